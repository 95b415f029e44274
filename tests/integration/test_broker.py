"""The local broker is a real Kafka: transactions and log compaction work."""

from __future__ import annotations

import time
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

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
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False,
        auto_offset_reset="earliest", consumer_timeout_ms=3000,
    )
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    end = consumer.end_offsets([tp])[tp]
    records = []
    while consumer.position(tp) < end:
        for batch in consumer.poll(timeout_ms=1000).values():
            records.extend((r.key, r.value) for r in batch)
    consumer.close()
    return records


def test_read_committed_sees_committed_and_not_aborted(kafka_bootstrap, topic):
    name = topic()
    producer = KafkaProducer(
        bootstrap_servers=kafka_bootstrap, transactional_id=f"tx-{uuid.uuid4().hex}",
        enable_idempotence=True,
    )
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(5):
        producer.send(name, key=b"k", value=f"committed-{i}".encode())
    producer.commit_transaction()
    producer.begin_transaction()
    for i in range(5):
        producer.send(name, key=b"k", value=f"aborted-{i}".encode())
    producer.flush()
    producer.abort_transaction()
    producer.close()

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
