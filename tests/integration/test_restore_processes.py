"""A large restore split over processes (workers.stream.restore_processes) against the broker:
the stores it leaves are the stores one process leaves (every key, every tombstone, the offset
each reached; an aborted transaction applied by neither), the owner has them open and READY
after; a child's stale store comes back as the restore's own StaleState, naming the
partitions, and a child's failure, or children that cannot start, leave the worker to restore
the rest alone."""

from __future__ import annotations

import asyncio
import logging

import pytest

from workers.core.outputs import changelog_topic
from workers.settings import kafka_settings
from workers.stream import local_state, restore_processes
from workers.stream.batch_send import send_all
from workers.stream.clients import producer_factory
from workers.stream.state_owner import StateOwner, StoreState
from workers.stream.store_memory import StoreMemory
from workers.stream.transactions import BatchTransactions

pytestmark = pytest.mark.kafka

PARTITIONS = [0, 1, 2, 3, 5]
PER_PARTITION = 3_000


def write_changelog(ks, changelog: str) -> None:  # noqa: ANN001
    """Per partition: puts, overwrites, tombstones and a key of the store's own (never
    applied) in committed transactions, and an aborted transaction between them."""
    group = ks.topic_prefix + "split"

    def records(p: int, lo: int, hi: int) -> list:
        out = []
        for i in range(lo, hi):
            key = f"s\x00p{p}-k{i % 1_000}".encode()  # each key written three times
            out.append((changelog, p, key, None if i % 7 == 0 else f"v{i}".encode(), ()))
        return out

    async def write() -> None:
        txns = BatchTransactions(producer_factory(ks, group), f"{group}-w1")
        await txns.start()
        half = PER_PARTITION // 2
        await txns.commit([r for p in PARTITIONS for r in records(p, 0, half)]
                          + [(changelog, 0, local_state.OFFSET_KEY, b"999999", ())], {}, group)
        producer = txns.producer
        await producer.begin_transaction()
        await send_all(producer, [(changelog, p, b"s\x00aborted", b"x", ()) for p in PARTITIONS])
        await producer.abort_transaction()
        await txns.commit([r for p in PARTITIONS for r in records(p, half, PER_PARTITION)], {},
                          group)
        await txns.close()

    asyncio.run(write())
    local_state.settle(ks, [(changelog, p) for p in PARTITIONS], timeout_s=30)


def owners(tmp_path, changelog: str) -> tuple[StateOwner, StateOwner]:  # noqa: ANN001
    """The same partitions assigned to an owner that restores alone and one that splits."""
    alone = StateOwner(tmp_path / "alone", "sessions", changelog, StoreMemory(16), 8)
    split = StateOwner(tmp_path / "split", "sessions", changelog, StoreMemory(16), 8,
                       restore_processes=2)
    alone.assign(PARTITIONS)
    split.assign(PARTITIONS)
    return alone, split


def contents(owner: StateOwner, p: int) -> dict[bytes, bytes]:
    return dict(owner.db(p).items())


def test_a_restore_split_over_processes_leaves_the_stores_one_process_leaves(
        env, topics, tmp_path, monkeypatch, caplog):
    ks = kafka_settings(env)
    changelog = changelog_topic(ks.topic_prefix, "transcript-owner", "sessions")
    write_changelog(ks, changelog)
    monkeypatch.setattr(restore_processes, "SPLIT_RECORDS", 1_000)

    alone, split = owners(tmp_path, changelog)
    try:
        with caplog.at_level(logging.INFO, logger="transcript_owner.state"):
            applied = split.restore(ks)
        assert "restored partitions [0, 1, 2, 3, 5] in 2 processes" in caplog.text
        assert applied == alone.restore(ks) == len(PARTITIONS) * PER_PARTITION
        assert alone.restore_processes == 1 and "in 1 processes" not in caplog.text
        for p in PARTITIONS:
            assert split.states[p] == StoreState.READY
            got, want = contents(split, p), contents(alone, p)
            assert got == want  # the keys, the tombstones' absence and the offset reached
            offset = int(got.pop(local_state.OFFSET_KEY))  # the offset key's record skipped
            assert PER_PARTITION <= offset < 999_999
            # each key's last write, a tombstone's key absent, the aborted one never applied
            assert got == {f"s\x00p{p}-k{k}".encode(): f"v{k + 2_000}".encode()
                           for k in range(1_000) if (k + 2_000) % 7}
        # the stores are the owner's again: at the changelog's end, nothing left to apply
        split.assign(PARTITIONS)
        assert split.restore(ks) == 0
    finally:
        alone.close()
        split.close()


def test_a_childs_stale_store_and_a_childs_failure_come_back_naming_the_partitions(
        env, topics, tmp_path):
    import rocksdict

    ks = kafka_settings(env)
    changelog = changelog_topic(ks.topic_prefix, "transcript-owner", "sessions")
    write_changelog(ks, changelog)
    tabledir = tmp_path / "tables"
    tabledir.mkdir()
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    db = rocksdict.Rdict(str(tabledir / "sessions-2.db"), options=options)
    db.put(local_state.OFFSET_KEY, b"99999999")  # ahead of its changelog
    db.close()
    stores = restore_processes.Stores(tabledir, "sessions", changelog, StoreMemory(16), 8)
    due = {p: (0, PER_PARTITION) for p in PARTITIONS}
    with pytest.raises(local_state.StaleState) as stale:
        restore_processes.restore(ks, stores, due, 2)
    assert stale.value.partitions == [2]
    assert "partition 2: it has applied changelog offset 99999999" in str(stale.value)

    (tmp_path / "a-file").write_text("not a directory\n")
    broken = restore_processes.Stores(tmp_path / "a-file", "sessions", changelog,
                                      StoreMemory(16), 8)
    with pytest.raises(local_state.LocalStateError) as failed:
        restore_processes.restore(ks, broken, {0: (0, 10), 1: (0, 10)}, 2)
    assert "the restore in processes failed: partitions [0]:" in str(failed.value)
    assert "partitions [1]:" in str(failed.value)
    assert isinstance(failed.value, restore_processes.SplitFailed)  # the worker goes on alone


def test_when_the_restores_processes_cannot_start_the_worker_restores_alone(
        env, topics, tmp_path, monkeypatch, caplog):
    """No /dev/shm for the pool's semaphores, a process limit: the split is only ever faster,
    never a condition of the restore (a worker that exited for it would exit at every start)."""
    ks = kafka_settings(env)
    changelog = changelog_topic(ks.topic_prefix, "transcript-owner", "sessions")
    write_changelog(ks, changelog)
    monkeypatch.setattr(restore_processes, "SPLIT_RECORDS", 1_000)

    def no_pool(processes: int):  # noqa: ANN202
        raise OSError(38, "Function not implemented (no /dev/shm)")

    monkeypatch.setattr(restore_processes.child_processes, "pool", no_pool)
    alone, split = owners(tmp_path, changelog)
    try:
        with caplog.at_level(logging.WARNING, logger="transcript_owner.state"):
            assert split.restore(ks) == alone.restore(ks) == len(PARTITIONS) * PER_PARTITION
        assert ("the restore's processes cannot start: [Errno 38] Function not implemented "
                "(no /dev/shm); restoring partitions [0, 1, 2, 3, 5] in the worker") in caplog.text
        for p in PARTITIONS:
            assert split.states[p] == StoreState.READY
            assert contents(split, p) == contents(alone, p)
    finally:
        alone.close()
        split.close()
