"""Rank 0's store port listening before any rank can call: a batch torch job's ``env://`` rendezvous
without torch's connect-refused wait.

Without an agent hosting the store (``TORCHELASTIC_USE_AGENT_STORE=False``), rank 0's
``init_process_group`` starts the ``TCPStore`` server on ``MASTER_PORT``. A rank that gets there first
(its ``import torch`` finished sooner) is refused, and torch's client waits before it tries again
(c10d's connect backoff): the group forms 0.5 s or more after the last rank arrived
(``bench/README.md``, launch). torchrun's ranks never meet that: its agent hosts the store before
they start. Here rank 0 listens on ``MASTER_PORT`` as soon as its ``import torch`` reaches
``torch.distributed.rendezvous`` (:func:`listen`, all interfaces, as torch's server does), long before
any rank's own import is done, and hands that socket to the first ``TCPStore`` it makes as master on
that port (torch's ``master_listen_fd``; :func:`install_on_import` hooks the name the rendezvous module
calls, which ``env://`` and ``tcp://`` use). An early rank's connection then waits in the listen
backlog and is served as soon as the server runs.

The agent asks for it (``TRAINPLANE_STORE_LISTEN``) only for global rank 0 of a batch job of a torch
distribution that is not elastic (``generation.NodeProcesses``). A rank 0 that imports torch cannot
then bind ``MASTER_PORT`` by other means than a ``TCPStore`` (as under torchrun, whose agent holds
it); one that never imports torch never has it bound. A port that cannot be bound (taken) changes
nothing: torch's own server then reports it as it would. Standard library only; torch is never
imported here.
"""

from __future__ import annotations

import os
import socket
import types
from typing import Any, Callable, Mapping, Optional

from runtime.agent import contract
from runtime.agent.execution import torchhooks

BACKLOG = 1024
"""Connections the kernel queues before the store's server accepts them: every rank's, many times over."""


def wanted(env: Mapping[str, str]) -> Optional[int]:
    """The port to listen on, from a rank's environment: ``MASTER_PORT`` when the agent asked for it
    (``TRAINPLANE_STORE_LISTEN=1``), else ``None``."""
    port = env.get(contract.MASTER_PORT, "")
    return int(port) if env.get(contract.STORE_LISTEN) == "1" and port.isdigit() else None


def listen(port: int) -> Optional[socket.socket]:
    """A socket listening on ``port`` on every interface (IPv6 and IPv4 where the host has both, as torch's
    server binds; IPv4 alone where IPv6 cannot be bound), or ``None`` when it cannot be bound."""
    dual = [(("::", port), socket.AF_INET6, True)] if socket.has_dualstack_ipv6() else []
    for address, family, both in [*dual, (("", port), socket.AF_INET, False)]:
        try:
            return socket.create_server(address, family=family, backlog=BACKLOG, dualstack_ipv6=both)
        except OSError:
            continue
    return None


def takes(kwargs: Mapping[str, Any], port: int) -> bool:
    """Whether a ``TCPStore(**kwargs)`` is the master store on ``port`` that the listening socket is for
    (keywords as torch's rendezvous passes them; one given its own ``master_listen_fd`` is not)."""
    return bool(kwargs.get("is_master")) and kwargs.get("port") == port and kwargs.get("master_listen_fd") is None


def install_on_import(port: int) -> None:
    """Once ``torch.distributed.rendezvous`` is imported (now, if it is: during ``import torch``, well before
    any rank can call), listen on ``port`` and give that socket to the first master ``TCPStore`` on the port
    that torch's rendezvous makes. A process that never imports torch never binds the port."""

    def imported(module: types.ModuleType) -> None:
        server = listen(port)
        if server is not None:
            _hook(module, server, port)

    torchhooks.after_import(torchhooks.RENDEZVOUS_MODULE, imported)


def _hook(module: types.ModuleType, server: socket.socket, port: int) -> None:
    original: Callable[..., Any] = module.TCPStore
    left = [server]

    def tcp_store(*args: Any, **kwargs: Any) -> Any:
        if left and not args and takes(kwargs, port):
            kwargs = {**kwargs, "master_listen_fd": left.pop().detach()}  # the store owns the socket from here on
        return original(*args, **kwargs)

    setattr(module, "TCPStore", tcp_store)  # noqa: B010 - the module is torch's, untyped here


def start() -> None:
    """What the bootstrap calls: :func:`install_on_import` when this rank's environment asks for it (the
    variable is taken out of the environment, so the user's processes do not see it)."""
    port = wanted(os.environ)
    os.environ.pop(contract.STORE_LISTEN, None)
    if port is not None:
        install_on_import(port)
