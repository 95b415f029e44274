"""The trust boundary (DESIGN 1.2): erasure only through the operator's transcript.control.

The rule (workers/core/control.py) as a table, then the owner's step over the worker's session
store (SessionStore over fake partition stores) and over replay's/audit's MemoryState: a
control erase is forwarded into its input partition with a ticket; the forwarded copy erases
and spends the ticket; every other erase on the input is a dead letter at or past the cut-over.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from transcript_connector.partitioning import partition_for

from tests.unit.test_erasure import KEY, NOW, erase
from tests.unit.test_session_store import FakeStores, store_over
from tests.unit.wire import WRITTEN_AT, confirmation, dumps
from workers.core import MemoryState
from workers.core.control import (
    CONTROL_OFFSET_HEADER,
    CONTROL_TAKES_ERASES,
    NO_TICKET,
    NOT_ITS_PARTITION,
    ONLY_ON_CONTROL,
    Admit,
    admit_erase,
    control_offset,
    held_tickets,
    ticket,
    with_ticket,
)
from workers.core.outputs import CONFIRMATIONS, DLQ, ENTRIES, ERASURES, Source
from workers.core.owner import Owner, Step, apply
from workers.core.state import CUTOVER_KEY, ticket_key

PARTITIONS = 8
HOME = partition_for(KEY, PARTITIONS)
CONTROL = "p.transcript.control"
INPUT = "p.delivery.confirmations"
VALUE = dumps(erase())


# --- the rule ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("offset", "headers", "held", "cutover", "expected"), [
    # a forwarded copy whose ticket the session holds: obeyed, the ticket spent
    (10, [(CONTROL_OFFSET_HEADER, b"7")], ticket(VALUE), 0, Admit(7)),
    # a forwarded copy without its ticket, or with another record's: refused
    (10, [(CONTROL_OFFSET_HEADER, b"7")], None, 0, NO_TICKET),
    (10, [(CONTROL_OFFSET_HEADER, b"7")], ticket(b"other"), 0, NO_TICKET),
    (10, [(CONTROL_OFFSET_HEADER, b"-7")], ticket(VALUE), 0, NO_TICKET),
    (10, [(CONTROL_OFFSET_HEADER, b"\xff")], ticket(VALUE), 0, NO_TICKET),
    # a plain erase: history below the cut-over (and where none is known), refused from it on
    (10, [], None, None, Admit(None)),
    (9, [], None, 10, Admit(None)),
    (10, [], None, 10, ONLY_ON_CONTROL),
    (10, None, None, 0, ONLY_ON_CONTROL),
    (10, [("other", b"1")], None, 0, ONLY_ON_CONTROL),
])
def test_which_erases_on_the_input_are_obeyed(offset: int, headers: Any, held: str | None,
                                              cutover: int | None, expected: object) -> None:
    at = control_offset(headers)
    assert admit_erase(offset, VALUE, at, held, cutover) == expected


def test_the_control_offset_header_is_read_strictly() -> None:
    assert control_offset([(CONTROL_OFFSET_HEADER, b"123")]) == 123
    assert control_offset(()) is None
    for bad in (b"", b"1e3", b" 1", b"+1", b"1" * 20, "١٢".encode()):
        assert control_offset([(CONTROL_OFFSET_HEADER, bad)]) == -1


# --- the owner's step over the worker's store ---------------------------------------------------

class Worker:
    """The processor's loop for one batch at a time: handle, erase, remember, hold, commit."""

    def __init__(self, cutover: int | None = 0) -> None:
        self.stores = FakeStores(PARTITIONS)
        self.store = store_over(self.stores)
        self.owner = Owner(PARTITIONS, timedelta(days=7), lambda: WRITTEN_AT, control=CONTROL)
        self.offsets = {INPUT: 100, CONTROL: 0}
        if cutover is not None:
            for p in range(PARTITIONS):
                self.store.set_cutover(p, cutover)
            self.commit()

    def handle(self, topic: str, value: bytes, *, key: str = KEY, partition: int = HOME,
               headers: tuple = (), now: datetime = NOW) -> Step:
        offset = self.offsets[topic]
        self.offsets[topic] += 1
        self.store.partition = partition
        step = self.owner.handle(Source(topic, partition, offset, key.encode(), value, headers),
                                 self.store, now)
        apply(self.store, step)
        self.commit()
        return step

    def forward(self, step: Step) -> Step:
        """The forwarded copy comes round on the input partition."""
        [copy] = step.sends
        return self.handle(INPUT, copy.value, partition=copy.partition, headers=copy.headers)

    def commit(self) -> None:
        self.stores.apply(self.store.take_writes())

    def db(self, partition: int = HOME) -> dict[bytes, bytes]:
        return self.stores.db_for(partition).data


