"""The cache-directory tag (the Cache Directory Tagging Specification, https://bford.info/cachedir/): the
agents' code stores and local jobs' log directories carry it, and code sync (``runtime.workflow.codesync``),
like ``tar --exclude-caches`` and backup tools, leaves a directory holding it out of a tree. Standard library
only."""

from __future__ import annotations

import os

CACHEDIR_TAG = "CACHEDIR.TAG"
CACHEDIR_SIGNATURE = "Signature: 8a477f597d28d172789f06886806bc55"
"""The specification's file and the first line it must start with."""


def tag_cache_dir(path: str) -> None:
    """Mark ``path`` (which exists) as a cache directory that copies of a tree leave out."""
    tag = os.path.join(path, CACHEDIR_TAG)
    if not os.path.exists(tag):
        with open(tag, "w") as f:
            f.write(f"{CACHEDIR_SIGNATURE}\n# trainplane: logs and synced code, not source\n")


def is_cache_dir(directory: str) -> bool:
    """Whether ``directory`` holds a ``CACHEDIR.TAG`` with the specification's signature."""
    tag = os.path.join(directory, CACHEDIR_TAG)
    if not os.path.isfile(tag):
        return False
    try:
        with open(tag, "rb") as f:
            return f.read(len(CACHEDIR_SIGNATURE)) == CACHEDIR_SIGNATURE.encode()
    except OSError:
        return False
