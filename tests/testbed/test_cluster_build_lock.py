"""Two runs that need the same tool build it once: the second waits for the first's build lock and finds it done,
instead of clearing the cache directory under the first one's ``go build`` (seen: a cluster test run beside
``.ci/run``'s build removed the Pulumi CLI's half-built directory)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from testbed.cluster.build import GoTool, build_tool, building, tool_dir

pytestmark = pytest.mark.unit

TOOL = GoTool("example", "example.com/tool", "v1.0.0", ("example.com/tool/cmd/tool",))


def test_a_build_waits_for_the_one_under_way_and_takes_its_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    root = tool_dir(TOOL)
    holding, release = threading.Event(), threading.Event()

    def first_build() -> None:
        with building(root):
            holding.set()
            release.wait(10)
            (root / "bin").mkdir(parents=True)
            (root / "bin" / "tool").write_text("built by the first run")
            (root / ".done").write_text("done")

    first = threading.Thread(target=first_build)
    first.start()
    assert holding.wait(10)
    result: list[tuple[Path, bool]] = []
    second = threading.Thread(target=lambda: result.append(build_tool(TOOL)))
    second.start()
    second.join(0.2)
    assert second.is_alive() and not result, "the second run waits while the first holds the lock"
    release.set()
    first.join(10)
    second.join(10)
    assert result == [(root / "bin", False)], "the second run builds nothing"
    assert (root / "bin" / "tool").read_text() == "built by the first run"
    assert not (root / "src").exists()
