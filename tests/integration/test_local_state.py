"""Local state is a cache of the changelog: per deployment, and discarded when it does not match.

A worker's RocksDB state lives under TRANSCRIPT_STATE_DIR/<prefix><app id>/, so two deployments
on one state dir never read each other's sessions; and state whose changelog was deleted and
recreated is discarded at start (with a warning) and restored from the changelog, as Kafka
Streams does with a corrupted task, instead of stopping the worker in faust's recovery.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest
from kafka.admin import KafkaAdminClient
from transcript_connector.partitioning import partition_for

from tests.conftest import cli
from tests.integration.harness import Collector, poll_until
from workers.core.outputs import CONFIRMATIONS, ENTRIES
from workers.kafka_io import end_offsets, publish, read
from workers.settings import kafka_settings

pytestmark = pytest.mark.kafka

WARNING = "discarding local state of sessions partition"  # ...partition 3: / ...partitions 0, 1:


def confirmations(session_key: str, run: str, n: int, start: int = 0) -> list[tuple[bytes, bytes]]:
    return [(session_key.encode(), json.dumps({
        "schema": "delivery-confirmation/1", "send_id": f"{run}-{i}",
        "confirmed_at": f"2026-05-01T12:00:{i:02d}+00:00", "agent_id": "ops",
        "session_key": session_key,
        "route": {"channel": "telegram", "peer_kind": "direct", "peer_id": "u1"},
        "origin": {"kind": "message_tool"}, "payload": {"text": f"{run} message {i}"},
        "receipt": {"platform_message_ids": [str(i)]},
    }).encode()) for i in range(start, start + n)]


def write_and_await(ks, worker, session_key: str, run: str, n: int, *, start: int = 0,
                    one_by_one: bool = False, timeout: float = 90) -> list[dict]:
    """Publish n confirmations of one session; return that session's entries once all are in
    (one_by_one: each awaited before the next, so each is its own batch and changelog write)."""
    entries = Collector(ks, ks.topic(ENTRIES))
    try:
        records = confirmations(session_key, run, n, start)
        batches = [[r] for r in records] if one_by_one else [records]
        want = start  # this run's earlier records are in the topic already
        for batch in batches:
            publish(ks, ks.topic(CONFIRMATIONS), batch, 8)
            want += len(batch)
            entries.wait_for(lambda r, want=want: _count(r, session_key, run) >= want,
                             timeout, worker)
        return [e for e in entries.values()
                if e["session_key"] == session_key and e["send_id"].startswith(f"{run}-")]
    finally:
        entries.close()


def _count(records, session_key: str, run: str) -> int:
    n = 0
    for r in records:
        e = json.loads(r.value)
        n += e["session_key"] == session_key and e["send_id"].startswith(f"{run}-")
    return n


def recreate_topics(env: dict[str, str]) -> None:
    """Delete every topic of this deployment and apply topics.yaml again (fresh, empty topics)."""
    prefix, bootstrap = env["TRANSCRIPT_TOPIC_PREFIX"], env["KAFKA_BOOTSTRAP"]
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        mine = [t for t in admin.list_topics() if t.startswith(prefix)]
        admin.delete_topics(mine)
        poll_until(lambda: not any(t.startswith(prefix) for t in admin.list_topics()), 60, [],
                   "topics deleted")
    finally:
        admin.close()
    # the broker may still be removing the old partitions: apply until it succeeds
    poll_until(lambda: cli("topics", "apply", env=env).returncode == 0, 60, [],
               "topics applied again", interval=1.0)


def discard_warning(log: str, partition: int) -> str:
    """The worker's warning line that discards `partition` of the session table."""
    for line in log.splitlines():
        m = re.search(rf"\[WARNING\] {WARNING}s? ([\d, ]+): ", line)
        if m and str(partition) in m.group(1).split(", "):
            return line
    raise AssertionError(f"no warning discarding partition {partition}:\n{log[-3000:]}")


def seqs(entries: list[dict]) -> list[int]:
    return sorted(e["seq"] for e in entries)


KEY = "agent:ops:telegram:direct:u1"


def test_two_deployments_on_one_state_dir_keep_their_own_state(env, topics, workers, tmp_path):
    state = tmp_path / "shared-state"
    ks_a = kafka_settings(env)
    a = workers("a", state)
    assert seqs(write_and_await(ks_a, a, KEY, "a", 5, one_by_one=True)) == [1, 2, 3, 4, 5]
    assert a.stop() == 0

    # another deployment (prefix) on the same state dir, its own topics from topics.yaml
    env_b = dict(env, TRANSCRIPT_TOPIC_PREFIX=env["TRANSCRIPT_TOPIC_PREFIX"] + "b.")
    done = cli("topics", "apply", env=env_b)
    assert done.returncode == 0, done.stderr.decode()
    ks_b = kafka_settings(env_b)
    b = workers("b", state, TRANSCRIPT_TOPIC_PREFIX=ks_b.topic_prefix)
    assert seqs(write_and_await(ks_b, b, KEY, "b", 3)) == [1, 2, 3]  # not 6, 7, 8
    assert b.stop() == 0

    # deployment a's own state is still there, untouched by b
    a2 = workers("a2", state)
    assert seqs(write_and_await(ks_a, a2, KEY, "a", 1, start=5)) == [1, 2, 3, 4, 5, 6]
    assert a2.stop() == 0
    for w in (a, b, a2):
        assert WARNING not in w.log.read_text(), w.tail()
    assert {p.name for p in state.iterdir()} >= {
        f"{ks_a.topic_prefix}transcript-owner", f"{ks_b.topic_prefix}transcript-owner"}


