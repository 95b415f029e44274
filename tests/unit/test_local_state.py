"""When local state no longer matches its changelog (workers.stream.local_state), and the state
owner's lifecycle (workers.stream.state_owner), without a broker: the pure verdict,
table-driven, `prepare` and the restore on real RocksDB stores."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import rocksdict
from kafka.errors import KafkaConnectionError

from workers.settings import kafka_settings
from workers.stream import local_state
from workers.stream.local_state import (
    OFFSET_KEY,
    Changelog,
    LocalStateError,
    Marker,
    StaleState,
    Store,
    batch_ops,
    deployment_dir,
    due_ranges,
    marker_path,
    partition_stores,
    prepare,
    read_marker,
    read_store,
    restore_range,
    verdict,
)
from workers.stream.state_owner import StateOwner, StoreState

TOPIC = "p.transcript-owner-sessions-changelog"
ID, OTHER_ID = "c5337d21-00bc-4a1d-8a5d-d8a6e6dad15c", "0b9f3a2e-5f7c-4d7e-9a51-6c2f1e4b8d90"
LOG = "transcript_owner.local_state"


def changelog(ends: dict[int, int], starts: dict[int, int] | None = None,
              topic_id: str | None = ID) -> Changelog:
    return Changelog(TOPIC, topic_id, starts or dict.fromkeys(ends, 0), ends)


KEEP = [
    ("never applied a record", Store(0, None), changelog({0: 0}), None),
    ("behind the end", Store(0, 41), changelog({0: 100}), Marker(TOPIC, ID)),
    ("at the last record", Store(0, 99), changelog({0: 100}), Marker(TOPIC, ID)),
    ("next record is the first one left", Store(0, 9), changelog({0: 100}, {0: 10}), None),
    ("no marker yet: offsets only", Store(0, 5), changelog({0: 6}), None),
    ("cluster gives no topic id", Store(0, 5), changelog({0: 6}, topic_id=None), Marker(TOPIC, ID)),
    ("marker without id", Store(0, 5), changelog({0: 6}), Marker(TOPIC, None)),
]

DISCARD = [
    ("recreated, empty", Store(3, 4), changelog({3: 0}), None,
     "it has applied changelog offset 4, but the changelog end offset is 0"),
    ("recreated, shorter", Store(3, 40), changelog({3: 40}), Marker(TOPIC, ID),
     "changelog end offset is 40 (the topic was recreated or truncated)"),
    ("recreated, grown past the old offset", Store(3, 4), changelog({3: 90}, topic_id=OTHER_ID),
     Marker(TOPIC, ID), f"it was written from topic id {ID}, and {TOPIC} has topic id {OTHER_ID}"),
    ("recreated, even a store that applied nothing", Store(3, None),
     changelog({3: 9}, topic_id=OTHER_ID), Marker(TOPIC, ID), "(the topic was recreated)"),
    ("records it missed are gone", Store(3, 4), changelog({3: 90}, {3: 50}), None,
     "but the changelog starts at offset 50"),
    ("another changelog", Store(3, 4), changelog({3: 90}), Marker("q.x-sessions-changelog", ID),
     "it was written from changelog q.x-sessions-changelog"),
    ("a partition the changelog lacks", Store(8, 4), changelog({0: 9}), None,
     f"{TOPIC} has no partition 8"),
    ("unreadable", Store(3, None, "Exception: Corruption"), changelog({3: 9}), None,
     "it cannot be read (Exception: Corruption)"),
]


@pytest.mark.parametrize("note, store, log, marker", KEEP, ids=[k[0] for k in KEEP])
def test_a_store_that_matches_its_changelog_is_kept(note, store, log, marker):
    assert verdict(store, log, marker) is None


@pytest.mark.parametrize("note, store, log, marker, why", DISCARD, ids=[d[0] for d in DISCARD])
def test_a_store_that_does_not_match_is_discarded(note, store, log, marker, why):
    assert why in (verdict(store, log, marker) or "")


def test_each_deployment_has_its_own_state_dir():
    a = deployment_dir("var/state", "", "transcript-owner")
    b = deployment_dir("var/state", "staging.", "transcript-owner")
    c = deployment_dir("var/state", "", "transcript-owner-2")
    assert a == Path("var/state/transcript-owner")
    assert len({a, b, c}) == 3 and all(p.parent == Path("var/state") for p in (a, b, c))
    with pytest.raises(LocalStateError):
        deployment_dir("var/state", "", "..")


# ---- prepare, on real stores ----------------------------------------------------------------


def make_store(tabledir: Path, partition: int, offset: int | None, rows: int = 3) -> Path:
    """A partition store as the worker writes it (rocksdict, raw mode, its offset key)."""
    path = tabledir / f"sessions-{partition}.db"
    db = rocksdict.Rdict(str(path), options=rocksdict.Options(raw_mode=True))
    for i in range(rows):
        db.put(f"agent:ops:main:{i}".encode(), b"state")
    if offset is not None:
        db.put(OFFSET_KEY, str(offset).encode())
    db.close()
    return path


def test_read_store_gives_the_persisted_offset_or_why_not(tmp_path):
    assert read_store(0, make_store(tmp_path, 0, 17)) == Store(0, 17)
    assert read_store(1, make_store(tmp_path, 1, None)) == Store(1, None)
    broken = tmp_path / "sessions-2.db"
    broken.mkdir()
    (broken / "CURRENT").write_text("MANIFEST-000099\n")
    got = read_store(2, broken)
    assert got.partition == 2 and got.offset is None and got.error


def test_prepare_discards_what_does_not_match_keeps_the_rest_and_records_the_topic(
    tmp_path, caplog
):
    tables = tmp_path / "v1" / "tables"
    kept = [make_store(tables, 0, None), make_store(tables, 1, 41)]
    stale = make_store(tables, 2, 4)
    (tables / "sessions-backups").mkdir()  # faust's, not a store
    with caplog.at_level(logging.WARNING, logger=LOG):
        gone = prepare(tables, "sessions", changelog({0: 0, 1: 42, 2: 0}))
    assert gone == [2]
    assert not stale.exists() and all(p.exists() for p in kept)
    assert read_store(1, kept[1]) == Store(1, 41)  # untouched
    (warning,) = [r.getMessage() for r in caplog.records if r.name == LOG]
    assert warning == (  # the line an operator sees
        "discarding local state of sessions partition 2: it has applied changelog offset 4, "
        "but the changelog end offset is 0 (the topic was recreated or truncated); it is "
        f"restored from {TOPIC} (removed {stale})")
    assert json.loads(marker_path(tables, "sessions").read_text()) == {
        "topic": TOPIC, "topic_id": ID}


def test_a_recreated_topic_is_found_by_its_id_at_the_next_start(tmp_path, caplog):
    tables = tmp_path / "tables"
    make_store(tables, 0, 5)
    make_store(tables, 1, None)
    assert prepare(tables, "sessions", changelog({0: 6, 1: 0})) == []  # records the id
    assert read_marker(marker_path(tables, "sessions")) == Marker(TOPIC, ID)
    with caplog.at_level(logging.WARNING, logger=LOG):
        gone = prepare(tables, "sessions", changelog({0: 500, 1: 500}, topic_id=OTHER_ID))
    assert gone == [0, 1] and partition_stores(tables, "sessions") == {}
    assert read_marker(marker_path(tables, "sessions")) == Marker(TOPIC, OTHER_ID)
    (warning,) = [r.getMessage() for r in caplog.records if r.name == LOG]  # one per reason
    assert warning.startswith("discarding local state of sessions partitions 0, 1: it was "
                              f"written from topic id {ID}, and {TOPIC} has topic id {OTHER_ID}")
    assert warning.endswith(f"they are restored from {TOPIC} (removed sessions-<partition>.db "
                            f"in {tables})")


def test_an_unreadable_marker_is_ignored_with_a_warning(tmp_path, caplog):
    tables = tmp_path / "tables"
    make_store(tables, 0, 5)
    marker_path(tables, "sessions").write_text("{not json")
    with caplog.at_level(logging.WARNING, logger=LOG):
        assert prepare(tables, "sessions", changelog({0: 6})) == []
    assert "unreadable" in caplog.text
    assert read_marker(marker_path(tables, "sessions")) == Marker(TOPIC, ID)


def test_a_store_another_process_holds_open_is_never_removed(tmp_path, caplog):
    tables = tmp_path / "tables"
    path = make_store(tables, 0, 99)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import rocksdict, sys\n"
        f"db = rocksdict.Rdict({str(path)!r}, options=rocksdict.Options(raw_mode=True))\n"
        "print('open', flush=True)\n"
        "sys.stdin.read()\n")],  # holds the store open until its stdin is closed
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"open\n"
        with caplog.at_level(logging.WARNING, logger=LOG):
            assert prepare(tables, "sessions", changelog({0: 0})) == []
        assert path.exists()
        assert "is open in another process: not checked" in caplog.text
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)  # the process is gone, and with it its lock
    assert prepare(tables, "sessions", changelog({0: 0})) == [0]  # once it is closed


# ---- the restore: what to read, and how records become writes -------------------------------

RANGES = [
    ("fresh store, whole log", None, 0, 100, (0, 100)),
    ("fresh store, log start moved", None, 40, 100, (40, 100)),
    ("behind", 41, 0, 100, (42, 100)),
    ("at the last record", 99, 0, 100, None),
    ("empty changelog", None, 0, 0, None),
    ("empty after deletes", None, 7, 7, None),
    ("next record is the first one left", 9, 10, 100, (10, 100)),
]


@pytest.mark.parametrize("note, persisted, start, end, want", RANGES, ids=[r[0] for r in RANGES])
def test_restore_reads_from_the_persisted_offset_to_the_end(note, persisted, start, end, want):
    assert restore_range(persisted, start, end) == want


def test_due_ranges_say_what_each_store_lacks_and_why_a_store_is_stale():
    changelog = Changelog(TOPIC, None, {0: 0, 1: 0, 2: 10, 3: 0, 4: 0},
                          {0: 100, 1: 50, 2: 60, 3: 20, 4: 30})
    applied = {0: b"41", 1: b"49", 2: None, 3: b"20", 4: b"4x\x00" * 30}
    due, stale = due_ranges(changelog, applied)
    assert due == {0: (42, 100), 2: (10, 60)}  # 1 is at its end: nothing due
    assert stale[3] == ("it has applied changelog offset 20, but the changelog end offset is 20 "
                        "(the topic was recreated or truncated)")
    assert stale[4].startswith("its applied offset b'4x\\x004x") and len(stale[4]) < 200  # 40 bytes
    assert set(stale) == {3, 4}


def _ops(records: list[tuple[int, bytes | None, bytes | None]], end: int
         ) -> tuple[list[tuple[bytes, bytes | None]], int, int | None]:
    ops: list[tuple[bytes, bytes | None]] = []
    written, last = batch_ops([SimpleNamespace(offset=o, key=k, value=v) for o, k, v in records],
                              end, lambda k, v: ops.append((k, v)),
                              lambda k: ops.append((k, None)))
    return ops, written, last


def test_batch_ops_put_delete_in_log_order_up_to_the_end():
    records = [(5, b"a", b"1"), (6, b"b", b"2"), (7, b"a", None), (8, None, b"x"),
               (9, OFFSET_KEY, b"123"), (10, b"c", b"3"), (11, b"d", b"4")]
    ops, written, last = _ops(records, end=11)
    assert ops == [(b"a", b"1"), (b"b", b"2"), (b"a", None), (b"c", b"3")]
    assert written == 4
    assert last == 10  # the record at the end offset (11) is past what is restored
    assert _ops([], end=5) == ([], 0, None)
    assert _ops([(5, b"a", b"1")], end=5) == ([], 0, None)


class FailingReader:
    """The restore's reader (aiokafka's interface). Partition 0's changelog holds offsets 0..99
    and 1's 0..49; the read delivers one fetch of partition 0 (offsets 42-44), then Kafka is
    lost."""

    def __init__(self):
        self.polls = 0
        self.stopped = False

    async def start(self):
        pass

    async def beginning_offsets(self, tps):
        return dict.fromkeys(tps, 0)

    async def end_offsets(self, tps):
        return {tp: 100 if tp.partition == 0 else 50 for tp in tps}

    def assign(self, tps):
        self.tps = tps

    def seek(self, tp, offset):
        assert (tp.partition, offset) in ((0, 42), (1, 0))

    async def getmany(self, **_):
        self.polls += 1
        if self.polls > 1:
            raise KafkaConnectionError("broker gone")
        tp = next(tp for tp in self.tps if tp.partition == 0)
        return {tp: [SimpleNamespace(partition=0, offset=o, key=k, value=v) for o, k, v in
                     ((42, b"k1", b"v1"), (43, b"agent:ops:main:0", None), (44, b"k2", b"v2"))]}

    async def position(self, tp):
        return 45 if tp.partition == 0 else 0

    async def stop(self):
        self.stopped = True


def failing_kafka(monkeypatch) -> FailingReader:
    reader = FailingReader()
    monkeypatch.setattr(local_state, "changelog_reader", lambda ks, client_id, **_: reader)
    return reader


def owner(tables: Path) -> StateOwner:
    return StateOwner(tables, "sessions", TOPIC)


def test_a_failed_restore_keeps_only_what_it_applied(tmp_path, monkeypatch):
    tables = tmp_path / "tables"
    make_store(tables, 0, 41)
    reader = failing_kafka(monkeypatch)
    state = owner(tables)
    state.assign([0, 1])
    # the takeover exits 70: the next start goes on
    with pytest.raises(LocalStateError, match="KafkaConnectionError: .*broker gone"):
        state.restore(kafka_settings({}))
    assert reader.stopped
    assert state.states == {0: StoreState.RESTORING, 1: StoreState.RESTORING}
    state.close()
    # the fetch it wrote, with its last offset in the same batch
    assert read_store(0, tables / "sessions-0.db") == Store(0, 44)
    db = rocksdict.Rdict(str(tables / "sessions-0.db"), options=rocksdict.Options(raw_mode=True))
    try:
        assert db.get(b"k1") == b"v1" and db.get(b"k2") == b"v2"
        assert db.get(b"agent:ops:main:0") is None and db.get(b"agent:ops:main:1") == b"state"
    finally:
        db.close()
    assert read_store(1, tables / "sessions-1.db") == Store(1, None)  # created, nothing applied


def test_a_restore_that_gets_no_record_stops_with_the_partitions_it_lacks(tmp_path,
                                                                         monkeypatch):
    tables = tmp_path / "tables"
    make_store(tables, 0, 41)
    reader = failing_kafka(monkeypatch)

    async def nothing(**_):
        reader.polls += 1
        return {}

    reader.getmany = nothing
    monkeypatch.setattr(local_state, "RESTORE_IDLE_S", 0.05)
    state = owner(tables)
    state.assign([0, 1])
    with pytest.raises(LocalStateError, match=r"stalled: no record for 0s; "
                       rf"{TOPIC}\[0\], {TOPIC}\[1\] not read to its end"):
        state.restore(kafka_settings({}))
    assert reader.polls >= 1 and reader.stopped
    state.close()
    assert read_store(0, tables / "sessions-0.db") == Store(0, 41)  # nothing claimed


def test_a_store_ahead_of_its_changelog_is_stale_and_nothing_is_applied(tmp_path, monkeypatch):
    tables = tmp_path / "tables"
    make_store(tables, 0, 41)
    make_store(tables, 1, 70)  # the changelog ends at 50: recreated under the worker
    failing_kafka(monkeypatch)
    state = owner(tables)
    state.assign([0, 1])
    with pytest.raises(StaleState) as caught:
        state.restore(kafka_settings({}))
    assert caught.value.partitions == [1]
    assert "partition 1: it has applied changelog offset 70, but the changelog end offset " \
           "is 50" in str(caught.value)
    assert state.discard([1]) == [1] and not (tables / "sessions-1.db").exists()
    state.close()
    assert read_store(0, tables / "sessions-0.db") == Store(0, 41)  # untouched


def test_assign_closes_the_stores_that_left_and_restores_every_one_it_keeps(tmp_path,
                                                                           monkeypatch):
    tables = tmp_path / "tables"
    make_store(tables, 0, 99)
    make_store(tables, 1, 49)  # both at their changelog's end: nothing to read
    failing_kafka(monkeypatch)
    state = owner(tables)
    state.assign([0, 1])
    assert state.states == {0: StoreState.REGISTERED, 1: StoreState.REGISTERED}
    assert state.restore(kafka_settings({})) == 0
    assert state.states == {0: StoreState.READY, 1: StoreState.READY}
    state.assign([1])  # 0 left; 1 stays, and is read to the end again
    assert set(state.open_stores()) == {1} and state.states == {1: StoreState.REGISTERED}
    with pytest.raises(LookupError, match="partition 0 is not open"):
        state.db(0)
    # partition 0's store is closed: its lock is free for whoever opens it next
    rocksdict.Rdict(str(tables / "sessions-0.db"), options=rocksdict.Options(raw_mode=True)).close()
    state.close()
    assert state.open_stores() == {}


def test_the_stores_bookkeeping_keys_are_the_layout_faust_wrote():
    """Canary: stores written while a faust table held them keep their applied offset under
    faust's key (adapter.STORE_OFFSET_KEY): the state owner reads them as they are. A
    checkpoint never copies a store's bookkeeping, and audit skips it: by this prefix."""
    from faust.stores.rocksdb import Store as FaustStore

    from workers.core import checkpoint_format
    from workers.stream import adapter, local_state, session_store

    assert FaustStore.offset_key == local_state.OFFSET_KEY == adapter.STORE_OFFSET_KEY, (
        "faust's Store.offset_key changed: stores a faust table wrote keep their applied "
        "offset under another key than the state owner reads (they would be restored whole)")
    assert local_state.OFFSET_KEY.startswith(local_state.OWN_KEYS)
    assert session_store.OWN_KEYS is local_state.OWN_KEYS
    assert local_state.OWN_KEYS.startswith(checkpoint_format.BOOKKEEPING)
