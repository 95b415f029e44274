"""The hash chain (DESIGN 1.2, "Tamper evidence") against the real broker: with every input
record deleted, `audit` still finds a changed, a removed and an appended entry, by session and
seq, from the entries topic and the worker's state alone; an honest `forget` leaves it clean."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from transcript_connector.chain import CHAIN_HEADER, link, parse_chain, verify_session
from transcript_connector.partitioning import partition_for

from tests.conftest import cli, keeping_input
from tests.integration.harness import (
    Collector,
    checkpointed_at,
    committed_input,
    group_of,
    poll_until,
    wait_drained,
)
from tests.unit.wire import confirmation, dumps, reset
from workers.core.outputs import CONFIRMATIONS, CONTROL, ENTRIES, entry_key, parse_entry_key
from workers.kafka_io import end_offsets, publish, read
from workers.settings import kafka_settings

pytestmark = pytest.mark.kafka
T0 = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)
CHANGED, REMOVED, APPENDED, ERASED = (f"agent:ops:telegram:direct:chain{x}" for x in "abcd")
SESSIONS = (CHANGED, REMOVED, APPENDED, ERASED)


@pytest.fixture
def env(env, tmp_path):
    """The input kept for ever: its oldest records are deleted by the test, and the worker
    checkpoints every second (tests.conftest.keeping_input)."""
    return keeping_input(env, tmp_path)


def inputs() -> list[tuple[bytes, bytes]]:
    """Four entries per session; CHANGED is reset between its second and third (a reset
    continues the chain)."""
    out = []
    for i, session in enumerate(SESSIONS):
        for n in range(4):
            at = T0 + timedelta(minutes=10 * i + n)
            out.append((session.encode(), dumps(confirmation(
                session_key=session, send_id=f"{session[-1]}{n}", confirmed_at=at.isoformat(),
                **{"payload.text": f"message {n} of {session[-6:]}",
                   "receipt.sent_at": at.isoformat()}))))
            if session == CHANGED and n == 1:
                out.append((session.encode(), dumps(reset(
                    session, (at + timedelta(seconds=30)).isoformat()))))
    return out


def live_entries(ks) -> dict[str, dict[int, tuple[bytes, bytes | None]]]:  # noqa: ANN001
    """Session -> seq -> (value, chain header): compaction's view of the entries topic."""
    latest: dict[bytes, tuple[bytes | None, bytes | None]] = {}
    for r in read(ks, ks.topic(ENTRIES)):
        chain = next((v for k, v in r.headers or () if k == CHAIN_HEADER), None)
        latest[r.key] = (r.value, chain)
    out: dict[str, dict[int, tuple[bytes, bytes | None]]] = {}
    for key, (value, chain) in latest.items():
        at = parse_entry_key(key)
        if at is not None and value is not None:
            out.setdefault(at[0], {})[at[1]] = (value, chain)
    return out


def test_audit_finds_tampering_with_no_input_left(env, topics, tmp_path, workers):
    ks = kafka_settings(env)
    source = ks.topic(CONFIRMATIONS)
    w = workers("w", tmp_path / "state", TRANSCRIPT_CHECKPOINT_INTERVAL_S="1")
    entries = Collector(ks, ks.topic(ENTRIES))
    publish(ks, source, inputs(), 8)
    wait_drained(env["KAFKA_BOOTSTRAP"], group_of(env), source, 120, [w])
    entries.wait_for(lambda r: len(r) >= 16, 30, w)
    entries.close()
    done = cli("forget", ERASED, "--reason", "a user's request", "--wait", "90", env=env)
    assert done.returncode == 0, done.stderr.decode() + w.tail()
    wait_drained(env["KAFKA_BOOTSTRAP"], group_of(env), source, 120, [w])

    # every input record is deleted, once each partition has a checkpoint at its end
    cut = committed_input(env, source)
    poll_until(lambda: checkpointed_at(ks, cut), 60, [w],
               "a checkpoint of every partition at its end")
    assert w.stop() == 0
    control = ks.topic(CONTROL)
    admin = KafkaAdminClient(bootstrap_servers=env["KAFKA_BOOTSTRAP"])
    try:
        admin.delete_records({TopicPartition(source, p): off for p, off in cut.items()})
        admin.delete_records({TopicPartition(control, p): off
                              for p, off in end_offsets(ks, control).items() if off})
    finally:
        admin.close()

    # as the worker wrote it: every entry chained, each session verifies, the audit is clean
    live = live_entries(ks)
    assert sorted(live) == sorted(SESSIONS[:3])  # ERASED: all tombstoned
    for session, rows in live.items():
        assert sorted(rows) == [1, 2, 3, 4] and all(c is not None for _, c in rows.values())
        assert verify_session(session, [(s, v, c) for s, (v, c) in rows.items()]).ok
    assert json.loads(live[CHANGED][3][0])["epoch"] == 1  # after the reset, one chain
    done = cli("audit", "--json", env=env)
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    report = json.loads(done.stdout)
    assert report["clean"] and report["input_records"] == 0
    assert report["actual_entries"] == 16  # ERASED's four, read before their tombstones

    # tampering, each by a plain producer with no credentials of the worker's state
    p = KafkaProducer(bootstrap_servers=env["KAFKA_BOOTSTRAP"])
    value, chain = live[CHANGED][2]
    changed = json.loads(value)
    changed["text"] = "not what was shown"
    p.send(ks.topic(ENTRIES), key=entry_key(CHANGED, 2), value=json.dumps(changed).encode(),
           headers=[(CHAIN_HEADER, chain)], partition=partition_for(CHANGED, 8))
    p.send(ks.topic(ENTRIES), key=entry_key(REMOVED, 2), value=None,
           partition=partition_for(REMOVED, 8))
    # an old entry sent again at the next seq, chained as the worker would chain it
    again = dict(json.loads(live[APPENDED][1][0]), seq=5)
    again_value = json.dumps(again).encode()
    again_chain = link(parse_chain(live[APPENDED][4][1]), again_value).hex().encode()
    p.send(ks.topic(ENTRIES), key=entry_key(APPENDED, 5), value=again_value,
           headers=[(CHAIN_HEADER, again_chain)], partition=partition_for(APPENDED, 8))
    p.flush()
    p.close()

    done = cli("audit", "--json", env=env)
    assert done.returncode == 1, done.stdout.decode() + done.stderr.decode()
    report = json.loads(done.stdout)
    chain_findings = report["examples"]["chain"]
    assert report["discrepancies"]["chain"] == len(chain_findings) == 3, chain_findings
    assert sorted(f.split(": ", 1)[0] for f in chain_findings) == sorted([
        f"{CHANGED} seq 2", f"{REMOVED} seq 3", f"{APPENDED} seq 5"])
    assert not any(ERASED in f for f in chain_findings)
    assert "not what was shown" not in done.stdout.decode()
