"""Rank 0's ``MASTER_PORT`` listens before the user's code runs (``execution.storelisten``): which ranks are
asked to (the environment the agent gives), what the bootstrap reads, and the hook that hands the socket to
torch's ``TCPStore``, on a stand-in for ``torch.distributed.rendezvous`` (no torch in the unit tier)."""

from __future__ import annotations

import socket
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from runtime.agent import contract
from runtime.agent.execution import storelisten
from runtime.agent.execution.generation import NodeProcesses
from runtime.agent.spec.agent_settings import AgentSettings
from runtime.agent.world import Node, World
from tests.runtime.agent.execution.test_join_env import BASE, Recorded

pytestmark = pytest.mark.unit

FIXED = {contract.MIN_WORKERS: "", contract.MAX_WORKERS: "", contract.WORKERS: "2"}


def asked(tmp_path: Path, node_rank: int = 0, **changes: str) -> list[str | None]:
    """Each of one node's ranks' ``TRAINPLANE_STORE_LISTEN`` (``None``: unset) for an agent of these settings."""
    env = {k: v for k, v in {**BASE, **FIXED, contract.NODE_RANK_SETTING: str(node_rank), **changes}.items() if v}
    settings = AgentSettings.from_env({**env, contract.RUN_ROOT: str(tmp_path)})
    spawner = Recorded()
    processes = NodeProcesses(settings=settings, spawner=spawner, say=lambda _line: None, on_exit=lambda _e: None,
                              on_daemon_exit=lambda _n, _e: None, environ={})
    world = World(job="j", generation=1, restart_count=0, max_restarts=0, master_port=29500,
                  nodes=(Node(0, "10.0.0.0", 32300, 2), Node(1, "10.0.0.1", 32300, 2)),
                  distribution=env[contract.DISTRIBUTION])
    try:
        processes.start(world)
    finally:
        processes.close()
    return [e.get(contract.STORE_LISTEN) for e in spawner.envs]


def test_global_rank_0_of_a_fixed_size_torch_batch_job_is_asked_to_listen(tmp_path: Path) -> None:
    assert asked(tmp_path) == ["1", None]
    assert asked(tmp_path, **{contract.DISTRIBUTION: "spmd"}) == ["1", None]
    assert asked(tmp_path, node_rank=1) == [None, None]


@pytest.mark.parametrize("changes", [
    {contract.MIN_WORKERS: "1", contract.MAX_WORKERS: "2"},  # elastic: its ranks meet through torchhooks' store
    {contract.DISTRIBUTION: "jax"},
    {contract.NO_PYTHON: "true"},
])
def test_no_other_rank_is(tmp_path: Path, changes: dict[str, str]) -> None:
    assert asked(tmp_path, **changes) == [None, None]


def test_the_port_is_the_master_port_when_asked() -> None:
    assert storelisten.wanted({contract.STORE_LISTEN: "1", contract.MASTER_PORT: "29500"}) == 29500
    assert storelisten.wanted({contract.MASTER_PORT: "29500"}) is None
    assert storelisten.wanted({contract.STORE_LISTEN: "1"}) is None


def test_only_the_master_store_on_that_port_takes_the_socket() -> None:
    assert storelisten.takes({"host_name": "h", "port": 29500, "is_master": True}, 29500)
    assert not storelisten.takes({"port": 29500, "is_master": False}, 29500)
    assert not storelisten.takes({"port": 29501, "is_master": True}, 29500)
    assert not storelisten.takes({"port": 29500, "is_master": True, "master_listen_fd": 7}, 29500)


class FakeStore:
    """Stands in for torch's ``TCPStore``: keeps what it was made with."""

    made: list[dict[str, Any]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        FakeStore.made.append({"args": args, **kwargs})


def test_the_first_master_store_on_the_port_gets_the_listening_socket_and_later_ones_bind_their_own() -> None:
    """The hook replaces the ``TCPStore`` name torch's rendezvous module calls: the first master store on the
    port is made with the socket's descriptor (the socket is detached: the store owns it); a client, a
    second master store or one made with positional arguments are made as asked."""
    server = storelisten.listen(0)
    assert server is not None
    port = server.getsockname()[1]
    fd = server.fileno()
    module = types.ModuleType("torch.distributed.rendezvous")
    module.TCPStore = FakeStore  # type: ignore[attr-defined]
    FakeStore.made = []
    try:
        storelisten._hook(module, server, port)
        module.TCPStore(host_name="h", port=port, is_master=False)  # type: ignore[attr-defined]
        module.TCPStore("h", port, 2, True)  # type: ignore[attr-defined]
        module.TCPStore(host_name="h", port=port, is_master=True)  # type: ignore[attr-defined]
        module.TCPStore(host_name="h", port=port, is_master=True)  # type: ignore[attr-defined]
        assert [m.get("master_listen_fd") for m in FakeStore.made] == [None, None, fd, None]
        assert server.fileno() == -1  # detached, not closed: the descriptor is the store's
    finally:
        socket.socket(fileno=fd).close()


def test_a_listening_socket_takes_connections_before_anything_accepts_them() -> None:
    """What an early rank meets: its connection is queued, not refused."""
    server = storelisten.listen(0)
    assert server is not None
    try:
        socket.create_connection(("127.0.0.1", server.getsockname()[1]), timeout=10).close()
    finally:
        server.close()


def test_a_port_that_cannot_be_bound_changes_nothing() -> None:
    taken = socket.create_server(("", 0))
    try:
        assert storelisten.listen(taken.getsockname()[1]) is None
    finally:
        taken.close()


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=10).close()
    except ConnectionRefusedError:
        return True
    return False


def test_the_port_is_bound_only_once_torchs_rendezvous_module_is_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    """Asked to listen, a rank that has not imported torch's rendezvous has nothing bound (its own code may
    still bind the port); once the module is there, the port takes connections and its ``TCPStore`` is hooked."""
    free = socket.create_server(("", 0))
    port = free.getsockname()[1]
    free.close()
    meta_path = list(sys.meta_path)
    monkeypatch.setattr(sys, "meta_path", meta_path)
    monkeypatch.delitem(sys.modules, "torch.distributed.rendezvous", raising=False)
    before = len(meta_path)
    storelisten.install_on_import(port)
    assert _refused(port) and len(sys.meta_path) == before + 1  # a finder waits for the module
    module = types.ModuleType("torch.distributed.rendezvous")
    module.TCPStore = FakeStore  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch.distributed.rendezvous", module)
    storelisten.install_on_import(port)
    assert not _refused(port)
    FakeStore.made = []
    module.TCPStore(host_name="h", port=port, is_master=True)  # type: ignore[attr-defined]
    fd = FakeStore.made[0]["master_listen_fd"]
    assert isinstance(fd, int)
    socket.socket(fileno=fd).close()
