"""The hash chain (DESIGN 1.2, "Tamper evidence") against the real broker: with every input
record deleted, `audit` still finds a changed, a removed and an appended entry, by session and
seq, from the entries topic and the worker's state alone; an honest `forget` leaves it clean.
Every header of a session stripped, or doubled, and a session's erased entries put back without
headers in front of its new chain: `show --verify` and `audit` find each (issue 42.4)."""

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


STRIPPED, DOUBLED, PUT_BACK = (f"agent:ops:telegram:direct:chain{x}" for x in "xyz")


def sends(session: str, tag: str, n: int, at: datetime) -> list[tuple[bytes, bytes]]:
    return [(session.encode(), dumps(confirmation(
        session_key=session, send_id=f"{tag}{i}", confirmed_at=(at + timedelta(seconds=i)
                                                                ).isoformat(),
        **{"payload.text": f"message {i} of {session[-6:]}",
           "receipt.sent_at": (at + timedelta(seconds=i)).isoformat()}))) for i in range(n)]


def test_stripped_doubled_and_put_back_entries_are_found(env, topics, tmp_path, workers):
    """Before: `show --verify` passed the stripped and the doubled session ("verified 0 entries
    (3 written before the chain)", exit 0), and `audit` found neither the put-back entries (no
    header, before the new chain) nor a header stripped anywhere but at the end. The worker's
    heads now record where each chain starts (chain_from) and what was erased (live_from)."""
    ks = kafka_settings(env)
    source = ks.topic(CONFIRMATIONS)
    w = workers("w", tmp_path / "state")
    entries = Collector(ks, ks.topic(ENTRIES))
    t0 = datetime.now(UTC) - timedelta(hours=1)
    publish(ks, source, sends(STRIPPED, "s", 3, t0) + sends(DOUBLED, "d", 3, t0)
            + sends(PUT_BACK, "p", 3, t0), 8)
    wait_drained(env["KAFKA_BOOTSTRAP"], group_of(env), source, 120, [w])
    written = entries.wait_for(lambda r: len(r) >= 9, 30, w)
    entries.close()
    before = {(r.key, r.value) for r in written if r.key.startswith(PUT_BACK.encode())}
    done = cli("forget", PUT_BACK, "--reason", "a user's request", "--wait", "90", env=env)
    assert done.returncode == 0, done.stderr.decode() + w.tail()
    publish(ks, source, sends(PUT_BACK, "q", 2, datetime.now(UTC) + timedelta(seconds=1)), 8)
    wait_drained(env["KAFKA_BOOTSTRAP"], group_of(env), source, 120, [w])
    poll_until(lambda: sorted(live_entries(ks).get(PUT_BACK, {})) == [4, 5], 30, [w],
               "the erased session's two new entries")
    assert w.stop() == 0
    live = live_entries(ks)
    for session in (STRIPPED, DOUBLED, PUT_BACK):
        assert verify_session(session, [(s, v, c) for s, (v, c) in live[session].items()]).ok
        done = cli("show", session, "--verify", env=env)
        assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    assert cli("audit", "--json", env=env).returncode == 0

    # a plain producer, with no credentials of the worker's state
    p = KafkaProducer(bootstrap_servers=env["KAFKA_BOOTSTRAP"])
    for seq, (value, _) in sorted(live[STRIPPED].items()):
        p.send(ks.topic(ENTRIES), key=entry_key(STRIPPED, seq), value=value,
               partition=partition_for(STRIPPED, 8))
    for seq, (value, chain) in sorted(live[DOUBLED].items()):
        p.send(ks.topic(ENTRIES), key=entry_key(DOUBLED, seq), value=value,
               headers=[(CHAIN_HEADER, chain), (CHAIN_HEADER, chain)],
               partition=partition_for(DOUBLED, 8))
    for key, value in sorted(before):
        p.send(ks.topic(ENTRIES), key=key, value=value, partition=partition_for(PUT_BACK, 8))
    p.flush()
    p.close()

    for session, seqs in ((STRIPPED, (1, 2, 3)), (DOUBLED, (1, 2, 3)), (PUT_BACK, (1, 2, 3))):
        done = cli("show", session, "--verify", env=env)
        assert done.returncode == 1, done.stdout.decode() + done.stderr.decode()
        found = [x for x in done.stdout.decode().splitlines() if x.startswith("chain: ")]
        assert [x.split(": ")[1] for x in found] == [f"seq {s}" for s in seqs], found
    done = cli("audit", "--json", env=env)
    assert done.returncode == 1, done.stdout.decode() + done.stderr.decode()
    chain = {f.split(": ", 1)[0] for f in json.loads(done.stdout)["examples"]["chain"]}
    assert chain == {f"{s} seq {n}" for s in (STRIPPED, DOUBLED, PUT_BACK) for n in (1, 2, 3)}, \
        chain
