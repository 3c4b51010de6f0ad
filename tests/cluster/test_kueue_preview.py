"""A misspelt Kueue framework, through the real engine (issue 21's third finding): ``pulumi preview`` of a program
that installs the ``Kueue`` add-on with ``frameworks`` naming one Kueue does not know fails, naming the field, the
value and every framework the pinned Kueue knows, and nothing is created.

Why the add-on refuses it, read in sigs.k8s.io/kueue v0.19.2: ``pkg/config/validation.go`` (``validateIntegrations``)
refuses an unknown name in ``integrations.frameworks`` and the manager then exits at start-up, while the chart's
webhooks (``failurePolicy: Fail``, ``charts/kueue/templates/webhook/manifests.yaml``) stay and refuse the workloads they
cover; ``tests/cluster/live_kueue.py`` shows the manager's own refusal, listing exactly ``KNOWN_FRAMEWORKS``.

The program runs on the Python host, as a user's would (the repository's program copied,
``testbed/cluster/project.py``);
the test cluster is only the kubeconfig: the preview stops before any resource is registered.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from components.addons.kueue import KNOWN_FRAMEWORKS
from testbed.cluster.engine import Engine
from testbed.cluster.lifecycle import Cluster
from testbed.cluster.project import cluster_stack, copy_project

pytestmark = pytest.mark.cluster

MISSPELT = "kubeflow.org/pytorchjobs"
PROGRAM = textwrap.dedent(f'''
    from components.addons import Kueue

    Kueue("queues", {{"frameworks": ["batch/job", "{MISSPELT}"]}})
''')


def test_a_misspelt_kueue_framework_fails_pulumi_preview_naming_the_known_ones(tmp_path: Path,
                                                                               cluster: Cluster) -> None:
    project = copy_project(tmp_path / "project", "dev", cluster_stack("existing", cluster.kubeconfig).config)
    (project / "__main__.py").write_text(PROGRAM)
    engine = Engine(project, tmp_path / "state", cluster.kubeconfig)
    engine.run("stack", "init", "dev")
    refused = engine.run("preview", timeout=1200, check=False)
    out = refused.stdout + refused.stderr
    words = " ".join(out.split())
    assert refused.returncode != 0, out
    assert f"frameworks[1]='{MISSPELT}'" in words, out
    assert "use one of " + ", ".join(KNOWN_FRAMEWORKS) in words, out
    exported = json.loads(engine.run("stack", "export").stdout)
    assert [r["type"] for r in exported["deployment"].get("resources", [])] == []