def written(w: Worker, n: int) -> None:
    for i in range(1, n + 1):
        step = w.handle(INPUT, dumps(confirmation(send_id=f"s{i}", **{"payload.text": f"t{i}"})))
        assert step.outcome == "written"


def test_a_control_erase_is_forwarded_with_a_ticket_then_erases_once() -> None:
    w = Worker()
    written(w, 2)
    fwd = w.handle(CONTROL, VALUE)
    assert fwd.outcome == "forwarded"
    [copy] = fwd.sends
    assert (copy.topic, copy.partition, copy.key, copy.value) == \
        (CONFIRMATIONS, HOME, KEY.encode(), VALUE)
    assert copy.headers == ((CONTROL_OFFSET_HEADER, b"0"),)
    assert w.db()[ticket_key(KEY, 0)] == ticket(VALUE).encode()

    done = w.forward(fwd)
    assert done.outcome == "erased"
    assert [o.topic for o in done.sends] == [ENTRIES, ENTRIES, ERASURES]
    assert ticket_key(KEY, 0) not in w.db()  # spent

    # the same copy again (a connector that saw it, or a redelivery): a dead letter
    again = w.forward(fwd)
    assert again.outcome == "dead_letter"
    assert again.decided.error == NO_TICKET
    [dead] = again.sends
    assert dead.topic == DLQ


def test_an_erase_published_to_the_input_is_a_dead_letter_however_spelled() -> None:
    w = Worker()
    written(w, 1)
    raw = VALUE.decode()
    forged = [
        VALUE,
        # "schema" twice, the last one session-erase/1 (and a header naming a control offset)
        ('{"schema":"delivery-confirmation/1",' + raw[1:]).encode(),
        raw.replace('"schema"', '"schema_"').encode(),
    ]
    for value in forged:
        step = w.handle(INPUT, value, headers=((CONTROL_OFFSET_HEADER, b"0"),))
        assert step.outcome == "dead_letter", value
        assert not any(o.topic in (ENTRIES, ERASURES) for o in step.sends)
    step = w.handle(INPUT, dumps(confirmation(send_id="s2", **{"payload.text": "t2"})))
    assert (step.outcome, step.decided.seq) == ("written", 2)  # the history is intact


def test_below_the_cut_over_an_input_erase_is_decided_as_before() -> None:
    w = Worker(cutover=102)
    written(w, 2)  # offsets 100, 101
    step = w.handle(INPUT, VALUE)  # offset 102: at the cut-over
    assert step.decided.error == ONLY_ON_CONTROL
    old = Worker(cutover=200)
    written(old, 2)
    assert old.handle(INPUT, VALUE).outcome == "erased"  # offset 102 < 200: 1.1 history


def test_no_cut_over_known_is_history() -> None:
    w = Worker(cutover=None)
    written(w, 1)
    assert CUTOVER_KEY not in w.db()
    assert w.handle(INPUT, VALUE).outcome == "erased"


@pytest.mark.parametrize("record", [
    confirmation(session_key=KEY),
    {"schema": "session-reset/1", "session_key": KEY, "reset_at": "2025-03-01T12:00:00Z"},
])
def test_transcript_control_takes_erases_only(record: dict) -> None:
    w = Worker()
    step = w.handle(CONTROL, dumps(record))
    assert (step.outcome, step.decided.error) == ("dead_letter", CONTROL_TAKES_ERASES)
    assert [o.topic for o in step.sends] == [DLQ]


def test_a_control_erase_off_its_partition_or_key_is_a_dead_letter() -> None:
    w = Worker()
    other = (HOME + 1) % PARTITIONS
    step = w.handle(CONTROL, VALUE, partition=other)
    assert step.decided.error == NOT_ITS_PARTITION
    step = w.handle(CONTROL, VALUE, key=KEY.upper())
    assert step.decided.error == NOT_ITS_PARTITION
    assert not any(k.startswith(b'["e",') for p in range(PARTITIONS) for k in w.db(p))


