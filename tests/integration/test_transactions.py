"""The exactly-once building blocks against the broker: a partition's next owner fences the last
one (its open transaction aborts, it can never commit again), and a store is topped up from the
changelog read_committed (an aborted batch's state is never applied)."""

from __future__ import annotations

import asyncio

import pytest
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient

from workers.kafka_io import consumer
from workers.settings import kafka_settings
from workers.stream import local_state
from workers.stream.outputs import CONFIRMATIONS, ENTRIES
from workers.stream.transactions import PartitionProducers, TransactionFailed
from workers.stream.worker import producer_factory

pytestmark = pytest.mark.kafka


def committed_values(ks, topic: str, partition: int) -> list[bytes]:
    c = consumer(ks)  # read_committed
    try:
        tp = TopicPartition(topic, partition)
        c.assign([tp])
        c.seek_to_beginning(tp)
        end = c.end_offsets([tp])[tp]
        out: list[bytes] = []
        while c.position(tp) < end:
            for records in c.poll(timeout_ms=1000).values():
                out.extend(r.value for r in records)
        return out
    finally:
        c.close()


def group_offset(ks, group: str, topic: str, partition: int) -> int | None:
    admin = KafkaAdminClient(**ks.kafka_python_kwargs())
    try:
        found = admin.list_group_offsets(group).get(group, {})
        o = found.get((topic, partition))
        return o.offset if o else None
    finally:
        admin.close()


def test_the_next_owner_fences_the_last_and_aborts_its_open_transaction(env, topics):
    ks = kafka_settings(env)
    group, source, entries = ks.topic_prefix + "fence", ks.topic(CONFIRMATIONS), ks.topic(ENTRIES)
    record = (entries, 0, b"k", b"", ())

    async def scenario() -> None:
        new = producer_factory(ks, group, transaction_timeout_s=60)
        old, nxt = (PartitionProducers(new, group) for _ in range(2))
        await old.assign([3])
        await old.commit(3, [(*record[:3], b"committed", ())], next_offsets={source: 5})
        # the old owner stalls in the middle of a transaction ...
        producer = old._producers[3]
        await producer.begin_transaction()
        from workers.stream.batch_send import send_all
        await send_all(producer, [(*record[:3], b"open", ())])
        # ... the next owner takes the partition over: its open transaction aborts at once
        await nxt.assign([3])
        assert committed_values(ks, entries, 0) == [b"committed"]
        with pytest.raises(Exception):  # noqa: B017  (fenced: aiokafka's error type varies)
            await producer.commit_transaction()
        await old.close()
        # the old owner, fenced, cannot commit a new transaction either
        zombie = PartitionProducers(new, group)
        zombie._producers[3] = producer
        with pytest.raises(TransactionFailed):
            await zombie.commit(3, [(*record[:3], b"zombie", ())], next_offsets={source: 9})
        await nxt.commit(3, [(*record[:3], b"next", ())], next_offsets={source: 7})
        await nxt.close()

    asyncio.run(scenario())
    assert committed_values(ks, entries, 0) == [b"committed", b"next"]
    assert group_offset(ks, group, source, 3) == 7


def test_top_up_applies_committed_changelog_records_and_skips_aborted_ones(env, topics,
                                                                          tmp_path):
    import rocksdict

    ks = kafka_settings(env)
    changelog = local_state.changelog_topic(ks.topic_prefix, "transcript-owner", "sessions")
    group = ks.topic_prefix + "topup"

    async def write() -> None:
        txns = PartitionProducers(producer_factory(ks, group), group)
        await txns.assign([1])
        await txns.commit(1, [(changelog, 1, b"a", b"1", ()), (changelog, 1, b"b", b"1", ())],
                          None)
        producer = txns._producers[1]
        await producer.begin_transaction()
        from workers.stream.batch_send import send_all
        await send_all(producer, [(changelog, 1, b"a", b"aborted", ()),
                                  (changelog, 1, b"c", b"aborted", ())])
        await producer.abort_transaction()
        await txns.commit(1, [(changelog, 1, b"b", None, ()), (changelog, 1, b"d", b"2", ())],
                          None)
        await txns.close()

    asyncio.run(write())
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    db = rocksdict.Rdict(str(tmp_path / "sessions-1.db"), options=options)
    try:
        db[b"stale"] = b"kept"  # written before: a top-up only adds what the store lacks
        assert local_state.top_up(ks, changelog, {1: db}) == 4
        assert db.get(b"a") == b"1" and db.get(b"b") is None and db.get(b"d") == b"2"
        assert db.get(b"c") is None and db.get(b"stale") == b"kept"
        # everything up to the end is applied, commit markers included: faust starts there
        end = int(db.get(local_state.OFFSET_KEY)) + 1
        c = consumer(ks)
        try:
            tp = TopicPartition(changelog, 1)
            assert c.end_offsets([tp])[tp] == end
        finally:
            c.close()
        assert local_state.top_up(ks, changelog, {1: db}) == 0  # nothing left
    finally:
        db.close()
