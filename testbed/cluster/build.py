"""Build (or find cached) every binary the cluster tests need, from Go modules by their module paths.

Each tool gets a small generated main module under the cache (``<cache>/<tool>-<version>-<go>/src``)
that requires the upstream module at its pinned version (``versions.py``), and ``go build -mod=mod``
builds the named main packages into ``<cache>/<tool>-<version>-<go>/bin``. Module contents are checked
against the Go checksum database as ``go`` always does. A finished build leaves a ``.done`` stamp; a
tool with a stamp is not built again.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from testbed.cluster import versions
from testbed.cluster.paths import cache_root, go_binary

_STAGING = re.compile(r"^\s*(k8s\.io/[a-z0-9-]+) v0\.0\.0$", re.MULTILINE)
_REPLACE = re.compile(r"^\s*(?:replace\s+)?(\S+)(?: v\S+)? => (\S+) (v\S+)\s*$", re.MULTILINE)


class BuildError(RuntimeError):
    """A tool could not be built; the message names the module, the version and go's own output."""


@dataclass(frozen=True)
class GoTool:
    """One upstream Go module and the main packages built from it.

    Args:
        name: the cache directory's prefix, e.g. ``kubernetes``.
        module: the module path required, e.g. ``k8s.io/kubernetes``.
        version: its pinned version.
        packages: main package paths to build (each gives a binary named after its last element).
        requires: further (module, version) requirements, e.g. a sibling module the upstream go.mod
            replaces with a relative path.
        replaces: extra ``replace`` lines (module => module version).
        ldflags: ``-X`` settings (package.var=value) for version strings.
        rename: (go's binary name, the name installed), e.g. etcd's server module builds ``server``.
        copies: (a file's path inside ``module``'s directory, the name installed beside the binaries), each made
            executable, e.g. the Python language host's executor script, which the host runs from its own
            directory.
        generated: a main package of ``module`` whose ``go:generate`` output is missing from the module zip:
            it is copied into the build module, ``go generate`` runs there (with ``VERSION`` set to the
            last ``-X`` value of ``ldflags``), and the copy is built in its place.
        extra_replaces: called with the downloaded upstream go.mod's text; returns more replace lines
            (Kubernetes' staging modules are ``v0.0.0`` there and must map to their published release).
    """

    name: str
    module: str
    version: str
    packages: tuple[str, ...]
    requires: tuple[tuple[str, str], ...] = ()
    replaces: tuple[str, ...] = ()
    ldflags: tuple[str, ...] = ()
    extra_replaces: Callable[[str], list[str]] | None = field(default=None, compare=False)
    rename: tuple[tuple[str, str], ...] = ()
    copies: tuple[tuple[str, str], ...] = ()
    generated: str = ""

    @property
    def key(self) -> str:
        """The cache directory name: tool, version and Go toolchain."""
        return f"{self.name}-{self.version}-{versions.GO}"

    @property
    def binaries(self) -> tuple[str, ...]:
        """The names of the binaries this tool installs."""
        renamed = dict(self.rename)
        built = tuple(renamed.get(n, n) for n in (_go_binary_name(p) for p in self.packages))
        return built + tuple(name for _, name in self.copies)


def _go_binary_name(package: str) -> str:
    """The name ``go build -o DIR/`` gives: the last path element, or the one before a ``/vN`` suffix."""
    parts = package.split("/")
    return parts[-2] if re.fullmatch(r"v[0-9]+", parts[-1]) else parts[-1]


def _kubernetes_staging(upstream_gomod: str) -> list[str]:
    minor = versions.KUBERNETES.removeprefix("v1.")
    return [f"{m} => {m} v0.{minor}" for m in sorted(set(_STAGING.findall(upstream_gomod)))]


def upstream_replaces(gomod: str) -> list[str]:
    """The upstream go.mod's replace directives that pin a published version (a dependency's replaces
    do not apply to the module requiring it, so they are restated)."""
    return [f"{old} => {new} {version}" for old, new, version in _REPLACE.findall(gomod)]


def served_replaces(gomod: str) -> list[str]:
    """:func:`upstream_replaces`, each module of ``versions.SERVED_INSTEAD`` at the served version named there."""
    out = []
    for line in upstream_replaces(gomod):
        old, new = line.split(" => ")
        module = new.split()[0]
        out.append(f"{old} => {module} {versions.SERVED_INSTEAD[module]}" if module in versions.SERVED_INSTEAD
                   else line)
    return out


