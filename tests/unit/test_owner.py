"""Owner.handle, the one step of the worker, `audit` and `replay`, with partitions (the
worker's: records keyed and placed as a connector does) against it without (replay's, through
tests/unit/wire.py), and against the plain wire forms.

Outcome for outcome the two must agree, and the records sent must be the models'
model_dump_json bytes. What it asks the shell to store (a head, a seen
record) is a return value: stored back into a MemoryState, the next record sees it.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from hypothesis import given
from kafka.partitioner.default import murmur2
from transcript_connector.partitioning import partition_for

from schemas import Invalid, parse_input
from tests.unit.test_properties import INPUTS
from tests.unit.wire import WRITTEN_AT, confirmation, dumps, run
from workers.core import DEFAULT_DEDUPE_WINDOW, EMPTY_HEAD, MemoryState, session_key_of
from workers.core.outputs import CONFIRMATIONS, DIAGNOSTICS, DLQ, ENTRIES, OutRecord, Source
from workers.core.owner import Owner, apply

PARTITIONS = 8


def home(key: str) -> int:
    """The Java client's partition, computed without partition_for (and its cache)."""
    return (murmur2(key.encode()) & 0x7FFFFFFF) % PARTITIONS


def source(offset: int, line: bytes, *, moved: bool = False) -> Source:
    """`line` as a connector sends it: keyed by its canonical key, on that key's partition."""
    record = parse_input(line)
    key = None if isinstance(record, Invalid) else session_key_of(record)
    if not isinstance(key, str):
        return Source("in", offset % PARTITIONS, offset, b"k", line)
    partition = (home(key) + moved) % PARTITIONS
    return Source("in", partition, offset, key.encode(), line)


@given(INPUTS)
def test_owner_agrees_with_replay_and_sends_the_models_json(lines: list[bytes]) -> None:
    owner = Owner(PARTITIONS, DEFAULT_DEDUPE_WINDOW, lambda: WRITTEN_AT)
    state = MemoryState()
    for offset, (line, outcome) in enumerate(zip(lines, run(lines), strict=True)):
        src = source(offset, line)
        step = owner.handle(src, state)
        assert step.outcome == outcome.kind
        assert step.decided == outcome
        assert step.session_key == outcome.session_key
        expected: list[OutRecord] = []
        if outcome.kind == "dead_letter":
            assert outcome.error is not None
            headers = (
                ("error", outcome.error.encode()),
                ("source.topic", b"in"),
                ("source.partition", str(src.partition).encode()),
                ("source.offset", str(offset).encode()),
            )
            expected.append(OutRecord(DLQ, src.key, line, None, headers))
        if outcome.entry is not None:
            e = outcome.entry
            entry_key = f"{e.session_key}#{e.seq:010d}".encode()
            value = e.model_dump_json().encode()
            assert outcome.chain is not None  # every entry is chained (DESIGN 1.2)
            chain = (("chain", outcome.chain.hex().encode()),)
            expected.append(OutRecord(ENTRIES, entry_key, value, home(e.session_key), chain))
        for d in outcome.diagnostics:
            value = d.model_dump_json().encode()
            expected.append(OutRecord(DIAGNOSTICS, d.session_key.encode(), value))
        assert step.sends == expected
        if step.head is not None or step.seen is not None:
            assert step.session_key is not None
        if step.seen is not None:
            assert step.seen[0] == outcome.send_id
        apply(state, step)
    assert owner.counts == Counter(o.kind for o in run(lines))


