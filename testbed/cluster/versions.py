"""Every version the ephemeral test cluster is built from, in one place.

Each tool is a Go module built by its module path with the ordinary ``go`` command (``build.py``); the
cache directory of a build is keyed by these versions, so changing one rebuilds only what it names.

Why these releases:

- Kubernetes 1.34: the EKS component's tested version (``tests/components/test_eks*``) and the one
  ``tests/components/schemacheck.py`` validates rendered objects against (kubernetes-validate's 1.34
  schemas), so the objects the schemas accept are the ones this API server receives. v1.34.4 is the
  newest 1.34 patch the Go module proxy serves here.
- etcd 3.6: the series Kubernetes 1.34 is built and tested against (its go.mod requires
  go.etcd.io/etcd/server/v3 v3.6.4); v3.6.16 is the newest 3.6 patch served. Debian's etcd-server is
  3.4.23, older than 1.34 supports for its watch-list and consistent-read features.
- Pulumi CLI 3.260.0: the newest release served both as the ``pulumi`` Python SDK and as the Go module
  github.com/pulumi/pulumi/pkg/v3 (3.261 to 3.273 of pkg/v3 are refused by the Go module proxy here),
  so CLI and SDK are one release; requirements-dev.txt pins the SDK to it.
- pulumi-kubernetes: its provider module (github.com/pulumi/pulumi-kubernetes/provider/v4) is published
  only as pseudo-versions, and the proxy serves one, the commit below (2026-01-15, on the way to the
  SDK release pinned in requirements-dev.txt). The plugin is installed under the SDK's version, which
  is the version the SDK asks the engine for.
- Python language host v3.68.0: the host's own module (github.com/pulumi/pulumi/sdk/python/cmd/
  pulumi-language-python/v3, where it moved after v3.68.0) is refused by the Go module proxy here, any version;
  v3.68.0 is the newest release where the host is still a package of the sdk/v3 module
  (sdk/v3/python/cmd/pulumi-language-python), which is served. It speaks the same language-host gRPC
  protocol to the v3.260.0 CLI and runs the venv's ``pulumi`` SDK (v3.260.0), which does the program's work.
- pulumi-random: its provider module (github.com/pulumi/pulumi-random/provider/v4) is refused by the Go
  module proxy here, any version; ``testbed/randomprovider`` stands in for its one resource the program uses,
  installed as the version of the ``pulumi-random`` SDK in the venv (the version that SDK asks the engine for).
- pulumi-command: its provider module (github.com/pulumi/pulumi-command/provider, and the repository's root module)
  is refused by the Go module proxy here, any version (tried again 2026-12-03); no stack the tests deploy creates a
  ``command`` resource, and the engine only logs the missing plugin the Python host names (``tests/cluster/
  test_missing_plugins.py``), so it is not built.
- pulumi-yaml v1.25.0: the newest served; the YAML language host for examples/yaml.
- CoreDNS v1.15.0: served by the Go module proxy; the cluster DNS of the optional ``pods`` part.
- kwok v0.7.0, controller-tools v0.23.0: the newest served releases.
- Kueue v0.19.2: the release the Kueue add-on installs (its chart 0.19.2), served by the Go module proxy here,
  so the manager the live tests run is the add-on's own (``kueue.py``; not part of ``build``).
"""

from __future__ import annotations

KUBERNETES = "v1.34.4"
"""k8s.io/kubernetes: kube-apiserver, kube-controller-manager, kube-scheduler."""

ETCD = "v3.6.16"
"""go.etcd.io/etcd/server/v3 (the etcd server is that module's main package)."""

KWOK = "v0.7.0"
"""sigs.k8s.io/kwok: nodes without a kubelet; its controller marks pods Running on them."""

CONTROLLER_TOOLS = "v0.23.0"
"""sigs.k8s.io/controller-tools: controller-gen, which generates the CRDs from upstream API types."""

PULUMI = "v3.260.0"
"""github.com/pulumi/pulumi/pkg/v3 (the CLI) and sdk/v3; the ``pulumi`` Python SDK's release."""