def _kube_ldflags() -> tuple[str, ...]:
    major, minor = versions.KUBERNETES.removeprefix("v").split(".")[:2]
    out: list[str] = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        out += [f"{pkg}.gitVersion={versions.KUBERNETES}", f"{pkg}.gitMajor={major}", f"{pkg}.gitMinor={minor}",
                f"{pkg}.gitTreeState=clean"]
    return tuple(out)


_PULUMI_CLIPBOARD = "github.com/atotto/clipboard => github.com/tgummerer/clipboard v0.0.0-20241001131231-d02d263e614e"

TOOLS: tuple[GoTool, ...] = (
    GoTool("etcd", "go.etcd.io/etcd/server/v3", versions.ETCD, ("go.etcd.io/etcd/server/v3",),
           requires=tuple((f"go.etcd.io/etcd/{m}", versions.ETCD) for m in ("api/v3", "client/pkg/v3",
                                                                             "client/v3", "pkg/v3")),
           rename=(("server", "etcd"),)),
    GoTool("kwok", "sigs.k8s.io/kwok", versions.KWOK, ("sigs.k8s.io/kwok/cmd/kwok",)),
    GoTool("controller-tools", "sigs.k8s.io/controller-tools", versions.CONTROLLER_TOOLS,
           ("sigs.k8s.io/controller-tools/cmd/controller-gen",)),
    GoTool("pulumi", "github.com/pulumi/pulumi/pkg/v3", versions.PULUMI,
           ("github.com/pulumi/pulumi/pkg/v3/cmd/pulumi",),
           requires=(("github.com/pulumi/pulumi/sdk/v3", versions.PULUMI),), replaces=(_PULUMI_CLIPBOARD,),
           ldflags=(f"github.com/pulumi/pulumi/sdk/v3/go/common/version.Version={versions.PULUMI}",)),
    GoTool("pulumi-language-python", "github.com/pulumi/pulumi/sdk/v3", versions.PULUMI_PYTHON_HOST,
           ("github.com/pulumi/pulumi/sdk/v3/python/cmd/pulumi-language-python",),
           copies=(("python/cmd/pulumi-language-python-exec", "pulumi-language-python-exec"),),
           ldflags=(f"github.com/pulumi/pulumi/sdk/v3/go/common/version.Version={versions.PULUMI_PYTHON_HOST}",)),
    GoTool("pulumi-yaml", "github.com/pulumi/pulumi-yaml", versions.PULUMI_YAML,
           ("github.com/pulumi/pulumi-yaml/cmd/pulumi-language-yaml",), replaces=(_PULUMI_CLIPBOARD,),
           ldflags=(f"github.com/pulumi/pulumi-yaml/pkg/version.Version={versions.PULUMI_YAML}",)),
    GoTool("pulumi-kubernetes", "github.com/pulumi/pulumi-kubernetes/provider/v4", versions.PULUMI_KUBERNETES_MODULE,
           ("github.com/pulumi/pulumi-kubernetes/provider/v4/cmd/pulumi-resource-kubernetes",),
           replaces=(_PULUMI_CLIPBOARD,), generated="cmd/pulumi-resource-kubernetes",
           ldflags=("github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version="
                    f"{versions.PULUMI_KUBERNETES_PLUGIN}",)),
    GoTool("kubernetes", "k8s.io/kubernetes", versions.KUBERNETES,
           tuple(f"k8s.io/kubernetes/cmd/{c}" for c in ("kube-apiserver", "kube-controller-manager",
                                                        "kube-scheduler")),
           ldflags=_kube_ldflags(), extra_replaces=_kubernetes_staging),
)

KUBELET = GoTool("kubelet", "k8s.io/kubernetes", versions.KUBERNETES, ("k8s.io/kubernetes/cmd/kubelet",),
                 ldflags=_kube_ldflags(), extra_replaces=_kubernetes_staging)
"""The real node's kubelet: the same module and flags as the control plane's build, so most packages come out of
go's build cache (its own cache directory, so the default build is unchanged)."""

COREDNS = GoTool("coredns", "github.com/coredns/coredns", versions.COREDNS, ("github.com/coredns/coredns",),
                 ldflags=(f"github.com/coredns/coredns/coremain.GitCommit={versions.COREDNS}",))
