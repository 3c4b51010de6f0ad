"""The node side's decisions with a fake clock: worlds, process exits, signals, the coordinator lost,
rejoining; the twin of test_coordinator.py."""

from __future__ import annotations

import signal
from dataclasses import replace

import pytest

from runtime.agent import contract
from runtime.agent.execution.procs import ProcExit
from runtime.agent.rendezvous.actions import (
    AskVotes,
    DeliverChange,
    Exit,
    Finish,
    PassOn,
    Register,
    Report,
    Say,
    StartGeneration,
    StopJob,
    StopProcesses,
    TakeOver,
)
from runtime.agent.rendezvous.events import (
    CoordinatorBack,
    CoordinatorLost,
    DaemonExited,
    Fatal,
    ProcessExited,
    Removed,
    SignalReceived,
    Tick,
    VotesCounted,
    WorldArrived,
)
from runtime.agent.rendezvous.member import WORLD_WAIT_MARGIN, Member, MemberState
from runtime.agent.spec.signals import DEFAULT_SIGNALS
from runtime.agent.spec.status import FAILED, STOPPED, SUCCEEDED
from runtime.agent.world import Node, World

pytestmark = pytest.mark.unit

COORDINATOR = (0, "10.0.0.0", 32300)


def world(generation: int = 1, nodes: tuple[int, ...] = (0, 1, 2), restart_count: int = 0,
          distribution: str = "spmd", num_proc: int = 2) -> World:
    return World(job="j", generation=generation, restart_count=restart_count, max_restarts=2,
                 nodes=tuple(Node(i, f"10.0.0.{i}", 32300, num_proc) for i in nodes), master_port=29500,
                 distribution=distribution, coordinator=COORDINATOR)


def member(node_id: int = 1, elastic: bool = False, local_world_size: int = 2, signals: str = DEFAULT_SIGNALS,
           coordinating: bool = False) -> Member:
    return Member(node_id=node_id, local_world_size=local_world_size, elastic=elastic, signals_to_handle=signals,
                  ttl=3.0, quorum_timeout=10.0, coordinating=coordinating, coordinator_port=32300)


def exited(local_rank: int, code: int, generation: int = 1, requested: bool = False) -> ProcessExited:
    return ProcessExited(ProcExit(generation, local_rank, 2 + local_rank, code, ("boom",), 100.0 + local_rank,
                                  requested))


def kinds(actions: tuple) -> list[type]:
    return [type(a) for a in actions]


def running(m: Member, w: World | None = None) -> Member:
    m.start(0.0)
    m.handle(WorldArrived(w or world()), 1.0)
    return m


def test_a_node_registers_at_start_and_gives_up_without_a_world_by_the_deadline():
    m = member()
    assert m.start(5.0) == (Register(0.0),) and m.state is MemberState.JOINING
    deadline = 5.0 + 10.0 + WORLD_WAIT_MARGIN
    assert m.handle(Tick(), deadline) == ()
    actions = m.handle(Tick(), deadline + 0.1)
    assert kinds(actions) == [Say, Exit] and actions[-1] == Exit(contract.EXIT_RENDEZVOUS)
    assert "giving up" in actions[0].message and m.state is MemberState.FINISHED
    assert m.handle(WorldArrived(world()), deadline + 1) == (), "a finished node decides nothing more"


def test_the_coordinator_never_gives_up_waiting_for_its_own_world():
    m = member(node_id=0, coordinating=True)
    m.start(0.0)
    assert m.handle(Tick(), 1e9) == ()


def test_a_first_world_starts_the_processes_and_an_older_or_repeated_one_is_ignored():
    m = member()
    m.start(0.0)
    first = world(generation=2)
    assert m.handle(WorldArrived(first), 1.0) == (StopProcesses(), StartGeneration(first))
    assert m.state is MemberState.RUNNING and m.running_generation == 2
    assert m.handle(WorldArrived(first), 1.1) == ()
    assert m.handle(WorldArrived(world(generation=1)), 1.2) == ()
    assert m.handle(Tick(), 1e9) == (), "a node with a world never times out"


