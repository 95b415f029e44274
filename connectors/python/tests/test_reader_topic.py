"""The session reader over the topic, on the local broker (`make kafka-up`; KAFKA_BOOTSTRAP to aim
elsewhere on this machine): an input and an entries topic made by hand per test, written as the
worker writes them (entries, then `position/<p>` records), and reads bound to LATEST, to a
delivery and to a delivery published under another partition count. A read that must wait is
awaited through the reader's own debug line ("waiting: partition …"), never by sleeping."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import uuid
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewPartitions, NewTopic
from transcript_connector import ReadError, StaleReadError, partition_for
from transcript_connector.entries_topic import entry_key, position_key, position_value
from transcript_connector.publisher import Delivery
from transcript_connector.reader import (
    LATEST,
    At,
    BlockingSessionReader,
    ReaderOptions,
    SessionRead,
)
from transcript_connector.reader_async import SessionReader

WAIT_S = 30  # a bound on waits for the broker, never a measurement


@pytest.fixture
def bootstrap() -> str:
    """The local broker (a missing one is a failure, not a skip: make test starts it)."""
    value = os.environ.get("KAFKA_BOOTSTRAP") or "127.0.0.1:9092"
    host = value.split(",")[0].rsplit(":", 1)[0]
    assert host in ("127.0.0.1", "localhost", "::1"), "tests only talk to a broker on loopback"
    return value


@pytest.fixture
def admin(bootstrap: str) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20_000)
    yield client
    client.close()


@pytest.fixture
def prefix(admin: KafkaAdminClient) -> Iterator[str]:
    """A topic prefix no other test uses; its topics are deleted after the test."""
    value = f"t{uuid.uuid4().hex[:10]}."
    yield value
    mine = [t for t in admin.list_topics() if t.startswith(value)]
    if mine:
        admin.delete_topics(mine)


def entry(session_key: str, seq: int, text: str = "hi") -> bytes:
    """A transcript-entry/1 value of `session_key` and `seq`, as the worker writes one."""
    return (f'{{"schema":"transcript-entry/1","session_key":"{session_key}","epoch":0,'
            f'"seq":{seq},"entry_id":"e{seq}","send_id":"s{seq}","role":"assistant",'
            f'"agent_id":"a","text":"{text}","media":[],"source":"automation_result",'
            '"posted_by":{"kind":"job","id":"j"},"delivered_at":"2026-12-04T10:00:00Z",'
            '"written_at":"2026-12-04T10:00:00Z","platform_message_ids":["1"]}').encode()


class Fabric:
    """An input topic and an entries topic, written by hand: confirmations (their content does
    not matter to a reader, only their offsets), entries and positions."""

    def __init__(self, bootstrap: str, admin: KafkaAdminClient, prefix: str,
                 partitions: int = 2, entries_partitions: int | None = None) -> None:
        self.prefix, self.partitions, self.admin = prefix, partitions, admin
        self.input = f"{prefix}delivery.confirmations"
        self.entries = f"{prefix}transcript.entries"
        admin.create_topics([NewTopic(self.input, partitions, 1),
                             NewTopic(self.entries, entries_partitions or partitions, 1)])
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
        self.options = ReaderOptions(bootstrap=bootstrap, topic_prefix=prefix,
                                     client_id="reader-test")

    def home(self, session_key: str) -> int:
        return partition_for(session_key, self.partitions)

    def key_at(self, home: int, skip: int = 0) -> str:
        """A session key whose home is `home` (the `skip`th such key)."""
        keys = (f"agent:a:s{i}" for i in range(10_000))
        return [k for k in keys if self.home(k) == home][skip]

    def confirm(self, partition: int) -> Delivery:
        """One confirmation on input partition `partition`: its delivery."""
        meta = self.producer.send(self.input, b"{}", key=b"k", partition=partition).get(WAIT_S)
        return Delivery(self.input, meta.partition, meta.offset, "k")

    def send(self, partition: int, key: bytes, value: bytes | None,
             headers: list[tuple[str, bytes]] | None = None) -> int:
        meta = self.producer.send(self.entries, value, key=key, partition=partition,
                                  headers=headers or []).get(WAIT_S)
        return meta.offset

    def entry(self, session_key: str, seq: int, text: str = "hi", *,
              partition: int | None = None, chain: str | None = None) -> int:
        headers = [] if chain is None else [("chain", chain.encode())]
        where = self.home(session_key) if partition is None else partition
        return self.send(where, entry_key(session_key, seq), entry(session_key, seq, text),
                         headers)

    def position(self, partition: int, input_offset: int) -> int:
        value = position_value(partition, input_offset, 0, datetime.now(UTC))
        return self.send(partition, position_key(partition), value)

    def close(self) -> None:
        self.producer.close()


@pytest.fixture
def fabric(bootstrap: str, admin: KafkaAdminClient, prefix: str) -> Iterator[Fabric]:
    made = Fabric(bootstrap, admin, prefix)
    yield made
    made.close()


class Waits(logging.Handler):
    """An event per partition, set when the reader logs that a read waits there for its
    position ("waiting") or for a repartition's end ("blocked")."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.events: defaultdict[tuple[str, int], threading.Event] = defaultdict(threading.Event)

    def emit(self, record: logging.LogRecord) -> None:
        kind = str(record.msg).split(":")[0]
        if kind in ("waiting", "blocked"):
            self.events[kind, record.args[0]].set()  # type: ignore[index]

    def await_(self, partition: int, kind: str = "waiting") -> None:
        assert self.events[kind, partition].wait(WAIT_S), f"no read {kind} on {partition}"


