"""The test cluster builds the add-ons' own releases: the versions ``testbed/cluster/versions.py`` pins for what an
add-on installs are the ones ``components/addons/versions.py`` pins for that add-on, and so are the local copies of
their charts (``testbed/cluster/charts.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.addons import versions as addons
from testbed.cluster import charts, versions
from testbed.cluster.project import addon_stack

pytestmark = pytest.mark.unit


def test_the_trainer_and_jobset_built_are_the_releases_the_trainer_addon_installs() -> None:
    assert f"v{addons.TRAINER.version}" == versions.TRAINER
    assert versions.JOBSET == addons.JOBSET_VERSION


def test_the_kueue_built_is_the_release_the_kueue_addon_installs() -> None:
    assert f"v{addons.KUEUE.version}" == versions.KUEUE


def test_the_local_copies_are_of_the_releases_the_addons_pin() -> None:
    """``charts.COPIES`` takes each add-on's chart (or overlay) from the module release the add-on pins, so the
    add-on's own check of the copy (name and version in ``Chart.yaml``, the overlay's image tag) can pass."""
    pins = {"kueue": f"v{addons.KUEUE.version}", "volcano": f"v{addons.VOLCANO.version}",
            "training-operator": addons.TRAINING_OPERATOR_VERSION}
    assert {name: copy.version for name, copy in charts.COPIES.items()} == pins


def test_the_addon_stack_keeps_the_stacks_addons_with_their_copies_and_leaves_out_what_needs_a_controller(
        tmp_path: Path) -> None:
    copies = {"kueue": "/charts/kueue", "training-operator": "/overlays/standalone"}
    stack = addon_stack("existing", tmp_path / "kubeconfig", copies)
    assert stack.config["trainplane:addons"] == ["training-operator", "kueue"]
    assert stack.config["trainplane:addonCopies"] == copies
    assert stack.config["trainplane:kubeconfig"] == str(tmp_path / "kubeconfig")
    assert stack.left_out == ("trainplane:kueue", "trainplane:jobs")
    assert "trainplane:kueue" not in stack.config and "trainplane:jobs" not in stack.config
