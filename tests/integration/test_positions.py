"""The worker's position records (DESIGN 1.3): every owned partition gets one when a worker takes
it, each transaction that consumed a partition writes one after its entries, and a partition
whose last offsets hold nothing to decide (a connector's transaction markers, an aborted
transaction, the worker's own re-keyed records) reads as caught up: its position reaches the
input's last stable offset without any further input. The time each took is written to
var/integration/positions.json (docs/guarantees.md quotes it); no test asserts a time."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from transcript_connector.entries_topic import Positioned, classify
from transcript_connector.partitioning import partition_for

from tests.conftest import cli
from tests.integration.harness import Collector, poll_until
from workers.core.outputs import CONFIRMATIONS, CONTROL, ENTRIES
from workers.settings import kafka_settings

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 8


def confirmation(key: str, send_id: str) -> bytes:
    return json.dumps({
        "schema": "delivery-confirmation/1", "send_id": send_id,
        "confirmed_at": "2026-05-01T12:00:00Z", "agent_id": "ops", "session_key": key,
        "route": {"channel": "telegram", "peer_kind": "direct", "peer_id": "p"},
        "origin": {"kind": "message_tool"}, "payload": {"text": f"message {send_id}"},
        "receipt": {"platform_message_ids": ["1"]},
    }).encode()


def keys_in_distinct_partitions(n: int) -> list[str]:
    """n canonical session keys, each in a partition of its own."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < n:
        key = f"agent:ops:telegram:direct:pos{i}"
        found.setdefault(partition_for(key, PARTITIONS), key)
        i += 1
    return list(found.values())


class Positions:
    """The last position record of each entries partition, as a read_committed reader sees
    it, and the entries before it."""

    def __init__(self, ks) -> None:  # noqa: ANN001
        self.entries = Collector(ks, ks.topic(ENTRIES))
        self.last: dict[int, tuple[int, int, int]] = {}  # p -> (input, control, entries offset)
        self._read = 0

    def refresh(self) -> dict[int, tuple[int, int, int]]:
        self.entries.take()
        for r in self.entries.positions[self._read:]:
            found = classify(r.key, r.value, r.headers, r.partition, r.offset)
            assert isinstance(found, Positioned), (r.key, r.value)
            pos = found.position
            self.last[r.partition] = (pos.input_offset, pos.control_offset, r.offset)
        self._read = len(self.entries.positions)
        return self.last


def last_stable(ks, topic: str, partitions: list[int]) -> dict[int, int]:  # noqa: ANN001
    c = KafkaConsumer(**ks.kafka_python_kwargs(), isolation_level="read_committed",
                      enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        return {tp.partition: end for tp, end in c.end_offsets(tps).items()}
    finally:
        c.close()


def test_positions_reach_the_last_stable_offset_past_markers_aborts_and_rekeys(env, workers):
    ks = kafka_settings(env)
    source, control = ks.topic(CONFIRMATIONS), ks.topic(CONTROL)
    w = workers()
    seen = Positions(ks)
    everywhere = list(range(PARTITIONS))
    # a worker that takes its partitions writes a position for each at once
    poll_until(lambda: set(seen.refresh()) == set(everywhere), 90, [w],
               "a position in every partition")
    assert all(inp == 0 and ctl == 0 for inp, ctl, _ in seen.last.values())

    committed_key, aborted_key, rekeyed_key = keys_in_distinct_partitions(3)
    home = {k: partition_for(k, PARTITIONS) for k in (committed_key, aborted_key, rekeyed_key)}
    elsewhere = next(p for p in everywhere if p not in home.values())
    producer = KafkaProducer(**ks.kafka_python_kwargs(),
                             transactional_id=f"{env['TRANSCRIPT_TOPIC_PREFIX']}connector")
    producer.init_transactions()
    timings: dict[str, float] = {}

    def caught_up(partitions: list[int], what: str) -> None:
        """Until each partition's last position is its input's last stable offset (and
        control's); records how long that took."""
        began = time.monotonic()

        def done() -> bool:
            ends = last_stable(ks, source, partitions)
            control_ends = last_stable(ks, control, partitions)
            last = seen.refresh()
            return all(p in last and last[p][:2] == (ends[p], control_ends[p])
                       for p in partitions)

        poll_until(done, 60, [w], f"{what}: the position at the last stable offset",
                   interval=0.02)
        timings[what] = round(time.monotonic() - began, 3)

    # a connector's committed transaction: its commit marker is the partition's last offset
    producer.begin_transaction()
    for i in range(3):
        producer.send(source, key=committed_key.encode(), value=confirmation(committed_key,
                      f"c{i}"), partition=home[committed_key])
    producer.commit_transaction()
    caught_up([home[committed_key]], "committed transaction")
    assert last_stable(ks, source, [home[committed_key]])[home[committed_key]] == 4

    # an aborted transaction after a committed one: its records and marker are the tail
    producer.begin_transaction()
    producer.send(source, key=aborted_key.encode(), value=confirmation(aborted_key, "a0"),
                  partition=home[aborted_key])
    producer.commit_transaction()
    producer.begin_transaction()
    for i in range(1, 4):
        producer.send(source, key=aborted_key.encode(), value=confirmation(aborted_key, f"a{i}"),
                      partition=home[aborted_key])
    producer.flush()
    producer.abort_transaction()
    caught_up([home[aborted_key]], "aborted transaction")
    assert last_stable(ks, source, [home[aborted_key]])[home[aborted_key]] == 6
    producer.close()

    # a record in a partition that is not its session's: the worker re-keys it into its home
    # partition in a transaction (the copy, then a marker), and decides the copy there
    plain = KafkaProducer(**ks.kafka_python_kwargs())
    plain.send(source, key=rekeyed_key.encode(), value=confirmation(rekeyed_key, "r0"),
               partition=elsewhere).get(timeout=30)
    plain.close()
    caught_up([elsewhere, home[rekeyed_key]], "re-keyed record")
    assert last_stable(ks, source, [home[rekeyed_key]])[home[rekeyed_key]] == 2  # copy, marker

    # every entry is before its partition's position record, and each partition's positions
    # never move back
    entries = seen.entries.records
    assert sorted(json.loads(r.value)["send_id"] for r in entries) == [
        "a0", "c0", "c1", "c2", "r0"]
    by_partition: dict[int, list[tuple[int, int]]] = {}
    for r in seen.entries.positions:
        pos = classify(r.key, r.value, r.headers, r.partition, r.offset).position
        by_partition.setdefault(r.partition, []).append((r.offset, pos.input_offset))
    for p, found in by_partition.items():
        assert [o for _, o in found] == sorted(o for _, o in found), p
    for r in entries:
        last_offset = max(o for o, _ in by_partition[r.partition])
        assert r.offset < last_offset

    assert w.stop() == 0
    done = cli("audit", "--json", "--strict", env=env, timeout=120)
    assert done.returncode == 0, done.stdout.decode()
    out = ROOT / "var/integration"
    out.mkdir(parents=True, exist_ok=True)
    (out / "positions.json").write_text(json.dumps(
        {"seconds_to_caught_up": timings, "gap_watch_tick_s": 1.0}, indent=2) + "\n")
    print("caught up after", timings)