@pytest.fixture
def waits() -> Iterator[Waits]:
    logger = logging.getLogger("transcript_connector.reader")
    handler, level = Waits(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=2) as executor:
        yield executor


def seqs(read: SessionRead) -> list[int]:
    return [e.seq for e in read.entries]


# --- bound to LATEST -------------------------------------------------------------------------


def test_latest_returns_when_the_position_is_the_inputs_last_stable_offset(fabric: Fabric) -> None:
    k = fabric.key_at(0)
    for _ in range(3):
        fabric.confirm(0)
    fabric.entry(k, 1, "one")
    fabric.position(0, 3)
    with BlockingSessionReader(fabric.options) as reader:
        read = reader.read(k, at=LATEST, timeout_s=WAIT_S)
        assert (read.session_key, read.partition, read.needed) == (k, 0, 3)
        assert read.position.input_offset == 3 and read.position.offset == 1
        assert [(e.seq, e.entry.text, e.value) for e in read.entries] == [
            (1, "one", entry(k, 1, "one"))]
        # once read, a read that needs no more returns without waiting at all
        assert seqs(reader.read(k, at=LATEST, timeout_s=0)) == [1]


def test_a_read_that_does_not_reach_latest_is_stale_at_its_deadline(fabric: Fabric) -> None:
    k = fabric.key_at(1)
    for _ in range(5):
        fabric.confirm(1)
    fabric.entry(k, 1)
    fabric.position(1, 3)  # the worker decided 3 of 5
    with BlockingSessionReader(fabric.options) as reader:
        with pytest.raises(StaleReadError) as caught:
            reader.read(k, at=LATEST, timeout_s=0.5)
    error = caught.value
    assert (error.partition, error.reached, error.needed, error.reason) == (1, 3, 5, None)
    assert error.age_s is not None and error.age_s >= 0
    assert str(error).startswith("stale read: partition 1 reached input offset 3, needed 5; "
                                 "the worker's last position there is ")


def test_a_partition_without_any_position_is_stale_with_no_age(fabric: Fabric) -> None:
    k = fabric.key_at(0)
    fabric.confirm(0)
    fabric.entry(k, 1)  # an entry without a position claims nothing
    with BlockingSessionReader(fabric.options) as reader, \
            pytest.raises(StaleReadError) as caught:
        reader.read(k, at=LATEST, timeout_s=0.3)
    assert (caught.value.reached, caught.value.needed, caught.value.age_s) == (0, 1, None)
    assert "the worker has written no position there" in str(caught.value)


