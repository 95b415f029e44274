"""The worker's lifecycle (workers/core/lifecycle.py): every event in every state, checked
against grids written here by hand (not read from the module's table), then the sequences a
worker goes through, and what /readyz says in each state."""

from __future__ import annotations

import itertools

import pytest

from workers.core.lifecycle import (
    LIVE,
    TERMINAL,
    TRANSITIONS,
    Assigned,
    Checked,
    Event,
    EventKind,
    Fail,
    Invalid,
    Lifecycle,
    Restored,
    Revoked,
    Settled,
    State,
    Stop,
)

GEN = 7  # the current generation of every state but STARTING (which has none yet)
NEXT = 8  # the generation an ASSIGNED in the grids carries

EVENTS: dict[str, Event] = {
    "assigned": Assigned(NEXT),
    "settled": Settled(),
    "restored": Restored(),
    "checked": Checked(GEN),
    "revoked": Revoked(),
    "stop": Stop(),
    "fail": Fail(),
}

# the state after each event; "-": invalid, the state stays
EXACTLY_ONCE = """
             assigned   settled    restored   checked    revoked      stop       fail
starting     settling   -          -          -          rebalancing  stopping   failed
settling     settling   restoring  -          -          rebalancing  stopping   failed
restoring    settling   -          checking   -          rebalancing  stopping   failed
checking     settling   -          -          ready      rebalancing  stopping   failed
ready        settling   -          -          -          rebalancing  stopping   failed
rebalancing  settling   -          -          -          rebalancing  stopping   failed
stopping     stopping   stopping   stopping   stopping   stopping     stopping   stopping
failed       failed     failed     failed     failed     failed       failed     failed
"""
# at-least-once: no settle step (SETTLING cannot be reached; a Lifecycle put there still
# refuses SETTLED)
AT_LEAST_ONCE = """
             assigned   settled    restored   checked    revoked      stop       fail
starting     restoring  -          -          -          rebalancing  stopping   failed
settling     restoring  -          -          -          rebalancing  stopping   failed
restoring    restoring  -          checking   -          rebalancing  stopping   failed
checking     restoring  -          -          ready      rebalancing  stopping   failed
ready        restoring  -          -          -          rebalancing  stopping   failed
rebalancing  restoring  -          -          -          rebalancing  stopping   failed
stopping     stopping   stopping   stopping   stopping   stopping     stopping   stopping
failed       failed     failed     failed     failed     failed       failed     failed
"""


def grid(text: str) -> dict[tuple[str, str], str]:
    header, *rows = (line.split() for line in text.strip().splitlines())
    return {(row[0], event): cell for row in rows for event, cell in zip(header, row[1:],
                                                                         strict=True)}


GRIDS = {True: grid(EXACTLY_ONCE), False: grid(AT_LEAST_ONCE)}


def test_the_grids_cover_every_state_and_event_kind() -> None:
    for cells in GRIDS.values():
        assert set(cells) == set(itertools.product((s.value for s in State),
                                                   (k.value for k in EventKind)))
    assert set(EVENTS) == {k.value for k in EventKind}


@pytest.mark.parametrize("settles", [True, False], ids=["exactly_once", "at_least_once"])
@pytest.mark.parametrize(("state", "kind"), list(itertools.product(State, EventKind)),
                         ids=lambda v: str(v))
def test_every_event_in_every_state(settles: bool, state: State, kind: EventKind) -> None:
    generation = None if state is State.STARTING else GEN
    life = Lifecycle(settles=settles, state=state, generation=generation)
    event = EVENTS[kind.value]
    expected = GRIDS[settles][(state.value, kind.value)]

    result = life.send(event)

    if expected == "-":
        assert isinstance(result, Invalid), result
        assert (result.state, result.event) == (state, event)
        assert result.reason
        assert (life.state, life.generation) == (state, generation)
        return
    assert result == State(expected) == life.state
    applied = kind is EventKind.ASSIGNED and state not in TERMINAL
    assert life.generation == (NEXT if applied else generation)


def test_the_table_keys_are_states_and_event_kinds_and_terminal_states_stay() -> None:
    for (state, kind), target in TRANSITIONS.items():
        assert isinstance(state, State) and isinstance(kind, EventKind)
        assert isinstance(target, State)
        if state in TERMINAL:
            assert target is state
    assert set(LIVE) | TERMINAL == set(State)


def run(life: Lifecycle, *events: Event) -> list[State | Invalid]:
    return [life.send(e) for e in events]


def test_the_normal_path() -> None:
    life = Lifecycle(settles=True)
    seen = [life.readiness()]
    for event, state in ((Assigned(3), State.SETTLING), (Settled(), State.RESTORING),
                         (Restored(), State.CHECKING), (Checked(3), State.READY)):
        assert life.send(event) is state
        seen.append(life.readiness())
    assert life.generation == 3
    assert seen == [
        (False, "waiting for the group to assign partitions"),
        (False, "waiting for the last owners' transactions to end"),
        (False, "restoring the assigned partitions' state"),
        (False, "checking where each partition starts"),
        (True, "processing"),
    ]


def test_the_normal_path_at_least_once_has_no_settle_step() -> None:
    life = Lifecycle(settles=False)
    assert run(life, Assigned(3), Restored(), Checked(3)) == [
        State.RESTORING, State.CHECKING, State.READY]
    refused = Lifecycle(settles=False, state=State.RESTORING, generation=3).send(Settled())
    assert isinstance(refused, Invalid)
    assert "does not settle" in refused.reason


