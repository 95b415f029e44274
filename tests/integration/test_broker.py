"""The local broker is a real Kafka: transactions and log compaction work; and how the
tests read it (workers.kafka_io's read loop, the harness's GroupLag)."""

from __future__ import annotations

import time
import uuid

import pytest
from kafka import KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.structs import OffsetAndMetadata

from tests.integration.harness import GroupLag
from workers.kafka_io import consumer, ranges_with_records, read
from workers.settings import KafkaSettings

pytestmark = pytest.mark.kafka


@pytest.fixture
def topic(kafka_bootstrap: str):
    """A throwaway topic factory; every topic made is deleted afterwards."""
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    made: list[str] = []

    def make(configs: dict[str, str] | None = None) -> str:
        name = f"broker-test-{uuid.uuid4().hex[:10]}"
        admin.create_topics([NewTopic(name, 1, 1, topic_configs=configs or {})])
        made.append(name)
        return name

    yield make
    if made:
        admin.delete_topics(made)
    admin.close()


def read_all(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[tuple]:
    records = read(KafkaSettings(bootstrap=bootstrap), topic, isolation_level=isolation)
    return [(r.key, r.value) for r in records]


def committed_then_aborted(bootstrap: str, topic: str) -> None:
    """Offsets 0-4 committed records, 5 the commit marker, 6-10 aborted records, 11 the abort
    marker: the log's end (12) and the 7 offsets before it hold no committed record."""
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=f"tx-{uuid.uuid4().hex}",
        enable_idempotence=True,
    )
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(5):
        producer.send(topic, key=b"k", value=f"committed-{i}".encode())
    producer.commit_transaction()
    producer.begin_transaction()
    for i in range(5):
        producer.send(topic, key=b"k", value=f"aborted-{i}".encode())
    producer.flush()
    producer.abort_transaction()
    producer.close()


def test_read_committed_sees_committed_and_not_aborted(kafka_bootstrap, topic):
    name = topic()
    committed_then_aborted(kafka_bootstrap, name)

    committed = [v for _, v in read_all(kafka_bootstrap, name)]
    assert committed == [f"committed-{i}".encode() for i in range(5)]
    uncommitted = [v for _, v in read_all(kafka_bootstrap, name, "read_uncommitted")]
    assert [v for v in uncommitted if v.startswith(b"aborted")] == [
        f"aborted-{i}".encode() for i in range(5)
    ]


def test_compacted_topic_really_compacts(kafka_bootstrap, topic):
    name = topic({
        "cleanup.policy": "compact",
        "segment.ms": "100",
        "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0",
        "delete.retention.ms": "100",
    })
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    for round_ in range(20):
        for key in range(5):
            producer.send(name, key=f"k{key}".encode(), value=f"v{round_}".encode())
    producer.flush()
    written = 100
    deadline = time.monotonic() + 60
    while True:
        # the active segment is never cleaned; with segment.ms=100 each later send rolls it
        producer.send(name, key=b"roll", value=b"x").get(timeout=10)
        records = read_all(kafka_bootstrap, name)
        data = [(k, v) for k, v in records if k != b"roll"]
        if len(data) <= 10 or time.monotonic() > deadline:
            break
        time.sleep(0.5)  # poll interval while waiting for the cleaner, not synchronisation
    producer.close()
    assert len(data) < written, "the log cleaner never compacted the topic"
    latest = {k: v for k, v in data}
    assert latest == {f"k{key}".encode(): b"v19" for key in range(5)}


def test_the_read_loop_steps_over_markers_and_follows(kafka_bootstrap, topic):
    """workers.kafka_io's read loop: a range of markers and aborted records holds no record,
    one more offset does; and with until_end=False it goes on with what is written later,
    until its timeout."""
    name = topic()
    committed_then_aborted(kafka_bootstrap, name)
    ks = KafkaSettings(bootstrap=kafka_bootstrap)
    tp = TopicPartition(name, 0)
    c = consumer(ks)
    try:
        assert ranges_with_records(c, {tp: (5, 12)}) == set()
        assert ranges_with_records(c, {tp: (4, 12)}) == {tp}
    finally:
        c.close()

    following = read(ks, name, until_end=False, timeout=60)
    assert [next(following).value for _ in range(5)] == [
        f"committed-{i}".encode() for i in range(5)]
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    producer.send(name, value=b"later").get(timeout=10)
    producer.close()
    assert next(following).value == b"later"
    following.close()
    with pytest.raises(TimeoutError, match=f"^{name} not read to its end in 1s$"):
        list(read(ks, name, until_end=False, timeout=1))


def test_group_lag_counts_records_not_markers(kafka_bootstrap, topic):
    """GroupLag (the tests' and the bench's): offsets holding only markers and aborted records
    need no commit; a gap wider than probe_limit is not read and counts whole."""
    name = topic()
    committed_then_aborted(kafka_bootstrap, name)
    tp = TopicPartition(name, 0)
    group = f"broker-test-{uuid.uuid4().hex[:10]}"
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    lag = GroupLag(kafka_bootstrap, group, name)
    try:
        assert lag() == 12  # nothing committed: every offset counts
        admin.alter_group_offsets(group, {tp: OffsetAndMetadata(4, "", -1)})
        assert lag() == 8
        admin.alter_group_offsets(group, {tp: OffsetAndMetadata(5, "", -1)})
        assert lag() == 0
        lag.probe_limit = 6
        assert lag() == 7
    finally:
        lag.close()
        admin.delete_groups([group])
        admin.close()