def test_a_waiting_read_returns_once_the_position_is_written(
        fabric: Fabric, waits: Waits, pool: ThreadPoolExecutor) -> None:
    k = fabric.key_at(1)
    fabric.confirm(1)
    fabric.entry(k, 1)
    fabric.position(1, 1)
    fabric.confirm(1)  # confirmed, not yet decided
    with BlockingSessionReader(fabric.options) as reader:
        pending = pool.submit(reader.read, k, at=LATEST, timeout_s=WAIT_S)
        waits.await_(1)
        assert not pending.done()
        fabric.entry(k, 2, "the reply's message")
        fabric.position(1, 2)
        read = pending.result(WAIT_S)
    assert seqs(read) == [1, 2] and read.position.input_offset == 2 and read.needed == 2


# --- bound to a delivery ---------------------------------------------------------------------


def test_a_delivery_on_home_needs_the_position_past_it(fabric: Fabric) -> None:
    k = fabric.key_at(0)
    delivery = fabric.confirm(0)
    fabric.confirm(0)  # a later one: the bound is the delivery, not the end
    fabric.entry(k, 1)
    fabric.position(0, delivery.offset + 1)
    with BlockingSessionReader(fabric.options) as reader:
        read = reader.read(k, at=delivery, timeout_s=WAIT_S)
        assert (read.needed, seqs(read)) == (delivery.offset + 1, [1])
        assert seqs(reader.read(k, at=At(0, delivery.offset), timeout_s=0)) == [1]
        with pytest.raises(StaleReadError) as caught:
            reader.read(k, at=At(0, delivery.offset + 1), timeout_s=0)
        assert (caught.value.reached, caught.value.needed) == (1, 2)
        with pytest.raises(ReadError, match="has 2 partitions, none numbered 2"):
            reader.read(k, at=At(2, 0), timeout_s=0)
        with pytest.raises(ReadError, match="a delivery to topic other.topic"):
            reader.read(k, at=Delivery("other.topic", 0, 1, k), timeout_s=0)


def test_a_delivery_elsewhere_than_home_takes_two_steps(
        fabric: Fabric, waits: Waits, pool: ThreadPoolExecutor) -> None:
    """Published to partition 0 (an older count, or a non-canonical key): the worker re-keys it
    to home 1 in the transaction that moves partition 0's position past it."""
    k = fabric.key_at(1)
    delivery = fabric.confirm(0)
    fabric.position(0, delivery.offset)  # not yet past it
    fabric.position(1, 0)
    with BlockingSessionReader(fabric.options) as reader:
        pending = pool.submit(reader.read, k, at=delivery, timeout_s=WAIT_S)
        waits.await_(0)
        rekeyed = fabric.confirm(1)  # the worker's re-keyed copy, on home
        fabric.position(0, delivery.offset + 1)
        waits.await_(1)  # then home, up to its last stable offset at that moment
        assert not pending.done()
        fabric.entry(k, 1, "re-keyed")
        fabric.position(1, rekeyed.offset + 1)
        read = pending.result(WAIT_S)
    assert (read.partition, read.needed, seqs(read)) == (1, rekeyed.offset + 1, [1])


# --- a repartition in progress ----------------------------------------------------------------


def test_differing_counts_are_a_stale_read_naming_the_repartition(
        bootstrap: str, admin: KafkaAdminClient, prefix: str) -> None:
    moving = Fabric(bootstrap, admin, prefix, partitions=2, entries_partitions=4)
    try:
        k = moving.key_at(0)
        moving.confirm(0)
        moving.position(0, 1)  # reached, but the move is not over
        with BlockingSessionReader(moving.options) as reader, \
                pytest.raises(StaleReadError) as caught:
            reader.read(k, at=LATEST, timeout_s=0.3)
    finally:
        moving.close()
    assert caught.value.reason == ("a repartition is in progress: delivery.confirmations has "
                                   "2 partitions, transcript.entries 4")
    assert (caught.value.partition, caught.value.needed) == (0, 1)
    assert str(caught.value).endswith(caught.value.reason)