@pytest.mark.parametrize("marker", ["kept", "lost"])
def test_state_of_recreated_topics_is_discarded_with_a_warning(
    env, topics, workers, tmp_path, marker
):
    """With the topic id recorded beside the state, or (a marker lost, a broker without topic
    ids) from the offsets alone: the state has applied offsets the new changelog lacks."""
    state = tmp_path / "state"
    ks = kafka_settings(env)
    w1 = workers("w1", state)
    assert seqs(write_and_await(ks, w1, KEY, "old", 5, one_by_one=True)) == [1, 2, 3, 4, 5]
    assert w1.stop() == 0

    recreate_topics(env)
    if marker == "lost":
        for path in state.glob("*/v1/tables/sessions.changelog.json"):
            path.unlink()
    w2 = workers("w2", state)
    assert seqs(write_and_await(ks, w2, KEY, "new", 3)) == [1, 2, 3]
    assert w2.stop() == 0
    warning = discard_warning(w2.log.read_text(), partition_for(KEY, 8))
    if marker == "kept":
        assert "(the topic was recreated)" in warning, warning
    else:
        assert re.search(r"it has applied changelog offset \d+, but the changelog end offset "
                         r"is 0 \(the topic was recreated or truncated\)", warning), warning


def test_recreated_changelog_that_grew_past_the_state_is_detected_by_topic_id(
    env, topics, workers, tmp_path
):
    """The new changelog already holds more records than the old one did when the stale state
    comes back: offsets alone cannot tell, the topic id recorded beside the state does."""
    partition = partition_for(KEY, 8)
    other = next(k for i in range(10_000)
                 if partition_for(k := f"agent:ops:telegram:direct:v{i}", 8) == partition)
    state = tmp_path / "state"
    ks = kafka_settings(env)
    w1 = workers("w1", state)
    assert seqs(write_and_await(ks, w1, KEY, "old", 3, one_by_one=True)) == [1, 2, 3]
    assert w1.stop() == 0

    recreate_topics(env)
    # another worker (fresh state) fills the new changelog partition past the old offsets
    w_mid = workers("mid")
    write_and_await(ks, w_mid, other, "fill", 8, one_by_one=True)
    assert w_mid.stop() == 0

    w2 = workers("w2", state)
    assert seqs(write_and_await(ks, w2, KEY, "new", 2)) == [1, 2]  # not 4, 5
    assert w2.stop() == 0
    warning = discard_warning(w2.log.read_text(), partition)
    assert "it was written from topic id" in warning, warning


def test_topics_recreated_under_a_running_worker_stop_it_once_then_it_restores(
    env, topics, workers, tmp_path
):
    """The state owner's check, at the rebalance after the topics came back: the worker exits 75
    having discarded its local state, instead of stopping the same way at every start."""
    state = tmp_path / "state"
    ks = kafka_settings(env)
    # the worker notices deleted and recreated topics at its next metadata refresh (faust's
    # default: 5 minutes); 2 s here
    w1 = workers("w1", state, CONSUMER_METADATA_MAX_AGE_MS="2000")
    assert seqs(write_and_await(ks, w1, KEY, "old", 5, one_by_one=True)) == [1, 2, 3, 4, 5]
    recreate_topics(env)
    publish(ks, ks.topic(CONFIRMATIONS), confirmations(KEY, "new", 3), 8)
    assert w1.proc.wait(timeout=120) == 75, w1.tail()
    assert "local state is ahead of its changelog" in w1.log.read_text(), w1.tail()

    w2 = workers("w2", state)
    assert seqs(write_and_await(ks, w2, KEY, "new", 3)) == [1, 2, 3]
    assert w2.stop() == 0


def test_a_wiped_state_dir_is_restored_at_the_assignment(env, topics, workers, tmp_path):
    """The state owner applies the changelog to fresh stores when the partitions are assigned
    (one INFO line per assignment); the restored sessions dedupe and number on as before."""
    state = tmp_path / "state"
    ks = kafka_settings(env)
    others = ["agent:ops:telegram:direct:u2", "agent:ops:slack:channel:c9"]
    w1 = workers("w1", state)
    assert seqs(write_and_await(ks, w1, KEY, "a", 3, one_by_one=True)) == [1, 2, 3]
    for other in others:
        assert seqs(write_and_await(ks, w1, other, "o", 2)) == [1, 2]
    assert w1.stop() == 0
    changelog = f"{ks.topic_prefix}transcript-owner-sessions-changelog"
    ends = end_offsets(ks, changelog)
    committed = list(read(ks, changelog))
    shutil.rmtree(state)

    w2 = workers("w2", state)
    retry, new = confirmations(KEY, "a", 1, start=1)[0], confirmations(KEY, "a", 1, start=3)[0]
    entries = Collector(ks, ks.topic(ENTRIES))
    try:  # the retry, then a new send, of the same session: in order in one partition
        publish(ks, ks.topic(CONFIRMATIONS), [retry, new], 8)
        entries.wait_for(lambda rs: any(json.loads(r.value)["send_id"] == "a-3" for r in rs),
                         120, w2)
        mine = [e for e in entries.values() if e["session_key"] == KEY]
    finally:
        entries.close()
    assert sorted((e["send_id"], e["seq"]) for e in mine) == [
        ("a-0", 1), ("a-1", 2), ("a-2", 3), ("a-3", 4)]  # the retry is a duplicate: no entry
    assert w2.stop() == 0
    log = w2.log.read_text()
    found = re.findall(r"\[INFO\] assigned input partitions \[([\d, ]*)\]: .*?"
                       r"(\d+) changelog records applied in [\d.]+s", log)
    assert found, log[-3000:]
    assert {int(p) for p in found[0][0].split(", ")} == set(range(8))  # all, to one worker
    # every committed changelog record, once (the offsets also hold the transactions' markers)
    assert sum(int(n) for _, n in found) == len(committed) > 0, ends

