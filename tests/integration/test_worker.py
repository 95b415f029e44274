"""The worker on the real broker: every rule end to end, re-keying, dead letters, restarts,
and two workers in one group."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest

from tests.conftest import cli
from tests.integration.harness import (
    Collector,
    group_of,
    poll_until,
    replay_entries,
    wait_drained,
    wait_members,
    without_written_at,
)
from workers.core.outputs import CONFIRMATIONS, DIAGNOSTICS, DLQ, ENTRIES
from workers.kafka_io import publish
from workers.scenario import steps
from workers.settings import kafka_settings
from workers.synthetic import generate

pytestmark = pytest.mark.kafka


@pytest.fixture
def ks(env, topics):
    return kafka_settings(env)


def collector(ks, topic):
    return Collector(ks, ks.topic(topic))


def test_every_rule_end_to_end_equals_replay(ks, env, workers):
    scenario = steps("e2e1", datetime(2026, 5, 1, 12, 0, tzinfo=UTC))
    publish(ks, ks.topic(CONFIRMATIONS), [(s.key, s.value) for s in scenario], 8)
    w = workers()
    entries, diags, dlq = (collector(ks, t) for t in (ENTRIES, DIAGNOSTICS, DLQ))
    n_written = sum(s.expect == "written" for s in scenario)
    entries.wait_for(lambda r: len(r) >= n_written, 90, w)
    dlq.wait_for(lambda r: len(r) >= 2, 30, w)
    diags.wait_for(lambda r: len(r) >= 5, 30, w)

    got = sorted(entries.values(), key=lambda e: (e["session_key"], e["seq"]))
    expected = sorted(replay_entries([s.value for s in scenario], env),
                      key=lambda e: (e["session_key"], e["seq"]))
    assert without_written_at(got) == without_written_at(expected)
    assert len(got) == n_written

    dm = "agent:ops:telegram:direct:ue2e1"
    by_session = {}
    for e in got:
        by_session.setdefault(e["session_key"], []).append(e)
    assert [e["seq"] for e in by_session[dm]] == list(range(1, len(by_session[dm]) + 1))
    assert [e["epoch"] for e in by_session[dm]] == [0, 0, 0, 1, 1, 1]
    assert by_session[dm][0]["posted_by"] == {
        "kind": "job", "id": "job-e2e1", "name": "daily report", "run_id": "r1"}
    media_entry = next(e for e in got if e["media"])
    assert media_entry["media"] == [{"kind": "image", "name": "chart.png"}]
    assert "token" not in json.dumps(got)

    codes = sorted((d["level"], d["code"]) for d in diags.values())
    assert codes == [
        ("error", "conflicting_duplicate"),
        ("info", "session_key_mismatch"),
        ("warn", "destination_bound_to_other_agent"),
        ("warn", "in_chat_job_delivered_elsewhere"),
        ("warn", "native_only_payload"),
    ]
    reasons = [dict(r.headers)["error"].decode() for r in dlq.records]
    assert reasons[0].startswith("not JSON")
    assert "confirmed_at: field required" in reasons[1]
    for r in dlq.records:
        h = dict(r.headers)
        assert h["source.topic"].decode() == ks.topic(CONFIRMATIONS)
        assert int(h["source.partition"]) >= 0 and int(h["source.offset"]) >= 0
    assert w.stop() == 0


def _confirmations_for(session_key: str, n: int, key: bytes) -> list[tuple[bytes, bytes]]:
    out = []
    for i in range(n):
        out.append((key, json.dumps({
            "schema": "delivery-confirmation/1", "send_id": f"send-{i}",
            "confirmed_at": f"2026-05-01T12:00:{i:02d}+00:00", "agent_id": "ops",
            "session_key": key.decode(), "route": {"channel": "telegram",
                                                   "peer_kind": "direct", "peer_id": "u7"},
            "origin": {"kind": "message_tool"}, "payload": {"text": f"message {i}"},
            "receipt": {"platform_message_ids": [str(i)]},
        }).encode()))
    return out


def test_non_canonical_key_lands_in_its_canonical_session_in_order(ks, workers):
    legacy = b"  AGENT:OPS:Telegram:DM:U7 "
    publish(ks, ks.topic(CONFIRMATIONS), _confirmations_for("x", 30, legacy))
    w = workers()
    entries = collector(ks, ENTRIES)
    entries.wait_for(lambda r: len(r) >= 30, 90, w)
    values = entries.values()
    assert {e["session_key"] for e in values} == {"agent:ops:telegram:direct:u7"}
    assert [e["send_id"] for e in values] == [f"send-{i}" for i in range(30)]
    assert [e["seq"] for e in values] == list(range(1, 31))
    assert {r.key.decode().split("#")[0] for r in entries.records} == {
        "agent:ops:telegram:direct:u7"}
    assert w.stop() == 0


def test_invalid_records_are_dead_lettered_and_neighbours_written(ks, workers):
    key = b"agent:ops:telegram:direct:u8"
    good = _confirmations_for("x", 4, key)
    mixed = [good[0], (key, b"\xff\xfe not json"), good[1],
             (key, b'{"schema": "delivery-confirmation/1"}'), good[2],
             (key, b'{"schema": "nope/1", "session_key": "x"}'), good[3]]
    publish(ks, ks.topic(CONFIRMATIONS), mixed, 8)
    w = workers()
    entries, dlq = collector(ks, ENTRIES), collector(ks, DLQ)
    entries.wait_for(lambda r: len(r) >= 4, 90, w)
    dlq.wait_for(lambda r: len(r) >= 3, 30, w)
    assert [e["send_id"] for e in entries.values()] == [f"send-{i}" for i in range(4)]
    assert [r.value for r in dlq.records] == [mixed[1][1], mixed[3][1], mixed[5][1]]
    errors = [dict(r.headers)["error"].decode() for r in dlq.records]
    assert errors[0].startswith("not JSON")
    assert "send_id: field required" in errors[1]
    assert errors[2].startswith("unknown schema")
    offsets = [int(dict(r.headers)["source.offset"]) for r in dlq.records]
    assert offsets == [1, 3, 5]
    assert w.stop() == 0


def test_a_small_inbox_pauses_fetching_and_loses_nothing(ks, env, workers, kafka_bootstrap):
    records = list(generate(20_000, sessions_n=300, seed=11))
    publish(ks, ks.topic(CONFIRMATIONS), records)
    # batches of 50: the inbox holds at most 1 batch before it pauses the partitions, and a
    # fetch hands over at most one batch, so the backlog is taken in hundreds of pause cycles
    w = workers(TRANSCRIPT_MAX_BATCH="50")
    wait_drained(kafka_bootstrap, group_of(env), ks.topic(CONFIRMATIONS), 300, [w])
    assert w.stop() == 0
    high_water = int(re.findall(r"stopped; .* inbox high-water (\d+)", w.log.read_text())[-1])
    assert high_water <= 2 * 50
    # the audit replays each partition in the order the worker read it (re-keyed records too)
    done = cli("audit", "--json", env=env, timeout=300)
    report = json.loads(done.stdout)
    assert done.returncode == 0, json.dumps(report, indent=1)
    assert report["expected_entries"] > 10_000


def test_restarted_worker_resumes_with_its_state(ks, env, workers):
    records = list(generate(3000, sessions_n=50, seed=7))
    first, second = records[:1500], records[1500:]
    retries = first[:200]  # connector retries of records the first run already wrote
    publish(ks, ks.topic(CONFIRMATIONS), first)
    expected = replay_entries([v for _, v in records + retries], env)
    expected_first = replay_entries([v for _, v in first], env)

    entries = collector(ks, ENTRIES)
    w = workers()
    entries.wait_for(lambda r: len(r) >= len(expected_first), 120, w)
    assert w.stop() == 0

    publish(ks, ks.topic(CONFIRMATIONS), second + retries)
    w2 = workers()
    entries.wait_for(lambda r: len(r) >= len(expected), 120, w2)
    got = entries.values()
    keys = [r.key for r in entries.records]
    assert len(keys) == len(set(keys)), "an entry key was written twice"
    by_session: dict[str, list[int]] = {}
    for e in got:
        by_session.setdefault(e["session_key"], []).append(e["seq"])
    for seqs in by_session.values():
        assert sorted(seqs) == list(range(1, len(seqs) + 1))
    assert sorted(e["send_id"] for e in got) == sorted(e["send_id"] for e in expected)
    assert w2.stop() == 0


def test_two_workers_split_partitions_and_write_what_one_would(ks, env, workers, kafka_bootstrap):
    # canonical keys only, so that input order is each session's partition order (as in replay)
    records = list(generate(4000, sessions_n=300, seed=11, legacy_rate=0.0))
    w1, w2 = workers("a"), workers("b")
    # both own partitions before the input arrives: it will be split between them (the one
    # that joined second takes its partitions after warming standbys of them up)
    wait_members(kafka_bootstrap, group_of(env), 2, [w1, w2])

    def owns(w) -> bool:  # noqa: ANN001
        taken = re.findall(r"assigned input partitions \[([0-9, ]*)\]", w.log.read_text())
        return bool(taken and taken[-1])

    poll_until(lambda: owns(w1) and owns(w2), 120, [w1, w2], "both workers owning partitions")

    entries = collector(ks, ENTRIES)
    publish(ks, ks.topic(CONFIRMATIONS), records)
    expected = replay_entries([v for _, v in records], env)
    entries.wait_for(lambda r: len(r) >= len(expected), 180, w1)
    got = entries.values()
    key = lambda e: (e["session_key"], e["seq"])  # noqa: E731
    assert without_written_at(sorted(got, key=key)) == without_written_at(sorted(expected, key=key))
    assert w1.stop() == 0 and w2.stop() == 0
    for w in (w1, w2):  # each worker decided records of its own partitions
        final = [ln for ln in w.log.read_text().splitlines() if "stopped; outcomes:" in ln]
        assert final and "'written': " in final[-1], w.tail()


def test_worker_refuses_topics_with_another_partition_count(env, topics):
    from tests.conftest import cli

    done = cli("worker", env=dict(env, TRANSCRIPT_PARTITIONS="12"), timeout=60)
    assert done.returncode == 2
    assert b"has 8 partitions, TRANSCRIPT_PARTITIONS is 12" in done.stderr


def test_worker_refuses_missing_topics(env):
    from tests.conftest import cli

    done = cli("worker", env=env, timeout=60)
    assert done.returncode == 2
    assert b"does not exist: run `transcript-owner topics apply`" in done.stderr


def test_a_takeover_that_waits_for_an_open_transaction_keeps_its_membership(ks, env, workers,
                                                                             kafka_bootstrap):
    """A last owner's transaction stays open on the changelog (a frozen worker) for twice the
    session timeout. The worker that takes the partitions over waits for it to end before it
    reads the changelog, and meanwhile stays a member of the group: it is not removed for
    missing heartbeats (the wait used to run inside aiokafka's assignment callback, which
    sends none), and once the transaction ends it writes, without exiting."""
    import asyncio

    from kafka import KafkaAdminClient

    from workers.core.outputs import changelog_topic
    from workers.stream.batch_send import send_all
    from workers.stream.clients import producer_factory
    from workers.stream.transactions import BatchTransactions

    changelog = changelog_topic(ks.topic_prefix, "transcript-owner", "sessions")
    group = group_of(env)
    loop = asyncio.new_event_loop()
    # not a transactional id of the group (`<group>-...`): a departed worker's would be ended
    # at once by the new owner (workers.stream.fencing); this one stands for a transaction the
    # new owner cannot end, which it must wait for
    frozen = BatchTransactions(producer_factory(ks, group, transaction_timeout_s=60),
                               f"{group}.frozen")
    loop.run_until_complete(frozen.start())
    loop.run_until_complete(frozen.producer.begin_transaction())
    loop.run_until_complete(send_all(frozen.producer, [(changelog, p, b"x", None, ())
                                                       for p in range(8)]))
    try:
        w = workers(TRANSCRIPT_SESSION_TIMEOUT_S="4")
        wait_members(kafka_bootstrap, group, 1, [w])
        admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        try:
            def member() -> list[str]:
                return [m["member_id"] for m in admin.describe_groups([group])[group]["members"]]

            joined = member()
            entries = collector(ks, ENTRIES)
            records = list(generate(200, sessions_n=20, seed=29, legacy_rate=0.0))
            publish(ks, ks.topic(CONFIRMATIONS), records)
            # twice the session timeout with the transaction open: nothing can be written
            with pytest.raises(AssertionError, match="timed out with 0 records"):
                entries.wait_for(lambda r: len(r) > 0, 8, w)
            assert member() == joined, "the waiting worker lost its group membership"
        finally:
            admin.close()
    finally:
        loop.run_until_complete(frozen.producer.abort_transaction())
        loop.run_until_complete(frozen.close())
        loop.close()
    expected = replay_entries([v for _, v in records], env)
    entries.wait_for(lambda r: len(r) >= len(expected), 120, w)
    assert w.alive() and w.stop() == 0
