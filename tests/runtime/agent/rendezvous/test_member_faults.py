"""The node side's decisions about faults that really happen (issue 12), with a fake clock."""

from __future__ import annotations

import signal

import pytest

from runtime.agent.rendezvous.actions import Exit, Report, StopJob, StopProcesses
from runtime.agent.rendezvous.events import SignalReceived, WorldArrived
from runtime.agent.spec.status import STOPPED
from tests.runtime.agent.rendezvous.test_member import member, running, world

pytestmark = pytest.mark.unit


def test_an_elastic_coordinator_stopped_by_a_signal_leaves_and_the_job_goes_on():
    """One pod's SIGTERM (eviction, drain, spot reclaim) is not the job's: node 0 leaves as any node
    does, and the lowest survivor takes over when it falls silent."""
    m = running(member(node_id=0, elastic=True, coordinating=True))
    actions = m.handle(SignalReceived(signal.SIGTERM), 2.0)
    assert not any(isinstance(a, (StopJob, Report)) for a in actions)
    assert StopProcesses(signal.SIGTERM) in actions and actions[-1] == Exit(143)


def test_an_elastic_coordinator_alone_in_its_world_stops_the_job():
    m = member(node_id=0, elastic=True, coordinating=True)
    m.start(0.0)
    m.handle(WorldArrived(world(nodes=(0,))), 1.0)
    assert StopJob("the coordinator received SIGTERM", 143) in m.handle(SignalReceived(signal.SIGTERM), 2.0)


def test_an_elastic_node_stopped_by_a_signal_reports_it_and_leaves():
    actions = running(member(node_id=1, elastic=True)).handle(SignalReceived(signal.SIGTERM), 2.0)
    assert Report(1, STOPPED, message="received SIGTERM", now=True) in actions and actions[-1] == Exit(143)
