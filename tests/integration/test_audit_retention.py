"""`audit` past input retention: the oldest input records deleted (as retention does), the audit
starts each partition at a checkpoint the worker wrote (workers/core/checkpoint_format.py) and stays
exact: clean on what the worker wrote, and still finding a forged, a missing and a changed
entry; a session erased before the checkpoint is checked against its erasure record."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from kafka import KafkaAdminClient, TopicPartition
from transcript_connector.partitioning import partition_for

from tests.conftest import cli, keeping_input
from tests.integration.harness import (
    Collector,
    checkpointed_at,
    committed_input,
    entry_records,
    group_of,
    poll_until,
    wait_drained,
)
from tests.unit.wire import confirmation, dumps
from workers.core.checkpoint_format import CHECKPOINTS, manifest_key
from workers.core.outputs import CONFIRMATIONS, ENTRIES
from workers.kafka_io import end_offsets, producer, publish
from workers.scenario import steps
from workers.settings import kafka_settings

pytestmark = pytest.mark.kafka
DM = "agent:ops:telegram:direct:uret1"


@pytest.fixture
def env(env, tmp_path):
    """The input kept for ever: its oldest records are deleted by the test, and the worker
    checkpoints every second (tests.conftest.keeping_input)."""
    return keeping_input(env, tmp_path)


@pytest.fixture
def truncated(env, topics, tmp_path, workers):
    """The demo scenario in two parts, a checkpoint between them, then every input record of
    the first part deleted. Returns (settings, entries of part one, entries of part two)."""
    ks = kafka_settings(env)
    scenario = steps("ret1", datetime(2026, 6, 1, 9, 0, tzinfo=UTC))
    half = len(scenario) // 2
    # part two ends with a retry of the first send: a duplicate only for a replay that starts
    # with the state of part one
    first, second = scenario[:half], [*scenario[half:], scenario[0]]
    group = env["TRANSCRIPT_TOPIC_PREFIX"] + "transcript-owner"
    w = workers("w", tmp_path / "state", TRANSCRIPT_CHECKPOINT_INTERVAL_S="1")
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
    # the chain (tests/integration/test_chain.py) finds each too: the forged and the changed
    # entry have no chain header, and the entry after the tombstoned one does not chain
    chain = {f.split(": ", 1)[0] for f in report["examples"]["chain"]}
    assert found["chain"] == 3 and {f"{DM} seq {top + 1}", f"{DM} seq {new['seq']}"} <= chain
    assert sum(found.values()) == 6 + found["order"]  # a tombstoned seq leaves a gap


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


def test_audit_past_retention_checks_a_session_erased_before_the_checkpoint(env, topics,
                                                                            tmp_path, workers):
    """A session erased (`forget`, through seq 3) and written to again (seqs 4 and 5), all
    before the checkpoint the audit starts from: the erasure's record in transcript.erasures
    tells the two apart. Clean as the worker wrote it; a tombstone on seq 4 (written after the
    erasure, before the checkpoint) is `missing`, a value on the erased seq 2 `unexpected`.
    (The audit used to skip every session erased before its checkpoint.)"""
    ks = kafka_settings(env)
    bootstrap, group, source = env["KAFKA_BOOTSTRAP"], group_of(env), ks.topic(CONFIRMATIONS)
    victim, kept = "agent:ops:telegram:direct:uret-erased", "agent:ops:telegram:direct:uret-kept"
    home = partition_for(victim, 8)
    filler = next(k for i in range(10_000)
                  if partition_for(k := f"agent:ops:telegram:direct:uret-fill{i}", 8) == home)
    w = workers("w", tmp_path / "state", TRANSCRIPT_CHECKPOINT_INTERVAL_S="1")
    try:
        t0 = datetime.now(UTC) - timedelta(hours=1)
        publish(ks, source, [send(victim, f"v{i}", t0 + timedelta(minutes=i)) for i in (1, 2, 3)]
                + [send(kept, f"k{i}", t0 + timedelta(minutes=i)) for i in (1, 2)], 8)
        wait_drained(bootstrap, group, source, 120, [w])
        done = cli("forget", victim, "--reason", "test", "--wait", "60", env=env)
        assert done.returncode == 0, done.stderr.decode() + w.tail()
        after = datetime.now(UTC)
        publish(ks, source, [send(victim, f"a{i}", after + timedelta(seconds=i)) for i in (1, 2)],
                8)
        wait_drained(bootstrap, group, source, 120, [w])
        cut = end_offsets(ks, source)

        # a checkpoint of the victim's partition at or after the cut: the first batch of each
        # checkpoint interval writes one, so records go on arriving until it is there
        ckpts = Collector(ks, ks.topic(CHECKPOINTS))
        manifest = manifest_key(home, 0).rsplit(b"/", 1)[0] + b"/"

        def checkpointed() -> bool:
            return any(r.key.startswith(manifest) and json.loads(r.value)["input_offset"]
                       >= cut[home] for r in ckpts.records if r.value is not None)

        deadline, n = time.monotonic() + 60, 0
        while not checkpointed():
            assert time.monotonic() < deadline and w.alive(), w.tail()
            n += 1
            publish(ks, source, [send(filler, f"f{n}", after + timedelta(seconds=10 + n))], 8)
            for recs in ckpts.consumer.poll(timeout_ms=500).values():  # waits for records
                ckpts.records.extend(recs)
        ckpts.close()
        publish(ks, source, [send(victim, "a3", after + timedelta(seconds=5))], 8)  # seq 6
        wait_drained(bootstrap, group, source, 120, [w])
    finally:
        assert w.stop() == 0
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.delete_records({TopicPartition(source, p): off for p, off in cut.items() if off})
    finally:
        admin.close()

    done = cli("audit", "--json", env=env)
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    report = json.loads(done.stdout)
    # replayed from the checkpoint: the erasure, seqs 1..5 and the first fillers are older
    assert report["outcomes"].get("erased", 0) == 0
    assert 1 <= report["expected_entries"] <= n + 1  # seq 6 and the fillers after it

    p = producer(ks)

    def key(seq: int) -> bytes:
        return f"{victim}#{seq:010d}".encode()

    p.send(ks.topic(ENTRIES), key=key(4), value=None, partition=home).get(timeout=10)
    undone = dict(json.loads(next(r.value for r in entry_records(ks, partitions=[home])
                                  if r.key == key(4))), seq=2)
    p.send(ks.topic(ENTRIES), key=key(2), value=json.dumps(undone).encode(),
           partition=home).get(timeout=10)
    p.close()
    done = cli("audit", "--json", env=env)
    assert done.returncode == 1, done.stdout.decode() + done.stderr.decode()
    report = json.loads(done.stdout)
    assert report["examples"]["missing"] == [key(4).decode()]
    assert report["examples"]["unexpected"] == [key(2).decode()]
    found = {k: v for k, v in report["discrepancies"].items() if v}
    # seq 2 after 6; and seq 5 no longer chains: the entry before it (4) is gone; seq 2, with
    # no chain header, is below the head's live_from (the erasure's next seq, 4): put back
    assert found == {"missing": 1, "unexpected": 1, "order": 1, "chain": 2}
    assert sorted(f.split(": ", 1)[0] for f in report["examples"]["chain"]) == [
        f"{victim} seq 2", f"{victim} seq 5"]


def send(session: str, send_id: str, at: datetime) -> tuple[bytes, bytes]:
    return session.encode(), dumps(confirmation(
        session_key=session, send_id=send_id, confirmed_at=at.isoformat(),
        **{"payload.text": f"text of {send_id}", "receipt.sent_at": at.isoformat()}))


def test_a_partition_that_went_quiet_is_checkpointed_after_its_last_record(env, topics,
                                                                          tmp_path, workers):
    """The input stops: at the next checkpoint interval each partition is still checkpointed at
    the end of what it processed, by time, not with a next batch that never comes (until issue
    24 a checkpoint rode a batch, at the batch's first offset). So once retention has removed
    every input record, `audit` starts every partition at that checkpoint and is clean."""
    ks = kafka_settings(env)
    scenario = steps("ret4", datetime(2026, 6, 1, 9, 0, tzinfo=UTC))
    source = ks.topic(CONFIRMATIONS)
    w = workers("w", tmp_path / "state", TRANSCRIPT_CHECKPOINT_INTERVAL_S="1")
    entries = Collector(ks, ks.topic(ENTRIES))
    publish(ks, source, [(s.key, s.value) for s in scenario], 8)
    wait_drained(env["KAFKA_BOOTSTRAP"], group_of(env), source, 120, [w])
    written = sum(s.expect == "written" for s in scenario)
    entries.wait_for(lambda r: len(r) >= written, 30, w)
    entries.close()
    cut = committed_input(env, source)
    assert cut
    poll_until(lambda: checkpointed_at(ks, cut), 60, [w],
               "a checkpoint of every partition at the end of its input, with no input after")
    assert w.stop() == 0
    admin = KafkaAdminClient(bootstrap_servers=env["KAFKA_BOOTSTRAP"])
    try:
        admin.delete_records({TopicPartition(source, p): off for p, off in cut.items()})
    finally:
        admin.close()
    done = cli("audit", "--json", env=env)
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    report = json.loads(done.stdout)
    assert report["clean"] and report["expected_entries"] == 0
    assert report["actual_entries"] == written
