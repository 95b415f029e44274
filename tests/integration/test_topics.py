"""`topics apply|check` against the real broker."""

from __future__ import annotations

import pytest
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewPartitions

from tests.conftest import cli, delete_topics

pytestmark = pytest.mark.kafka

NAMES = ["delivery.confirmations", "transcript.entries", "transcript.diagnostics",
         "delivery.confirmations.dlq"]


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
    assert all(len(t["partitions"]) == 8 for t in topics.values())

    second = cli("topics", "apply", env=env)
    assert second.returncode == 0, second.stderr
    assert second.stdout.decode().startswith("nothing to change: 4 topics match")


def test_check_reports_missing_then_clean_after_apply(env, cleanup):
    before = cli("topics", "check", env=env)
    assert before.returncode == 1
    assert before.stdout.decode().count("absent") == 4

    assert cli("topics", "apply", env=env).returncode == 0
    after = cli("topics", "check", env=env)
    assert after.returncode == 0, after.stdout
    assert "no drift" in after.stdout.decode()


def test_check_names_config_drift_and_apply_repairs_it(env, admin, cleanup):
    assert cli("topics", "apply", env=env).returncode == 0
    entries = env["TRANSCRIPT_TOPIC_PREFIX"] + "transcript.entries"
    admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, entries, configs={"cleanup.policy": "delete"})],
        incremental=True,
    )
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
