"""How a local job ended, and whose its exit code is: a rank's (or a framework daemon's), passed
through, or the launcher's own. Standard library only."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from runtime.agent import contract


@dataclass(frozen=True)
class Outcome:
    """How a local job ended: its exit code and whose it is.

    The launcher's own codes are ``contract.EXIT_USAGE`` (2, only ever before a job starts, in the
    one ``error:`` line), ``contract.EXIT_RENDEZVOUS`` (3: the world could not be formed),
    ``contract.EXIT_TIMEOUT`` (124: the job's time limit, ``--timeout``, passed) and 128 + N
    (stopped by signal N); every other failure passes on the root cause's code: a rank's, or a
    framework daemon's. The numbers overlap (a rank may exit 2 or 3), so :meth:`line`, the
    launcher's last line, names the owner.

    Attributes:
        exit_code: the job's exit code.
        owner: ``"rank"``, ``"daemon"`` (the root cause's own code, passed through), or
            ``"launcher"`` (one of the launcher's codes, or an agent's verdict without a root cause).
        detail: whose code, ``rank 1's own exit code (node 1 at 127.0.0.3)``, or why the launcher
            ended the job.
    """

    exit_code: int
    owner: str
    detail: str

    @classmethod
    def of(cls, verdict: Optional[Mapping[str, Any]], agent_codes: Sequence[int], signum: Optional[int]) -> Outcome:
        """The outcome from the agents' verdict file (``None`` when none was written: agents killed
        or the world never formed), the agents' exit codes and the stop signal received, if any."""
        if signum is not None:
            return cls(contract.EXIT_INTERRUPTED_BASE + signum, "launcher",
                       f"stopped by {signal.Signals(signum).name} (128 + {signum})")
        if verdict is None:
            code = next((c for c in agent_codes if c), 0)
            why = ("the world could not be formed" if code == contract.EXIT_RENDEZVOUS
                   else f"an agent exited with code {code}")
            return cls(code, "launcher", f"{why}; see the agents' lines above")
        code, cause = int(verdict["exit_code"]), verdict.get("cause")
        if cause and code == cause.get("exit_code"):
            where = f"node {cause['node_id']}" + (f" at {cause['addr']}" if cause.get("addr") else "")
            if cause.get("daemon"):
                return cls(code, "daemon", f"the {cause['daemon']} daemon's own exit code ({where})")
            if cause.get("signal"):
                signum = int(cause["signal"])
                name = signal.Signals(signum).name
                return cls(code, "rank", f"rank {cause['rank']} was killed by {name} ({where}): 128 + {signum}")
            return cls(code, "rank", f"rank {cause['rank']}'s own exit code ({where})")
        detail = str(verdict.get("message") or verdict.get("status", "")).split(";")[0]
        return cls(code, "launcher", detail + (" (--timeout)" if code == contract.EXIT_TIMEOUT else ""))

    def line(self) -> str:
        """The launcher's last line for a non-zero exit, naming whose code it is."""
        if self.owner == "launcher":
            return f"[trainplane] exit code {self.exit_code}: the launcher's own: {self.detail}"
        return f"[trainplane] exit code {self.exit_code}: {self.detail}, passed through (not the launcher's)"
