"""`audit` past input retention: the oldest input records deleted (as retention does), the audit
starts each partition at a checkpoint the worker wrote (workers/stream/checkpoints.py) and stays
exact: clean on what the worker wrote, and still finding a forged, a missing and a changed
entry."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest
from kafka import KafkaAdminClient, TopicPartition

from tests.conftest import cli
from tests.integration.harness import Collector, WorkerProcess, wait_drained
from workers.kafka_io import end_offsets, producer, publish
from workers.scenario import steps
from workers.settings import kafka_settings
from workers.stream.outputs import CONFIRMATIONS, ENTRIES
from workers.stream.partitioning import partition_for

pytestmark = pytest.mark.kafka
DM = "agent:ops:telegram:direct:uret1"


@pytest.fixture
def truncated(env, topics, tmp_path):
    """The demo scenario in two parts, a checkpoint between them, then every input record of
    the first part deleted. Returns (settings, entries of part one, entries of part two)."""
    ks = kafka_settings(env)
    scenario = steps("ret1", datetime(2026, 6, 1, 9, 0, tzinfo=UTC))
    half = len(scenario) // 2
    # part two ends with a retry of the first send: a duplicate only for a replay that starts
    # with the state of part one
    first, second = scenario[:half], [*scenario[half:], scenario[0]]
    group = env["TRANSCRIPT_TOPIC_PREFIX"] + "transcript-owner"
    w = WorkerProcess(env, tmp_path / "state", tmp_path / "w.log",
                      TRANSCRIPT_CHECKPOINT_INTERVAL_S="1").start()
    entries = Collector(ks, ks.topic(ENTRIES))
    publish(ks, ks.topic(CONFIRMATIONS), [(s.key, s.value) for s in first], 8)
    wait_drained(env["KAFKA_BOOTSTRAP"], group, ks.topic(CONFIRMATIONS), 120, [w])
    n_first = sum(s.expect == "written" for s in first)
    part_one = list(entries.wait_for(lambda r: len(r) >= n_first, 30, w))
    cut = end_offsets(ks, ks.topic(CONFIRMATIONS))
    time.sleep(1.5)  # a new checkpoint interval: the next batch checkpoints every partition
    publish(ks, ks.topic(CONFIRMATIONS), [(s.key, s.value) for s in second], 8)
    wait_drained(env["KAFKA_BOOTSTRAP"], group, ks.topic(CONFIRMATIONS), 120, [w])
    n_all = sum(s.expect == "written" for s in scenario)
    everything = entries.wait_for(lambda r: len(r) >= n_all, 30, w)
    entries.close()
    assert w.stop() == 0
    assert "checkpoints of partitions" in w.log.read_text()

    admin = KafkaAdminClient(bootstrap_servers=env["KAFKA_BOOTSTRAP"])
    try:
        admin.delete_records({TopicPartition(ks.topic(CONFIRMATIONS), p): off
                              for p, off in cut.items() if off > 0})
    finally:
        admin.close()
    keys = {r.key for r in part_one}
    return ks, [json.loads(r.value) for r in part_one], [
        json.loads(r.value) for r in everything if r.key not in keys]


def test_audit_past_retention_is_clean_and_starts_at_checkpoints(env, truncated):
    _, part_one, part_two = truncated
    assert part_one and part_two
    done = cli("audit", "--json", env=env)
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    report = json.loads(done.stdout)
    assert report["clean"]
    # only part two (and the retry) was replayed; every entry was read
    assert report["expected_entries"] == len(part_two)
    assert report["actual_entries"] == len(part_one) + len(part_two)
    assert report["outcomes"].get("duplicate", 0) >= 1


def test_audit_past_retention_finds_forged_missing_and_changed(env, truncated):
    ks, part_one, part_two = truncated
    p = producer(ks)
    part = partition_for(DM, 8)
    old = next(e for e in part_one if e["session_key"] == DM)  # before the checkpoint
    new = next(e for e in part_two if e["session_key"] == DM)  # after it
    top = max(e["seq"] for e in part_one + part_two if e["session_key"] == DM)
    forged = dict(new, seq=top + 1, text="I never said this", entry_id="forged")
    changed = dict(new, text="not what was shown")

    def key(seq: int) -> bytes:
        return f"{DM}#{seq:010d}".encode()

    p.send(ks.topic(ENTRIES), key=key(top + 1), value=json.dumps(forged).encode(),
           partition=part).get(timeout=10)
    p.send(ks.topic(ENTRIES), key=key(old["seq"]), value=None,
           partition=part).get(timeout=10)  # tombstone: an entry older than the checkpoint
    p.send(ks.topic(ENTRIES), key=key(new["seq"]), value=json.dumps(changed).encode(),
           partition=part).get(timeout=10)
    p.close()

    done = cli("audit", "--json", env=env)
    assert done.returncode == 1, done.stdout.decode() + done.stderr.decode()
    report = json.loads(done.stdout)
    found = report["discrepancies"]
    assert report["examples"]["unexpected"] == [key(top + 1).decode()]
    assert report["examples"]["missing"] == [key(old["seq"]).decode()]
    assert report["examples"]["rewritten"] == [key(new["seq"]).decode()]
    assert found["unexpected"] == found["missing"] == found["rewritten"] == 1
    assert sum(found.values()) == 3 + found["order"]  # a tombstoned seq leaves a gap


def test_audit_without_a_checkpoint_past_retention_cannot_run(env, topics):
    ks = kafka_settings(env)
    scenario = steps("ret2", datetime(2026, 6, 1, 9, 0, tzinfo=UTC))
    publish(ks, ks.topic(CONFIRMATIONS), [(s.key, s.value) for s in scenario], 8)
    cut = end_offsets(ks, ks.topic(CONFIRMATIONS))
    admin = KafkaAdminClient(bootstrap_servers=env["KAFKA_BOOTSTRAP"])
    try:
        admin.delete_records({TopicPartition(ks.topic(CONFIRMATIONS), p): off // 2
                              for p, off in cut.items() if off // 2 > 0})
    finally:
        admin.close()
    done = cli("audit", env=env)
    assert done.returncode == 2
    assert "no checkpoint" in done.stderr.decode()
