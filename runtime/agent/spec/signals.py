"""Signals as torchrun's ``--signals-to-handle`` names them, which of them stop a job, and the exit status
of a process a signal ended: the rules both the launcher and every agent follow. Standard library only.

Read from the pinned torch 2.13.0 ``torch/distributed/run.py`` (``--signals-to-handle``'s default)
and ``torch/distributed/launcher/api.py`` (``TORCHELASTIC_SIGNALS_TO_HANDLE``).
"""

from __future__ import annotations

import signal

from runtime.agent import contract

DEFAULT_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
"""torchrun's ``--signals-to-handle`` default: the signals its agent handles and passes on."""
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT})
"""Signals that stop the job: passed on to every rank as themselves, then SIGKILL after the grace
period. Any other handled signal (SIGUSR1, SIGUSR2: a scheduler's preemption notice) is passed on
to every rank and the job goes on; the ranks decide what it means."""
ALWAYS_STOP = (signal.SIGTERM, signal.SIGINT)
"""Handled even when ``--signals-to-handle`` leaves them out (Kubernetes stops a pod with SIGTERM)."""
NOTICE_ONLY = tuple(s for s in (getattr(signal, "SIGUSR1", None), getattr(signal, "SIGUSR2", None)) if s)
"""Caught even when not to be passed on, so that they never kill an agent or the launcher silently."""


def parse_signals(text: str) -> tuple[signal.Signals, ...]:
    """``SIGTERM,SIGINT,...`` as torchrun's ``--signals-to-handle`` takes it, in order, without repeats.

    Raises:
        ValueError: a name that is not a signal here; the message, the problem alone, quotes it (the job
            spec's check adds the fix).
    """
    found: list[signal.Signals] = []
    for name in (n.strip() for n in text.split(",")):
        sig = getattr(signal, name, None) if name.startswith("SIG") else None
        if not isinstance(sig, signal.Signals):
            raise ValueError(f"{name!r} is not a signal name")
        if sig not in found:
            found.append(sig)
    return tuple(found)


def handled(signals: tuple[signal.Signals, ...]) -> tuple[signal.Signals, ...]:
    """Every signal an agent or the launcher catches: the ones to pass on, SIGTERM and SIGINT, and
    SIGUSR1/SIGUSR2 (caught, to be reported and ignored, when they are not to be passed on)."""
    return tuple(dict.fromkeys((*signals, *ALWAYS_STOP, *NOTICE_ONLY)))


def exit_status(returncode: int) -> int:
    """A shell-style exit status of a process (``subprocess``'s ``returncode``): the code itself, or
    128 + N for death by signal N (``contract.EXIT_INTERRUPTED_BASE``)."""
    return contract.EXIT_INTERRUPTED_BASE - returncode if returncode < 0 else returncode
