"""Checkpoint records (workers/core/checkpoint_format.py): chunks and manifest round-trip; a slot
reused by a newer checkpoint hides the older one; an incomplete checkpoint is not used; no batch
carries more than the bound of state keys, however large a partition's state (a copy is spread
over batches from a snapshot); an interrupted copy is no checkpoint."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime

import pytest
import rocksdict

from workers.commands.audit_start import state_of
from workers.core import Seen, SessionHead, head_key, seen_key
from workers.core import checkpoint_format as checkpoints
from workers.core.checkpoint_format import decode, encode
from workers.stream.checkpoints import Checkpointer

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


class Db:
    """A partition store as the checkpointer reads it: a snapshot, and its items in key order."""

    def __init__(self, items: list[tuple[bytes, bytes]]) -> None:
        self._items = items

    def snapshot(self) -> Db:
        return Db(list(self._items))

    def items(self):
        return iter(sorted(self._items))


def test_checkpointer_waits_for_the_next_interval_and_skips_unmoved():
    c = Checkpointer("t.transcript.checkpoints", 10.0, 3)
    assert not c.due(100.0)  # the process's first interval: no copy at start
    assert not c.due(109.9)
    assert c.due(110.0)
    out = c.take(110.0, {0: 5, 1: 0}, lambda p: Db(_items(1)))
    assert sorted(out) == [0, 1] and all(r[1] == p for p, rs in out.items() for r in rs)
    assert [x.partition for x in c.finished] == [0, 1]
    assert not c.due(115.0)
    assert c.due(120.0)
    assert sorted(c.take(120.0, {0: 5, 1: 3}, lambda p: Db(_items(1)))) == [1]  # 0 has not moved


def _keys_in(records) -> int:  # noqa: ANN001
    """State keys the checkpoint records of one batch carry."""
    return sum(len(json.loads(r[3])["items"]) for r in records if r[2].startswith(b"c/"))


def _rocks(path, n: int, tag: str = ""):  # noqa: ANN001, ANN202
    db = rocksdict.Rdict(str(path), options=rocksdict.Options(raw_mode=True))
    for key, value in _items(n):
        db[key] = value + tag.encode()
    return db


def test_no_batch_carries_more_state_keys_than_the_bound(tmp_path):
    """Partitions of 0 to 2,501 state keys, 100 keys a batch: every batch (so every one of its
    transactions) carries at most 100 keys, a large partition's copy goes on over many batches
    from the snapshot taken when it began, although the store changes between batches, and each
    partition ends with one complete checkpoint, equal to its state at its input offset."""
    sizes = {0: 2, 1: 1250, 2: 0, 3: 20, 4: 1}  # sessions (2 state keys each, plus faust's)
    dbs = {p: _rocks(tmp_path / f"p{p}", n) for p, n in sizes.items()}
    c = Checkpointer("t", 10.0, 3, keys_per_batch=100)
    c.due(100.0)
    written: dict[int, list] = {p: [] for p in sizes}
    began: dict[int, tuple[int, list]] = {}  # partition -> (input offset, state) at its copy
    batches, wall = 0, 110.0
    while c.due(wall):
        positions = {p: 1000 * p + batches for p in sizes}  # each batch moves every partition
        states = {p: [kv for kv in db.items() if not kv[0].startswith(b"__faust")]
                  for p, db in dbs.items()}
        out = c.take(wall, positions, lambda p: dbs[p])
        batches += 1
        assert _keys_in([r for rs in out.values() for r in rs]) <= 100
        for p, records in out.items():
            assert all(r[0] == "t" and r[1] == p for r in records)
            written[p].extend((r[2], r[3]) for r in records)
            began.setdefault(p, (positions[p], states[p]))
        for db in dbs.values():  # the batch's own state writes, after its checkpoint records
            for key, _ in list(db.items())[:3]:
                if key.startswith(b'["h"'):
                    db[key] = SessionHead(5, 99, AT).to_bytes()
                else:
                    del db[key]
            db[head_key(f"agent:a:new{batches}")] = SessionHead(0, 1, AT).to_bytes()
        wall += 0.01  # within the interval
        assert batches < 100
    assert batches >= 2 * 1250 // 100
    for p in sizes:
        (ckpt,) = decode(written[p])
        assert (ckpt.partition, ckpt.input_offset, ckpt.items) == (p, *began[p])
    assert c.taken == len(sizes)


def test_an_interrupted_copy_is_no_checkpoint_and_begins_again(tmp_path):
    """A rebalance abandons a copy after some of its chunks were written: they make no
    checkpoint (and the slot's older one is gone); the partition is copied again in the same
    interval, at its new position, and that copy is complete even over the older one's chunks
    of the same id. A manifest is never read with the chunks of another copy."""
    db = _rocks(tmp_path / "p0", 300, "-first")
    c = Checkpointer("t", 10.0, 3, keys_per_batch=100)
    c.due(100.0)
    assert c.due(110.0)
    older = encode(0, 110 // 10 % 3, 11, 5, None, _items(3), AT)  # a complete older copy
    first = [(r[2], r[3]) for r in c.take(110.0, {0: 40}, lambda p: db)[0]]
    assert not c.finished and c.copying is not None and c.copying.input_offset == 40
    assert decode([*older, *first]) == []
    c.abandon()  # a rebalance
    assert c.copying is None and c.due(111.0)
    for key, _ in list(db.items())[:10]:
        db[key] = SessionHead(1, 7, AT).to_bytes()
    state = [kv for kv in db.items() if not kv[0].startswith(b"__faust")]
    again: list = []
    while c.due(111.0):
        again.extend((r[2], r[3]) for r in c.take(111.0, {0: 77}, lambda p: db).get(0, []))
    (ckpt,) = decode([*older, *first, *again])
    assert (ckpt.id, ckpt.input_offset, ckpt.items) == (11, 77, state)
    # the second copy's manifest with a chunk the first copy wrote later: not a checkpoint
    assert decode([*again, first[0]]) == []


def test_a_copy_spans_a_new_interval_and_finishes_first(tmp_path):
    db = _rocks(tmp_path / "p0", 75)  # 150 state keys: two batches
    c = Checkpointer("t", 10.0, 1, keys_per_batch=100)  # one slot: the next copy reuses it
    c.due(100.0)
    assert c.due(110.0)
    records = [(r[2], r[3]) for r in c.take(110.0, {0: 1}, lambda p: db)[0]]
    assert not c.finished
    assert c.due(120.0)  # a new interval while the copy of the last one is unfinished
    records += [(r[2], r[3]) for r in c.take(120.0, {0: 2}, lambda p: db)[0]]
    assert [(x.id, x.input_offset) for x in c.finished] == [(11, 1)]
    assert c.copying is not None and c.copying.id == 12  # begun with the batch's budget left
    while c.due(120.0):
        records += [(r[2], r[3]) for r in c.take(120.0, {0: 2}, lambda p: db)[0]]
    assert [(x.id, x.input_offset) for x in decode(records)] == [(12, 2)]


def test_partitions_take_turns_when_a_round_outlasts_the_interval(tmp_path):
    """Copying every partition takes longer than the interval: each new interval begins with
    the partitions copied longest ago, so none is starved by the first ones."""
    dbs = {p: _rocks(tmp_path / f"p{p}", 60) for p in range(4)}  # 120 keys: 2 batches each
    c = Checkpointer("t", 1.0, 100, keys_per_batch=100)
    c.due(100.0)
    done, wall = [], 101.0
    for _ in range(16):  # one batch an interval
        assert c.due(wall)
        c.take(wall, {p: int(wall) for p in dbs}, lambda p: dbs[p])
        done += [x.partition for x in c.finished]
        wall += 1.0
    counts = Counter(done)
    assert set(counts) == set(dbs) and max(counts.values()) - min(counts.values()) <= 1


def test_records_of_no_checkpoint_are_not_read_as_one():
    """Whoever may write the topic can put anything there: a key of no checkpoint's form, a
    manifest naming another partition, a string `input_offset`, a chunk of garbage. Before,
    `decode` failed on such a key (IndexError, ValueError), sorted a string offset against an
    int (TypeError) and took a manifest of partition 3 in partition 0's key as it stood."""
    good = encode(0, 0, 7, 42, 9, _items(2), AT)
    m = json.loads(good[-1][1])
    garbage = [
        (b"c/x", b"{}"), (b"c/0/x/000001", b"{}"), (b"\xff/0/0", b"{}"), (b"m/0", b"[]"),
        (b"m/0/1", json.dumps(dict(m, input_offset="5")).encode()),
        (b"m/0/2", json.dumps(dict(m, partition=3, input_offset=1)).encode()),
        (b"m/0/3", json.dumps(dict(m, input_offset=-1)).encode()),
        (b"m/0/4", b"not JSON"), (b"m/0/5", json.dumps([m]).encode()),
    ]
    for slot in (None, 0, 1, 2):
        assert [(c.partition, c.slot, c.id, c.input_offset) for c in decode(
            [*garbage, *good], slot=slot)] == ([(0, 0, 7, 42)] if slot in (None, 0) else [])
    assert [c.id for c in decode([*garbage, *good], manifests_only=True)] == [7]
    # a garbage chunk in place of one of the manifest's: no checkpoint
    assert decode([*good[:-1], (good[0][0], b'{"items": 5}'), good[-1]]) == []


def test_a_manifest_is_checked_member_by_member():
    manifest = json.loads(encode(3, 1, 7, 42, None, [], AT)[-1][1])
    assert checkpoints.read_manifest(json.dumps(manifest).encode(), 3)["input_offset"] == 42
    for changes, what in [
        ({"partition": 4}, "a manifest of partition 4 under a key of partition 3"),
        ({"input_offset": "42"}, "input_offset: not a whole number from 0 to "
                                 "9223372036854775807"),
        ({"chunks": -1}, "chunks: not a whole number from 0 to 999999"),
        ({"diagnostics_offset": 1.5}, "diagnostics_offset: not a whole number from 0 to "
                                      "9223372036854775807"),
        ({"id": None}, "id: not a whole number from 0 to 9223372036854775807"),
    ]:
        with pytest.raises(checkpoints.Malformed) as err:
            checkpoints.read_manifest(json.dumps(dict(manifest, **changes)).encode(), 3)
        assert str(err.value) == what
    del manifest["input_offset"]
    with pytest.raises(checkpoints.Malformed, match="^input_offset: missing$"):
        checkpoints.read_manifest(json.dumps(manifest).encode(), 3)
    assert checkpoints.parse_key(b"c/3/1/000002") == ("c", 3, 1, 2)
    for key in (b"c/3/1/2", b"m/3/01", b"m/03/1", b"m/3/1/", b"m/-3/1", b"m/3/1 "):
        with pytest.raises(checkpoints.Malformed):
            checkpoints.parse_key(key)
