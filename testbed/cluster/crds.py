"""The CRDs the tests and the cluster need, generated with controller-gen from the pinned upstream modules'
API types, the way each upstream's Makefile generates its published files.

``generate()`` writes them into ``<cache>/crds-<key>/`` (one ``<group>_<plural>.yaml`` per CRD, the
upstream file names); ``schemas_dir()`` is where the tests read CRDs from: ``TRAINPLANE_CRD_SCHEMAS`` if
set, else ``shared/schemas`` beside the repository where it exists, else the generated directory.

Beside them, ``pulumi-package-metaschema.json``: the Pulumi package metaschema of the pinned Pulumi release
(``codegen/schema/pulumi.json`` of github.com/pulumi/pulumi/pkg/v3), which the package tests validate against.

JobSet's and Kubeflow Trainer v2's CRDs are not run through controller-gen here: each module zip ships them as
its release generated them (upstream's ``make manifests`` runs controller-gen over the API packages and checks the
output in: sigs.k8s.io/jobset v0.12.0 ``config/components/crd/bases``, controller-gen v0.17.2 with
``crd:generateEmbeddedObjectMeta=true``; github.com/kubeflow/trainer/v2 v2.3.0 ``manifests/base/crds``,
controller-gen v0.18.0 with the same option), so they are copied from the module as they are
(``CrdSource.shipped``): the files the releases' own manifests and charts install, byte for byte, where
controller-gen v0.23.0 would word their descriptions differently.

Volcano's API types live in the module volcano.sh/apis, which the Go module proxy here does not serve at the
release volcano.sh/volcano v1.15.1 requires (``volcano.sh/apis v1.15.1``, refused; its go.mod replaces it with
``./staging/src/volcano.sh/apis``, a directory its module zip leaves out), so controller-gen cannot read them.
The module zip of volcano.sh/volcano v1.15.1 does hold the files upstream's ``make manifests`` generates from
them (``Makefile``: ``controller-gen crd:crdVersions=v1,generateEmbeddedObjectMeta=true`` into
``config/crd/volcano/bases``), committed beside the sources and the chart's copy; those are taken as they are
(:data:`PUBLISHED`; byte for byte the files ``shared/schemas`` lists, same git blobs).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from testbed.cluster import versions
from testbed.cluster.build import BuildError, _go_env, binary, upstream_replaces
from testbed.cluster.paths import cache_root, go_binary

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_SCHEMAS = REPO_ROOT / ".." / "shared" / "schemas"
SCHEMAS_SETTING = "TRAINPLANE_CRD_SCHEMAS"


@dataclass(frozen=True)
class CrdSource:
    """One upstream module's API packages and controller-gen's ``crd`` options for them (its Makefile's).

    Args:
        module: the module path.
        version: the release (``components/addons/versions.py`` pins the same for the add-ons).
        paths: API package patterns inside the module.
        options: the ``crd:...`` generator argument upstream passes.
        files: the CRD files kept (controller-gen's names; upstream's published names).
        shipped: a directory of the module holding upstream's generated CRDs as released; when set, ``files``
            are copied from it and ``paths`` and ``options`` are unused.
    """

    module: str
    version: str
    paths: tuple[str, ...]
    options: str
    files: tuple[str, ...]
    shipped: str = ""


SOURCES = (
    CrdSource("github.com/kubeflow/training-operator", versions.TRAINING_OPERATOR, ("pkg/apis/kubeflow.org/v1/...",),
              "crd:generateEmbeddedObjectMeta=true,maxDescLen=400", ("kubeflow.org_pytorchjobs.yaml",)),
    CrdSource("sigs.k8s.io/kueue", versions.KUEUE, ("apis/kueue/...",), "crd:generateEmbeddedObjectMeta=true",
              ("kueue.x-k8s.io_resourceflavors.yaml", "kueue.x-k8s.io_clusterqueues.yaml",
               "kueue.x-k8s.io_localqueues.yaml")),
    CrdSource("sigs.k8s.io/scheduler-plugins", versions.SCHEDULER_PLUGINS, ("apis/scheduling/...",),
              "crd:crdVersions=v1,generateEmbeddedObjectMeta=true", ("scheduling.x-k8s.io_podgroups.yaml",)),
    CrdSource("sigs.k8s.io/jobset", versions.JOBSET, (), "", ("jobset.x-k8s.io_jobsets.yaml",),
              shipped="config/components/crd/bases"),
    CrdSource("github.com/kubeflow/trainer/v2", versions.TRAINER, (), "",
              tuple(f"trainer.kubeflow.org_{p}.yaml" for p in ("trainjobs", "clustertrainingruntimes",
                                                               "trainingruntimes")),
              shipped="manifests/base/crds"),
)



@dataclass(frozen=True)
class PublishedCrds:
    """CRD files an upstream module's zip holds as its Makefile generated them, taken from the module as they are.

    Args:
        module: the module path.
        version: the release (``components/addons/versions.py`` pins the same for the add-on).
        directory: where the generated files are inside the module.
        files: the CRD files kept.
    """

    module: str
    version: str
    directory: str
    files: tuple[str, ...]


PUBLISHED = (
    PublishedCrds("volcano.sh/volcano", versions.VOLCANO, "config/crd/volcano/bases",
                  ("scheduling.volcano.sh_podgroups.yaml", "scheduling.volcano.sh_queues.yaml")),
)

FILES = tuple(f for s in (*SOURCES, *PUBLISHED) for f in s.files)
"""Every CRD file ``generate`` writes."""

METASCHEMA = "pulumi-package-metaschema.json"


def generated_dir() -> Path:
    """Where ``generate`` writes the CRDs (keyed by controller-tools' and every source's version)."""
    key = "-".join([versions.CONTROLLER_TOOLS, versions.PULUMI, *(s.version for s in (*SOURCES, *PUBLISHED))])
    return cache_root() / f"crds-{key}"


def schemas_dir() -> Path:
    """The directory the tests read CRDs from (see the module docstring)."""
    explicit = os.environ.get(SCHEMAS_SETTING)
    if explicit:
        return Path(explicit)
    return SHARED_SCHEMAS if SHARED_SCHEMAS.is_dir() else generated_dir()


def crd_file(name: str) -> Path:
    """The CRD file ``name`` (e.g. ``kubeflow.org_pytorchjobs.yaml``) from ``schemas_dir()``."""
    return schemas_dir() / name


def _download(module: str, version: str, work: Path, field: str) -> Path:
    """``go mod download`` one module version; the path ``field`` (``GoMod`` or ``Dir``) names."""
    listed = subprocess.run([go_binary(), "mod", "download", "-json", f"{module}@{version}"], cwd=work,
                            env=_go_env(work), capture_output=True, text=True, check=False)
    found = re.search(rf'"{field}":\s*"([^"]+)"', listed.stdout)
    if listed.returncode != 0 or found is None:
        raise BuildError(f"go mod download {module}@{version} failed: {listed.stdout}{listed.stderr}")
    return Path(found.group(1))


def _copy_shipped(source: CrdSource, out: Path, work: Path) -> None:
    """Copy ``source.files`` from the module's ``shipped`` directory (see the module docstring)."""
    shipped = _download(source.module, source.version, work, "Dir") / source.shipped
    for name in source.files:
        if not (shipped / name).is_file():
            raise BuildError(f"{source.module}@{source.version} ships no {source.shipped}/{name}")
        shutil.copyfile(shipped / name, out / name)


def _generate_one(source: CrdSource, out: Path, work: Path) -> None:
    work.mkdir(parents=True, exist_ok=True)
    if source.shipped:
        _copy_shipped(source, out, work)
        return
    env = _go_env(work)
    (work / "go.mod").write_text(
        f"module trainplane.build/crds\n\ngo 1.24.0\n\nrequire {source.module} {source.version}\n")
    replaces = upstream_replaces(_download(source.module, source.version, work, "GoMod").read_text())
    if replaces:
        with (work / "go.mod").open("a") as gomod:
            gomod.write("\nreplace (\n" + "".join(f"\t{r}\n" for r in replaces) + ")\n")
    raw = work / "out"
    paths = ";".join(f"{source.module}/{p}" for p in source.paths)
    done = subprocess.run([str(binary("controller-gen")), source.options, f"paths={paths}",
                           f"output:crd:artifacts:config={raw}"], cwd=work, env=env, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise BuildError(f"controller-gen for {source.module}@{source.version} failed:\n{done.stderr[-3000:]}")
    for name in source.files:
        if not (raw / name).is_file():
            raise BuildError(f"controller-gen wrote no {name} for {source.module}@{source.version}")
        shutil.copy(raw / name, out / name)


def generate() -> Path:
    """Generate every CRD of ``SOURCES`` and copy those of ``PUBLISHED`` unless already done; returns the directory.

    Raises:
        BuildError: a module could not be downloaded or controller-gen failed (the message has its output).
    """
    out = generated_dir()
    if (out / ".done").exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for i, source in enumerate(SOURCES):
        _generate_one(source, out, out / f".work-{i}")
    for published in PUBLISHED:
        module = _download(published.module, published.version, out, "Dir")
        for name in published.files:
            shutil.copyfile(module / published.directory / name, out / name)
    pulumi = _download("github.com/pulumi/pulumi/pkg/v3", versions.PULUMI, out, "Dir")
    shutil.copy(pulumi / "codegen" / "schema" / "pulumi.json", out / METASCHEMA)
    for i in range(len(SOURCES)):
        shutil.rmtree(out / f".work-{i}", ignore_errors=True)
    (out / ".done").write_text("\n".join(f"{s.module}@{s.version}" for s in (*SOURCES, *PUBLISHED)) + "\n")
    return out
