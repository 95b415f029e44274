"""Owner.handle, the worker's per-record path, against replay's fold and the plain wire forms.

The worker and `audit` call Owner.handle, `replay` folds decide: they must agree outcome for
outcome, and the records sent must be the models' model_dump_json bytes.
"""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given
from kafka.partitioner.default import murmur2

from schemas import Invalid, parse_input
from tests.unit.test_properties import INPUTS
from tests.unit.wire import WRITTEN_AT, run
from workers.core import DEFAULT_DEDUPE_WINDOW, EMPTY_STATE, SessionState, session_key_of
from workers.outputs import CONFIRMATIONS, DIAGNOSTICS, DLQ, ENTRIES, OutRecord, Source
from workers.owner import Owner
from workers.partitioning import partition_for

PARTITIONS = 8


def home(key: str) -> int:
    """The Java client's partition, computed without workers.partitioning (and its cache)."""
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
    states: dict[str, SessionState] = {}
    for offset, (line, outcome) in enumerate(zip(lines, run(lines), strict=True)):
        src = source(offset, line)
        step = owner.handle(src, lambda key: states.get(key, EMPTY_STATE))
        assert step.outcome == outcome.kind
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
            expected.append(OutRecord(ENTRIES, entry_key, value, home(e.session_key)))
        for d in outcome.diagnostics:
            value = d.model_dump_json().encode()
            expected.append(OutRecord(DIAGNOSTICS, d.session_key.encode(), value))
        assert step.sends == expected
        if step.new_state is not None:
            assert step.session_key is not None
            states[step.session_key] = step.new_state


@given(INPUTS)
def test_a_record_off_its_home_is_forwarded_unchanged(lines: list[bytes]) -> None:
    owner = Owner(PARTITIONS, timedelta(days=7), lambda: WRITTEN_AT)
    for offset, line in enumerate(lines):
        src = source(offset, line, moved=True)
        step = owner.handle(src, lambda key: EMPTY_STATE)
        if step.outcome != "dead_letter":
            assert step.outcome == "rekeyed" and step.session_key is not None
            partition = partition_for(step.session_key, PARTITIONS)
            assert partition == home(step.session_key) != src.partition
            headers = (("rekeyed.from", f"{src.partition}:{offset}".encode()),)
            assert step.sends == [OutRecord(CONFIRMATIONS, src.key, line, partition, headers)]
