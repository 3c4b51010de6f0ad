"""Archives and the store: the digest names the content, unpacking refuses anything unsafe."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
import tracemalloc
from pathlib import Path

import pytest

from runtime.agent.code.store import KEEP, CodeStore, manifest
from runtime.agent.spec import archive as archive_module
from runtime.agent.spec.archive import ArchiveError, Entry, pack, tree_digest, unpack

pytestmark = pytest.mark.unit


def entry(path: str, data: bytes, executable: bool = False) -> tuple[Entry, bytes]:
    return Entry(path, executable, hashlib.sha256(data).hexdigest()), data


def tar_of(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for info, data in members:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return gzip.compress(raw.getvalue())


def test_a_packed_tree_unpacks_to_the_same_files_and_digest(tmp_path: Path):
    files = [entry("pkg/__init__.py", b""), entry("pkg/mod.py", b"X = 1\n"), entry("run.sh", b"#!/bin/sh\n", True)]

    archive = pack(files)
    entries = unpack(archive, str(tmp_path / "out"))

    assert tree_digest(entries) == tree_digest(e for e, _ in files)
    assert (tmp_path / "out/pkg/mod.py").read_bytes() == b"X = 1\n"
    assert os.access(tmp_path / "out/run.sh", os.X_OK) and not os.access(tmp_path / "out/pkg/mod.py", os.X_OK)
    assert pack(list(reversed(files))) == archive, "no times, owners or order in the archive"


def test_the_digest_names_content_paths_and_modes_only():
    base = [entry("a.py", b"1")]
    assert tree_digest(e for e, _ in base) != tree_digest(e for e, _ in [entry("a.py", b"2")])
    assert tree_digest(e for e, _ in base) != tree_digest(e for e, _ in [entry("b.py", b"1")])
    assert tree_digest(e for e, _ in base) != tree_digest(e for e, _ in [entry("a.py", b"1", True)])


def link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, b""


@pytest.mark.parametrize(("members", "message"), [
    ([(tarfile.TarInfo("../escape.py"), b"x")], r"path '../escape.py' is unsafe"),
    ([(tarfile.TarInfo("/etc/passwd"), b"x")], r"path '/etc/passwd' is unsafe"),
    ([(tarfile.TarInfo("a/./b.py"), b"x")], r"is unsafe"),
    ([link("evil", "/etc/passwd")], r"evil is not a regular file"),
    ([link("hard", "/etc/passwd", tarfile.LNKTYPE)], r"hard is not a regular file"),
    ([(tarfile.TarInfo("a.py"), b"1"), (tarfile.TarInfo("a.py"), b"2")], r"a.py appears twice"),
], ids=["dotdot", "absolute", "dot", "symlink", "hardlink", "twice"])
def test_unsafe_archives_are_refused_and_write_nothing_outside(tmp_path: Path, members, message: str):
    with pytest.raises(ArchiveError, match=message):
        unpack(tar_of(*members), str(tmp_path / "out"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_link_planted_as_a_directory_is_not_followed(tmp_path: Path):
    (tmp_path / "outside").mkdir()
    with pytest.raises(ArchiveError):
        unpack(tar_of(link("d", str(tmp_path / "outside")), (tarfile.TarInfo("d/x.py"), b"x")), str(tmp_path / "out"))
    assert not list((tmp_path / "outside").iterdir())


def test_garbage_is_not_an_archive(tmp_path: Path):
    with pytest.raises(ArchiveError, match="not a whole gzipped tar"):
        unpack(b"not an archive", str(tmp_path / "out"))


def test_an_archive_cut_short_is_not_an_archive(tmp_path: Path):
    whole = pack([entry("a.py", b"A = 1\n" * 1000)])
    with pytest.raises(ArchiveError, match="not a whole gzipped tar"):
        unpack(whole[:len(whole) // 2], str(tmp_path / "out"))


def test_a_tree_over_max_files_is_refused(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(archive_module, "MAX_FILES", 3)
    files = [entry(f"m{i}.py", b"") for i in range(4)]

    unpack(pack(files[:3]), str(tmp_path / "three"))
    with pytest.raises(ArchiveError, match="more than 3 files"):
        unpack(pack(files), str(tmp_path / "four"))


def test_a_tree_over_max_tree_bytes_is_refused(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(archive_module, "MAX_TREE_BYTES", 2 * 1024 * 1024)

    unpack(pack([entry("a.bin", b"a" * 2 * 1024 * 1024)]), str(tmp_path / "at"))
    with pytest.raises(ArchiveError, match="over 2 MiB"):
        unpack(pack([entry("a.bin", b"a" * 2 * 1024 * 1024), entry("b.bin", b"b")]), str(tmp_path / "over"))


def test_a_pax_header_bomb_is_refused_before_the_tar_is_read(tmp_path: Path, monkeypatch):
    """A PAX header's payload is read whole by ``tarfile`` before any member is seen (CPython
    Lib/tarfile.py, ``TarInfo._proc_pax``: ``tarfile.fileobj.read(self._block(self.size))``), so a
    small archive whose one header claims 32 MiB would cost that much memory before our caps; the
    decompression stops at :func:`tar_limit` instead, and the peak stays near it."""
    monkeypatch.setattr(archive_module, "MAX_TREE_BYTES", 1024 * 1024)
    monkeypatch.setattr(archive_module, "MAX_FILES", 10)
    info = tarfile.TarInfo("a.py")
    info.pax_headers = {"comment": "x" * (32 * 1024 * 1024)}
    bomb = tar_of((info, b"A = 1\n"))
    assert len(bomb) < 64 * 1024

    tracemalloc.start()
    try:
        with pytest.raises(ArchiveError, match="over 1 MiB decompressed"):
            unpack(bomb, str(tmp_path / "out"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * archive_module.tar_limit(), peak
    assert not (tmp_path / "out").exists()


def test_the_store_checks_the_digest_keeps_a_manifest_and_the_newest_trees(tmp_path: Path):
    store = CodeStore(str(tmp_path / "store"))
    trees = [[entry("m.py", f"V = {i}\n".encode())] for i in range(KEEP + 1)]
    digests = [tree_digest(e for e, _ in t) for t in trees]

    with pytest.raises(ArchiveError, match=f"not {digests[1]} as it was sent"):
        store.add(digests[1], pack(trees[0]))
    paths = [store.add(d, pack(t)) for d, t in zip(digests, trees)]

    assert store.tree(digests[0]) is None and store.archive(digests[0]) is None, "the oldest went"
    assert store.tree(digests[-1]) == paths[-1] and Path(paths[-1], "m.py").read_text() == f"V = {KEEP}\n"
    assert manifest(paths[-1]) == {"m.py": trees[-1][0][0].sha256}
    assert store.archive(digests[-1]) == pack(trees[-1])
    assert store.add(digests[-1], b"ignored: held already") == paths[-1]
    assert not [p for p in (tmp_path / "store").iterdir() if p.name.startswith(".incoming")]