def test_a_read_blocked_by_a_repartition_completes_once_the_counts_agree(
        bootstrap: str, admin: KafkaAdminClient, prefix: str, waits: Waits,
        pool: ThreadPoolExecutor) -> None:
    moving = Fabric(bootstrap, admin, prefix, partitions=2, entries_partitions=4)
    try:
        k = next(key for key in (f"agent:a:s{i}" for i in range(200))
                 if partition_for(key, 4) >= 2)  # a home only the grown topic has
        with BlockingSessionReader(moving.options) as reader:
            pending = pool.submit(reader.read, k, at=LATEST, timeout_s=WAIT_S)
            waits.await_(partition_for(k, 2), "blocked")
            admin.create_partitions({moving.input: NewPartitions(4)})  # the move's last step
            home = partition_for(k, 4)
            # nothing reaches even offset 0 before a position record is read there (a new
            # partition holds the move's copies before any): the worker's first, at its start
            waits.await_(home, "waiting")
            moving.position(home, 0)
            read = pending.result(WAIT_S)
    finally:
        moving.close()
    # home under the grown count, which nothing was confirmed to yet
    assert (read.partition, read.needed, seqs(read)) == (home, 0, [])


# --- what the reader holds ---------------------------------------------------------------------


def test_a_new_session_is_read_from_the_start_a_held_one_from_where_it_was(
        fabric: Fabric) -> None:
    k, other = fabric.key_at(0), fabric.key_at(0, skip=1)
    for key in (k, other):
        fabric.entry(key, 1)
    fabric.confirm(0)
    fabric.position(0, 1)  # records 0..2
    with BlockingSessionReader(fabric.options) as reader:
        assert seqs(reader.read(k, at=LATEST, timeout_s=WAIT_S)) == [1]
        assert reader.partitions()[0][:2] == (1, 3)  # one session, 3 records read
        fabric.entry(k, 2)
        fabric.entry(other, 2)
        fabric.confirm(0)
        fabric.position(0, 2)  # records 3..5
        assert seqs(reader.read(k, at=LATEST, timeout_s=WAIT_S)) == [1, 2]
        assert reader.partitions()[0][:2] == (1, 6)  # only the 3 new records fetched
        # not held: its partition from the start, its first entry included
        assert seqs(reader.read(other, at=LATEST, timeout_s=WAIT_S)) == [1, 2]
        assert reader.partitions()[0][:2] == (2, 12)
        assert seqs(reader.read(k, at=LATEST, timeout_s=0)) == [1, 2]  # still held, current


def test_at_most_the_bound_of_sessions_is_held_least_recently_read_dropped_first(
        fabric: Fabric) -> None:
    a, b, c = (fabric.key_at(1, skip=i) for i in range(3))
    for key in (a, b, c):
        fabric.entry(key, 1)
    fabric.confirm(1)
    fabric.position(1, 1)
    options = fabric.options.model_copy(update={"sessions_per_partition": 2})
    with BlockingSessionReader(options) as reader:
        for key in (a, b, c):
            assert seqs(reader.read(key, at=LATEST, timeout_s=WAIT_S)) == [1]
        sessions, records, _ = reader.partitions()[1]
        assert sessions == 2
        assert seqs(reader.read(c, at=LATEST, timeout_s=0)) == [1]  # held: no record read
        assert reader.partitions()[1].records_read == records
        assert seqs(reader.read(a, at=LATEST, timeout_s=WAIT_S)) == [1]  # dropped: read again
        assert reader.partitions()[1] == (2, records + 4, reader.partitions()[1].position)


