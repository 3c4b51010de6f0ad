"""The caller's side of code sync: the function's source tree, as it is on disk now, content-addressed.

The tree is the function's import root (``locate``: the directory its top-level package or module
is in), every regular file under it except what ``.gitignore`` and ``.trainplaneignore`` in the root
exclude (gitignore syntax, read with ``pathspec``), :data:`DEFAULT_EXCLUDES`, and directories tagged
as caches (a ``CACHEDIR.TAG``, as the agents' code stores and local jobs' log directories are, so a
log directory inside the project is never synced); symbolic links are left out. Taking a snapshot
stats every file and reads only those whose size, time or inode changed since the last one, so an
unchanged tree costs a walk and a digest. The digest is
``runtime.agent.spec.archive.tree_digest``; the archive is built only when the job lacks it.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sysconfig
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pathspec

from runtime.agent.errors import ConfigError
from runtime.agent.spec.archive import Entry, pack, tree_digest
from runtime.agent.spec.cachedir import is_cache_dir

IGNORE_FILES = (".gitignore", ".trainplaneignore")
"""Files in the root whose patterns (gitignore syntax) leave paths out of the tree."""
DEFAULT_EXCLUDES = (".git/", ".hg/", ".svn/", "__pycache__/", "*.pyc", "*.pyo", ".venv/", "venv/", ".tox/",
                    ".nox/", ".mypy_cache/", ".pytest_cache/", ".ruff_cache/", "node_modules/", "*.egg-info/",
                    ".ipynb_checkpoints/", ".DS_Store")
"""Left out of every tree."""
MAX_TREE_BYTES = 32 * 1024 * 1024
"""Most bytes of files a tree may hold (a source tree, not a data set)."""
MAX_ARCHIVE_BYTES = 11 * 1024 * 1024
"""Most bytes a packed tree may have (it travels base64 in one request, under the agents' 16 MiB cap)."""


@dataclass(frozen=True)
class Snapshot:
    """A source tree as it was when taken.

    Attributes:
        root: the tree's directory.
        digest: what names its content.
        entries: its files.
        size: their total size, bytes.
    """

    root: str
    digest: str
    entries: tuple[Entry, ...]
    size: int


class Source:
    """One source tree on this machine, snapshotted as often as asked.

    Args:
        root: the directory (a function's import root).
    """

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self._lock = threading.Lock()
        self._known: dict[str, tuple[tuple[int, int, int], Entry]] = {}

    def snapshot(self) -> Snapshot:
        """The tree as it is now.

        Raises:
            ConfigError: it is over :data:`MAX_TREE_BYTES` (told from the files' sizes, before any is
                read); names the largest files and how to exclude them.
        """
        with self._lock:
            files = self._files(self._excludes())
            sizes = [(info.st_size, relative) for relative, info in files]
            total = sum(size for size, _ in sizes)
            if total > MAX_TREE_BYTES:
                largest = ", ".join(f"{path} ({size / 2**20:.1f} MiB)"
                                    for size, path in sorted(sizes, reverse=True)[:5])
                raise ConfigError(f"the code under {self.root} is {total / 2**20:.1f} MiB, over the "
                                  f"{MAX_TREE_BYTES // 2**20} MiB a job takes from its caller (largest: {largest}): "
                                  f"exclude data and build output in {os.path.join(self.root, '.trainplaneignore')} "
                                  "(gitignore syntax), or move them out of the package")
            entries: list[Entry] = []
            known: dict[str, tuple[tuple[int, int, int], Entry]] = {}
            for relative, info in files:
                key = (info.st_size, info.st_mtime_ns, info.st_ino)
                seen = self._known.get(relative)
                if seen is not None and seen[0] == key:
                    entry = seen[1]
                else:
                    entry = Entry(relative, bool(info.st_mode & stat.S_IXUSR),
                                  _file_digest(os.path.join(self.root, relative)))
                known[relative] = (key, entry)
                entries.append(entry)
            self._known = known
        return Snapshot(self.root, tree_digest(entries), tuple(entries), total)

    def archive(self, snapshot: Snapshot) -> bytes:
        """The packed tree of ``snapshot``.

        Raises:
            ConfigError: the archive is over :data:`MAX_ARCHIVE_BYTES`.
            ArchiveError: a file changed since the snapshot (take a new one).
            OSError: a file went away since the snapshot.
        """
        files = []
        for entry in snapshot.entries:
            with open(os.path.join(snapshot.root, entry.path), "rb") as f:
                files.append((entry, f.read()))
        archive = pack(files)
        if len(archive) > MAX_ARCHIVE_BYTES:
            raise ConfigError(f"the code under {snapshot.root} packs to {len(archive) / 2**20:.1f} MiB, over the "
                              f"{MAX_ARCHIVE_BYTES // 2**20} MiB one request carries: exclude large files in "
                              f"{os.path.join(snapshot.root, '.trainplaneignore')} (gitignore syntax)")
        return archive

    def _excludes(self) -> pathspec.PathSpec:
        lines = list(DEFAULT_EXCLUDES)
        for name in IGNORE_FILES:
            path = Path(self.root, name)
            if path.is_file():
                lines.extend(path.read_text(errors="replace").splitlines())
        return pathspec.GitIgnoreSpec.from_lines(lines)

    def _files(self, excluded: pathspec.PathSpec) -> list[tuple[str, os.stat_result]]:
        """Every regular file the tree holds: relative path and ``lstat``, in walk order."""
        found = []
        pending = [""]
        while pending:
            relative_dir = pending.pop()
            if is_cache_dir(os.path.join(self.root, relative_dir)):
                continue
            with os.scandir(os.path.join(self.root, relative_dir)) as listing:
                for item in listing:
                    relative = f"{relative_dir}/{item.name}" if relative_dir else item.name
                    if item.is_symlink():
                        continue
                    if item.is_dir():
                        if not excluded.match_file(relative + "/"):
                            pending.append(relative)
                    elif item.is_file() and not excluded.match_file(relative):
                        found.append((relative, item.stat()))
        return found


_SOURCES: dict[str, Source] = {}
_SOURCES_LOCK = threading.Lock()


def installed(root: str) -> bool:
    """Whether ``root`` is where this interpreter's standard library or installed packages live: code
    the job's processes import from their own environment, never synced."""
    real = os.path.realpath(root)
    paths = sysconfig.get_paths()
    return any(real == os.path.realpath(paths[key]) for key in ("stdlib", "platstdlib", "purelib", "platlib"))


def source_for(root: str) -> Optional[Source]:
    """The :class:`Source` of ``root``, one per directory in this process (so its snapshots share what
    they read); ``None`` for an :func:`installed` root."""
    if installed(root):
        return None
    with _SOURCES_LOCK:
        found: Optional[Source] = _SOURCES.get(root)
        if found is None:
            found = _SOURCES[root] = Source(root)
        return found


def _file_digest(path: str) -> str:
    """The SHA-256 (hex) of the file at ``path``, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(2**20), b""):
            digest.update(chunk)
    return digest.hexdigest()
