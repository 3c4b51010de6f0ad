"""One node's code: a directory per tree digest, ``<root>/<digest>/tree`` (what processes import
from), beside the tree's manifest (path to content digest, for reloading only what changed) and the
archive it came in (served to nodes that join later). Standard library only.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from typing import Optional

from runtime.agent.spec.archive import ArchiveError, check_digest, tree_digest, unpack
from runtime.agent.spec.cachedir import tag_cache_dir

TREE = "tree"
MANIFEST = "manifest.json"
ARCHIVE = "archive.tar.gz"
KEEP = 4
"""Trees a node keeps; older ones are removed as new ones arrive."""


def manifest(tree_dir: str) -> dict[str, str]:
    """The manifest beside a tree directory: relative path to the SHA-256 of its content.

    Raises:
        OSError, ValueError: there is none, or it is not one.
    """
    with open(os.path.join(os.path.dirname(tree_dir), MANIFEST)) as f:
        data = json.load(f)
    if not isinstance(data, dict):
        raise ValueError(f"{MANIFEST} beside {tree_dir} is not an object")
    return {str(k): str(v) for k, v in data.items()}


class CodeStore:
    """The trees this node holds.

    Args:
        root: the directory to keep them in (created with the first tree).
    """

    def __init__(self, root: str) -> None:
        self.root = root
        self._lock = threading.Lock()
        self._order: list[str] = []

    def tree(self, digest: str) -> Optional[str]:
        """The directory of tree ``digest``, or ``None`` when this node does not hold it."""
        path = os.path.join(self.root, check_digest(digest), TREE)
        return path if os.path.isdir(path) else None

    def archive(self, digest: str) -> Optional[bytes]:
        """The archive tree ``digest`` came in, or ``None``."""
        try:
            with open(os.path.join(self.root, check_digest(digest), ARCHIVE), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def add(self, digest: str, archive: bytes) -> str:
        """Unpack ``archive`` as tree ``digest`` (unless held already); its directory.

        Raises:
            ArchiveError: the archive is unsafe or malformed, or its content's digest is not ``digest``.
        """
        check_digest(digest)
        with self._lock:
            held = self.tree(digest)
            if held is not None:
                return held
            os.makedirs(self.root, mode=0o700, exist_ok=True)
            tag_cache_dir(self.root)
            incoming = tempfile.mkdtemp(prefix=".incoming-", dir=self.root)
            try:
                entries = unpack(archive, os.path.join(incoming, TREE))
                found = tree_digest(entries)
                if found != digest:
                    raise ArchiveError(f"the archive's content has digest {found}, not {digest} as it was sent")
                with open(os.path.join(incoming, MANIFEST), "w") as f:
                    json.dump({e.path: e.sha256 for e in entries}, f)
                with open(os.path.join(incoming, ARCHIVE), "wb") as f:
                    f.write(archive)
                os.rename(incoming, os.path.join(self.root, digest))
            except BaseException:
                shutil.rmtree(incoming, ignore_errors=True)
                raise
            self._order.append(digest)
            for old in self._order[:-KEEP]:
                shutil.rmtree(os.path.join(self.root, old), ignore_errors=True)
            self._order = self._order[-KEEP:]
            return os.path.join(self.root, digest, TREE)

    def remove(self) -> None:
        """Remove every tree (the node is done)."""
        shutil.rmtree(self.root, ignore_errors=True)
