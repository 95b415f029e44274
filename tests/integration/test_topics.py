"""`topics apply|check` against the real broker, and the worker's check of the topics."""

from __future__ import annotations

import json

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewPartitions

from tests.conftest import cli, delete_topics
from tests.integration.harness import Collector, poll_until
from workers.kafka_io import publish
from workers.settings import kafka_settings

pytestmark = pytest.mark.kafka

NAMES = ["delivery.confirmations", "transcript.entries", "transcript.diagnostics",
         "delivery.confirmations.dlq", "transcript.erasures", "transcript-owner-sessions-changelog",
         "transcript.checkpoints", "transcript.control", "transcript-owner-__assignor-__leader",
         "transcript.layout"]
CHANGELOG = "transcript-owner-sessions-changelog"


@pytest.fixture
def admin(kafka_bootstrap: str):
    client = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    yield client
    client.close()


@pytest.fixture
def cleanup(env):
    yield
    delete_topics(env["KAFKA_BOOTSTRAP"], env["TRANSCRIPT_TOPIC_PREFIX"])


def test_apply_creates_all_topics_then_changes_nothing(env, admin, cleanup):
    first = cli("topics", "apply", env=env)
    assert first.returncode == 0, first.stderr
    out = first.stdout.decode()
    for name in NAMES:
        assert f"created {env['TRANSCRIPT_TOPIC_PREFIX']}{name} " in out
    prefix = env["TRANSCRIPT_TOPIC_PREFIX"]
    topics = {t["name"]: t for t in admin.describe_topics([prefix + n for n in NAMES])}
    assert {n: len(t["partitions"]) for n, t in topics.items()} == {
        prefix + n: 1 if n.endswith(("__leader", ".layout")) else 8 for n in NAMES}
    changelog = admin.describe_configs([ConfigResource(
        ConfigResourceType.TOPIC, prefix + CHANGELOG)])["topic"][prefix + CHANGELOG]
    assert {k: changelog[k]["value"] for k in ("cleanup.policy", "retention.ms")} == {
        "cleanup.policy": "compact", "retention.ms": "-1"}

    second = cli("topics", "apply", env=env)
    assert second.returncode == 0, second.stderr
    assert second.stdout.decode().startswith(f"nothing to change: {len(NAMES)} topics match")


def test_check_reports_missing_then_clean_after_apply(env, cleanup):
    before = cli("topics", "check", env=env)
    assert before.returncode == 1
    assert before.stdout.decode().count("absent") == len(NAMES)

    assert cli("topics", "apply", env=env).returncode == 0
    after = cli("topics", "check", env=env)
    assert after.returncode == 0, after.stdout
    assert "no drift" in after.stdout.decode()


def cleanup_policy(admin, topic: str) -> str:
    found = admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic, configs=None)], config_filter="all")
    return found["topic"][topic]["cleanup.policy"]["value"]


def test_check_names_config_drift_and_apply_repairs_it(env, admin, cleanup):
    assert cli("topics", "apply", env=env).returncode == 0
    entries = env["TRANSCRIPT_TOPIC_PREFIX"] + "transcript.entries"
    admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, entries, configs={"cleanup.policy": "delete"})],
        incremental=True,
    )
    # the broker applies an accepted change from its metadata log a moment later
    poll_until(lambda: cleanup_policy(admin, entries) == "delete", 30, [], "config changed")
    drift = cli("topics", "check", env=env)
    assert drift.returncode == 1
    rows = [r.split() for r in drift.stdout.decode().splitlines()[2:]]
    assert rows == [[entries, "cleanup.policy", "compact", "delete"]]

    fix = cli("topics", "apply", env=env)
    assert fix.returncode == 0
    assert f"set {entries} cleanup.policy=compact" in fix.stdout.decode()
    assert cli("topics", "check", env=env).returncode == 0


def test_partition_drift_is_reported_and_never_changed(env, admin, cleanup):
    assert cli("topics", "apply", env=env).returncode == 0
    diagnostics = env["TRANSCRIPT_TOPIC_PREFIX"] + "transcript.diagnostics"
    admin.create_partitions({diagnostics: NewPartitions(total_count=12)})
    poll_until(lambda: len(admin.describe_topics([diagnostics])[0]["partitions"]) == 12, 30, [],
               "partitions added")

    drift = cli("topics", "check", env=env)
    assert drift.returncode == 1
    rows = [r.split() for r in drift.stdout.decode().splitlines()[2:]]
    assert rows == [[diagnostics, "partitions", "8", "12"]]

    refused = cli("topics", "apply", env=env)
    assert refused.returncode == 1
    assert f"would not change partitions of {diagnostics} (12 -> 8)" in refused.stdout.decode()
    (topic,) = admin.describe_topics([diagnostics])
    assert len(topic["partitions"]) == 12