def test_a_membership_change_in_the_same_restart_epoch_is_delivered_to_the_live_processes():
    m = running(member(elastic=True))
    grown = world(generation=2, nodes=(0, 1, 2, 3))
    assert m.handle(WorldArrived(grown), 2.0) == (DeliverChange(world(), grown),)
    assert m.running_generation == 1, "the processes keep running: the change reached them"


def test_a_restart_stops_and_starts_the_processes_as_a_new_generation():
    m = running(member())
    restarted = world(generation=2, restart_count=1)
    assert m.handle(WorldArrived(restarted), 2.0) == (StopProcesses(), StartGeneration(restarted))
    assert m.running_generation == 2


@pytest.mark.parametrize(("status", "said"), [(FAILED, "job failed: rank 3 exited"), (STOPPED, "job stopped: bye"),
                                              (SUCCEEDED, None)])
def test_a_verdict_stops_the_processes_records_it_and_exits_with_its_code(status: str, said: str | None):
    m = running(member())
    verdict = world().finished(status, "rank 3 exited; details" if status == FAILED else "bye", 7)
    actions = m.handle(WorldArrived(verdict), 2.0)
    assert actions[0] == StopProcesses() and actions[-2:] == (Finish(verdict), Exit(7))
    assert [a.message for a in actions if isinstance(a, Say)] == ([said] if said else [])


def test_the_coordinator_says_nothing_of_its_own_verdict():
    m = running(member(node_id=0, coordinating=True))
    actions = m.handle(WorldArrived(world().finished(FAILED, "x", 1)), 2.0)
    assert not [a for a in actions if isinstance(a, Say)]


def test_left_out_of_a_world_an_elastic_node_registers_again_after_one_ttl_and_a_fixed_one_stops():
    elastic = running(member(elastic=True))
    actions = elastic.handle(WorldArrived(world(generation=2, nodes=(0, 2))), 4.0)
    assert actions[0] == StopProcesses() and actions[-1] == Register(3.0)
    assert "registering again in 3 s" in actions[1].message
    assert elastic.state is MemberState.REJOINING and elastic.world is None
    assert elastic.world_deadline == 4.0 + 3.0 + 10.0 + WORLD_WAIT_MARGIN
    assert elastic.handle(WorldArrived(world(generation=3)), 8.0)[-1] == StartGeneration(world(generation=3))
    fixed = running(member())
    actions = fixed.handle(Removed("the coordinator no longer counts this node"), 4.0)
    assert actions[0] == StopProcesses() and actions[-1] == Exit(contract.EXIT_RENDEZVOUS)
    assert "the job is not elastic" in actions[1].message


def test_a_failing_process_is_reported_at_once_and_success_once_every_process_exited_0():
    m = running(member())
    failing = exited(1, 3)
    assert m.handle(failing, 2.0) == (Report(1, FAILED, exit=failing.exit),)
    ok = running(member())
    assert ok.handle(exited(0, 0), 2.0) == ()
    assert ok.handle(exited(1, 0), 2.1) == (Report(1, SUCCEEDED),)


def test_exits_of_another_generation_or_asked_for_count_for_nothing():
    m = running(member())
    assert m.handle(exited(0, 9, generation=0), 2.0) == ()
    assert m.handle(exited(0, 9, requested=True), 2.0) == ()


def test_a_daemon_failure_is_reported_and_its_clean_exit_only_said():
    m = running(member(local_world_size=0), world(distribution="ray", num_proc=0))
    ended = ProcExit(1, 0, 1, 2, (), 5.0, False)
    assert m.handle(DaemonExited("ray worker", ended), 2.0) == (Report(1, FAILED, exit=ended, daemon="ray worker"),)
    clean = replace(ended, exit_code=0)
    assert m.handle(DaemonExited("ray worker", clean), 2.0) == (Say("the ray worker daemon exited with code 0"),)
    spmd = running(member())
    assert spmd.handle(DaemonExited("ray worker", ended), 2.0) == (), "no daemon runs in an spmd job"