def test_a_revocation_mid_restore() -> None:
    life = Lifecycle(settles=True)
    run(life, Assigned(1), Settled())
    assert life.state is State.RESTORING
    assert life.send(Revoked()) is State.REBALANCING
    late = life.send(Restored())  # faust's recovery of the revoked assignment reports late
    assert isinstance(late, Invalid) and late.state is State.REBALANCING
    assert life.state is State.REBALANCING
    assert life.readiness() == (
        False, "rebalancing: partitions revoked, waiting for the new assignment")
    assert run(life, Assigned(2), Settled(), Restored(), Checked(1), Checked(2)) == [
        State.SETTLING, State.RESTORING, State.CHECKING, State.CHECKING, State.READY]
    assert life.generation == 2


def test_a_stale_checked_is_ignored_not_invalid() -> None:
    life = Lifecycle(settles=True)
    run(life, Assigned(4), Settled(), Restored())
    assert life.state is State.CHECKING
    # reassigned without a revocation seen here (a static member): generation 5 begins
    assert life.send(Assigned(5)) is State.SETTLING
    # the check of generation 4 ends after that: ignored, the new chain goes on
    assert life.send(Checked(4)) is State.SETTLING
    assert (life.state, life.generation) == (State.SETTLING, 5)
    # in every live state, a check of an older generation leaves the state and generation
    for state in LIVE:
        other = Lifecycle(settles=True, state=state, generation=5)
        assert other.send(Checked(4)) is state
        assert (other.state, other.generation) == (state, 5)


def test_a_checked_of_a_newer_generation_is_invalid() -> None:
    life = Lifecycle(settles=True, state=State.CHECKING, generation=5)
    result = life.send(Checked(6))
    assert isinstance(result, Invalid)
    assert "generation 6" in result.reason and "generation 5" in result.reason
    assert life.state is State.CHECKING
    before = Lifecycle(settles=True).send(Checked(1))  # no assignment yet
    assert isinstance(before, Invalid) and before.state is State.STARTING


def test_a_second_assignment_while_settling_restarts_with_the_newer_generation() -> None:
    life = Lifecycle(settles=True)
    assert run(life, Assigned(1), Assigned(2)) == [State.SETTLING, State.SETTLING]
    assert life.generation == 2
    assert run(life, Settled(), Restored(), Checked(1)) == [
        State.RESTORING, State.CHECKING, State.CHECKING]
    assert life.send(Checked(2)) is State.READY


def test_an_assignment_while_ready_restarts_the_chain() -> None:
    life = Lifecycle(settles=True)
    run(life, Assigned(1), Settled(), Restored(), Checked(1))
    assert life.send(Assigned(2)) is State.SETTLING
    assert life.readiness()[0] is False


@pytest.mark.parametrize("terminal", sorted(TERMINAL))
@pytest.mark.parametrize("settles", [True, False])
def test_terminal_states_ignore_everything(terminal: State, settles: bool) -> None:
    life = Lifecycle(settles=True)
    run(life, Assigned(1), Settled(), Restored(), Checked(1))
    assert life.send(Stop() if terminal is State.STOPPING else Fail()) is terminal
    life.settles = settles
    for event in (Assigned(9), Settled(), Restored(), Checked(1), Checked(9), Revoked(),
                  Stop(), Fail(), Assigned(10)):
        assert life.send(event) is terminal
        assert (life.state, life.generation) == (terminal, 1)
    assert life.readiness()[0] is False


def test_a_stop_or_failure_from_every_live_state() -> None:
    for state in LIVE:
        assert Lifecycle(settles=True, state=state).send(Stop()) is State.STOPPING
        assert Lifecycle(settles=True, state=state).send(Fail()) is State.FAILED


READY_SAYS = {
    State.STARTING: (False, "waiting for the group to assign partitions"),
    State.SETTLING: (False, "waiting for the last owners' transactions to end"),
    State.RESTORING: (False, "restoring the assigned partitions' state"),
    State.CHECKING: (False, "checking where each partition starts"),
    State.READY: (True, "processing"),
    State.REBALANCING: (False, "rebalancing: partitions revoked, waiting for the new assignment"),
    State.STOPPING: (False, "stopping"),
    State.FAILED: (False, "failed: exiting"),
}


@pytest.mark.parametrize("state", list(State), ids=str)
def test_readiness_per_state(state: State) -> None:
    assert Lifecycle(settles=True, state=state, generation=1).readiness() == READY_SAYS[state]


def test_states_keep_the_phase_names_health_reports() -> None:
    # workers.ops.health's phases and the metrics' `phase == "restoring"` keep their strings
    for phase in ("starting", "rebalancing", "restoring", "ready", "stopping"):
        assert State(phase) == phase


def test_an_invalid_event_is_a_value_that_names_what_was_expected() -> None:
    life = Lifecycle(settles=True, state=State.SETTLING, generation=1)
    result = life.send(Restored())
    assert isinstance(result, Invalid)
    assert result == Invalid(State.SETTLING, Restored(), result.reason)
    assert "restored" in result.reason and "settled" in result.reason
    assert life.state is State.SETTLING