def test_invalid_topics_file_names_file_line_and_field(env, tmp_path):
    bad = tmp_path / "topics.yaml"
    bad.write_text("defaults:\n  partitions: 8\ntopics:\n  a:\n    partitions: zero\n")
    done = cli("topics", "check", "--file", str(bad), env=env)
    assert done.returncode == 2
    err = done.stderr.decode()
    assert f"{bad}:5: topics.a.partitions:" in err


def test_bad_environment_is_a_clear_error(env):
    env = dict(env, KAFKA_SECURITY_PROTOCOL="SASL_SSL")
    done = cli("topics", "check", env=env)
    assert done.returncode == 2
    assert "KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD are required" in done.stderr.decode()


def test_the_app_id_names_the_changelog(env, admin, cleanup):
    env = dict(env, TRANSCRIPT_APP_ID="blue")
    done = cli("topics", "apply", env=env)
    assert done.returncode == 0, done.stderr
    prefix = env["TRANSCRIPT_TOPIC_PREFIX"]
    mine = {t for t in admin.list_topics() if t.startswith(prefix)}
    assert {prefix + "blue-sessions-changelog", prefix + "blue-__assignor-__leader"} <= mine
    assert prefix + CHANGELOG not in mine


def test_the_worker_uses_the_declared_changelog_and_faust_leaves_it_as_it_is(
    env, admin, workers, kafka_bootstrap
):
    prefix = env["TRANSCRIPT_TOPIC_PREFIX"]
    before = {t["name"]: t["topic_id"] for t in admin.describe_topics(
        [prefix + n for n in NAMES])}
    ks = kafka_settings(env)
    key = "agent:ops:telegram:direct:u1"
    publish(ks, ks.topic("delivery.confirmations"), [(key.encode(), json.dumps({
        "schema": "delivery-confirmation/1", "send_id": "s1",
        "confirmed_at": "2026-05-01T12:00:00+00:00", "agent_id": "ops", "session_key": key,
        "route": {"channel": "telegram", "peer_kind": "direct", "peer_id": "u1"},
        "origin": {"kind": "message_tool"}, "payload": {"text": "hello"},
        "receipt": {"platform_message_ids": ["1"]}}).encode())], 8)
    w = workers()
    entries = Collector(ks, ks.topic("transcript.entries"))
    entries.wait_for(lambda r: len(r) >= 1, 90, w)
    entries.close()
    assert w.stop() == 0
    ends = sum(int(o) for o in _end_offsets(kafka_bootstrap, prefix + CHANGELOG).values())
    assert ends >= 1  # the session's state went to the declared changelog
    after = {t["name"]: t["topic_id"] for t in admin.describe_topics(
        [prefix + n for n in NAMES])}
    assert after == before  # nothing recreated
    check = cli("topics", "check", env=env)
    assert check.returncode == 0, check.stdout.decode()  # nothing altered


def _end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        return {tp.partition: o for tp, o in consumer.end_offsets(tps).items()}
    finally:
        consumer.close()


def test_the_worker_refuses_a_missing_or_mispartitioned_changelog(env, admin, cleanup):
    assert cli("topics", "apply", env=env).returncode == 0
    changelog = env["TRANSCRIPT_TOPIC_PREFIX"] + CHANGELOG
    admin.delete_topics([changelog])
    _wait_gone(admin, changelog)

    missing = cli("worker", env=env, timeout=60)
    assert missing.returncode == 2
    assert (f"error: topic {changelog} does not exist: run `transcript-owner topics apply`"
            in missing.stderr.decode())

    admin.create_topics({changelog: {"num_partitions": 4, "replication_factor": 1,
                                     "configs": {"cleanup.policy": "compact"}}})
    wrong = cli("worker", env=env, timeout=60)
    assert wrong.returncode == 2
    assert (f"error: topic {changelog} has 4 partitions, TRANSCRIPT_PARTITIONS is 8"
            in wrong.stderr.decode())


def _wait_gone(admin, topic: str) -> None:
    poll_until(lambda: topic not in admin.list_topics(), 60, [], f"{topic} deleted")
