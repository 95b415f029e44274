"""`transcript-owner forget` against the real broker: tombstones for every entry of the session,
read_committed; after the log cleaner, no record of the erased entries at all while other
sessions stay; the erasure in transcript.erasures; the audit clean after it; later records by
the documented rule; unknown and invalid keys refused (exit 2); the reason never logged."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
from transcript_connector.partitioning import partition_for

from tests.conftest import cli
from tests.integration.harness import Collector, group_lag, group_of, wait_drained
from tests.unit.wire import confirmation, dumps
from workers.core.outputs import (
    CONFIRMATIONS,
    CONTROL,
    DLQ,
    ENTRIES,
    ERASURES,
    SESSIONS,
    changelog_topic,
    entry_key,
)
from workers.core.state import CUTOVER_KEY
from workers.kafka_io import publish, read
from workers.settings import kafka_settings

pytestmark = pytest.mark.kafka

VICTIM = "agent:ops:telegram:direct:erase-me"
KEPT = "agent:ops:telegram:direct:keep-me"
REASON = "ticket-7781 reason-text-never-logged"
T0 = datetime.now(UTC) - timedelta(hours=1)


def send(session: str, send_id: str, minutes: float, text: str) -> tuple[bytes, bytes]:
    at = (T0 + timedelta(minutes=minutes)).isoformat()
    return session.encode(), dumps(confirmation(
        session_key=session, send_id=send_id, confirmed_at=at,
        **{"payload.text": text, "receipt.sent_at": at}))


def beside(session: str, n: int = 8) -> str:
    """A session key whose entries share `session`'s partition (to roll its segments)."""
    home = partition_for(session, n)
    return next(k for i in range(10_000)
                if partition_for(k := f"agent:ops:telegram:direct:roll{i}", n) == home)


