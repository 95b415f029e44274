"""The exactly-once building blocks against the broker: one transactional producer per worker,
fenced by the consumer group's generation (KIP-447). A member of an older generation cannot
commit; a restart with the same transactional id ends the last incarnation's open transaction;
a partition's next owner waits for the transactions open on its changelog (settle) and reads
only stable committed offsets; a store is topped up from the changelog read_committed (an
aborted batch's state is never applied)."""

from __future__ import annotations

import asyncio
import time

import pytest
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import KafkaError

from workers.core.outputs import CONFIRMATIONS, ENTRIES, changelog_topic
from workers.kafka_io import consumer, read
from workers.settings import kafka_settings
from workers.stream import clients, local_state
from workers.stream.adapter import GroupMember
from workers.stream.batch_send import send_all
from workers.stream.clients import offsets_reader, producer_factory
from workers.stream.transactions import BatchTransactions, Overtaken

pytestmark = pytest.mark.kafka


def ends(ks, topic: str, partition: int) -> tuple[int, int]:
    """(last stable offset, high watermark) of one partition."""
    tp = TopicPartition(topic, partition)
    stable, raw = consumer(ks), consumer(ks, isolation_level="read_uncommitted")
    try:
        return stable.end_offsets([tp])[tp], raw.end_offsets([tp])[tp]
    finally:
        stable.close()
        raw.close()


def committed_values(ks, topic: str, partition: int, *, settle: bool = True) -> list[bytes]:
    """The partition's values read_committed, once no transaction is open on it (`settle`: a
    commit's markers are written after commit_transaction returns)."""
    if settle:
        local_state.settle(ks, [(topic, partition)], timeout_s=30)
    return [r.value for r in read(ks, topic, partitions=[partition], timeout=60)]  # read_committed


def group_offset(ks, group: str, topic: str, partition: int) -> int | None:
    admin = KafkaAdminClient(**ks.kafka_python_kwargs())
    try:
        found = admin.list_group_offsets(group).get(group, {})
        o = found.get((topic, partition))
        return o.offset if o else None
    finally:
        admin.close()


