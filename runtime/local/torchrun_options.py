"""torchrun's command line as the launcher takes it: the value forms of ``--nnodes`` and
``--nproc-per-node``, and the options that have no meaning here. Read from the pinned torch 2.13.0
``torch/distributed/run.py`` (``get_args_parser``, ``determine_local_world_size``). Standard library
only (torch is imported only to count devices for ``--nproc-per-node gpu|xpu|auto``).

A value neither form reads is refused as the agent refuses a number it cannot read (the spec's ``INT``
codec), with the other forms added to its problem and fix: a ``ParseError``'s ``(problem, fix)``.
"""

from __future__ import annotations

import argparse
import os
from typing import Optional, Union

from runtime.agent.errors import ParseError
from runtime.agent.spec.setting import INT

IGNORED = {
    "rdzv_backend": "the agents run their own rendezvous",
    "rdzv_endpoint": "with --standalone every node runs on this machine",
    "rdzv_conf": "the agents run their own rendezvous",
    "standalone": "every node runs on this machine already",
    "node_rank": "without --rdzv-endpoint the launcher starts every node itself",
    "master_addr": "node 0's address is the master",
    "local_addr": "without --rdzv-endpoint each node has its own loopback address",
    "monitor_interval": "each agent sees its processes exit at once",
    "start_method": "a script runs as its own process either way, as under torchrun",
    "event_log_handler": "torchrun's event log is torchrun's",
    "logs_specs": "output goes where --log-dir, --redirects and --tee say",
    "numa_binding": "torchrun binds processes to CPUs near their GPU; this launcher does not",
}
"""torchrun options with no meaning for this launcher, by dest, with why: accepted in torchrun's
spellings and value forms, then named in one notice line, so a torchrun command line runs
unchanged and what runs is never silently different."""
PER_NODE_HELP = {
    "rdzv_endpoint": "HOST[:PORT]: run one node per host, each launcher joining the others there (torchrun's "
                     "per-node command line; runtime.local.hosts); ignored with --standalone, where every node runs on "
                     "this machine",
    "node_rank": "with --rdzv-endpoint: this host's node rank (default: the order hosts join in); ignored "
                 "otherwise, where the launcher starts every node itself",
    "local_addr": "with --rdzv-endpoint: the address the others reach this host's agent at; ignored otherwise, "
                  "where each node has its own loopback address",
}
"""``--help`` of the options that mean something on a per-node command line (``runtime.local.hosts``) and are
ignored otherwise; :data:`IGNORED` keeps why, for the notice line when they are ignored."""
NUMA_MODES = ("node", "socket", "exclusive", "core-complex")
"""torchrun's ``--numa-binding`` choices (torch 2.13.0 ``torch.numa.binding.AffinityMode``)."""
START_METHODS = ("spawn", "fork", "forkserver")
"""torchrun's ``--start-method`` choices."""


NPROC_WORDS = ("auto", "cpu", "gpu", "xpu")
"""``--nproc-per-node``'s words, as torchrun takes them, beside a number of processes."""
NPROC_FIX = "use a number of processes, auto or cpu"
"""How to put right a ``--nproc-per-node`` word that counts devices there are none of."""


def _whole(text: str, problem: str, fix: str) -> int:
    """``text`` read by the spec's ``INT`` codec; text it cannot read refused in its words, ``problem`` and
    ``fix`` added to them (the flag's other forms)."""
    try:
        return int(INT.parse(text))
    except ParseError as exc:
        raise ParseError(f"{exc.problem}, {problem}", f"{exc.fix}, {fix}") from None


def node_count(text: str) -> tuple[int, Optional[int]]:
    """``--nnodes`` as torchrun takes it: ``N``, or ``MIN:MAX`` for an elastic job.

    Returns:
        ``(N, None)``, or ``(MAX, MIN)``: the local launcher starts MAX nodes and keeps going while MIN
        remain.

    Raises:
        ParseError: neither form: ``must be a whole number, or MIN:MAX``, ``write it in digits, e.g. 4, or
            MIN:MAX, e.g. 2:4``.
    """
    low, colon, high = text.partition(":")
    words = ("or MIN:MAX", "or MIN:MAX, e.g. 2:4")
    return (_whole(high, *words), _whole(low, *words)) if colon else (_whole(text, *words), None)


def nproc(text: str) -> Union[int, str]:
    """``--nproc-per-node`` as torchrun takes it: a whole number, or ``auto``, ``cpu``, ``gpu``, ``xpu``
    (resolved by :func:`resolve_nproc` once every flag is known).

    Raises:
        ParseError: anything else: ``must be a whole number, or auto, cpu, gpu or xpu``, ``write it in
            digits, e.g. 4, or use auto, cpu, gpu or xpu``.
    """
    if text in NPROC_WORDS:
        return text
    words = f"{', '.join(NPROC_WORDS[:-1])} or {NPROC_WORDS[-1]}"
    return _whole(text, f"or {words}", f"or use {words}")


def cpu_count() -> int:
    """The CPUs this process may run on, as torch counts them (``torch._utils.cpu_count``)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def resolve_nproc(value: Union[int, str]) -> int:
    """torchrun's ``determine_local_world_size`` (torch 2.13.0 ``torch/distributed/run.py``): ``cpu`` is
    :func:`cpu_count`; ``gpu`` and ``xpu`` the devices torch sees (imported only for them); ``auto``
    the accelerators torch sees, else :func:`cpu_count` (also when torch is not installed).

    Raises:
        ParseError: ``gpu``/``xpu`` where torch sees no such device (torchrun raises ``Cuda is not
            available.``), or torch is not installed to count them; the fix is :data:`NPROC_FIX`.
    """
    if isinstance(value, int):
        return value
    if value == "cpu":
        return cpu_count()
    try:
        import torch
    except ImportError:
        if value == "auto":
            return cpu_count()
        raise ParseError("torch is not installed to count the devices", NPROC_FIX) from None
    if value == "auto":
        accelerator = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
        return torch.accelerator.device_count() if accelerator is not None else cpu_count()
    device = torch.cuda if value == "gpu" else torch.xpu
    if not device.is_available():
        raise ParseError(f"no {'CUDA' if value == 'gpu' else 'XPU'} device is visible", NPROC_FIX)
    return int(device.device_count())


def ignored_notice(ns: argparse.Namespace, used: tuple[str, ...] = ()) -> str:
    """The one line naming the torchrun options typed that have no meaning here (``""`` for none);
    ``used`` are those that do have one for this command line (a per-node command line's
    ``--rdzv-endpoint``, ``--node-rank`` and ``--local-addr``: ``runtime.local.hosts``)."""
    typed = [(dest, ns.spelled[dest]) for dest in IGNORED if dest in ns.spelled and dest not in used]
    if not typed:
        return ""
    shown = [flag_ if dest == "standalone" else f"{flag_}={getattr(ns, dest)}" for dest, flag_ in typed]
    return (f"[trainplane] ignoring torchrun options with no meaning here: {', '.join(shown)} "
            f"({'; '.join(IGNORED[dest] for dest, _ in typed)})")