def test_forget_tombstones_a_session_and_compaction_removes_it(env, topics, workers, tmp_path):
    ks = kafka_settings(env)
    bootstrap, group = env["KAFKA_BOOTSTRAP"], group_of(env)
    entries_topic, source = ks.topic(ENTRIES), ks.topic(CONFIRMATIONS)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, entries_topic, configs={
        "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0", "delete.retention.ms": "100"})], incremental=True)
    admin.close()

    w = workers("w")
    history = [send(VICTIM, f"v{i}", i, f"secret text {i}") for i in range(1, 4)]
    history += [send(KEPT, f"k{i}", i, f"kept text {i}") for i in range(1, 3)]
    publish(ks, source, history, 8)
    wait_drained(bootstrap, group, source, 120, [w])
    Collector(ks, entries_topic).wait_for(lambda r: len(r) >= 5, 30, w)

    # refused: not a full key, and a session with no entry
    invalid = cli("forget", "main", "--reason", REASON, env=env)
    assert invalid.returncode == 2
    assert b"an erase needs a full agent:<agent_id>:" in invalid.stderr
    unknown = cli("forget", "agent:ops:telegram:direct:nobody", "--reason", REASON, env=env)
    assert unknown.returncode == 2 and b"no live entry of session" in unknown.stderr

    done = cli("forget", VICTIM, "--reason", REASON, "--wait", "90", env=env)
    assert done.returncode == 0, done.stderr.decode() + w.tail()
    assert b"seq 1..3 tombstoned" in done.stdout and b"epoch 1" in done.stdout
    for out in (invalid, unknown, done):
        assert REASON.encode() not in out.stdout + out.stderr
    # a new deployment: the cut-over of each partition read is where it began, offset 0
    changelog = changelog_topic(ks.topic_prefix, "transcript-owner", SESSIONS)
    assert [r.value for r in read(ks, changelog, partitions=[partition_for(VICTIM, 8)])
            if r.key == CUTOVER_KEY] == [b"0"]
    # the control record's offset was committed with its forwarding (in the same transaction)
    assert b"transcript.control partition" in done.stdout
    assert group_lag(bootstrap, group, ks.topic(CONTROL)) == 0

    # a read_committed reader sees a tombstone for every entry of the session
    victim_keys = {entry_key(VICTIM, seq) for seq in (1, 2, 3)}
    seen = Collector(ks, entries_topic).wait_for(
        lambda r: victim_keys <= {x.key for x in r if x.value is None}, 30, w)
    latest = {r.key: r.value for r in seen}
    assert all(latest[k] is None for k in victim_keys)
    assert sum(v is not None for k, v in latest.items() if k.startswith(b"agent:ops:telegram:"
                                                                       b"direct:keep-me#")) == 2
    erasures = [json.loads(r.value) for r in read(ks, ks.topic(ERASURES))]
    assert erasures == [{"schema": "session-erasure/1", "session_key": VICTIM,
                         "erased_at": erasures[0]["erased_at"], "reason": REASON, "epoch": 1,
                         "through_seq": 3}]
    assert b"secret text" not in json.dumps(erasures).encode()

    audit = cli("audit", "--json", env=env)
    report = json.loads(audit.stdout)
    assert audit.returncode == 0, audit.stdout.decode()
    assert report["outcomes"]["erased"] == 1 and report["expected_entries"] == 2
    # forget went through transcript.control: forwarded into the input, decided there
    assert report["outcomes"]["forwarded"] == 1
    assert len(list(read(ks, ks.topic(CONTROL)))) == 1

    # a connector's erase on the input (1.2): a dead letter, the session untouched, and the
    # audit, which replays transcript.control and the cut-over, agrees
    forged = json.dumps({"schema": "session-erase/1", "session_key": KEPT,
                         "erased_at": datetime.now(UTC).isoformat(), "reason": "forged"})
    publish(ks, source, [(KEPT.encode(), forged.encode())], 8)
    [dead] = Collector(ks, ks.topic(DLQ)).wait_for(lambda r: len(r) >= 1, 60, w)
    assert dict(dead.headers)["error"] == b"session-erase/1 is accepted only on transcript.control"
    wait_drained(bootstrap, group, source, 120, [w])
    audit = cli("audit", "--json", env=env)
    report = json.loads(audit.stdout)
    assert audit.returncode == 0, audit.stdout.decode()
    assert (report["outcomes"]["erased"], report["outcomes"]["dead_letter"]) == (1, 1)

    # the log cleaner: rolls of the partition's active segment (entries of another session
    # there) until no record of an erased entry is left, not even its tombstone
    roll = beside(VICTIM)
    partition = partition_for(VICTIM, 8)
    deadline, n = time.monotonic() + 150, 0
    while True:
        n += 1
        publish(ks, source, [send(roll, f"r{n}", 100 + n, f"roll {n}")], 8)
        records = list(read(ks, entries_topic, partitions=[partition]))
        left = [r for r in records if r.key in victim_keys]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(1.0)  # the cleaner's pace (log.cleaner.backoff.ms): poll, not synchronise
    assert not left, f"{len(left)} records of erased entries after {n} rolls"
    print(f"compacted after {n} rolls")
    kept = [json.loads(r.value) for r in read(ks, entries_topic)
            if r.value is not None and r.key.startswith(KEPT.encode() + b"#")]
    assert sorted(e["seq"] for e in kept) == [1, 2]
    wait_drained(bootstrap, group, source, 120, [w])

    # later records: a retry of an erased send is not written; a new send starts in epoch 1
    now = datetime.now(UTC)
    publish(ks, source, [history[0], (VICTIM.encode(), dumps(confirmation(
        session_key=VICTIM, send_id="after", confirmed_at=(now + timedelta(seconds=1))
        .isoformat(), **{"payload.text": "after the erasure"})))], 8)
    wait_drained(bootstrap, group, source, 120, [w])
    shown = cli("show", VICTIM, "--json", env=env)
    assert [(e["epoch"], e["seq"], e["send_id"]) for e in map(json.loads,
            shown.stdout.splitlines())] == [(1, 4, "after")]

    audit = cli("audit", "--json", env=env)
    report = json.loads(audit.stdout)
    assert audit.returncode == 0, audit.stdout.decode()
    assert report["outcomes"]["erased_send"] == 1 and report["outcomes"]["erased"] == 1
    assert w.stop() == 0
    assert REASON not in w.log.read_text(errors="replace")
