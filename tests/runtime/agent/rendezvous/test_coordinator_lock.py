"""The coordinator role's lock: a decision taken where the role is held, and told apart from no role at all."""

from __future__ import annotations

import pytest

from runtime.agent.rendezvous.coordinator import Coordinator
from runtime.agent.rendezvous.coordinator_lock import Coordination
from testbed.settings import agent_settings

pytestmark = pytest.mark.unit


def test_an_attempt_says_none_without_the_role_and_a_list_with_it():
    """``attempt`` checks the role under the lock it decides under: a suspicion on a node that has just given the
    role up goes up with a beat instead (``Agent._suspect``), not nowhere."""
    coordination = Coordination(Coordinator(agent_settings(job_name="j", node_id=0, workers=2), 0.0))
    assert coordination.attempt(lambda c: c.suspect(1, "refused")) == [], "coordinating: no world yet, no probe"
    assert coordination.decide(lambda c: c.suspect(1, "refused")) == []
    coordination.resign()
    assert coordination.attempt(lambda c: c.suspect(1, "refused")) is None
    assert coordination.decide(lambda c: c.suspect(1, "refused")) == []
    assert Coordination(None).attempt(lambda _c: []) is None