@given(INPUTS)
def test_a_record_off_its_home_is_forwarded_unchanged(lines: list[bytes]) -> None:
    owner = Owner(PARTITIONS, timedelta(days=7), lambda: WRITTEN_AT)
    for offset, line in enumerate(lines):
        src = source(offset, line, moved=True)
        step = owner.handle(src, MemoryState())
        if step.outcome != "dead_letter":
            assert step.outcome == "rekeyed" and step.session_key is not None
            assert (step.decided, step.head, step.seen) == (None, None, None)
            partition = partition_for(step.session_key, PARTITIONS)
            assert partition == home(step.session_key) != src.partition
            headers = (("rekeyed.from", f"{src.partition}:{offset}".encode()),)
            assert step.sends == [OutRecord(CONFIRMATIONS, src.key, line, partition, headers)]


def test_a_forwarded_erase_keeps_its_control_offset_when_rekeyed() -> None:
    """After a repartition an erase forwarded under the old count is re-keyed to the
    session's new partition, where its ticket went with the state: the ticket's offset goes
    with it; any other header does not."""
    owner = Owner(PARTITIONS, DEFAULT_DEDUPE_WINDOW, lambda: WRITTEN_AT)
    key = "agent:main:telegram:direct:42"
    line = dumps({"schema": "session-erase/1", "session_key": key,
                  "erased_at": "2026-01-01T00:00:00Z", "reason": "r"})
    off = (home(key) + 1) % PARTITIONS
    src = Source(CONFIRMATIONS, off, 9, key.encode(), line,
                 (("control.offset", b"17"), ("other", b"x")))
    state = MemoryState()
    state.partition_cutover = 0  # this partition admits no erase without its ticket
    step = owner.handle(src, state)
    assert step.outcome == "rekeyed"
    assert step.sends == [OutRecord(CONFIRMATIONS, key.encode(), line, home(key), (
        ("rekeyed.from", f"{off}:9".encode()), ("control.offset", b"17")))]


def test_without_partitions_nothing_is_rekeyed() -> None:
    """replay's Owner: a file has no partitions, so every record is decided where it is."""
    owner = Owner(None, DEFAULT_DEDUPE_WINDOW, lambda: WRITTEN_AT)
    line = dumps(confirmation(session_key="Telegram:Group:-100123"))
    step = owner.handle(Source("replay", 0, 1, None, line), MemoryState())
    assert step.outcome == "written" and step.decided is not None
    assert step.head is not None and step.head.next_seq == 2
    assert step.seen is not None and step.seen[0] == "outbound-delivery:d1:0"
    assert [o.topic for o in step.sends] == [ENTRIES, DIAGNOSTICS]  # + session_key_mismatch


def test_now_is_the_workers_clock_and_written_at_the_entries() -> None:
    """`now` (when the broker appended the record) is what the skew allowance is measured
    from; written_at comes from the owner's clock."""
    owner = Owner(None, DEFAULT_DEDUPE_WINDOW, lambda: WRITTEN_AT)
    line = dumps(confirmation(confirmed_at="2025-03-01T12:10:00Z"))
    early = datetime(2025, 3, 1, 12, tzinfo=UTC)
    step = owner.handle(Source("replay", 0, 1, None, line), MemoryState(), early)
    assert step.decided is not None and step.decided.entry is not None
    assert step.decided.entry.written_at == WRITTEN_AT
    assert [d.code for d in step.decided.diagnostics] == ["clock_skew"]
    assert step.head is not None and step.head.clock == early  # moved to the worker's clock only
    step = owner.handle(Source("replay", 0, 2, None, line), MemoryState())  # now = clock()
    assert step.decided is not None and step.decided.diagnostics == ()


def test_a_duplicate_asks_to_store_nothing() -> None:
    owner = Owner(None, DEFAULT_DEDUPE_WINDOW, lambda: WRITTEN_AT)
    state, line = MemoryState(), dumps(confirmation())
    first = owner.handle(Source("replay", 0, 1, None, line), state)
    state.remember(first.session_key or "", first.head, first.seen)
    again = owner.handle(Source("replay", 0, 2, None, line), state)
    assert (again.outcome, again.head, again.seen, again.sends) == ("duplicate", None, None, [])
    assert state.head(first.session_key or "") != EMPTY_HEAD