def test_a_stop_signal_stops_the_processes_with_itself_tells_the_coordinator_and_exits_128_plus_n():
    m = running(member())
    actions = m.handle(SignalReceived(signal.SIGHUP), 2.0)
    assert actions[1:] == (StopProcesses(signal.SIGHUP), Report(1, STOPPED, message="received SIGHUP", now=True),
                           Exit(128 + signal.SIGHUP))
    assert actions[0] == Say("received SIGHUP: stopping processes (SIGHUP to each)")
    unnamed = running(member(signals="SIGTERM"))
    assert unnamed.handle(SignalReceived(signal.SIGINT), 2.0)[1] == StopProcesses(signal.SIGTERM)


def test_the_coordinator_receiving_a_stop_signal_stops_the_whole_job():
    m = running(member(node_id=0, coordinating=True))
    actions = m.handle(SignalReceived(signal.SIGTERM), 2.0)
    assert StopJob("the coordinator received SIGTERM", 128 + signal.SIGTERM) in actions and actions[-1] == Exit(143)


def test_a_named_notice_signal_is_passed_on_and_an_unnamed_one_ignored():
    m = running(member(signals="SIGTERM,SIGUSR1"))
    assert m.handle(SignalReceived(signal.SIGUSR1), 2.0) == (PassOn(signal.SIGUSR1),)
    [said] = m.handle(SignalReceived(signal.SIGUSR2), 2.0)
    assert said.message == ("received SIGUSR2, which TORCHELASTIC_SIGNALS_TO_HANDLE (SIGTERM,SIGUSR1) does not name: "
                            "ignored")
    assert m.state is MemberState.RUNNING


def test_the_lowest_survivor_asks_for_votes_and_takes_over_only_with_a_majority():
    successor = running(member(node_id=1, elastic=True))
    [said, ask] = successor.handle(CoordinatorLost(COORDINATOR, 3.5), 5.0)
    assert "votes of 2 of the world's 3 nodes" in said.message and isinstance(ask, AskVotes)
    assert [n.node_id for n in ask.peers] == [2] and ask.ballot.epoch == 2
    assert successor.handle(VotesCounted(ask.ballot, (1,), 0), 5.1) == (), "its own vote is no majority"
    [said, take_over] = successor.handle(VotesCounted(ask.ballot, (1, 2), 0), 5.2)
    assert take_over == TakeOver(world(), 0, 2, pytest.approx(4.2)) and "node 1 takes over in epoch 2" in said.message
    assert successor.coordinating and successor.handle(CoordinatorLost(COORDINATOR, 4.0), 6.0) == ()
    other = running(member(node_id=2, elastic=True))
    assert kinds(other.handle(CoordinatorLost(COORDINATOR, 3.5), 5.0)) == [Say], "node 2 stands one TTL later"
    assert other.handle(CoordinatorLost((9, "x", 1), 3.5), 5.0) == (), "news of another coordinator"


def test_a_fixed_size_node_losing_the_coordinator_trains_on_then_stops_with_its_processes():
    m = running(member())
    [said] = m.handle(CoordinatorLost(COORDINATOR, 3.2), 5.0)
    assert "training continues" in said.message and m.state is MemberState.ORPHANED
    assert m.handle(exited(0, 0), 6.0) == ()
    actions = m.handle(exited(1, 0), 7.0)
    assert kinds(actions) == [Say, Exit] and actions[-1] == Exit(0)
    back = running(member())
    back.handle(CoordinatorLost(COORDINATOR, 3.2), 5.0)
    assert back.handle(CoordinatorBack(4), 6.0) == (Say("the coordinator answers again after 4 failed heartbeat(s)"),)
    assert back.state is MemberState.RUNNING


def test_an_orphaned_node_stops_at_its_first_failing_process_with_its_code():
    m = running(member())
    m.handle(CoordinatorLost(COORDINATOR, 3.2), 5.0)
    assert m.handle(exited(1, 5), 6.0)[-1] == Exit(5)


