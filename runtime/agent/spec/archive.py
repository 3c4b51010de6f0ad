"""A source tree as it travels: a gzipped tar of regular files, named by a digest of its content.

The digest is SHA-256 over the sorted entries, each ``path NUL mode NUL sha256(content) LF`` (mode
``755`` for an executable file, else ``644``), so it names the content and nothing else (no times,
owners or archive layout). The packer computes it from the files; :func:`unpack` computes it again
from what it extracts and refuses an archive that does not match. Unpacking is safe by construction:
only regular files and directories, relative paths without ``..`` or empty parts, no links, devices
or special bits, written with ``O_NOFOLLOW | O_EXCL`` under a fresh directory, within caps on the
number of files and their total size. The archive is decompressed into memory no further than those
caps allow (:func:`tar_limit`) before the tar is read, so no header (a PAX header's payload is read
whole) can make it cost more. Nothing is ever unpickled. Standard library only.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import stat
import tarfile
import zlib
from dataclasses import dataclass
from typing import Iterable, Sequence

MAX_FILES = 20000
"""Most files one tree may hold."""
MAX_TREE_BYTES = 256 * 1024 * 1024
"""Most bytes one tree may hold, uncompressed."""
MAX_PATH = 1024
"""Longest relative path, characters."""
MEMBER_OVERHEAD = 4096
"""Most tar bytes one file takes besides its content: its header block, a PAX header (a block and a
record naming a path of up to :data:`MAX_PATH` characters, UTF-8) and padding to the next block."""
_DIGEST = re.compile(r"[0-9a-f]{64}")


class ArchiveError(ValueError):
    """An archive is malformed, unsafe, over a cap, or does not match its digest."""


@dataclass(frozen=True)
class Entry:
    """One file of a tree.

    Attributes:
        path: relative, ``/``-separated.
        executable: whether it is executable (its mode is ``755``, else ``644``).
        sha256: hex digest of its content.
    """

    path: str
    executable: bool
    sha256: str


def tree_digest(entries: Iterable[Entry]) -> str:
    """The digest naming a tree with these entries (module docstring)."""
    h = hashlib.sha256()
    for entry in sorted(entries, key=lambda e: e.path):
        h.update(f"{entry.path}\0{'755' if entry.executable else '644'}\0{entry.sha256}\n".encode())
    return h.hexdigest()


def check_digest(value: object) -> str:
    """A tree digest: 64 lower-case hex digits.

    Raises:
        ArchiveError: anything else.
    """
    if not isinstance(value, str) or not _DIGEST.fullmatch(value):
        raise ArchiveError(f"digest={value!r} is invalid: use the 64 hex digits of a tree's SHA-256")
    return value


def check_path(path: str) -> str:
    """A relative path that stays inside the tree.

    Raises:
        ArchiveError: absolute, empty parts, ``.`` or ``..``, a backslash or NUL, or too long.
    """
    parts = path.split("/")
    if (not path or len(path) > MAX_PATH or path.startswith("/") or "\\" in path or "\0" in path
            or any(p in ("", ".", "..") for p in parts)):
        raise ArchiveError(f"path {path!r} is unsafe: archives hold relative paths inside the tree only")
    return path


def pack(files: Sequence[tuple[Entry, bytes]]) -> bytes:
    """A gzipped tar of ``files`` (entry, content), in path order, with no times or owners.

    Raises:
        ArchiveError: a path is unsafe, or a content does not match its entry's digest.
    """
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry, data in sorted(files, key=lambda f: f[0].path):
            check_path(entry.path)
            if hashlib.sha256(data).hexdigest() != entry.sha256:
                raise ArchiveError(f"{entry.path} changed while it was being packed; pack again")
            info = tarfile.TarInfo(entry.path)
            info.size = len(data)
            info.mode = 0o755 if entry.executable else 0o644
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), compresslevel=6, mtime=0)


def tar_limit() -> int:
    """Most bytes the decompressed tar of a tree within :data:`MAX_FILES` and :data:`MAX_TREE_BYTES`
    may have: their content, :data:`MEMBER_OVERHEAD` per file and the end-of-archive blocks."""
    return MAX_TREE_BYTES + MAX_FILES * MEMBER_OVERHEAD + tarfile.RECORDSIZE


def gunzip(archive: bytes, limit: int) -> bytes:
    """The content of the gzip member ``archive``, decompressed a bounded piece at a time.

    Raises:
        ArchiveError: it decompresses to more than ``limit`` bytes (found after at most ``limit + 1``
            bytes are produced), is cut short, is not gzip, or has bytes after its member.
    """
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    out = bytearray()
    pending = archive
    try:
        while not inflater.eof:
            chunk = inflater.decompress(pending, limit + 1 - len(out))
            out += chunk
            if len(out) > limit:
                raise ArchiveError(f"the archive is over {limit // (1024 * 1024)} MiB decompressed, more than a "
                                   f"tree of {MAX_FILES} files and {MAX_TREE_BYTES // (1024 * 1024)} MiB takes")
            pending = inflater.unconsumed_tail
            if not chunk and not pending:
                raise ArchiveError("not a whole gzipped tar: the archive is cut short")
    except zlib.error as exc:
        raise ArchiveError(f"not a whole gzipped tar: {exc}") from None
    if inflater.unused_data:
        raise ArchiveError("not a whole gzipped tar: bytes follow its end")
    return bytes(out)


def unpack(archive: bytes, destination: str) -> list[Entry]:
    """Extract ``archive`` into ``destination`` (a directory that must not exist yet) and return the
    entries extracted (:func:`tree_digest` names them).

    Raises:
        ArchiveError: the archive is not a gzipped tar, holds anything but regular files and
            directories, an unsafe path, a file twice, or more than :data:`MAX_FILES` files or
            :data:`MAX_TREE_BYTES` bytes, or decompresses to more than :func:`tar_limit` bytes.
        OSError: ``destination`` exists or cannot be written.
    """
    plain = gunzip(archive, tar_limit())
    os.mkdir(destination, 0o755)
    entries: list[Entry] = []
    total = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(plain), mode="r:") as tar:
            for member in tar:
                path = check_path(member.name.rstrip("/") if member.isdir() else member.name)
                if member.isdir():
                    _make_dirs(destination, path)
                    continue
                if not member.isreg():
                    raise ArchiveError(f"{path} is not a regular file (links, devices and fifos are refused)")
                if len(entries) >= MAX_FILES:
                    raise ArchiveError(f"the tree holds more than {MAX_FILES} files")
                total += member.size
                if total > MAX_TREE_BYTES:
                    raise ArchiveError(f"the tree is over {MAX_TREE_BYTES // (1024 * 1024)} MiB unpacked")
                source = tar.extractfile(member)
                data = source.read() if source is not None else b""
                executable = bool(member.mode & stat.S_IXUSR)
                _write(destination, path, data, executable)
                entries.append(Entry(path, executable, hashlib.sha256(data).hexdigest()))
    except (tarfile.TarError, EOFError) as exc:
        raise ArchiveError(f"not a whole gzipped tar: {exc}") from None
    return entries


def _make_dirs(root: str, relative: str) -> str:
    """Create ``root/relative`` one part at a time, never through a link; return its path."""
    path = root
    for part in relative.split("/"):
        path = os.path.join(path, part)
        try:
            os.mkdir(path, 0o755)
        except FileExistsError:
            if os.path.islink(path) or not os.path.isdir(path):
                raise ArchiveError(f"{relative} is not a directory in the tree") from None
    return path


def _write(root: str, relative: str, data: bytes, executable: bool) -> None:
    parent, _, name = relative.rpartition("/")
    directory = _make_dirs(root, parent) if parent else root
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(os.path.join(directory, name), flags, 0o755 if executable else 0o644)
    except FileExistsError:
        raise ArchiveError(f"{relative} appears twice in the archive") from None
    with os.fdopen(fd, "wb") as f:
        f.write(data)