PULUMI_PYTHON_HOST = "v3.68.0"
"""github.com/pulumi/pulumi/sdk/v3's python/cmd/pulumi-language-python: the Python language host."""

PULUMI_YAML = "v1.25.0"
"""github.com/pulumi/pulumi-yaml: the YAML language host."""

PULUMI_KUBERNETES_MODULE = "v4.0.0-20260115033456-f47bc2d6f199"
"""github.com/pulumi/pulumi-kubernetes/provider/v4: the only version the Go module proxy serves."""

PULUMI_KUBERNETES_PLUGIN = "4.34.2"
"""The version the kubernetes plugin is installed as: the pinned ``pulumi-kubernetes`` SDK's."""

KUEUE = "v0.19.2"
"""sigs.k8s.io/kueue: the Kueue manager (``cmd/kueue``), its CRDs and webhooks; the release the Kueue add-on
installs (``components/addons/versions.py``, chart 0.19.2), served by the Go module proxy here."""

COREDNS = "v1.15.0"
"""github.com/coredns/coredns: the cluster DNS of the ``pods`` part (the real node, ``realnode.py``); the release
the Go module proxy serves here. The real node's kubelet is k8s.io/kubernetes at :data:`KUBERNETES` (cmd/kubelet)."""

VOLCANO = "v1.15.1"
"""volcano.sh/volcano: the release the Volcano add-on installs (its chart 1.15.1); its module zip holds the CRDs
(``crds.PUBLISHED``) and the scheduler's and controllers' sources. Those are not built: they import volcano.sh/apis
v1.15.1, which the Go module proxy here refuses (as v1.15.0, v1.15.2, v1.14.1, v1.14.2), and the nearest served,
v1.14.0, lacks ``scheduling/v1beta1.QueueAllocationGateKey``, which the v1.15.1 scheduler uses
(``pkg/scheduler/cache/util.go``), so no replace builds it (2026-12-02)."""

TRAINING_OPERATOR = "v1.9.4"
"""github.com/kubeflow/training-operator: the Kubeflow training operator (``cmd/training-operator.v1``), the release
the training-operator add-on installs (``components/addons/versions.py``); a named part (``build --with``)."""

SCHEDULER_PLUGINS = "v0.34.7"
"""sigs.k8s.io/scheduler-plugins: the second scheduler with coscheduling (``cmd/scheduler``); the release for
Kubernetes 1.34 (its go.mod requires k8s.io/kubernetes v1.34.7), whose PodGroup CRD ``crds.SOURCES`` generates
and whose API the training operator v1.9.4 imports; a named part (``build --with``)."""

SCHEDULER_PLUGINS_KUBERNETES = "v1.34.7"
"""The k8s.io/kubernetes release scheduler-plugins v0.34.7 requires and builds its scheduler on: the version its
binary reports (``build.PARTS``)."""

SERVED_INSTEAD = {"k8s.io/csi-translation-lib": "v0.34.5"}
"""Modules a part's upstream go.mod pins (replaces) at a version the Go module proxy here refuses, and the nearest
one it serves, built instead: scheduler-plugins v0.34.7 replaces k8s.io/csi-translation-lib with v0.34.7 (refused,
as is v0.34.6); v0.34.5 is the newest 1.34 patch served. k8s.io/kubernetes v1.34.7's scheduler uses it only to
translate in-tree volumes to CSI (``pkg/scheduler/framework/plugins/nodevolumelimits``, ``volumebinding``), which
the coscheduling tests' pods do not have; the build compiling against it is the API check."""

GO = "go1.26.8"
"""The Go toolchain the cache key names (the machine's ``go``)."""

JOBSET = "v0.12.0"
"""sigs.k8s.io/jobset: the JobSet CRD and controller manager; the release the Trainer's chart installs
(``components/addons/versions.py``, ``JOBSET_VERSION``)."""

TRAINER = "v2.3.0"
"""github.com/kubeflow/trainer/v2: the Trainer's CRDs and controller manager; the release the ``TrainerV2`` add-on
installs (``components/addons/versions.py``, chart 2.3.0)."""
