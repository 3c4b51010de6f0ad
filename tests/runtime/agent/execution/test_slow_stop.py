"""Stopping a generation whose ranks are slow to stop (``NodeProcesses.stop`` with ``meanwhile``): the stop runs in
a thread of its own while the caller's thread goes on calling ``meanwhile`` (the agent: its coordinator's decisions),
the ranks count as gone meanwhile, and a stop that fails raises on the caller's thread as before."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Optional

import pytest

from runtime.agent import contract
from runtime.agent.execution.generation import NodeProcesses
from runtime.agent.spec.agent_settings import AgentSettings
from runtime.agent.world import Node, World

pytestmark = pytest.mark.unit


class Stubborn:
    """A spawner whose processes stop only once :attr:`release` is set (or raise ``fails`` then)."""

    def __init__(self, fails: Optional[BaseException] = None) -> None:
        self.release = threading.Event()
        self.fails = fails
        self.generation = 1
        self.stopped_on: list[threading.Thread] = []
        self.finished = threading.Event()

    def __call__(self, **_: Any) -> Stubborn:
        return self

    def start(self) -> None:
        """Nothing to start."""

    def stop(self, grace: float, sig: int = 15) -> None:
        """Block until released; then raise ``fails`` if given."""
        self.stopped_on.append(threading.current_thread())
        assert self.release.wait(30)
        self.finished.set()
        if self.fails is not None:
            raise self.fails

    def activity(self) -> list[tuple[int, Optional[int], float]]:
        return [(0, None, 0.0)]


def started(tmp_path: Path, spawner: Stubborn) -> NodeProcesses:
    settings = AgentSettings.from_env({contract.JOB_NAME: "j", contract.TOKEN: "t", contract.NODE_RANK_SETTING: "0",
                                       contract.COORDINATOR_HOST: "node-0", contract.ENTRYPOINT: '["train.py"]',
                                       contract.RUN_ROOT: str(tmp_path)})
    processes = NodeProcesses(settings=settings, spawner=spawner, say=lambda _line: None, on_exit=lambda _e: None,
                              on_daemon_exit=lambda _n, _e: None, environ={})
    processes.start(World(job="j", generation=1, restart_count=0, max_restarts=0, master_port=29500,
                          nodes=(Node(0, "10.0.0.0", 32300, 1),)))
    assert processes.activity() == [(0, None, 0.0)]
    return processes


def test_meanwhile_runs_on_the_callers_thread_until_the_slow_ranks_have_stopped(tmp_path: Path) -> None:
    spawner = Stubborn()
    processes = started(tmp_path, spawner)
    calls: list[tuple[threading.Thread, list]] = []

    def meanwhile() -> None:
        calls.append((threading.current_thread(), processes.activity()))
        if len(calls) == 3:
            spawner.release.set()

    try:
        processes.stop(meanwhile=meanwhile)
    finally:
        processes.close()
    assert len(calls) >= 3 and all(thread is threading.current_thread() for thread, _ in calls)
    assert all(activity == [] for _, activity in calls), "ranks being stopped are gone for the stragglers' report"
    assert spawner.stopped_on != [threading.current_thread()], "the stop itself ran in a thread of its own"


def test_a_stop_that_fails_raises_on_the_callers_thread(tmp_path: Path) -> None:
    spawner = Stubborn(fails=OSError("cannot reap"))
    processes = started(tmp_path, spawner)
    try:
        with pytest.raises(OSError, match="cannot reap"):
            processes.stop(meanwhile=spawner.release.set)
    finally:
        processes.close()


def test_without_meanwhile_the_stop_runs_on_the_callers_thread(tmp_path: Path) -> None:
    spawner = Stubborn()
    spawner.release.set()
    processes = started(tmp_path, spawner)
    try:
        processes.stop()
    finally:
        processes.close()
    assert spawner.stopped_on == [threading.current_thread()] and processes.activity() == []


def test_an_error_of_meanwhile_is_raised_only_once_the_ranks_have_stopped(tmp_path: Path) -> None:
    """Nothing is left running behind it: the processes are no longer the generation's to stop again."""
    spawner = Stubborn()
    processes = started(tmp_path, spawner)

    def meanwhile() -> None:
        threading.Timer(0.2, spawner.release.set).start()
        raise RuntimeError("a coordinator decision failed")

    try:
        with pytest.raises(RuntimeError, match="a coordinator decision failed"):
            processes.stop(meanwhile=meanwhile)
        assert spawner.finished.is_set()
    finally:
        processes.close()
