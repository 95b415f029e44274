"""The worker's partition-assignment lifecycle as one table: events in, states out. Pure.

Why: the lifecycle was spread over five modules with no test of it as a whole. The settle
and restore at each assignment (workers.stream.takeover, `on_assigned`), faust resuming the
partitions (through its signals), the cursor check of each generation's first batch
(workers.stream.processor, `_admit`/`_starts`), the phase /readyz reads (workers.ops.health)
and the stop and the fatal exits each knew a piece. Here, as h11's `_state.py` does for
HTTP, every transition is in one table and the rest is a few lines of code that say
why they do not fit it; nothing here does I/O. The shell sends an event where the thing
happens and acts on the state it gets back.

    STARTING --ASSIGNED(g)--> SETTLING --SETTLED--> RESTORING --RESTORED--> CHECKING
                                 ^                                            |
                                 |                                       CHECKED(g)
      ASSIGNED(g') from SETTLING, RESTORING, CHECKING, READY, REBALANCING     |
      (a new generation restarts the chain: a static member may be            v
       reassigned without a revocation this worker saw)                     READY

    REVOKED   from every live state -> REBALANCING (waits for the next ASSIGNED)
    STOP      from every live state -> STOPPING  }  terminal: every event there is
    FAIL      from every live state -> FAILED    }  ignored, the state stays

    state        the worker is ...                                 ready
    STARTING     waiting for its first assignment                  no
    SETTLING     waiting for the last owners' transactions to end  no
    RESTORING    restoring its state; faust resuming               no
    CHECKING     reading where each partition starts               no
    READY        processing                                        yes
    REBALANCING  revoked, waiting for the new assignment           no
    STOPPING     stopping                                          no
    FAILED       failed, exiting                                   no

At-least-once there is no settle step (`Lifecycle(settles=False)`): ASSIGNED goes straight
to RESTORING and SETTLED is invalid. A transition that is not in the table is not an
exception: `send` returns an `Invalid` value, and the state stays.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar

__all__ = [
    "LIVE", "READINESS", "TERMINAL", "TRANSITIONS", "Assigned", "Checked", "Event",
    "EventKind", "Fail", "Invalid", "Lifecycle", "Restored", "Revoked", "Settled", "State",
    "Stop", "transition",
]

class State(StrEnum):
    # the values are the phase names workers.ops.health uses (where a state existed there)
    STARTING = "starting"
    SETTLING = "settling"
    RESTORING = "restoring"
    CHECKING = "checking"
    READY = "ready"
    REBALANCING = "rebalancing"
    STOPPING = "stopping"
    FAILED = "failed"


class EventKind(StrEnum):
    ASSIGNED = "assigned"
    SETTLED = "settled"
    RESTORED = "restored"
    CHECKED = "checked"
    REVOKED = "revoked"
    STOP = "stop"
    FAIL = "fail"


@dataclass(frozen=True)
class Assigned:
    """The group assigned this worker its partitions (possibly none) in `generation`."""

    generation: int
    kind: ClassVar[EventKind] = EventKind.ASSIGNED


@dataclass(frozen=True)
class Settled:
    """The last owners' transactions on the assigned partitions have ended (exactly-once)."""

    kind: ClassVar[EventKind] = EventKind.SETTLED


@dataclass(frozen=True)
class Restored:
    """The local state is restored and faust has resumed the assignment's partitions."""

    kind: ClassVar[EventKind] = EventKind.RESTORED


@dataclass(frozen=True)
class Checked:
    """The first batch of `generation` read where each assigned partition must start."""

    generation: int
    kind: ClassVar[EventKind] = EventKind.CHECKED


@dataclass(frozen=True)
class Revoked:
    """The group revoked this worker's partitions: a rebalance began."""

    kind: ClassVar[EventKind] = EventKind.REVOKED


@dataclass(frozen=True)
class Stop:
    """The worker is stopping (a signal, or faust stops it)."""

    kind: ClassVar[EventKind] = EventKind.STOP


@dataclass(frozen=True)
class Fail:
    """A fatal condition: the worker exits (workers.stream.processor.EXIT_FATAL)."""

    kind: ClassVar[EventKind] = EventKind.FAIL


Event = Assigned | Settled | Restored | Checked | Revoked | Stop | Fail

S, E = State, EventKind
TERMINAL: frozenset[State] = frozenset({S.STOPPING, S.FAILED})
LIVE: tuple[State, ...] = tuple(s for s in State if s not in TERMINAL)