"""CoreDNS with its default plugin list (``core/plugin/zplugin.go``, committed upstream): ``kubernetes`` serves
the cluster domain from the API server."""

PARTS: dict[str, tuple[GoTool, ...]] = {
    "pods": (KUBELET, COREDNS),
    "training-operator": (GoTool(
        "training-operator", "github.com/kubeflow/training-operator", versions.TRAINING_OPERATOR,
        ("github.com/kubeflow/training-operator/cmd/training-operator.v1",), rename=(("training-operator.v1",
                                                                                   "training-operator"),)),),
    "scheduler-plugins": (GoTool(
        "scheduler-plugins", "sigs.k8s.io/scheduler-plugins", versions.SCHEDULER_PLUGINS,
        ("sigs.k8s.io/scheduler-plugins/cmd/scheduler",), rename=(("scheduler", "scheduler-plugins-scheduler"),),
        ldflags=(f"k8s.io/component-base/version.gitVersion={versions.SCHEDULER_PLUGINS_KUBERNETES}",),
        extra_replaces=served_replaces),),
}
"""Named parts ``build`` leaves out unless asked (``python -m testbed.cluster build --with NAME``), for the live
tests only: ``pods`` is the real node that runs containers (``realnode.py``), the others are controllers (their
cold builds are measured in their modules' docstrings). The controllers' builds are upstream's ``Makefile``
targets by module path: the operator's ``build`` (``go build ./cmd/training-operator.v1``), scheduler-plugins'
``build-scheduler`` (``-X k8s.io/component-base/version.gitVersion=$(VERSION)``), the version set to the Kubernetes
release the scheduler is built on (``versions.SCHEDULER_PLUGINS_KUBERNETES``): with its own ``v0.34.7`` the
kube-scheduler framework reads binary version 0.34 and refuses to start ("emulation version 0.34 is not between
[1.31, 0.34.0]", k8s.io/apiserver v0.34.7 ``pkg/util/compatibility/version.go``, ``DefaultBuildEffectiveVersion``)."""


def tool_dir(tool: GoTool) -> Path:
    """The tool's cache directory (``src/``, ``bin/`` and the ``.done`` stamp)."""
    return cache_root() / tool.key


def binary(name: str) -> Path:
    """The built binary ``name`` (e.g. ``kube-apiserver``).

    Raises:
        BuildError: no tool builds it, or it is not built yet (run ``python -m testbed.cluster build``, with
            ``--with NAME`` for a binary of a named part).
    """
    parts = {tool: f" --with {part}" for part, tools in PARTS.items() for tool in tools}
    for tool in (*TOOLS, *parts):
        if name in tool.binaries:
            path = tool_dir(tool) / "bin" / name
            if not (tool_dir(tool) / ".done").exists() or not path.exists():
                raise BuildError(f"{name} is not built; run: python -m testbed.cluster build{parts.get(tool, '')}")
            return path
    raise BuildError(f"no tool builds {name!r}")


def _go_env(work: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"CGO_ENABLED": "0", "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local", "GOWORK": "off"})
    return env


def _run(cmd: list[str], cwd: Path, tool: GoTool, log: Path) -> None:
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        done = subprocess.run(cmd, cwd=cwd, env=_go_env(cwd), stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-30:]
        raise BuildError(f"building {tool.module}@{tool.version} failed ({cmd[1]}); log {log}:\n" + "\n".join(tail))


def _write_module(tool: GoTool, src: Path, log: Path) -> None:
    src.mkdir(parents=True, exist_ok=True)
    replaces = list(tool.replaces)
    if tool.extra_replaces is not None:
        (src / "go.mod").write_text(f"module trainplane.build/{tool.name}\n\ngo 1.24.0\n")
        _run([go_binary(), "mod", "download", f"{tool.module}@{tool.version}"], src, tool, log)
        gomod = subprocess.run([go_binary(), "mod", "download", "-json", f"{tool.module}@{tool.version}"],
                               cwd=src, env=_go_env(src), capture_output=True, text=True, check=True).stdout
        path = re.search(r'"GoMod":\s*"([^"]+)"', gomod)
        if path is None:
            raise BuildError(f"go mod download named no go.mod for {tool.module}@{tool.version}")
        replaces += tool.extra_replaces(Path(path.group(1)).read_text())
    lines = [f"module trainplane.build/{tool.name}", "", "go 1.24.0", "", "require ("]
    lines += [f"\t{m} {v}" for m, v in ((tool.module, tool.version), *tool.requires)]
    lines += [")", ""]
    if replaces:
        lines += ["replace (", *(f"\t{r}" for r in replaces), ")", ""]
    (src / "go.mod").write_text("\n".join(lines))