def test_tombstones_invalid_values_and_a_neighbours_keys(fabric: Fabric) -> None:
    """Compaction's view of exactly the session's keys: session `K#1` is not part of `K`."""
    k = next(key for key in (f"agent:a:n{i}" for i in range(200))
             if fabric.home(key) == fabric.home(f"{key}#1"))
    neighbour, home = f"{k}#1", fabric.home(k)
    fabric.entry(k, 1, "kept", chain="a" * 64)
    fabric.entry(neighbour, 1, "the neighbour's")
    fabric.entry(k, 2, "erased")
    fabric.send(home, entry_key(k, 2), None)
    fabric.entry(k, 3, "overwritten")
    fabric.send(home, entry_key(k, 3), b'{"schema":"transcript-entry/1"}')
    fabric.send(home, entry_key(k, 4), entry("agent:a:elsewhere", 4))
    fabric.send(home, b"position/x", b"not a position")
    fabric.send(home, position_key(home), b'{"not": "a position"}')
    fabric.send(home, entry_key(k, 5), b"\xff\xfe")
    fabric.confirm(home)
    fabric.position(home, 1)
    with BlockingSessionReader(fabric.options) as reader:
        read = reader.read(k, at=LATEST, timeout_s=WAIT_S)
        theirs = reader.read(neighbour, at=LATEST, timeout_s=WAIT_S)
    assert [(e.seq, e.entry.text, e.chain) for e in read.entries] == [(1, "kept", "a" * 64)]
    assert [u.seq for u in read.unreadable] == [3, 4, 5]
    assert [(e.seq, e.entry.text) for e in theirs.entries] == [(1, "the neighbour's")]


def test_a_missing_topic_is_named_and_never_created(
        bootstrap: str, admin: KafkaAdminClient, prefix: str) -> None:
    options = ReaderOptions(bootstrap=bootstrap, topic_prefix=prefix)
    with BlockingSessionReader(options) as reader, \
            pytest.raises(ReadError, match=f"^topic {prefix}delivery.confirmations does not "
                                           "exist"):
        reader.read("agent:a:main", timeout_s=1)
    assert not [t for t in admin.list_topics() if t.startswith(prefix)]


# --- the asyncio reader ----------------------------------------------------------------------


def test_the_async_reader_serves_a_read_while_another_waits(
        fabric: Fabric, waits: Waits) -> None:
    stuck, fine = fabric.key_at(0), fabric.key_at(1)
    fabric.confirm(0)  # partition 0's worker is stalled: no position
    fabric.entry(fine, 1)
    fabric.confirm(1)
    fabric.position(1, 1)

    async def run() -> tuple[SessionRead, SessionRead]:
        async with SessionReader(fabric.options) as reader:
            waiting = asyncio.create_task(reader.read(stuck, at=LATEST, timeout_s=WAIT_S))
            await asyncio.to_thread(waits.await_, 0)
            other = await reader.read(fine, at=LATEST, timeout_s=WAIT_S)
            assert not waiting.done()
            await asyncio.to_thread(fabric.position, 0, 1)
            return await waiting, other

    first, other = asyncio.run(run())
    assert (seqs(first), seqs(other)) == ([], [1])


def test_the_async_reader_raises_the_same_errors_and_drops_a_cancelled_read(
        fabric: Fabric, waits: Waits) -> None:
    k = fabric.key_at(0)
    fabric.confirm(0)

    async def run() -> None:
        async with SessionReader(fabric.options) as reader:
            with pytest.raises(StaleReadError, match="^stale read: partition 0 "):
                await reader.read(k, timeout_s=0.2)
            waits.events["waiting", 0].clear()
            waiting = asyncio.create_task(reader.read(k, timeout_s=WAIT_S))
            await asyncio.to_thread(waits.await_, 0)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            fabric.position(0, 1)
            assert seqs(await reader.read(k, timeout_s=WAIT_S)) == []
        with pytest.raises(ReadError, match="not connected"):
            await reader.read(k)

    asyncio.run(run())
