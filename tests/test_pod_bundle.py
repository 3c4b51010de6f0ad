"""The pod bundle is exactly the in-pod packages, and each of its modules imports, in a bare interpreter (``-I -S``, no
site-packages), from the bundle alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from components.job.bundle import build_bundle, materialise
from tests.conftest import ROOT

pytestmark = pytest.mark.process


def test_the_pod_bundle_is_the_in_pod_packages_and_every_module_imports_from_it_alone(tmp_path: Path):
    bundle = build_bundle()
    paths = [item["path"] for item in bundle.items]
    in_pod = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "runtime" / "agent").rglob("*.py")
                    if "__pycache__" not in p.parts)
    assert paths == ["runtime/__init__.py", *in_pod]
    packages = {str(Path(p).parent) for p in in_pod}
    assert all(f"{package}/__init__.py" in in_pod for package in packages)
    materialise(bundle.data, bundle.items, tmp_path)
    modules = [p.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for p in paths
               if not p.endswith("__main__.py")]
    code = ("import importlib, sys; sys.path.insert(0, sys.argv[1]); "
            "[importlib.import_module(m) for m in sys.argv[2:]]; "
            "assert not any('site-packages' in p for p in sys.path); "
            "assert not any(m.split('.')[0] in ('testbed', 'components', 'bench', 'tests') for m in sys.modules); "
            "print(len(sys.argv) - 2)")
    result = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(tmp_path), *modules], capture_output=True,
                            text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) == len(modules) > 40
