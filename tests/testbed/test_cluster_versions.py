"""The test cluster builds the add-ons' own releases: the versions ``testbed/cluster/versions.py`` pins for what an
add-on installs are the ones ``components/addons/versions.py`` pins for that add-on."""

from __future__ import annotations

import pytest

from components.addons import versions as addons
from testbed.cluster import versions

pytestmark = pytest.mark.unit


def test_the_trainer_and_jobset_built_are_the_releases_the_trainer_addon_installs() -> None:
    assert f"v{addons.TRAINER.version}" == versions.TRAINER
    assert versions.JOBSET == addons.JOBSET_VERSION


def test_the_kueue_built_is_the_release_the_kueue_addon_installs() -> None:
    assert f"v{addons.KUEUE.version}" == versions.KUEUE
