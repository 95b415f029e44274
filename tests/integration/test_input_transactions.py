"""The input is read read_committed: a confirmation in an aborted connector transaction was
never confirmed and gets no outcome. And the worker is a static group member when told its
instance id."""

from __future__ import annotations

import json

import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient
from transcript_connector.partitioning import partition_for

from tests.conftest import cli
from tests.integration.harness import Collector, group_of, poll_until
from workers.core.outputs import CONFIRMATIONS, DIAGNOSTICS, DLQ, ENTRIES
from workers.settings import kafka_settings

pytestmark = pytest.mark.kafka

KEY = "agent:ops:telegram:direct:tx1"


def confirmation(send_id: str) -> bytes:
    return json.dumps({
        "schema": "delivery-confirmation/1", "send_id": send_id,
        "confirmed_at": "2026-05-01T12:00:00Z", "agent_id": "ops", "session_key": KEY,
        "route": {"channel": "telegram", "peer_kind": "direct", "peer_id": "tx1"},
        "origin": {"kind": "message_tool"}, "payload": {"text": f"message {send_id}"},
        "receipt": {"platform_message_ids": ["1"]},
    }).encode()


def test_only_committed_connector_transactions_get_outcomes(env, topics, workers,
                                                            kafka_bootstrap):
    ks = kafka_settings(env)
    source = ks.topic(CONFIRMATIONS)
    partition = partition_for(KEY, 8)
    producer = KafkaProducer(**ks.kafka_python_kwargs(),
                             transactional_id=f"{env['TRANSCRIPT_TOPIC_PREFIX']}connector")
    producer.init_transactions()
    for name, commit in (("a", True), ("b", False), ("c", True)):
        producer.begin_transaction()
        for i in range(3):
            producer.send(source, key=KEY.encode(), value=confirmation(f"{name}{i}"),
                          partition=partition)
        producer.flush()
        if commit:
            producer.commit_transaction()
        else:
            producer.abort_transaction()
    producer.close()

    w = workers()
    entries = Collector(ks, ks.topic(ENTRIES))
    entries.wait_for(lambda r: len(r) >= 6, 120, w)
    got = [(e["send_id"], e["seq"]) for e in entries.values()]
    assert got == [("a0", 1), ("a1", 2), ("a2", 3), ("c0", 4), ("c1", 5), ("c2", 6)]
    # the group commits past c2 (offset 10; offsets 3 and 7 are the first two transaction
    # markers, 4-6 the aborted records); the marker after c2 is never delivered, so the lag
    # stays 1 until the next record
    poll_until(lambda: committed(kafka_bootstrap, group_of(env), source, partition) == 11, 60,
               [w], "offsets committed past c2")
    assert w.stop() == 0
    stopped = [ln for ln in w.log.read_text().splitlines() if "stopped; outcomes:" in ln]
    assert stopped and "outcomes: {'written': 6};" in stopped[-1]  # none for the aborted ones
    # nothing else came of the aborted records: no diagnostic, no dead letter
    for topic in (DIAGNOSTICS, DLQ):
        assert Collector(ks, ks.topic(topic)).consumer.poll(timeout_ms=2000) == {}
    done = cli("audit", "--json", "--strict", env=env, timeout=120)
    assert done.returncode == 0, done.stdout.decode()
    assert json.loads(done.stdout)["input_records"] == 6


def committed(bootstrap: str, group: str, topic: str, partition: int) -> int | None:
    from kafka import TopicPartition

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        found = admin.list_group_offsets(group).get(group, {})
    finally:
        admin.close()
    meta = found.get(TopicPartition(topic, partition))
    return None if meta is None else meta.offset


def test_the_instance_id_makes_a_static_member(env, topics, workers, kafka_bootstrap):
    w = workers(TRANSCRIPT_INSTANCE_ID="pod-0")
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    group = group_of(env)

    def instance_ids() -> list:
        members = admin.describe_groups([group])[group]["members"]
        return [m.get("group_instance_id") for m in members]

    try:
        poll_until(lambda: instance_ids() == ["pod-0"], 90, [w], "a static member pod-0")
    finally:
        admin.close()
    assert w.stop() == 0
