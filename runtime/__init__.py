"""trainplane's runtime: the in-pod agent (``runtime.agent``), the local launcher and the client.

Importing this package needs the standard library only; httpx and kubernetes are imported by the
client-side modules alone. User code sees :class:`WorkerMembershipChanged` and :mod:`membership`
(``runtime.membership.poll()`` / ``wait()``) from here.
"""

from runtime.agent import membership
from runtime.agent.errors import WorkerMembershipChanged

__all__ = ["WorkerMembershipChanged", "membership"]