def _module_dir(tool: GoTool, src: Path) -> Path:
    """The upstream module's directory in the module cache (downloading it if needed)."""
    listed = subprocess.run([go_binary(), "mod", "download", "-json", f"{tool.module}@{tool.version}"], cwd=src,
                            env=_go_env(src), capture_output=True, text=True, check=True).stdout
    found = re.search(r'"Dir":\s*"([^"]+)"', listed)
    if found is None:
        raise BuildError(f"go mod download named no directory for {tool.module}@{tool.version}")
    return Path(found.group(1))


def _generate(tool: GoTool, src: Path, log: Path) -> str:
    """Copy ``tool.generated`` out of the module cache into ``src`` and run its ``go:generate`` there; returns
    the copy's package pattern (``./...``)."""
    copy = src / tool.generated
    shutil.copytree(_module_dir(tool, src) / tool.generated, copy)
    for path in (copy, *copy.rglob("*")):
        path.chmod(path.stat().st_mode | 0o200)
    version = tool.ldflags[-1].rsplit("=", 1)[1]
    with log.open("a") as out:
        done = subprocess.run([go_binary(), "generate", "."], cwd=copy, env={**_go_env(src), "VERSION": version},
                              stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        raise BuildError(f"go generate in {tool.module}/{tool.generated}@{tool.version} failed; log {log}")
    return f"./{tool.generated}"


def build_tool(tool: GoTool) -> tuple[Path, bool]:
    """Build ``tool`` unless its cache directory is stamped done.

    Returns:
        (its bin directory, whether it was built now).

    Raises:
        BuildError: go failed; the message has the tail of the build log.
    """
    root = tool_dir(tool)
    bin_dir = root / "bin"
    if (root / ".done").exists():
        return bin_dir, False
    with building(root):
        if (root / ".done").exists():  # built by the process this one waited for
            return bin_dir, False
        _build(tool, root)
    return bin_dir, True


@contextlib.contextmanager
def building(root: Path) -> Iterator[None]:
    """Hold the build lock of the cache directory ``root`` (an exclusive ``flock`` on ``<root>.lock`` beside it, which
    a build's clean start does not remove) for the ``with`` block, waiting while another process holds it: two runs
    needing the same tool (a test run beside ``python -m testbed.cluster build``) build it once, the second finding it
    done, instead of one clearing the directory under the other's ``go build``."""
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f"{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _build(tool: GoTool, root: Path) -> None:
    bin_dir = root / "bin"
    shutil.rmtree(root, ignore_errors=True)
    src = root / "src"
    root.mkdir(parents=True)
    log = root / "build.log"
    _write_module(tool, src, log)
    packages = list(tool.packages)
    if tool.generated:
        packages[packages.index(f"{tool.module}/{tool.generated}")] = _generate(tool, src, log)
    ldflags = "-s -w" + "".join(f" -X {x}" for x in tool.ldflags)
    _run([go_binary(), "build", "-trimpath", f"-ldflags={ldflags}", "-o", f"{bin_dir}/", *packages],
         src, tool, log)
    for built, name in tool.rename:
        (bin_dir / built).replace(bin_dir / name)
    for inside, name in tool.copies:
        shutil.copyfile(_module_dir(tool, src) / inside, bin_dir / name)
        (bin_dir / name).chmod(0o755)
    (root / ".done").write_text(f"{tool.module}@{tool.version}\n")


def build_all(tools: Iterable[GoTool] = TOOLS, report: Callable[[str], None] = print) -> dict[str, Path]:
    """Build every tool not cached, one after another (each ``go build`` already uses every core).

    Returns:
        binary name -> path, for every binary of ``tools``.
    """
    found: dict[str, Path] = {}
    for tool in tools:
        started = time.monotonic()
        bin_dir, built = build_tool(tool)
        took = time.monotonic() - started
        state = f"built in {took:.0f} s" if built else "cached"
        report(f"{tool.name} {tool.version}: {state} ({bin_dir})")
        found.update({b: bin_dir / b for b in tool.binaries})
    return found
