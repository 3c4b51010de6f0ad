"""The runtime bundle: the agent's source files shipped to pods as one ConfigMap.

A ConfigMap key cannot contain ``/``, so each file ``runtime/agent/contract.py`` is stored under the
key ``runtime__agent__contract.py`` and the pod volume's ``items`` map every key back to its path,
laying the package tree out under :data:`runtime.agent.contract.BUNDLE_MOUNT_PATH`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Mapping, Sequence

from components.errors import BundleError
from components.outputs import Labels, merged

REPO_ROOT = Path(__file__).resolve().parents[2]
AGENT_DIR = PurePosixPath("runtime", "agent")
PACKAGE_INIT = PurePosixPath("runtime", "__init__.py")
MAX_CONFIGMAP_BYTES = 1024 * 1024
"""The API server's limit on a ConfigMap's data, bytes (1 MiB)."""
KEY_SEPARATOR = "__"
CONFIGMAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


@dataclass(frozen=True)
class RuntimeBundle:
    """The agent's source files, ready for a ConfigMap and its volume.

    Attributes:
        data: ConfigMap key to file text.
        items: the volume's ``items``: ``{"key": <key>, "path": <relative path>}`` per file.
        size: bytes the ConfigMap's data takes (keys plus UTF-8 values).
        digest: SHA-256 of the paths and contents, hex; changes whenever a file does.
    """

    data: Mapping[str, str]
    items: tuple[Mapping[str, str], ...]
    size: int
    digest: str


def bundle_key(path: PurePosixPath) -> str:
    """The ConfigMap key of a file's repository-relative path: ``/`` becomes ``__``.

    Raises:
        BundleError: the path contains characters a ConfigMap key cannot hold.
    """
    key = KEY_SEPARATOR.join(path.parts)
    if not CONFIGMAP_KEY.match(key) or len(key) > 253:
        raise BundleError(f"{path}: cannot be a ConfigMap key; rename it to letters, digits, '-', '_', '.'")
    return key


def bundle_files(root: Path) -> list[PurePosixPath]:
    """Files of the bundle, relative to ``root``: ``runtime/__init__.py`` and every ``runtime/agent/**.py``.

    Raises:
        BundleError: ``root/runtime/agent`` holds no Python files.
    """
    agent = root / AGENT_DIR
    files = sorted(
        PurePosixPath(p.relative_to(root).as_posix())
        for p in agent.rglob("*.py")
        if "__pycache__" not in p.parts
    )
    if not files:
        raise BundleError(f"no Python files under {agent}: the runtime bundle needs the agent's sources")
    if (root / PACKAGE_INIT).is_file():
        files.insert(0, PACKAGE_INIT)
    return files


def build_bundle(root: Path = REPO_ROOT, limit: int = MAX_CONFIGMAP_BYTES) -> RuntimeBundle:
    """Read the agent's sources from disk into a :class:`RuntimeBundle`.

    Args:
        root: the repository root holding ``runtime/``.
        limit: the largest allowed ConfigMap data, bytes.

    Raises:
        BundleError: no sources, a path unfit for a key, two paths with one key, or the bundle
            exceeds ``limit`` (the message lists the largest files).
    """
    data: dict[str, str] = {}
    items: list[dict[str, str]] = []
    digest = hashlib.sha256()
    for path in bundle_files(root):
        key = bundle_key(path)
        if key in data:
            raise BundleError(f"{path}: its ConfigMap key {key!r} collides with another file; rename one")
        text = (root / path).read_text(encoding="utf-8")
        data[key] = text
        items.append({"key": key, "path": str(path)})
        digest.update(f"{path}\0{text}\0".encode())
    size = sum(len(k) + len(v.encode()) for k, v in data.items())
    if size > limit:
        largest = sorted(data, key=lambda k: len(data[k].encode()), reverse=True)[:3]
        raise BundleError(
            f"runtime bundle is {size} bytes, over the ConfigMap limit of {limit} bytes; largest files: "
            + ", ".join(f"{k} ({len(data[k].encode())} bytes)" for k in largest)
            + ". Move non-agent code out of runtime/agent/."
        )
    return RuntimeBundle(data=data, items=tuple(items), size=size, digest=digest.hexdigest())


def configmap_manifest(name: str, namespace: Any, labels: Labels, bundle: RuntimeBundle) -> dict:
    """The ConfigMap holding ``bundle``, as a Kubernetes manifest."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": merged(labels)},
        "data": dict(bundle.data),
    }


def materialise(data: Mapping[str, str], items: Sequence[Mapping[str, Any]], dest: Path) -> list[Path]:
    """Write a ConfigMap's ``data`` into ``dest`` the way a volume with ``items`` would.

    Args:
        data: the ConfigMap's data.
        items: the volume's items (``key`` and relative ``path``).
        dest: directory standing in for the mount path.

    Returns:
        The files written, in ``items`` order.

    Raises:
        BundleError: an item names a missing key or a path that is absolute or leaves ``dest``.
    """
    written = []
    for item in items:
        rel = PurePosixPath(item["path"])
        if rel.is_absolute() or ".." in rel.parts:
            raise BundleError(f"volume item path {item['path']!r} must be relative and stay in the mount")
        if item["key"] not in data:
            raise BundleError(f"volume item key {item['key']!r} is not in the ConfigMap")
        target = dest.joinpath(*rel.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(data[item["key"]], encoding="utf-8")
        written.append(target)
    return written
