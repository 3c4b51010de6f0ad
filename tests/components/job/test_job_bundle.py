"""The runtime bundle: files to ConfigMap keys and volume items, size limit, and materialising it back."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest

from components.errors import BundleError
from components.job.bundle import (
    MAX_CONFIGMAP_BYTES,
    REPO_ROOT,
    build_bundle,
    bundle_key,
    configmap_manifest,
    materialise,
)

pytestmark = pytest.mark.unit


def make_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


AGENT_TREE = {
    "runtime/__init__.py": "",
    "runtime/agent/__init__.py": "",
    "runtime/agent/__main__.py": "print('agent')\n",
    "runtime/agent/contract.py": "PORT = 1\n",
    "runtime/agent/sub/deep.py": "X = 'é'\n",
    "runtime/agent/__pycache__/contract.cpython-311.py": "stale",
    "runtime/agent/notes.txt": "not python",
    "runtime/client.py": "import httpx\n",
}


def test_bundle_holds_agent_sources_and_package_init_only(tmp_path: Path) -> None:
    bundle = build_bundle(make_tree(tmp_path, AGENT_TREE))
    assert [item["path"] for item in bundle.items] == [
        "runtime/__init__.py",
        "runtime/agent/__init__.py",
        "runtime/agent/__main__.py",
        "runtime/agent/contract.py",
        "runtime/agent/sub/deep.py",
    ]
    assert {item["key"] for item in bundle.items} == set(bundle.data)
    assert bundle.data["runtime__agent__sub__deep.py"] == "X = 'é'\n"
    assert bundle.size == sum(len(k) + len(v.encode()) for k, v in bundle.data.items())
    assert all("/" not in key for key in bundle.data)


def test_materialise_restores_the_tree(tmp_path: Path) -> None:
    bundle = build_bundle(make_tree(tmp_path / "src", AGENT_TREE))
    written = materialise(bundle.data, bundle.items, tmp_path / "mount")
    assert len(written) == 5
    assert (tmp_path / "mount/runtime/agent/sub/deep.py").read_text() == "X = 'é'\n"
    assert (tmp_path / "mount/runtime/agent/contract.py").read_text() == "PORT = 1\n"


def test_real_bundle_ships_the_contract_and_fits() -> None:
    bundle = build_bundle()
    assert bundle.data["runtime__agent__contract.py"] == (REPO_ROOT / "runtime/agent/contract.py").read_text()
    assert 0 < bundle.size <= MAX_CONFIGMAP_BYTES


def test_digest_changes_with_content(tmp_path: Path) -> None:
    root = make_tree(tmp_path, AGENT_TREE)
    before = build_bundle(root).digest
    (root / "runtime/agent/contract.py").write_text("PORT = 2\n")
    assert build_bundle(root).digest != before


def test_oversize_bundle_fails_naming_size_and_largest_file(tmp_path: Path) -> None:
    root = make_tree(tmp_path, {**AGENT_TREE, "runtime/agent/huge.py": "#" * 2000})
    with pytest.raises(
        BundleError,
        match=r"over the ConfigMap limit of 1000 bytes; largest files: "
        r"runtime__agent__huge\.py \(2000 bytes\)",
    ):
        build_bundle(root, limit=1000)


def test_default_limit_is_one_mebibyte(tmp_path: Path) -> None:
    root = make_tree(tmp_path, {"runtime/agent/huge.py": "#" * MAX_CONFIGMAP_BYTES})
    with pytest.raises(BundleError, match=r"over the ConfigMap limit of 1048576 bytes"):
        build_bundle(root)


def test_missing_sources_fail_clearly(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match=r"no Python files under .*runtime/agent"):
        build_bundle(tmp_path)


def test_colliding_keys_fail(tmp_path: Path) -> None:
    root = make_tree(tmp_path, {"runtime/agent/a/b.py": "", "runtime/agent/a__b.py": ""})
    with pytest.raises(BundleError, match=r"collides with another file"):
        build_bundle(root)


def test_unkeyable_path_fails() -> None:
    with pytest.raises(BundleError, match=r"cannot be a ConfigMap key"):
        bundle_key(PurePosixPath("runtime/agent/my file.py"))


@pytest.mark.parametrize(
    ("items", "fragment"),
    [
        ([{"key": "k", "path": "../escape.py"}], "must be relative and stay in the mount"),
        ([{"key": "k", "path": "/etc/passwd"}], "must be relative and stay in the mount"),
        ([{"key": "missing", "path": "x.py"}], "is not in the ConfigMap"),
    ],
)
def test_materialise_rejects_bad_items(tmp_path: Path, items: list[dict[str, str]], fragment: str) -> None:
    with pytest.raises(BundleError, match=fragment):
        materialise({"k": "x"}, items, tmp_path)


def test_configmap_manifest_carries_the_data(tmp_path: Path) -> None:
    bundle = build_bundle(make_tree(tmp_path, AGENT_TREE))
    cm = configmap_manifest("demo-runtime", "ml", {"a": "b"}, bundle)
    assert cm["metadata"] == {"name": "demo-runtime", "namespace": "ml", "labels": {"a": "b"}}
    assert cm["data"] == dict(bundle.data)
