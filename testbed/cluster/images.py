"""Container images for the real node, assembled from folders on this machine, with no registry.

An image here is an OCI image layout archive (``oci-layout``, ``index.json``, ``blobs/sha256/...``; the OCI
image-spec v1.1 ``image-layout.md``) holding one uncompressed layer made from a folder, which
``ctr -n k8s.io images import`` loads into containerd's CRI namespace under the name the index's
``io.containerd.image.name`` annotation gives (containerd v1.6 ``images/archive/importer.go``).

Two images:

- the sandbox (pause) image: ``sleep`` and the libraries it loads, copied from the host; every pod's sandbox
  container runs ``sleep infinity`` (containerd's CRI kills the sandbox with SIGKILL when it stops it, so the
  pause program's own signal handling does not matter);
- the job image: a root file system that is empty but for the merged-``/usr`` links (``/bin``, ``/lib``,
  ``/lib64``, ``/sbin`` -> ``usr/...``), the mount points and ``/etc/passwd``; a pod mounts the host's ``/usr``,
  Python and the project's venv read-only with ``hostPath`` volumes (:func:`host_python_volumes`), so the job
  runs the host's Python with the test requirements.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

PAUSE_IMAGE = "trainplane.local/pause:1"
"""The sandbox image's name (containerd's ``sandbox_image``); the tag is not ``latest``, so the kubelet never pulls."""

PYTHON_IMAGE = "trainplane.local/host-python:1"
"""The job image's name (pods name it as ``image``; ``IfNotPresent`` by default for a tag that is not ``latest``)."""

_MERGED_USR = {"bin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64", "sbin": "usr/sbin"}
_MOUNT_POINTS = ("usr", "etc", "tmp", "proc", "sys", "dev", "root", "var/tmp", "run")


