"""``python -m testbed.cluster project STACK DIR``: the repository's program copied with a stack for the running
test cluster (``tests/cluster/test_docs.py`` deploys it with ``pulumi up``), its add-ons named as left out."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from testbed.cluster import __main__ as cli
from testbed.cluster import lifecycle

pytestmark = pytest.mark.unit


def test_project_copies_the_program_with_the_stack_pointed_at_the_cluster(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    monkeypatch.setattr(lifecycle, "running", lambda state: SimpleNamespace(kubeconfig=kubeconfig))
    assert cli.main(["project", "existing", str(tmp_path / "copy")]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == str(tmp_path / "copy")
    project = yaml.safe_load((tmp_path / "copy" / "Pulumi.yaml").read_text())
    config = yaml.safe_load((tmp_path / "copy" / project["stackConfigDir"] / "Pulumi.existing.yaml").read_text())
    assert config["config"]["trainplane:kubeconfig"] == str(kubeconfig)
    assert "trainplane:addons" not in config["config"] and "backend" not in config["config"]["trainplane:jobs"][0]
    assert (tmp_path / "copy" / "__main__.py").is_file() and (tmp_path / "copy" / "components").is_dir()
    for setting in ("trainplane:addons", "trainplane:kueue", "jobs[0].backend", "jobs[0].queue"):
        assert f"left out (needs an add-on this cluster does not run): {setting}" in err


def test_project_names_a_missing_stack_and_a_cluster_not_running(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["project", "existing", str(tmp_path / "copy"), "--state", str(tmp_path / "none")]) == 1
    assert f"no test cluster runs in {tmp_path / 'none'}" in capsys.readouterr().err
    monkeypatch.setattr(lifecycle, "running", lambda state: SimpleNamespace(kubeconfig=tmp_path / "kubeconfig"))
    assert cli.main(["project", "nosuch", str(tmp_path / "copy")]) == 1
    assert "no stack 'nosuch': stacks/Pulumi.nosuch.yaml does not exist" in capsys.readouterr().err
    assert not (tmp_path / "copy").exists()