# (state, event kind) -> the next state. A pair that is not here is an invalid transition.
TRANSITIONS: dict[tuple[State, EventKind], State] = {
    (S.STARTING, E.ASSIGNED): S.SETTLING,
    (S.STARTING, E.REVOKED): S.REBALANCING,  # a join revokes (nothing) before it assigns
    (S.STARTING, E.STOP): S.STOPPING,
    (S.STARTING, E.FAIL): S.FAILED,
    #
    (S.SETTLING, E.ASSIGNED): S.SETTLING,  # a newer assignment: settle its partitions
    (S.SETTLING, E.SETTLED): S.RESTORING,
    (S.SETTLING, E.REVOKED): S.REBALANCING,
    (S.SETTLING, E.STOP): S.STOPPING,
    (S.SETTLING, E.FAIL): S.FAILED,
    #
    (S.RESTORING, E.ASSIGNED): S.SETTLING,
    (S.RESTORING, E.RESTORED): S.CHECKING,
    (S.RESTORING, E.REVOKED): S.REBALANCING,
    (S.RESTORING, E.STOP): S.STOPPING,
    (S.RESTORING, E.FAIL): S.FAILED,
    #
    (S.CHECKING, E.ASSIGNED): S.SETTLING,
    (S.CHECKING, E.CHECKED): S.READY,  # of the current generation only: see `transition`
    (S.CHECKING, E.REVOKED): S.REBALANCING,
    (S.CHECKING, E.STOP): S.STOPPING,
    (S.CHECKING, E.FAIL): S.FAILED,
    #
    (S.READY, E.ASSIGNED): S.SETTLING,
    (S.READY, E.REVOKED): S.REBALANCING,
    (S.READY, E.STOP): S.STOPPING,
    (S.READY, E.FAIL): S.FAILED,
    #
    (S.REBALANCING, E.ASSIGNED): S.SETTLING,
    (S.REBALANCING, E.REVOKED): S.REBALANCING,  # revoked again before the assignment came
    (S.REBALANCING, E.STOP): S.STOPPING,
    (S.REBALANCING, E.FAIL): S.FAILED,
    # terminal: every event is ignored (an assignment that arrives as the worker stops, a
    # batch that fails while it stops: the next start takes the partitions over)
    **{(s, kind): s for s in TERMINAL for kind in EventKind},
}

# what /readyz says in each state (workers.ops.health's wording where the state was there)
READINESS: dict[State, tuple[bool, str]] = {
    S.STARTING: (False, "waiting for the group to assign partitions"),
    S.SETTLING: (False, "waiting for the last owners' transactions to end"),
    S.RESTORING: (False, "restoring the assigned partitions' state"),
    S.CHECKING: (False, "checking where each partition starts"),
    S.READY: (True, "processing"),
    S.REBALANCING: (False, "rebalancing: partitions revoked, waiting for the new assignment"),
    S.STOPPING: (False, "stopping"),
    S.FAILED: (False, "failed: exiting"),
}


@dataclass(frozen=True)
class Invalid:
    """An event the lifecycle does not expect in `state`: the state stays. A value, never
    raised: the shell logs it (it means the shell's wiring or faust's order changed)."""

    state: State
    event: Event
    reason: str


def _expected(state: State) -> str:
    return ", ".join(kind for kind in EventKind if (state, kind) in TRANSITIONS)


def transition(state: State, generation: int | None, event: Event, *,
               settles: bool) -> tuple[State, int | None] | Invalid:
    """The state and generation after `event`, or why `event` is invalid in `state`."""
    kind = event.kind
    if state in TERMINAL:
        return TRANSITIONS[(state, kind)], generation
    if kind is E.SETTLED and not settles:
        return Invalid(state, event, "this worker does not settle (at-least-once): an "
                                     "assignment goes straight to restoring")
    if isinstance(event, Checked) and event.generation != generation:
        if generation is not None and event.generation < generation:
            # Stale, not invalid: the cursor check of a generation can end after the group
            # has moved on (a rebalance while it awaited the committed offsets). It says
            # where the partitions of a generation that is over start, which the new chain
            # (SETTLING...) must neither take for its own check nor report as a bug.
            return state, generation
        return Invalid(state, event, f"checked generation {event.generation}, but the "
                                     f"current assignment is of generation {generation}")
    target = TRANSITIONS.get((state, kind))
    if target is None:
        return Invalid(state, event, f"{kind} is not expected while {state} "
                                     f"(expected: {_expected(state)})")
    if isinstance(event, Assigned):
        generation = event.generation
    if target is S.SETTLING and not settles:
        # at-least-once no last owner's transaction can be open: nothing to wait for
        target = S.RESTORING
    return target, generation


@dataclass
class Lifecycle:
    """The worker's lifecycle: the shell sends events, reads the state and readiness.

    `settles`: exactly-once (an assignment waits for the last owners' transactions);
    at-least-once it does not."""

    settles: bool
    state: State = S.STARTING
    generation: int | None = None  # of the last assignment

    def send(self, event: Event) -> State | Invalid:
        """Apply `event`; the new state (the same one for an ignored event), or `Invalid`
        with the state kept."""
        result = transition(self.state, self.generation, event, settles=self.settles)
        if isinstance(result, Invalid):
            return result
        self.state, self.generation = result
        return self.state

    def readiness(self) -> tuple[bool, str]:
        return READINESS[self.state]