class ImageError(RuntimeError):
    """An image could not be assembled or imported; the message names the image and the command's output."""


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _layer(folder: Path) -> bytes:
    """An uncompressed tar of ``folder``'s contents (paths relative to it, owned by root)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(folder.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(folder)))
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if info.isfile():
                with path.open("rb") as data:
                    tar.addfile(info, data)
            else:
                tar.addfile(info)
    return out.getvalue()


def oci_archive(folder: Path, name: str, command: list[str], archive: Path, env: tuple[str, ...] = ()) -> Path:
    """Write an OCI image layout archive of one layer (``folder``'s contents) named ``name``.

    Args:
        folder: the image's root file system.
        name: the image reference, e.g. ``trainplane.local/pause:1``.
        command: the image's ``Cmd``.
        archive: the ``.tar`` file to write.
        env: ``NAME=value`` entries of the image's ``Env``.

    Returns:
        ``archive``.
    """
    layer = _layer(folder)
    config = {"architecture": "amd64", "os": "linux",
              "config": {"Cmd": command, "Env": list(env) or ["PATH=/usr/local/bin:/usr/bin:/bin"]},
              "rootfs": {"type": "layers", "diff_ids": [_sha(layer)]}}
    config_bytes = json.dumps(config, sort_keys=True).encode()
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": _sha(config_bytes),
                           "size": len(config_bytes)},
                "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": _sha(layer),
                            "size": len(layer)}]}
    manifest_bytes = json.dumps(manifest, sort_keys=True).encode()
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [{"mediaType": manifest["mediaType"], "digest": _sha(manifest_bytes),
                            "size": len(manifest_bytes), "platform": {"architecture": "amd64", "os": "linux"},
                            "annotations": {"io.containerd.image.name": name,
                                            "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1]}}]}
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w") as tar:
        def add(arcname: str, data: bytes) -> None:
            info = tarfile.TarInfo(arcname)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        add("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        add("index.json", json.dumps(index).encode())
        for blob in (layer, config_bytes, manifest_bytes):
            add(f"blobs/sha256/{_sha(blob).removeprefix('sha256:')}", blob)
    return archive


def _libraries(program: Path) -> list[Path]:
    """The shared libraries ``program`` loads (``ldd``), the dynamic loader included."""
    listed = subprocess.run(["ldd", str(program)], capture_output=True, text=True, check=True).stdout
    found = []
    for line in listed.splitlines():
        parts = line.split()
        path = parts[2] if "=>" in parts and len(parts) > 2 else parts[0]
        if path.startswith("/"):
            found.append(Path(path))
    return found


def _skeleton(root: Path) -> None:
    for directory in (*_MOUNT_POINTS, *_MERGED_USR.values()):
        (root / directory).mkdir(parents=True, exist_ok=True)
    for name, target in _MERGED_USR.items():
        (root / name).symlink_to(target)
    (root / "tmp").chmod(0o1777)
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")
    (root / "etc" / "group").write_text("root:x:0:\nnogroup:x:65534:\n")


def pause_rootfs(root: Path) -> Path:
    """Fill ``root`` with the sandbox image's files: ``sleep`` and the libraries it loads, each at the path the
    host loads it from (through the merged-``/usr`` links)."""
    _skeleton(root)
    sleep = Path(shutil.which("sleep") or "/usr/bin/sleep")
    for path in (sleep, *_libraries(sleep)):
        inside = root / path.relative_to("/")
        inside.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path.resolve(), inside)
    return root


def python_rootfs(root: Path) -> Path:
    """Fill ``root`` with the job image's files: only the skeleton; ``/usr`` and Python come from the host."""
    _skeleton(root)
    return root


def host_python_paths() -> tuple[Path, ...]:
    """The host directories a pod needs to run this process's Python with its packages: ``/usr`` (the C
    libraries), the base interpreter's prefix and the venv's (each resolved), without duplicates or nesting."""
    candidates = [Path("/usr"), Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()]
    out: list[Path] = []
    for path in candidates:
        if not any(path == kept or path.is_relative_to(kept) for kept in out):
            out.append(path)
    return tuple(out)


def host_python_volumes() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(volumes, volume_mounts)`` in Kubernetes' shape mounting :func:`host_python_paths` read-only at the same
    paths, for a pod of :data:`PYTHON_IMAGE` (``DistributedJobArgs.volumes`` / ``volume_mounts``)."""
    volumes, mounts = [], []
    for number, path in enumerate(host_python_paths()):
        name = f"host-python-{number}"
        volumes.append({"name": name, "hostPath": {"path": str(path), "type": "Directory"}})
        mounts.append({"name": name, "mountPath": str(path), "readOnly": True})
    return volumes, mounts


def host_python() -> str:
    """The interpreter a pod of :data:`PYTHON_IMAGE` runs: this process's venv Python (its path is the same in the
    pod, through :func:`host_python_volumes`)."""
    return str(Path(sys.prefix).resolve() / "bin" / "python")


def python_env() -> tuple[str, ...]:
    """The job image's ``Env``: the venv's ``bin`` first on ``PATH``, so ``python3`` (what a DistributedJob runs)
    is the venv's interpreter."""
    return (f"PATH={Path(sys.prefix).resolve() / 'bin'}:/usr/local/bin:/usr/bin:/bin",)


def import_image(ctr: list[str], folder: Path, name: str, command: list[str], work: Path,
                 env: tuple[str, ...] = ()) -> None:
    """Assemble ``folder`` as image ``name`` and import it into containerd's ``k8s.io`` namespace.

    Args:
        ctr: the ``ctr`` command with its address, e.g. ``["ctr", "--address", SOCK]``.

    Raises:
        ImageError: ``ctr`` refused it (its output is in the message).
    """
    archive = oci_archive(folder, name, command, work / f"{name.replace('/', '_').replace(':', '_')}.tar", env)
    done = subprocess.run([*ctr, "-n", "k8s.io", "images", "import", str(archive)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ImageError(f"ctr images import of {name} failed ({done.returncode}): {done.stdout}{done.stderr}")
