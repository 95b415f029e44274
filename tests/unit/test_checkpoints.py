"""Checkpoint records (workers/stream/checkpoints.py): chunks and manifest round-trip; a slot
reused by a newer checkpoint hides the older one; an incomplete checkpoint is not used."""

from __future__ import annotations

from datetime import UTC, datetime

from workers.commands.audit_start import state_of
from workers.core import Seen, SessionHead, head_key, seen_key
from workers.stream import checkpoints
from workers.stream.checkpoints import Checkpointer, decode, encode

AT = datetime(2026, 6, 1, tzinfo=UTC)


def _items(n: int) -> list[tuple[bytes, bytes]]:
    items = [(b"__faust\x00offset", b"12")]
    for i in range(n):
        s = f"agent:a:main{i}\u00e9"
        items.append((head_key(s), SessionHead(0, i + 1, AT).to_bytes()))
        items.append((seen_key(s, f"send-{i}"), Seen(AT, "fp").to_bytes()))
    return items


def test_round_trip_in_chunks(monkeypatch):
    monkeypatch.setattr(checkpoints, "CHUNK_BYTES", 200)
    records = encode(3, 1, 7, 42, 9, _items(20), AT)
    assert len(records) > 3 and records[-1][0] == b"m/3/1"
    (c,) = decode(records)
    assert (c.partition, c.id, c.input_offset, c.diagnostics_offset) == (3, 7, 42, 9)
    assert c.items == _items(20)[1:]  # faust's bookkeeping is not state
    state = state_of(c)
    assert state.head("agent:a:main4\u00e9").next_seq == 5
    assert state.seen("agent:a:main4\u00e9", "send-4") == Seen(AT, "fp")


def test_slots_and_incomplete_checkpoints(monkeypatch):
    monkeypatch.setattr(checkpoints, "CHUNK_BYTES", 200)
    older = encode(0, 0, 1, 10, None, _items(20), AT)
    newer = encode(0, 0, 3, 30, None, _items(2), AT)  # same slot, fewer chunks
    other = encode(0, 1, 2, 20, None, _items(1), AT)
    found = decode([*older, *other, *newer])
    assert [(c.id, c.input_offset) for c in found] == [(2, 20), (3, 30)]
    assert [c.id for c in decode([*older, *other, *newer], manifests_only=True)] == [2, 3]
    assert [(c.id, len(c.items)) for c in decode([*older, *other, *newer], slot=1)] == [(2, 2)]
    # a manifest whose chunks were overwritten by a newer checkpoint is not complete
    assert decode([*older, *newer[:-1]]) == []


def test_checkpointer_waits_for_the_next_interval_and_skips_unmoved():
    class Db:
        def items(self):
            return iter(_items(1))

    c = Checkpointer("t.transcript.checkpoints", 10.0, 3)
    assert not c.due(100.0)  # the process's first interval: no copy at start
    assert not c.due(109.9)
    assert c.due(110.0)
    out = c.take(110.0, {0: 5, 1: 0}, lambda p: Db())
    assert sorted(out) == [0, 1] and all(r[1] == p for p, rs in out.items() for r in rs)
    assert not c.due(115.0)
    assert c.due(120.0)
    assert sorted(c.take(120.0, {0: 5, 1: 3}, lambda p: Db())) == [1]  # 0 has not moved


def test_checkpointer_spreads_a_large_state_over_batches(monkeypatch):
    monkeypatch.setattr(checkpoints, "KEYS_PER_BATCH", 3)

    class Db:
        def items(self):
            return iter(_items(1))  # 2 state keys

    c = Checkpointer("t", 10.0, 3)
    c.due(100.0)
    positions = {0: 1, 1: 1, 2: 1, 3: 1}
    assert c.due(110.0)
    assert sorted(c.take(110.0, positions, lambda p: Db())) == [0, 1]
    assert c.due(111.0)  # the rest still due in this interval
    assert sorted(c.take(111.0, positions, lambda p: Db())) == [2, 3]
    assert not c.due(112.0)