def test_a_daemon_only_node_whose_drivers_coordinator_is_lost_stops():
    m = running(member(local_world_size=0), world(distribution="ray", num_proc=0))
    actions = m.handle(CoordinatorLost(COORDINATOR, 3.2), 5.0)
    assert actions[-1] == Exit(contract.EXIT_NODE_LOST) and "serves nobody" in actions[0].message


def test_a_fatal_event_ends_the_node_with_its_code():
    m = member()
    m.start(0.0)
    assert m.handle(Fatal("registration refused: 409", 3), 1.0) == (Say("registration refused: 409"), Exit(3))


def test_an_elastic_jobs_failed_verdict_exits_with_the_failed_for_good_code():
    """The pod's exit code the Indexed Job's podFailurePolicy fails the Job on (FailJob), so a failed
    elastic job is not started again in replaced pods; the verdict keeps the root cause's code."""
    m = running(member(elastic=True))
    verdict = world().finished(FAILED, "node 1's processes failed 1 time(s), past its budget", 5)
    actions = m.handle(WorldArrived(verdict), 2.0)
    assert actions[-2:] == (Finish(verdict), Exit(contract.EXIT_JOB_FAILED))
    assert any(isinstance(a, Say) and "exiting 121: the elastic job failed for good" in a.message for a in actions)
    stopped = world().finished(STOPPED, "bye", 143)
    assert running(member(elastic=True)).handle(WorldArrived(stopped), 2.0)[-1] == Exit(143)


def test_a_node_whose_processes_all_exited_0_reports_it_again_to_a_new_world_and_a_returning_coordinator():
    """Its first report may have gone to a coordinator that was stalled or has since been replaced."""
    m = running(member(elastic=True))
    m.handle(exited(0, 0), 2.0)
    assert m.handle(exited(1, 0), 2.1) == (Report(1, SUCCEEDED),)
    taken_over = replace(world(generation=2, nodes=(1, 2)), coordinator=(1, "10.0.0.1", 32300), epoch=2)
    assert kinds(m.handle(WorldArrived(taken_over), 3.0)) == [DeliverChange, Report]
    assert m.handle(WorldArrived(taken_over), 3.1) == ()
    back = running(member(elastic=True))
    back.handle(exited(0, 0), 2.0)
    back.handle(exited(1, 0), 2.1)
    back.handle(CoordinatorLost(COORDINATOR, 3.2), 5.0)
    assert back.handle(CoordinatorBack(3), 6.0)[-1] == Report(1, SUCCEEDED)


def test_processes_that_ended_before_the_coordinator_was_lost_stop_the_node_as_if_they_ended_after():
    """The order of the two events does not change the outcome: a node that never fails over stops."""
    for first_lost in (True, False):
        m = running(member())
        events = [CoordinatorLost(COORDINATOR, 3.2), exited(0, 0), exited(1, 0)]
        if not first_lost:
            events = events[1:] + events[:1]
        actions = [m.handle(e, 5.0 + i) for i, e in enumerate(events)]
        assert actions[-1][-1] == Exit(0) and m.state is MemberState.FINISHED, (first_lost, actions)


def test_an_elastic_node_whose_processes_ended_waits_for_a_coordinator_until_nobody_answers():
    """In a world that can fail over, its success goes to whoever coordinates next; it stops with its
    processes' code once no node of its world answers a ballot (the job ended without it)."""
    m = running(member(elastic=True))
    [_, ask] = m.handle(CoordinatorLost(COORDINATOR, 3.2), 5.0)
    assert m.handle(exited(0, 0), 5.5) == () and m.handle(exited(1, 0), 5.6) == ()
    assert m.state is MemberState.ORPHANED
    assert isinstance(ask, AskVotes)
    assert m.handle(VotesCounted(ask.ballot, (1,), 0, None, 1), 6.1) == (), "node 2 answered: wait"
    [ask] = m.handle(Tick(), 8.0)
    actions = m.handle(VotesCounted(ask.ballot, (1,), 0, None, 0), 8.1)
    assert actions[-1] == Exit(0) and "no other node of its world answers" in actions[0].message
