"""Where the test cluster's builds and state live: under the user's cache directory, never the repository."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/trainplane/cluster`` (``~/.cache/trainplane/cluster`` when it is unset).

    Every build is a subdirectory named by its tool and versions, so two checkouts pinning different
    versions share the cache without clashing.
    """
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "trainplane" / "cluster"


def go_binary() -> str:
    """The ``go`` command: ``$GO`` if set, else ``/usr/local/go/bin/go`` where it exists, else ``go`` on PATH."""
    explicit = os.environ.get("GO")
    if explicit:
        return explicit
    standard = Path("/usr/local/go/bin/go")
    return str(standard) if standard.exists() else "go"
