"""Settings come from the environment; a bad one stops a command with the variable named."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from workers.settings import MAX_DEDUPE_WINDOW_DAYS, SettingsError, kafka_settings, worker_settings


def test_defaults_and_prefix():
    ks = kafka_settings({"TRANSCRIPT_TOPIC_PREFIX": "t1."})
    assert ks.bootstrap == "127.0.0.1:9092"
    assert ks.topic("transcript.entries") == "t1.transcript.entries"
    assert worker_settings({}).partitions == 8


def test_sasl_password_is_masked_and_passed_to_clients():
    ks = kafka_settings({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_USERNAME": "u",
                         "KAFKA_SASL_PASSWORD": "hunter2", "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512"})
    assert "hunter2" not in repr(ks) and "hunter2" not in str(ks.model_dump())
    kwargs = ks.kafka_python_kwargs()
    assert kwargs["sasl_plain_password"] == "hunter2"
    assert kwargs["sasl_mechanism"] == "SCRAM-SHA-512" and kwargs["security_protocol"] == "SASL_SSL"


@pytest.mark.parametrize("env, named", [
    ({"KAFKA_BOOTSTRAP": "nohost"}, "KAFKA_BOOTSTRAP"),
    ({"KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT"}, "KAFKA_SASL_USERNAME"),
    ({"TRANSCRIPT_TOPIC_PREFIX": "bad prefix"}, "TRANSCRIPT_TOPIC_PREFIX"),
])
def test_kafka_errors_name_the_variable(env, named):
    with pytest.raises(SettingsError, match=named):
        kafka_settings(env)


@pytest.mark.parametrize("env, named", [
    ({"TRANSCRIPT_PARTITIONS": "0"}, "TRANSCRIPT_PARTITIONS"),
    ({"TRANSCRIPT_DEDUPE_WINDOW_DAYS": "soon"}, "TRANSCRIPT_DEDUPE_WINDOW_DAYS"),
    ({"TRANSCRIPT_LOG_LEVEL": "loud"}, "TRANSCRIPT_LOG_LEVEL"),
])
def test_worker_errors_name_the_variable(env, named):
    with pytest.raises(SettingsError, match=named):
        worker_settings(env)


@pytest.mark.parametrize("value", ["inf", "Infinity", "-inf", "nan", "1e9", "3650.5", "0", "-1"])
def test_the_dedupe_window_must_be_finite_positive_and_at_most_ten_years(value):
    with pytest.raises(SettingsError, match="TRANSCRIPT_DEDUPE_WINDOW_DAYS"):
        worker_settings({"TRANSCRIPT_DEDUPE_WINDOW_DAYS": value})


@pytest.mark.parametrize("value, days", [("0.5", 0.5), ("7", 7.0), ("3650", 3650.0)])
def test_every_accepted_dedupe_window_is_a_usable_timedelta(value, days):
    window = worker_settings({"TRANSCRIPT_DEDUPE_WINDOW_DAYS": value}).dedupe_window_days
    assert window == days <= MAX_DEDUPE_WINDOW_DAYS == 3650
    # what the worker does with it: a timedelta, added to the latest valid timestamp
    latest = datetime(2999, 12, 31, 23, 59, 59, tzinfo=UTC)
    assert latest + timedelta(days=window) > latest


def test_cli_exits_2_with_the_variable_named():
    env = dict(os.environ, TRANSCRIPT_LOG_LEVEL="loud")
    done = subprocess.run([sys.executable, "-m", "workers", "worker"], env=env,
                          capture_output=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.decode().startswith("error: invalid environment: TRANSCRIPT_LOG_LEVEL")


@pytest.mark.parametrize("value", ["pod 0", "pod/0", "x" * 250, "pöd"])
def test_the_instance_id_is_a_kafka_safe_name(value):
    with pytest.raises(SettingsError, match="TRANSCRIPT_INSTANCE_ID"):
        worker_settings({"TRANSCRIPT_INSTANCE_ID": value})


def test_the_instance_id_is_optional_and_kept_as_given():
    assert worker_settings({}).instance_id is None
    assert worker_settings({"TRANSCRIPT_INSTANCE_ID": "transcript-owner-0"}).instance_id == (
        "transcript-owner-0")


def test_exactly_once_is_the_default_and_at_least_once_is_chosen_by_name():
    assert worker_settings({}).processing_guarantee == "exactly_once"
    chosen = worker_settings({"TRANSCRIPT_PROCESSING_GUARANTEE": "at_least_once"})
    assert chosen.processing_guarantee == "at_least_once"


@pytest.mark.parametrize(("var", "value"), [
    ("TRANSCRIPT_PROCESSING_GUARANTEE", "exactly-once"),
    ("TRANSCRIPT_PROCESSING_GUARANTEE", "at_most_once"),
    ("TRANSCRIPT_SHUTDOWN_TIMEOUT_S", "0"),
    ("TRANSCRIPT_SHUTDOWN_TIMEOUT_S", "nan"),
    ("TRANSCRIPT_SHUTDOWN_TIMEOUT_S", "inf"),
    ("TRANSCRIPT_TRANSACTION_TIMEOUT_S", "0.5"),
    ("TRANSCRIPT_TRANSACTION_TIMEOUT_S", "901"),  # past the broker's transaction.max.timeout.ms
])
def test_guarantee_and_timeouts_are_checked(var, value):
    with pytest.raises(SettingsError, match=var):
        worker_settings({var: value})