async def until(done, what: str, *members, timeout_s: float = 60.0) -> None:
    """Fetch with every consumer in `members` (their group work goes on meanwhile) until
    `done()`, at most `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"not within {timeout_s:.0f}s: {what}"
        await asyncio.gather(*(m.getmany(timeout_ms=100) for m in members))


# "auto" speaks transactions v2 on the local broker (Kafka 4.x, transaction.version 2); "1" is a
# cluster without it, or an operator's TRANSCRIPT_TRANSACTION_VERSION=1: both fence alike
VERSIONS = pytest.mark.parametrize("version,speaks", [("auto", 2), ("1", 1)],
                                   ids=["transactions-v2", "transactions-v1"])


@VERSIONS
def test_a_member_of_an_older_generation_cannot_commit(env, topics, version, speaks):
    from aiokafka import AIOKafkaConsumer

    ks = kafka_settings(env)
    group, source, entries = ks.topic_prefix + "fence", ks.topic(CONFIRMATIONS), ks.topic(ENTRIES)

    def record(value: bytes):
        return (entries, 0, b"k", value, ())

    async def scenario() -> None:
        def member() -> AIOKafkaConsumer:
            return AIOKafkaConsumer(source, **ks.kafka_python_kwargs(), group_id=group,
                                    enable_auto_commit=False, heartbeat_interval_ms=100,
                                    auto_offset_reset="earliest")

        a, b = member(), member()
        new = producer_factory(ks, group)
        txns = BatchTransactions(new, f"{group}-w1", version)
        try:
            await a.start()
            await until(lambda: a.assignment(), "A is assigned", a)
            old = GroupMember(group, a._coordinator.generation, a._coordinator.member_id, None)
            await txns.start()
            assert txns.version == speaks
            await txns.commit([record(b"first")], {(source, 3): 5}, old)
            # off the loop: the members keep heartbeating meanwhile
            assert await asyncio.to_thread(committed_values, ks, entries, 0) == [b"first"]
            assert await asyncio.to_thread(group_offset, ks, group, source, 3) == 5

            # B joins: the group moves to a new generation, and A's partitions are split
            await b.start()
            await until(lambda: (a._coordinator.generation > old.generation_id
                                 and a._coordinator.generation == b._coordinator.generation
                                 and a.assignment() and b.assignment()),
                        "a new generation assigns A and B", a, b)
            with pytest.raises(Overtaken, match="ILLEGAL_GENERATION|UNKNOWN_MEMBER_ID"):
                await txns.commit([record(b"zombie")], {(source, 3): 9}, old)
            # the refused transaction is aborted on the broker, not only in the client: nothing
            # of it stays open (a next commit on this producer would otherwise commit it)
            # (its markers follow the abort's answer: allowed 10 s, a sixth of its timeout)
            await asyncio.to_thread(local_state.settle, ks, [(entries, 0)], 10)
            assert await asyncio.to_thread(committed_values, ks, entries, 0) == [b"first"]
            assert await asyncio.to_thread(group_offset, ks, group, source, 3) == 5

            # as A of the current generation, the same producer commits
            now = GroupMember(group, a._coordinator.generation, a._coordinator.member_id, None)
            await txns.commit([record(b"current")], {(source, 3): 7}, now)
        finally:
            await txns.close()
            await b.stop()
            await a.stop()

    asyncio.run(scenario())
    assert committed_values(ks, entries, 0) == [b"first", b"current"]
    assert group_offset(ks, group, source, 3) == 7


@VERSIONS
def test_a_restart_with_the_same_transactional_id_ends_the_open_transaction(env, topics, version,
                                                                            speaks):
    ks = kafka_settings(env)
    group, entries = ks.topic_prefix + "restart", ks.topic(ENTRIES)
    record = (entries, 1, b"k", b"", ())

    async def scenario() -> None:
        new = producer_factory(ks, group, transaction_timeout_s=60)
        x, y = (BatchTransactions(new, f"{group}-w1", version) for _ in range(2))
        await x.start()
        assert x.version == speaks
        await x.commit([(*record[:3], b"committed", ())], {}, group)
        assert committed_values(ks, entries, 1) == [b"committed"]
        # the last incarnation stalls in the middle of a transaction ...
        await x.producer.begin_transaction()
        await send_all(x.producer, [(*record[:3], b"open", ())])
        stable, high = ends(ks, entries, 1)
        assert stable < high  # the open transaction holds the last stable offset back
        # ... the worker restarts with the same transactional id: that transaction is over
        await y.start()
        stable, high = ends(ks, entries, 1)
        assert stable == high, "the restart left the last incarnation's transaction open"
        assert committed_values(ks, entries, 1, settle=False) == [b"committed"]
        with pytest.raises(Exception):  # noqa: B017  (fenced: aiokafka's error type varies)
            await x.producer.commit_transaction()
        await x.close()
        await y.commit([(*record[:3], b"restarted", ())], {}, group)
        await y.close()

    asyncio.run(scenario())
    assert committed_values(ks, entries, 1) == [b"committed", b"restarted"]


def test_settle_waits_for_a_transaction_open_on_the_changelog(env, topics):
    ks = kafka_settings(env)
    changelog = changelog_topic(ks.topic_prefix, "transcript-owner", "sessions")
    group = ks.topic_prefix + "settle"

    async def scenario() -> None:
        txns = BatchTransactions(producer_factory(ks, group), f"{group}-w1")
        await txns.start()
        await txns.commit([(changelog, 2, b"a", b"1", ())], {}, group)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, local_state.settle, ks, [(changelog, 2)], 30)
        producer = txns.producer
        await producer.begin_transaction()
        await send_all(producer, [(changelog, 2, b"a", b"2", ())])
        with pytest.raises(local_state.SettleTimeout, match=rf"{changelog}\[2\]"):
            await loop.run_in_executor(None, local_state.settle, ks, [(changelog, 2)], 2)
        await producer.commit_transaction()
        await loop.run_in_executor(None, local_state.settle, ks, [(changelog, 2)], 60)
        stable, high = ends(ks, changelog, 2)
        assert stable == high
        await txns.close()

    asyncio.run(scenario())
    assert committed_values(ks, changelog, 2, settle=False) == [b"1", b"2"]


def test_a_transaction_that_is_handed_its_records_releases_each_once_sent(env, topics):
    """The worker hands a batch's outputs over: each slot is emptied once its record
    is in a producer batch, and the offsets returned are still where each was written."""
    ks = kafka_settings(env)
    changelog = changelog_topic(ks.topic_prefix, "transcript-owner", "sessions")
    entries, group = ks.topic(ENTRIES), ks.topic_prefix + "release"
    records = [(entries, 5, b"k%d" % i, b"entry %d" % i, (("h", b"v"),)) for i in range(3)]
    records += [(changelog, 5, b"s", b"head", ()), (entries, 6, b"k9", b"entry 9", ())]
    sent = list(records)

    async def scenario() -> list[int]:
        txns = BatchTransactions(producer_factory(ks, group), f"{group}-w1")
        await txns.start()
        try:
            return await txns.commit(records, {}, group)
        finally:
            await txns.close()

    offsets = asyncio.run(scenario())
    assert records == [None] * len(sent)
    local_state.settle(ks, [(entries, 5), (entries, 6), (changelog, 5)], timeout_s=30)
    for topic, partition in ((entries, 5), (entries, 6), (changelog, 5)):
        found = {r.offset: (r.key, r.value)
                 for r in read(ks, topic, partitions=[partition], timeout=60)}
        mine = [(o, (r[2], r[3])) for o, r in zip(offsets, sent, strict=True)
                if (r[0], r[1]) == (topic, partition)]
        assert mine and all(found.get(o) == kv for o, kv in mine), (topic, partition)


def test_committed_offsets_wait_for_a_pending_transactional_offset_commit(env, topics,
                                                                         monkeypatch):
    from aiokafka import TopicPartition as AioTopicPartition

    ks = kafka_settings(env)
    group, source = ks.topic_prefix + "stable", ks.topic(CONFIRMATIONS)
    tp = TopicPartition(source, 4)
    monkeypatch.setattr(clients, "COMMITTED_OFFSETS_TIMEOUT_S", 3.0)

    async def scenario() -> None:
        txns = BatchTransactions(producer_factory(ks, group), f"{group}-w1")
        await txns.start()
        await txns.commit([], {(source, 4): 5}, group)  # a group without members: plain id
        committed = offsets_reader(ks, group)
        assert await committed([tp]) == {tp: 5}
        producer = txns.producer
        await producer.begin_transaction()
        await producer.send_offsets_to_transaction({AioTopicPartition(source, 4): 9}, group)
        # the offset commit is pending: the old offset is not an answer
        began = time.monotonic()
        with pytest.raises(KafkaError):
            await committed([tp])
        assert time.monotonic() - began >= 2.5
        await producer.commit_transaction()
        assert await committed([tp]) == {tp: 9}
        await txns.close()

    asyncio.run(scenario())
    assert group_offset(ks, group, source, 4) == 9


def test_the_offsets_reader_reads_first_and_last_stable_offsets(env, topics):
    """The reader the processor asks at each generation, on connections of its own: a
    partition's first offset, and its last stable one (an open transaction's records and the
    markers after them are not below it until the transaction ends)."""
    ks = kafka_settings(env)
    group, entries = ks.topic_prefix + "bounds", ks.topic(ENTRIES)
    tp = TopicPartition(entries, 2)

    async def scenario() -> None:
        reader = offsets_reader(ks, group)

        async def settled(want: int) -> dict:
            """The last stable offset once it reaches `want` (or what it is after 30 s): a
            commit returns before the coordinator has written its markers (seen in CI)."""
            deadline = time.monotonic() + 30
            while (got := await reader.ends([tp])) != {tp: want} \
                    and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            return got

        assert await reader.earliest([tp]) == {tp: 0}
        assert await reader.ends([tp]) == {tp: 0}
        txns = BatchTransactions(producer_factory(ks, group), f"{group}-w1")
        await txns.start()
        await txns.commit([(entries, 2, b"k", b"1", ()), (entries, 2, b"k", b"2", ())], {}, group)
        assert await settled(3) == {tp: 3}  # two records and the commit marker
        producer = txns.producer
        await producer.begin_transaction()
        await producer.send_and_wait(entries, b"3", key=b"k", partition=2)
        assert await reader.ends([tp]) == {tp: 3}  # open: not stable yet
        await producer.commit_transaction()
        assert await settled(5) == {tp: 5}
        assert await reader.earliest([tp]) == {tp: 0}
        await txns.close()

    asyncio.run(scenario())


def test_top_up_applies_committed_changelog_records_and_skips_aborted_ones(env, topics,
                                                                          tmp_path):
    import rocksdict

    ks = kafka_settings(env)
    changelog = changelog_topic(ks.topic_prefix, "transcript-owner", "sessions")
    group = ks.topic_prefix + "topup"

    async def write() -> None:
        txns = BatchTransactions(producer_factory(ks, group), f"{group}-w1")
        await txns.start()
        await txns.commit([(changelog, 1, b"a", b"1", ()), (changelog, 1, b"b", b"1", ())],
                          {}, group)
        producer = txns.producer
        await producer.begin_transaction()
        await send_all(producer, [(changelog, 1, b"a", b"aborted", ()),
                                  (changelog, 1, b"c", b"aborted", ())])
        await producer.abort_transaction()
        await txns.commit([(changelog, 1, b"b", None, ()), (changelog, 1, b"d", b"2", ())],
                          {}, group)
        await txns.close()

    asyncio.run(write())
    # as the worker does: the changelog is final once no transaction is open on it
    local_state.settle(ks, [(changelog, 1)], timeout_s=30)
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


def test_top_up_reads_a_changelog_compressed_in_every_codec(env, topics, tmp_path,
                                                           kafka_bootstrap):
    """The worker writes its changelog uncompressed, but a topic's compression.type (or a
    mirror) may store it in any codec: the restore's reader (aiokafka) takes each."""
    import rocksdict
    from kafka import KafkaProducer

    from tests.integration.test_codecs import CODECS, assert_compressed

    ks = kafka_settings(env)
    changelog = changelog_topic(ks.topic_prefix, "transcript-owner", "sessions")
    expected: dict[bytes, bytes] = {}
    for codec in CODECS:
        p = KafkaProducer(**ks.kafka_python_kwargs(), compression_type=codec, linger_ms=100,
                          batch_size=1 << 20)
        keys = [f"{codec}-{i}".encode() for i in range(20)]
        for i, key in enumerate(keys):
            expected[key] = b'{"v":%d,"epoch":0}' % i * 20
            p.send(changelog, key=key, value=expected[key], partition=2)
        p.flush()
        p.close()
        assert_compressed(kafka_bootstrap, changelog, 2, codec, keys)
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    db = rocksdict.Rdict(str(tmp_path / "sessions-2.db"), options=options)
    try:
        assert local_state.top_up(ks, changelog, {2: db}) == len(expected)
        assert {key: db.get(key) for key in expected} == expected
    finally:
        db.close()

