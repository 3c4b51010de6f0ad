"""The Trainer's chart assembled from the Go modules (``trainerchart.local_chart``, real ``go mod download``) is one the
``TrainerV2`` add-on's ``chart_path`` takes, with each dependency in ``charts/`` at the version its ``Chart.yaml``
entry names (helm/helm ``pkg/chartutil/dependencies.go``, ``processDependencyEnabled``, matches them by name and
version range)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from components.addons.helm import local_chart
from components.addons.versions import TRAINER
from testbed.cluster import trainerchart

pytestmark = pytest.mark.process


def test_the_assembled_chart_is_the_pinned_one_with_its_dependencies_at_their_required_versions(
        tmp_path: Path) -> None:
    chart = trainerchart.local_chart(tmp_path)
    assert local_chart("chart_path", str(chart), TRAINER) == str(chart)
    required = {d["name"]: str(d["version"])
                for d in yaml.safe_load((chart / "Chart.yaml").read_text())["dependencies"]}
    assert sorted(required) == ["jobset", "lws"]
    for name, version in required.items():
        metadata = yaml.safe_load((chart / "charts" / name / "Chart.yaml").read_text())
        assert (metadata["name"], metadata["version"]) == (name, version)
    assert (chart / "charts" / "jobset" / "crds" / "jobset.x-k8s.io_jobsets.yaml").is_file()
