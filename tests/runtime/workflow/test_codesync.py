"""The caller's source tree: what is in it, what an unchanged tree costs, the caps."""

from __future__ import annotations

import builtins
from pathlib import Path

import pytest

from runtime.agent.errors import ConfigError
from runtime.agent.spec.archive import unpack
from runtime.agent.spec.cachedir import tag_cache_dir
from runtime.workflow import codesync
from runtime.workflow.codesync import Source

pytestmark = pytest.mark.unit


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def paths(source: Source) -> list[str]:
    return sorted(e.path for e in source.snapshot().entries)


def test_the_tree_leaves_out_ignored_paths_caches_links_and_build_output(tmp_path: Path):
    root = tree(tmp_path, {"pkg/__init__.py": "", "pkg/mod.py": "X = 1\n", "pkg/__pycache__/mod.pyc": "",
                           "data/big.csv": "1,2\n", "notes.tmp": "", ".git/HEAD": "ref", ".venv/lib/x.py": "",
                           ".gitignore": "data/\n", ".trainplaneignore": "*.tmp\n!keep.tmp\n", "keep.tmp": ""})
    (root / "pkg" / "link.py").symlink_to(root / "pkg" / "mod.py")

    assert paths(Source(str(root))) == [".gitignore", ".trainplaneignore", "keep.tmp", "pkg/__init__.py", "pkg/mod.py"]


def test_an_unchanged_tree_reads_no_file_and_keeps_its_digest(tmp_path: Path, monkeypatch):
    root = tree(tmp_path, {"a.py": "A = 1\n", "b.py": "B = 1\n"})
    source = Source(str(root))
    first = source.snapshot()
    opened: list[str] = []

    def counting_open(path: str, *args, **kwargs):
        opened.append(path)
        return builtins.open(path, *args, **kwargs)

    monkeypatch.setattr(codesync, "open", counting_open, raising=False)

    again = source.snapshot()
    (root / "b.py").write_text("B = 2\n")
    edited = source.snapshot()

    assert again.digest == first.digest and opened == [str(root / "b.py")]
    assert edited.digest != first.digest


def test_the_archive_carries_the_snapshot(tmp_path: Path):
    root = tree(tmp_path / "src", {"m.py": "M = 1\n"})
    source = Source(str(root))
    snapshot = source.snapshot()

    entries = unpack(source.archive(snapshot), str(tmp_path / "out"))

    assert [e.path for e in entries] == ["m.py"] and (tmp_path / "out" / "m.py").read_text() == "M = 1\n"


def test_a_tree_over_the_cap_names_its_largest_files_and_the_fix(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(codesync, "MAX_TREE_BYTES", 100)
    root = tree(tmp_path, {"small.py": "x" * 10, "weights.bin": "x" * 200})

    with pytest.raises(ConfigError, match=r"is 0.0 MiB, over the 0 MiB .*largest: weights.bin .*exclude data and "
                                          r"build output in .*\.trainplaneignore \(gitignore syntax\)"):
        Source(str(root)).snapshot()


def test_directories_tagged_as_caches_are_left_out(tmp_path: Path):
    root = tree(tmp_path, {"m.py": "", "logs/agents.log": "", "logs/run/x.py": "", "fake/CACHEDIR.TAG": "not one"})
    tag_cache_dir(str(root / "logs"))

    assert paths(Source(str(root))) == ["fake/CACHEDIR.TAG", "m.py"]


def test_a_tree_over_the_cap_is_refused_from_its_sizes_before_any_file_is_read(tmp_path: Path, monkeypatch):
    """A file larger than the cap (sparse, so it costs no disk) is refused by its ``stat`` alone: no
    file of the tree is opened, so the check costs no memory for what it refuses."""
    root = tree(tmp_path, {"m.py": "M = 1\n"})
    with open(root / "huge.bin", "wb") as f:
        f.truncate(codesync.MAX_TREE_BYTES + 1)
    opened: list[str] = []

    def counting_open(path: str, *args, **kwargs):
        opened.append(path)
        return builtins.open(path, *args, **kwargs)

    monkeypatch.setattr(codesync, "open", counting_open, raising=False)

    with pytest.raises(ConfigError, match=r"is 32.0 MiB, over the 32 MiB .*largest: huge.bin \(32.0 MiB\)"):
        Source(str(root)).snapshot()
    assert opened == []