def test_an_erase_dated_ahead_counts_as_made_at_the_workers_clock() -> None:
    w = Worker()
    written(w, 1)
    ahead = dumps(erase(erased_at=(NOW + timedelta(minutes=4)).isoformat()))
    done = w.forward(w.handle(CONTROL, ahead))
    assert done.outcome == "erased"
    erasure = json.loads(done.sends[-1].value)
    assert datetime.fromisoformat(erasure["erased_at"]) == NOW
    # a send confirmed a minute after the erasure's true time is a new send, not erased history
    late = dumps(confirmation(send_id="s9", confirmed_at=(NOW + timedelta(minutes=1)).isoformat(),
                              **{"payload.text": "after"}))
    assert w.handle(INPUT, late, now=NOW + timedelta(minutes=2)).outcome == "written"


def test_replay_and_audit_decide_alike_in_memory() -> None:
    owner = Owner(PARTITIONS, timedelta(days=7), lambda: WRITTEN_AT, control=CONTROL)
    state = MemoryState(partition_cutover=0)
    fwd = owner.handle(Source(CONTROL, HOME, 5, KEY.encode(), VALUE), state, NOW)
    state.hold(fwd.session_key, *fwd.ticket)
    [copy] = fwd.sends
    done = owner.handle(Source(INPUT, HOME, 9, copy.key, copy.value, copy.headers), state, NOW)
    assert (done.outcome, done.ticket) == ("erased", (5, ticket(VALUE), False))
    state.hold(done.session_key, *done.ticket)
    assert state.tickets == {}
    assert owner.handle(Source(INPUT, HOME, 10, KEY.encode(), VALUE), state, NOW).outcome \
        == "dead_letter"
    # replay (a file: no partition, no cut-over) decides an erase line as before
    assert Owner(None, timedelta(days=7), lambda: WRITTEN_AT).handle(
        Source("replay", 0, 1, None, VALUE), MemoryState(), NOW).outcome == "erased"


def test_the_cut_over_of_a_store_is_checked_when_read() -> None:
    w = Worker(cutover=None)
    w.stores.db_for(HOME).data[CUTOVER_KEY] = b"not an offset"
    step = w.handle(INPUT, VALUE)
    assert step.outcome == "dead_letter"
    assert "cut-over" in step.decided.error
    assert w.db()[CUTOVER_KEY] == b"not an offset"


def test_two_erases_of_one_session_at_one_control_offset_are_both_held_and_both_obeyed() -> None:
    """After a repartition a session's erases come from another control partition, whose
    offsets start again at 0: its second erase can share the first's offset. audit replays
    every control range of a family before its input, so both tickets are held at once; each
    forwarded copy is admitted and spends its own (issue 42, item 1)."""
    old, new = 8, 16
    key = next(k for k in (f"agent:ops:telegram:direct:m{i}" for i in range(100))
               if partition_for(k, old) != partition_for(k, new))
    first = dumps(erase(session_key=key, erased_at="2026-05-01T12:00:00Z", reason="one"))
    second = dumps(erase(session_key=key, erased_at="2026-05-01T13:00:00Z", reason="two"))
    state = MemoryState(partition_cutover=0)
    copies = []
    for count, value in ((old, first), (new, second)):
        owner = Owner(count, timedelta(days=7), lambda: WRITTEN_AT, control=CONTROL)
        fwd = owner.handle(Source(CONTROL, partition_for(key, count), 0, key.encode(), value),
                           state, NOW)
        assert fwd.outcome == "forwarded"
        apply(state, fwd)
        copies.append(fwd.sends[0])
    assert state.tickets == {(key, 0): f"{ticket(first)},{ticket(second)}"}
    owner = Owner(new, timedelta(days=7), lambda: WRITTEN_AT, control=CONTROL)
    home = partition_for(key, new)
    for offset, copy in enumerate(copies):
        step = owner.handle(Source(INPUT, home, 20 + offset, copy.key, copy.value, copy.headers),
                            state, NOW)
        assert step.outcome == "erased"
        apply(state, step)
    assert state.tickets == {}
    # a copy sent again finds no ticket: a dead letter
    again = owner.handle(Source(INPUT, home, 30, copies[0].key, copies[0].value,
                                copies[0].headers), state, NOW)
    assert again.outcome == "dead_letter"


def test_spending_a_ticket_leaves_the_others_at_its_offset_and_reads_an_older_single_one():
    assert held_tickets(None) == [] and held_tickets("ab") == ["ab"]
    assert with_ticket(None, "ab", True) == "ab"
    assert with_ticket("ab", "cd", True) == "ab,cd"
    assert with_ticket("ab,cd,ab", "ab", False) == "cd,ab"  # one occurrence, never another's
    assert with_ticket("ab", "cd", False) == "ab"
    assert with_ticket("ab", "ab", False) is None
