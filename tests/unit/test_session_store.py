"""workers/stream/session_store.py: the worker's state behind the core's StateView.

Over a stand-in for faust's partition stores (get, and items in key order from a key): a
batch sees its own writes before they are written; the writes come out as heads, seen
records and tombstones; format-1 records migrate lazily (and by the sweep); the sweep
tombstones exactly the expired send_ids, a bounded slice at a time, and wraps round; a value
that cannot be decoded dead-letters its session's records and stops nothing; a failing store
is StoreFailure, the one exception that stops a worker.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transcript_connector.chain import link, root
from transcript_connector.partitioning import partition_for

from tests.unit.test_fingerprint import stored
from tests.unit.test_owner import PARTITIONS, source
from tests.unit.test_properties import CHATS, INPUTS
from tests.unit.wire import WRITTEN_AT, confirmation, dumps, reset
from workers.core import (
    UNKNOWN_FINGERPRINT,
    MemoryState,
    Seen,
    SessionHead,
    StoreFailure,
    decode_v1,
    head_key,
    seen_key,
)
from workers.core.outputs import DLQ, Source
from workers.core.owner import Owner, Step, apply
from workers.core.state import micros, ticket_key
from workers.stream.session_store import SessionStore, Write

KEY = "agent:ops:telegram:group:-100123"
OTHER = "agent:ops:slack:channel:c0general"
T = datetime(2025, 3, 1, 12, tzinfo=UTC)  # wire.T0
DAY = timedelta(days=1)
US = timedelta(microseconds=1)


class FakeDB:
    """One partition's store as SessionStore reads it: bytes keys in byte order."""

    def __init__(self, data: dict[bytes, bytes] | None = None) -> None:
        self.data = dict(data or {})
        self.reads = 0  # items yielded by items(), over the store's life

    def get(self, key: bytes) -> bytes | None:
        return self.data.get(key)

    def items(self, from_key: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        for key in sorted(self.data):
            if key >= from_key:
                self.reads += 1
                yield key, self.data[key]


class FakeStores:
    """The partition stores of one worker; `apply` is what faust does with the changelog."""

    def __init__(self, partitions: int = 1) -> None:
        self.dbs = [FakeDB() for _ in range(partitions)]

    def db_for(self, partition: int) -> FakeDB:
        return self.dbs[partition]

    def apply(self, writes: Iterable[Write]) -> None:
        for p, key, value in writes:
            if value is None:
                self.dbs[p].data.pop(key, None)
            else:
                self.dbs[p].data[key] = value


def store_over(stores: FakeStores, window: timedelta = timedelta(days=7),
               **kw: Any) -> SessionStore:
    return SessionStore(stores.db_for, window, **kw)


class Worker:
    """The processor's loop without Kafka: handle, remember, and at the end of a batch, write."""

    def __init__(self, stores: FakeStores, window: timedelta = timedelta(days=7),
                 partitions: int | None = None, **kw: Any) -> None:
        self.stores = stores
        self.store = store_over(stores, window, **kw)
        self.owner = Owner(partitions, window, lambda: WRITTEN_AT)
        self.offset = 0

    def handle(self, record: dict[str, Any] | bytes, partition: int = 0,
               now: datetime | None = None) -> Step:
        value = record if isinstance(record, bytes) else dumps(record)
        self.offset += 1
        self.store.partition = partition
        step = self.owner.handle(Source("in", partition, self.offset, None, value), self.store, now)
        apply(self.store, step)
        return step

    def commit(self) -> list[Write]:
        writes = self.store.take_writes()
        self.stores.apply(writes)
        return writes

    def restart(self) -> None:
        """A new worker on the same local state (or after a rebalance)."""
        self.store = store_over(self.stores, self.store.window)


def kinds(steps: list[Step]) -> list[str]:
    return [s.outcome for s in steps]


# --- a batch ------------------------------------------------------------------------------


def test_a_batch_sees_its_own_writes_before_they_are_written() -> None:
    stores = FakeStores()
    w = Worker(stores)
    first = w.handle(confirmation())
    assert first.outcome == "written" and first.head is not None and first.seen is not None
    assert stores.dbs[0].data == {}  # nothing written yet
    assert w.store.head(KEY) == first.head
    assert w.store.seen(KEY, "outbound-delivery:d1:0") == first.seen[1]
    assert kinds([w.handle(confirmation()), w.handle(confirmation(send_id="b"))]) == [
        "duplicate", "written"]


def test_take_writes_returns_the_batch_in_order_once() -> None:
    stores = FakeStores()
    w = Worker(stores)
    a = w.handle(confirmation(send_id="a"))
    w.handle(confirmation(send_id="a"))  # a duplicate writes nothing
    b = w.handle(confirmation(send_id="b"))
    assert a.head is not None and a.seen is not None and b.head is not None and b.seen is not None
    writes = w.store.take_writes()
    assert writes == [
        (0, head_key(KEY), b.head.to_bytes()),  # one head per session: the latest
        (0, seen_key(KEY, "a"), a.seen[1].to_bytes()),
        (0, seen_key(KEY, "b"), b.seen[1].to_bytes()),
    ]
    assert w.store.take_writes() == [] and w.store.pending == {}


def test_written_state_is_read_back_by_a_new_store() -> None:
    stores = FakeStores()
    w = Worker(stores)
    first = w.handle(confirmation())
    w.commit()
    w.restart()
    assert w.store.head(KEY) == first.head
    assert kinds([w.handle(confirmation()), w.handle(confirmation(send_id="b"))]) == [
        "duplicate", "written"]
    assert w.handle(confirmation(send_id="c")).decided.entry.seq == 3  # type: ignore[union-attr]


def test_each_partition_has_its_own_store() -> None:
    stores = FakeStores(2)
    w = Worker(stores)
    w.handle(confirmation(), partition=1)
    w.commit()
    assert stores.dbs[0].data == {} and set(stores.dbs[1].data) == {
        head_key(KEY), seen_key(KEY, "outbound-delivery:d1:0")}


def test_a_small_head_cache_forgets_nothing() -> None:
    stores = FakeStores()
    w = Worker(stores, cache_size=2)
    keys = [f"agent:ops:telegram:group:-{i}" for i in range(10)]
    for rnd in range(3):
        steps = [w.handle(confirmation(session_key=k, send_id=f"r{rnd}")) for k in keys]
        assert kinds(steps) == ["written"] * 10
        assert [s.decided.entry.seq for s in steps] == [rnd + 1] * 10  # type: ignore[union-attr]
        w.commit()
        assert len(w.store._heads) < 10  # evicted: the next round reads heads from the store


# --- format 1: migrated lazily ------------------------------------------------------------

V1_KEY = KEY.encode()
V1 = (
    b'{"v":1,"epoch":2,"next_seq":7,"clock":1740830400000000,"last_reset_at":1740744000000000,'
    b'"seen":[["outbound-delivery:d1:0",1740830400000000,"e31eae0405f4267627c160457cace4b9"],'
    b'["q\\"uote,\\u0000\xc3\xbc",1740830400000000,"00000000000000000000000000000000"]]}'
)  # as the code before 0.2 wrote it; clock 2025-03-01T12:00:00Z, last reset a day before
MIGRATED_IDS = ["outbound-delivery:d1:0", 'q"uote,\x00ü']


def test_a_format_1_record_is_migrated_when_its_session_is_next_decided() -> None:
    stores = FakeStores()
    stores.dbs[0].data[V1_KEY] = V1
    w = Worker(stores)
    step = w.handle(confirmation(send_id="new"))
    assert step.outcome == "written" and step.decided is not None
    entry = step.decided.entry
    assert entry is not None and (entry.epoch, entry.seq) == (2, 7)  # carried over
    writes = w.commit()
    assert w.store.migrated == 1
    # a session written before the chain: its chain starts at its next entry, from the root
    # of its epoch (its older entries stay unchained; never erased, they all may be live)
    assert step.decided.chain == link(root(KEY, 2), step.decided.entry_json or b"")
    head = SessionHead(2, 8, T, T - DAY, chain=step.decided.chain, chain_from=7, live_from=1)
    seen = Seen(T, UNKNOWN_FINGERPRINT).to_bytes()
    assert step.seen is not None
    assert writes == [
        (0, head_key(KEY), head.to_bytes()),
        (0, seen_key(KEY, MIGRATED_IDS[0]), seen),
        (0, seen_key(KEY, MIGRATED_IDS[1]), seen),
        (0, V1_KEY, None),  # the format-1 record is tombstoned
        (0, seen_key(KEY, "new"), step.seen[1].to_bytes()),
    ]
    assert V1_KEY not in stores.dbs[0].data


@pytest.mark.parametrize("commit", [False, True], ids=["same batch", "after a restart"])
def test_a_retry_of_a_migrated_send_id_is_a_duplicate_whatever_it_holds(commit: bool) -> None:
    stores = FakeStores()
    stores.dbs[0].data[V1_KEY] = V1
    w = Worker(stores)
    assert w.handle(reset(reset_at="2025-03-01T12:30:00Z")).outcome == "reset"  # migrates
    if commit:
        w.commit()
        w.restart()
    retries = [
        confirmation(),
        confirmation(**{"payload.text": "the fingerprint of format 1 is not compared"}),
        confirmation(send_id=MIGRATED_IDS[1], payload={"native": [{"kind": "x"}]}),
    ]
    assert kinds([w.handle(r) for r in retries]) == ["duplicate"] * 3
    written = w.handle(confirmation(send_id="fresh"))
    assert written.decided is not None and written.decided.entry is not None
    assert (written.decided.entry.epoch, written.decided.entry.seq) == (3, 7)


def test_the_sweep_migrates_format_1_records_no_record_arrives_for() -> None:
    stores = FakeStores()
    stores.dbs[0].data[V1_KEY] = V1
    w = Worker(stores)
    w.store.sweep([0], budget=100)
    writes = w.commit()
    assert w.store.migrated == 1
    assert (0, V1_KEY, None) in writes
    assert set(stores.dbs[0].data) == {head_key(KEY), *(seen_key(KEY, s) for s in MIGRATED_IDS)}
    w.restart()
    assert w.handle(confirmation()).outcome == "duplicate"


def test_a_format_1_record_beside_a_newer_head_is_dropped(caplog: pytest.LogCaptureFixture) -> None:
    stores = FakeStores()
    newer = SessionHead(5, 50, T, None)
    stores.dbs[0].data.update({V1_KEY: V1, head_key(KEY): newer.to_bytes()})
    w = Worker(stores)
    assert w.store.head(KEY) == newer  # the head wins at once
    with caplog.at_level(logging.WARNING, logger="transcript_owner.state"):
        w.store.sweep([0], budget=100)
    assert w.commit() == [(0, V1_KEY, None)]
    assert w.store.migrated == 0 and "newer head" in caplog.text


# --- the sweep: expiry --------------------------------------------------------------------


def seeded(window: timedelta = DAY) -> tuple[FakeStores, set[bytes]]:
    """Three sessions' records; returns the stores and the keys the sweep must tombstone."""
    stores = FakeStores()
    db = stores.dbs[0].data
    a, b, c = KEY, OTHER, "agent:ops:main"
    db[head_key(a)] = SessionHead(0, 4, T, None).to_bytes()
    db[head_key(c)] = SessionHead(1, 2, T - 10 * DAY, T - 11 * DAY).to_bytes()
    expired = {
        seen_key(a, "old"): T - window - US,
        seen_key(a, "older"): T - 5 * window,
        seen_key(c, "x"): T - 10 * DAY - window - US,
    }
    kept = {
        seen_key(a, "edge"): T - window,  # exactly one window behind: still remembered
        seen_key(a, "new"): T,
        seen_key(a, "ahead"): T + DAY,  # first seen after the clock (no clock yet: now)
        seen_key(b, "headless"): T - 100 * DAY,  # no head: no clock, nothing expires
        seen_key(c, "y"): T - 10 * DAY - window,
    }
    fp = stored(confirmation())  # whatever the send_id, as the base confirmation holds
    for key, first in (expired | kept).items():
        db[key] = Seen(first, fp).to_bytes()
    db[b"__faust\x00offset"] = b"123"
    return stores, set(expired)


def test_the_sweep_tombstones_exactly_the_expired_send_ids() -> None:
    stores, expired = seeded()
    before = dict(stores.dbs[0].data)
    w = Worker(stores, window=DAY)
    w.store.sweep([0], budget=1000)
    writes = w.commit()
    assert sorted(writes) == sorted((0, key, None) for key in expired)
    assert w.store.expired == len(expired)
    assert stores.dbs[0].data == {k: v for k, v in before.items() if k not in expired}


def test_the_sweep_changes_no_outcome() -> None:
    """An expired send_id is absent for the decision already; tombstoning it only frees space."""
    outcomes = []
    for sweep in (False, True):
        stores, _ = seeded()
        w = Worker(stores, window=DAY)
        if sweep:
            w.store.sweep([0], budget=1000)
            w.commit()
        outcomes.append([w.handle(confirmation(send_id=s)).outcome
                         for s in ("old", "older", "edge", "new", "ahead")])
    assert outcomes[0] == outcomes[1] == ["written", "written", "duplicate", "duplicate",
                                          "duplicate"]


def test_the_sweep_leaves_this_batchs_writes_alone() -> None:
    stores, _ = seeded()
    w = Worker(stores, window=DAY)
    again = w.handle(confirmation(send_id="old"))  # expired: remembered anew, pending
    assert again.outcome == "written"
    w.store.sweep([0], budget=1000)
    writes = dict(((p, k), v) for p, k, v in w.commit())
    assert writes[(0, seen_key(KEY, "old"))] is not None
    w.restart()
    assert w.handle(confirmation(send_id="old")).outcome == "duplicate"


def test_the_sweep_resumes_from_its_cursor_and_wraps_round() -> None:
    stores, expired = seeded()
    db = stores.dbs[0]
    w = Worker(stores, window=DAY)
    ordered = sorted(k for k in db.data if k >= b'["s",')  # what the sweep walks over
    found: list[bytes] = []
    for i in range(len(ordered)):  # budget 1: one stored key per sweep, in key order
        w.store.sweep([0], budget=1)
        new = [k for (p, k), v in w.store.pending.items() if v is None and k not in found]
        assert new == ([ordered[i]] if ordered[i] in expired else []), i
        found += new
    assert set(found) == expired
    w.commit()
    # the session clock moves on: what was kept is now expired, and the next pass finds it
    db.data[head_key(KEY)] = SessionHead(0, 4, T + 30 * DAY, None).to_bytes()
    w.store._heads.clear()
    for _ in range(len(ordered) + 2):  # the end, one empty sweep, and round again
        w.store.sweep([0], budget=1)
    assert {k for (_, k), v in w.store.pending.items() if v is None} == {
        seen_key(KEY, s) for s in ("edge", "new", "ahead")}


def test_a_sweep_reads_a_bounded_slice() -> None:
    stores, _ = seeded()
    for i in range(1000):
        stores.dbs[0].data[seen_key(KEY, f"n{i:04}")] = Seen(T, "f" * 32).to_bytes()
    w = Worker(stores, window=DAY)
    w.store.sweep([0], budget=10)
    assert stores.dbs[0].reads <= 11  # the budget, and the one item that stops it


# --- what cannot be decoded stops nothing -------------------------------------------------

BAD_V1 = b'{"v":1,"epoch":"x","next_seq":1,"clock":null,"last_reset_at":null,"seen":[]}'


def test_an_unreadable_format_1_record_dead_letters_its_sessions_records_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stores = FakeStores()
    good_v1 = V1.replace(b'"epoch":2', b'"epoch":0')
    stores.dbs[0].data.update({V1_KEY: BAD_V1, OTHER.encode(): good_v1})
    stores.dbs[0].data[seen_key("agent:ops:main", "x")] = Seen(T - 30 * DAY, "f").to_bytes()
    stores.dbs[0].data[head_key("agent:ops:main")] = SessionHead(0, 2, T, None).to_bytes()
    w = Worker(stores)
    steps = [w.handle(confirmation()), w.handle(reset()), w.handle(confirmation(send_id="z"))]
    assert kinds(steps) == ["dead_letter"] * 3
    for step in steps:
        assert step.decided is not None and step.decided.error is not None
        assert step.decided.error.startswith("stored state of the session is unreadable: epoch")
        assert step.decided.session_key == KEY and (step.head, step.seen) == (None, None)
        (dlq,) = step.sends
        assert dlq.topic == DLQ and dict(dlq.headers)["error"] == step.decided.error.encode()
    assert [s.decided.send_id for s in steps] == [  # type: ignore[union-attr]
        "outbound-delivery:d1:0", None, "z"]
    # other sessions go on, and so does the sweep (it migrates and expires past the bad one)
    assert w.handle(confirmation(session_key=OTHER, send_id="new")).outcome == "written"
    with caplog.at_level(logging.WARNING, logger="transcript_owner.state"):
        w.store.sweep([0], budget=1000)
    writes = w.commit()
    assert "cannot be migrated" in caplog.text
    assert (0, seen_key("agent:ops:main", "x"), None) in writes
    assert (0, OTHER.encode(), None) in writes
    assert stores.dbs[0].data[V1_KEY] == BAD_V1  # left for an operator
    # an operator repairs it: the session's next record is decided
    stores.dbs[0].data[V1_KEY] = V1
    assert w.handle(confirmation()).outcome == "duplicate"
    assert w.handle(confirmation(send_id="after")).outcome == "written"


def test_an_unreadable_head_dead_letters_its_sessions_records() -> None:
    stores = FakeStores()
    stores.dbs[0].data[head_key(KEY)] = b'{"v":2,"epoch":0,"next_seq":0}'
    w = Worker(stores)
    step = w.handle(confirmation())
    assert step.outcome == "dead_letter" and step.decided is not None
    assert step.decided.error == (
        "stored state of the session is unreadable: next_seq: not an integer >= 1")
    assert w.handle(confirmation(session_key=OTHER)).outcome == "written"


def test_an_unreadable_seen_record_dead_letters_that_send_id_only() -> None:
    stores = FakeStores()
    stores.dbs[0].data[head_key(KEY)] = SessionHead(0, 2, T, None).to_bytes()
    stores.dbs[0].data[seen_key(KEY, "bad")] = b"[1,"
    w = Worker(stores, window=DAY)
    steps = [w.handle(confirmation(send_id="bad")), w.handle(confirmation(send_id="good")),
             w.handle(reset())]
    assert kinds(steps) == ["dead_letter", "written", "reset"]
    assert steps[0].decided is not None and steps[0].decided.error is not None
    assert steps[0].decided.error.startswith("stored state of the session is unreadable")
    w.store.sweep([0], budget=100)  # the sweep skips it, and tombstones nothing of it
    assert (0, seen_key(KEY, "bad")) not in w.store.pending


# --- a failing store is infrastructure: StoreFailure --------------------------------------


class BrokenDB:
    def get(self, key: bytes) -> bytes | None:
        raise OSError("IO error: No space left on device")


class BrokenIterationDB(FakeDB):
    def items(self, from_key: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        yield seen_key(KEY, "a"), b'[0,"f"]'
        raise OSError("IO error: Corruption")


def test_a_store_whose_get_raises_stops_the_worker() -> None:
    store = SessionStore(lambda p: BrokenDB(), timedelta(days=7))
    owner = Owner(None, timedelta(days=7), lambda: WRITTEN_AT)
    with pytest.raises(StoreFailure, match="partition 0 store: OSError: IO error: No space"):
        owner.handle(Source("in", 0, 1, None, dumps(confirmation())), store)
    with pytest.raises(StoreFailure):
        owner.handle(Source("in", 0, 2, None, dumps(reset())), store)
    # a record that needs no state is still decided
    step = owner.handle(Source("in", 0, 3, None, b"{not json"), store)
    assert step.outcome == "dead_letter"


def test_a_store_whose_iteration_raises_stops_the_sweep() -> None:
    db = BrokenIterationDB()
    store = SessionStore(lambda p: db, timedelta(days=7))
    with pytest.raises(StoreFailure, match="partition 0 store: OSError: IO error: Corruption"):
        store.sweep([0], budget=100)


def test_the_fake_store_walks_keys_as_rocksdb_does(tmp_path: Any) -> None:
    """FakeDB's order and from_key are those of a raw-mode Rdict (faust's partition store)."""
    rocksdict = pytest.importorskip("rocksdict")
    stores, _ = seeded()
    db = rocksdict.Rdict(str(tmp_path / "db"), options=rocksdict.Options(raw_mode=True))
    try:
        for key, value in stores.dbs[0].data.items():
            db[key] = value
        for start in (b"", b'["s",', seen_key(KEY, "new") + b"\0", b"\\", b"\xff"):
            assert list(db.items(from_key=start)) == list(stores.dbs[0].items(from_key=start))
        assert db.get(b"missing") is None
        assert db.get(head_key(KEY)) == stores.dbs[0].get(head_key(KEY))
    finally:
        db.close()


# --- format 1 written by the code before issue 12: a clock a connector pushed -------------


def _v1(clock: datetime | None, last_reset_at: datetime | None,
        seen: list[tuple[str, datetime]]) -> bytes:
    def us(at: datetime | None) -> int | None:
        return None if at is None else micros(at)

    doc = {"v": 1, "epoch": 0, "next_seq": len(seen) + 1, "clock": us(clock),
           "last_reset_at": us(last_reset_at),
           "seen": [[s, us(at), "f" * 32] for s, at in seen]}
    return json.dumps(doc, separators=(",", ":")).encode()


Y2099 = datetime(2099, 1, 1, tzinfo=UTC)


def test_a_migrated_clock_that_a_connector_pushed_does_not_stop_the_window() -> None:
    """746aef0 moved the session clock to the largest confirmed_at, 2099 included. Migrated
    as is, the session's window never runs again: every send_id is remembered for 73 years
    (a send of a week ago is still a duplicate) and the sweep never frees one."""
    stores = FakeStores()
    stores.dbs[0].data[V1_KEY] = _v1(Y2099, None, [("s1", T), ("s2", Y2099)])
    w = Worker(stores, window=DAY)

    def at(days: float) -> tuple[dict[str, Any], datetime]:
        t = T + timedelta(days=days)
        return confirmation(send_id="a", confirmed_at=t.isoformat()), t

    record, now = at(1)
    assert w.handle(record, now=now).outcome == "written"
    record, now = at(3)  # two windows later, on a clock no connector can push
    assert w.handle(record, now=now).outcome == "written"
    w.commit()  # the migration's writes; the sweep leaves a batch's own writes alone
    w.store.sweep([0], budget=100)
    assert (0, seen_key(KEY, "s1"), None) in w.commit()


def test_a_migrated_reset_dated_ahead_does_not_swallow_later_resets() -> None:
    stores = FakeStores()
    stores.dbs[0].data[V1_KEY] = _v1(T, datetime(2999, 12, 31, tzinfo=UTC), [])
    w = Worker(stores)
    now = T + DAY
    assert w.handle(reset(reset_at=now.isoformat()), now=now).outcome == "reset"


# --- migration is invisible: format 1 behind the store == its decoded form in memory -----


@settings(max_examples=40)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([k for _, _, k in CHATS]),
            st.integers(0, 3),  # epoch
            st.lists(st.sampled_from([f"s{i}" for i in range(8)]), unique=True, max_size=5),
            st.integers(0, 4 * 24 * 60),  # the session clock, in minutes after T
        ),
        unique_by=lambda s: s[0],
        max_size=4,
    ),
    INPUTS,
    st.data(),
)
def test_a_migrated_store_decides_as_its_decoded_state(
    sessions: list[tuple[str, int, list[str], int]], lines: list[bytes], data: st.DataObject
) -> None:
    window = DAY
    stores = FakeStores(PARTITIONS)
    memory = MemoryState()
    for key, epoch, send_ids, minutes in sessions:
        clock = T + timedelta(minutes=minutes)
        value = json.dumps({
            "v": 1, "epoch": epoch, "next_seq": len(send_ids) + 1, "clock": micros(clock),
            "last_reset_at": None,
            "seen": [[s, micros(clock - timedelta(hours=i * 5)), "x"]
                     for i, s in reversed(list(enumerate(send_ids)))],
        }, separators=(",", ":")).encode()
        stores.dbs[partition_for(key, PARTITIONS)].data[key.encode()] = value
        head, seens = decode_v1(value)
        memory.heads[key] = head
        memory.seens.update({(key, s): seen for s, seen in seens})
    store = store_over(stores, window, cache_size=data.draw(st.sampled_from([1, 100])))
    owner = Owner(PARTITIONS, window, lambda: WRITTEN_AT)
    for offset, line in enumerate(lines):
        src = source(offset, line)
        store.partition = src.partition
        got = owner.handle(src, store)
        want = owner.handle(src, memory)
        assert got == want
        if got.session_key is not None:
            store.remember(got.session_key, got.head, got.seen)
            memory.remember(got.session_key, want.head, want.seen)
        action = data.draw(st.integers(0, 5))
        if action == 0:
            stores.apply(store.take_writes())
        elif action == 1:
            store.sweep(list(range(PARTITIONS)), data.draw(st.integers(1, 4)))
        elif action == 2:
            stores.apply(store.take_writes())
            store = store_over(stores, window)
    stores.apply(store.take_writes())
    for _ in range(2 * PARTITIONS):  # a whole pass of each partition (one a call, in turn)
        store.sweep(list(range(PARTITIONS)), 10_000)
        stores.apply(store.take_writes())
    for db in stores.dbs:  # every format-1 record is gone
        assert all(k.startswith((b'["h",', b'["s",')) for k in db.data)


def test_tickets_at_one_control_offset_accumulate_across_batches_and_are_spent_one_by_one(
) -> None:
    """Two erases of one session forwarded at one control offset (from two control partitions,
    across a repartition): the store holds both, in the batch and once written; spending one
    leaves the other (workers/core/control.py)."""
    stores = FakeStores()
    store = store_over(stores)
    store.partition = 0
    store.hold(KEY, 0, "aa" * 32, True)
    store.hold(KEY, 0, "bb" * 32, True)  # same batch: read from its pending writes
    assert store.ticket(KEY, 0) == f"{'aa' * 32},{'bb' * 32}"
    for p, k, v in store.take_writes():
        stores.db_for(p).data[k] = v
    again = store_over(stores)
    again.partition = 0
    again.hold(KEY, 0, "aa" * 32, False)
    assert again.ticket(KEY, 0) == "bb" * 32
    again.hold(KEY, 0, "bb" * 32, False)
    assert again.ticket(KEY, 0) is None
    assert again.take_writes() == [(0, ticket_key(KEY, 0), None)]
