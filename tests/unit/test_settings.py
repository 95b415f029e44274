"""Settings come from the environment; a bad one stops a command with the variable named."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from workers.settings import (
    ENV,
    MAX_DEDUPE_WINDOW_DAYS,
    MAX_INPUT_BATCH_BYTES,
    WORKER_ENV,
    KafkaSettings,
    SettingsError,
    WorkerSettings,
    kafka_settings,
    numeric_range,
    worker_limits,
    worker_settings,
)
from workers.topics import retention_ms, topics_file

ROOT = Path(__file__).resolve().parents[2]


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


# ---- every numeric setting has a finite range, named in its error ---------------------------

# variable, reader, its range as the error names it (docs/configuration.md)
NUMERIC = [
    ("TRANSCRIPT_REPLICATION_FACTOR", kafka_settings, "a whole number from 1 to 32767", 1, 32767),
    ("TRANSCRIPT_DEDUPE_WINDOW_DAYS", worker_settings,
     "a finite number above 0 and at most 3650", 0.001, 3650),
    ("TRANSCRIPT_PARTITIONS", worker_settings, "a whole number from 1 to 10000", 1, 10_000),
    ("TRANSCRIPT_HTTP_PORT", worker_settings, "a whole number from 0 to 65535", 0, 65535),
    ("TRANSCRIPT_LIVENESS_TIMEOUT_S", worker_settings, "a finite number from 1 to 86400", 1,
     86400),
    ("TRANSCRIPT_SESSION_TIMEOUT_S", worker_settings, "a finite number from 1 to 1800", 1, 1800),
    ("TRANSCRIPT_MAX_BATCH", worker_settings, "a whole number from 1 to 1000000", 1, 1_000_000),
    ("TRANSCRIPT_LINGER_MS", worker_settings, "a finite number from 0 to 1000", 0, 1000),
    ("TRANSCRIPT_SHUTDOWN_TIMEOUT_S", worker_settings, "a finite number from 1 to 3600", 1, 3600),
    ("TRANSCRIPT_TRANSACTION_TIMEOUT_S", worker_settings, "a finite number from 1 to 900", 1,
     900),
    ("TRANSCRIPT_CHECKPOINT_INTERVAL_S", worker_settings, "a finite number from 0.1 to 604800",
     0.1, 604800),
    ("TRANSCRIPT_CHECKPOINT_KEEP", worker_settings, "a whole number from 1 to 1000", 1, 1000),
    ("TRANSCRIPT_CHECKPOINT_KEYS_PER_BATCH", worker_settings,
     "a whole number from 100 to 10000000", 100, 10_000_000),
    ("TRANSCRIPT_STATE_CACHE_MB", worker_settings, "a whole number from 8 to 65536", 8, 65_536),
    ("TRANSCRIPT_HEAD_CACHE", worker_settings, "a whole number from 0 to 10000000", 0,
     10_000_000),
    ("TRANSCRIPT_FETCH_BUFFER_MB", worker_settings, "a whole number from 1 to 4096", 1, 4096),
    ("TRANSCRIPT_STANDBY_REPLICAS", worker_settings, "a whole number from 0 to 16", 0, 16),
    ("TRANSCRIPT_RESTORE_PROCESSES", worker_settings, "a whole number from 1 to 64", 1, 64),
]


def test_the_table_holds_every_numeric_setting():
    """A numeric setting added without bounds fails here (numeric_range raises)."""
    numeric = {var for var, field in ENV.items() if numeric_range(KafkaSettings, field)}
    numeric |= {var for var, field in WORKER_ENV.items() if numeric_range(WorkerSettings, field)}
    assert numeric == {row[0] for row in NUMERIC}


@pytest.mark.parametrize(("var", "read", "span", "lowest", "highest"), NUMERIC,
                         ids=[row[0] for row in NUMERIC])
@pytest.mark.parametrize(("value", "problem"), [
    ("inf", "the value is infinite"),
    ("-inf", "the value is infinite"),
    ("nan", "the value is NaN"),
    ("1e300", "the value is above {highest}"),
    ("{above}", "the value is above {highest}"),
    ("-1", "the value is {below}"),
    ("soon", "the value is not a number"),
])
def test_a_numeric_setting_outside_its_finite_range_is_refused_naming_the_range(
        var, read, span, lowest, highest, value, problem):
    """inf, 1e300 and the like passed a lower bound alone: TRANSCRIPT_LINGER_MS=inf had the
    processor sleep for ever while /livez said 200, TRANSCRIPT_SESSION_TIMEOUT_S=inf reached
    the consumer group."""
    above = highest + 1
    below = "not above 0" if var == "TRANSCRIPT_DEDUPE_WINDOW_DAYS" else f"below {lowest:g}"
    value = value.format(above=above)
    problem = problem.format(highest=highest, below=below)
    with pytest.raises(SettingsError) as err:
        read({var: value})
    assert str(err.value) == f"invalid environment: {var}: must be {span}; {problem}"


@pytest.mark.parametrize(("var", "read", "span", "lowest", "highest"), NUMERIC,
                         ids=[row[0] for row in NUMERIC])
def test_both_ends_of_every_range_are_accepted_and_nothing_beyond(var, read, span, lowest,
                                                                  highest):
    field = (ENV | WORKER_ENV)[var]
    assert getattr(read({var: str(lowest)}), field) == lowest
    assert getattr(read({var: str(highest)}), field) == highest
    step = 1 if "whole" in span else 0.001
    for beyond in (lowest - step, highest + step):
        with pytest.raises(SettingsError, match=f"^invalid environment: {var}: must be {span}; "):
            read({var: str(beyond)})
    if "whole" in span:
        with pytest.raises(SettingsError, match=f"{var}: .*; the value is not a whole number$"):
            read({var: f"{lowest}.5"})


def test_the_defaults_and_the_values_this_repository_runs_with_are_in_range():
    """Defaults, and what the tests, the bench and the deployments set (grep TRANSCRIPT_)."""
    for model in (KafkaSettings, WorkerSettings):
        defaults = model()
        for field in model.model_fields:
            span = numeric_range(model, field)
            value = getattr(defaults, field)
            if span is not None and value is not None:
                assert span.lowest <= value <= span.highest, field
    ws = worker_settings({
        "TRANSCRIPT_SESSION_TIMEOUT_S": "6", "TRANSCRIPT_CHECKPOINT_INTERVAL_S": "1",
        "TRANSCRIPT_CHECKPOINT_KEEP": "1000", "TRANSCRIPT_CHECKPOINT_KEYS_PER_BATCH": "1000",
        "TRANSCRIPT_SHUTDOWN_TIMEOUT_S": "20", "TRANSCRIPT_LIVENESS_TIMEOUT_S": "2",
        "TRANSCRIPT_MAX_BATCH": "50", "TRANSCRIPT_PARTITIONS": "12",
        "TRANSCRIPT_HTTP_PORT": "6066"})
    assert (ws.session_timeout_s, ws.max_batch, ws.checkpoint_keep) == (6, 50, 1000)
    assert worker_settings({"TRANSCRIPT_SESSION_TIMEOUT_S": "45",
                            "TRANSCRIPT_MAX_BATCH": "2000"}).session_timeout_s == 45
    assert kafka_settings({"TRANSCRIPT_REPLICATION_FACTOR": "3"}).replication_factor == 3


@pytest.mark.parametrize(("bootstrap", "problem"), [
    ("127.0.0.1:99999", "the value has a port above 65535"),
    ("secret-host:123456789012345", "the value has a port above 65535"),
    ("127.0.0.1:0", "the value has port 0"),
    ("127.0.0.1", "the value has no :port"),
    (":9092", "the value has no host before the port"),
    ("secret-host:port", "the value has a port that is not a whole number"),
    ("secret-host:\u0663", "the value has a port that is not a whole number"),  # an Arabic 3
    ("secret host:9092", "the value has a blank or a control character in its host"),
    ("127.0.0.1:9092,,127.0.0.1:9093", "entry 2 of 3 is empty"),
    ("127.0.0.1:9092,secret-host:65536", "entry 2 of 2 has a port above 65535"),
])
def test_bootstrap_ports_are_1_to_65535_and_hosts_not_empty(bootstrap, problem):
    with pytest.raises(SettingsError) as err:
        kafka_settings({"KAFKA_BOOTSTRAP": bootstrap})
    assert str(err.value) == ("invalid environment: KAFKA_BOOTSTRAP: must be host:port[,host:port"
                              f"…] with a port from 1 to 65535; {problem}")
    assert "secret" not in str(err.value)  # what was typed is not repeated


def test_usable_bootstraps_are_accepted_up_to_port_65535():
    for bootstrap in ("127.0.0.1:1", "127.0.0.1:65535", "[::1]:9092",
                      "kafka-0.kafka:9092, kafka-1.kafka:9092"):
        assert kafka_settings({"KAFKA_BOOTSTRAP": bootstrap}).bootstrap == bootstrap
    with pytest.raises(SettingsError, match="KAFKA_BOOTSTRAP: .* has a port above 65535$"):
        kafka_settings({"KAFKA_BOOTSTRAP": "127.0.0.1:65536"})


@pytest.mark.parametrize(("command", "env", "says"), [
    ("worker", {"TRANSCRIPT_LINGER_MS": "inf"},
     "TRANSCRIPT_LINGER_MS: must be a finite number from 0 to 1000; the value is infinite"),
    ("worker", {"TRANSCRIPT_LINGER_MS": "1e300"},
     "TRANSCRIPT_LINGER_MS: must be a finite number from 0 to 1000; the value is above 1000"),
    ("worker", {"TRANSCRIPT_SESSION_TIMEOUT_S": "inf"},
     "TRANSCRIPT_SESSION_TIMEOUT_S: must be a finite number from 1 to 1800; the value is "
     "infinite"),
    ("audit", {"KAFKA_BOOTSTRAP": "127.0.0.1:99999"},
     "KAFKA_BOOTSTRAP: must be host:port[,host:port…] with a port from 1 to 65535; the value "
     "has a port above 65535"),
])
def test_settings_that_used_to_stall_stop_the_command_with_exit_2(command, env, says):
    # nothing listens on port 1: a worker that started anyway would reach no broker
    env = {**os.environ, "KAFKA_BOOTSTRAP": "127.0.0.1:1",
           "TRANSCRIPT_TOPIC_PREFIX": "nowhere.", **env}
    done = subprocess.run([sys.executable, "-m", "workers", command], env=env,
                          capture_output=True, timeout=60)
    assert (done.returncode, done.stdout) == (2, b"")
    assert done.stderr.decode() == f"error: invalid environment: {says}\n"


# ---- TLS: one context for every client, unusable files refused at start ----------------------

TLS = Path(__file__).resolve().parent / "data" / "tls"
SASL_SSL = {"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_USERNAME": "u",
            "KAFKA_SASL_PASSWORD": "hunter2", "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512"}


def test_one_tls_context_reaches_every_client():
    ks = kafka_settings(dict(SASL_SSL, KAFKA_SSL_CAFILE=str(TLS / "ca.pem")))
    context = ks.ssl_context()
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2
    assert [c["subject"] for c in context.get_ca_certs()] == [
        ((("commonName", "transcript-owner unit-test CA"),),)]
    kwargs = ks.kafka_python_kwargs()  # kafka-python's clients and the worker's aiokafka ones
    assert isinstance(kwargs["ssl_context"], ssl.SSLContext)
    assert not {"ssl_cafile", "ssl_certfile", "ssl_keyfile"} & set(kwargs)


def test_no_tls_means_no_context():
    ks = kafka_settings({})
    assert ks.ssl_context() is None and "ssl_context" not in ks.kafka_python_kwargs()
    sasl = kafka_settings(dict(SASL_SSL, KAFKA_SECURITY_PROTOCOL="SASL_PLAINTEXT"))
    assert sasl.ssl_context() is None and "ssl_context" not in sasl.kafka_python_kwargs()


def test_a_client_certificate_is_loaded_from_one_or_two_files():
    for cert, key in ((TLS / "client.pem", TLS / "client.key"),
                      (TLS / "client-with-key.pem", None)):
        env = dict(SASL_SSL, KAFKA_SECURITY_PROTOCOL="SSL", KAFKA_SSL_CAFILE=str(TLS / "ca.pem"),
                   KAFKA_SSL_CERTFILE=str(cert))
        if key:
            env["KAFKA_SSL_KEYFILE"] = str(key)
        assert isinstance(kafka_settings(env).ssl_context(), ssl.SSLContext)


@pytest.mark.parametrize("files, named, says", [
    ({"KAFKA_SSL_CAFILE": "/nonexistent/ca.pem"}, "KAFKA_SSL_CAFILE", "does not exist"),
    ({"KAFKA_SSL_CAFILE": str(TLS)}, "KAFKA_SSL_CAFILE", "is a directory"),
    ({"KAFKA_SSL_CAFILE": str(TLS / "README.md")}, "KAFKA_SSL_CAFILE", "is not PEM"),
    ({"KAFKA_SSL_CAFILE": str(TLS / "client.key")}, "KAFKA_SSL_CAFILE", "is not PEM"),
    ({"KAFKA_SSL_CAFILE": "@garbage"}, "KAFKA_SSL_CAFILE", "holds no usable CA certificate"),
    ({"KAFKA_SSL_CERTFILE": str(TLS / "client.pem")}, "KAFKA_SSL_CERTFILE", "a private key"),
    ({"KAFKA_SSL_KEYFILE": str(TLS / "client.key")}, "KAFKA_SSL_KEYFILE",
     "without KAFKA_SSL_CERTFILE"),
    ({"KAFKA_SSL_CERTFILE": str(TLS / "client.pem"),
      "KAFKA_SSL_KEYFILE": str(TLS / "client-encrypted.key")}, "KAFKA_SSL_KEYFILE", "encrypted"),
    ({"KAFKA_SSL_CERTFILE": str(TLS / "ca.pem"), "KAFKA_SSL_KEYFILE": str(TLS / "client.key")},
     "KAFKA_SSL_CERTFILE/KAFKA_SSL_KEYFILE", "not a usable certificate and key"),
])
def test_unusable_tls_files_are_refused_at_start_naming_the_variable(tmp_path, files, named, says):
    if files.get("KAFKA_SSL_CAFILE") == "@garbage":
        garbage = tmp_path / "ca.pem"
        garbage.write_text(
            "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n")
        files = {"KAFKA_SSL_CAFILE": str(garbage)}
    with pytest.raises(SettingsError) as err:
        kafka_settings(dict(SASL_SSL, **files))
    assert str(err.value).startswith(named)  # the variable first
    assert says in str(err.value)
    assert "hunter2" not in str(err.value)


def test_tls_files_without_a_tls_protocol_are_a_mistake():
    with pytest.raises(SettingsError) as err:
        kafka_settings({"KAFKA_SSL_CAFILE": str(TLS / "ca.pem")})
    assert "KAFKA_SSL_CAFILE set, but KAFKA_SECURITY_PROTOCOL=PLAINTEXT uses no TLS" in str(
        err.value)


def test_cli_refuses_a_missing_cafile_before_any_connection(tmp_path):
    env = dict(os.environ, **SASL_SSL, KAFKA_BOOTSTRAP="127.0.0.1:1",
               KAFKA_SSL_CAFILE=str(tmp_path / "missing.pem"))
    for command in (["topics", "check"], ["worker"]):
        done = subprocess.run([sys.executable, "-m", "workers", *command], env=env,
                              capture_output=True, timeout=60)
        assert done.returncode == 2, command
        err = done.stderr.decode()
        assert err.startswith(f"error: KAFKA_SSL_CAFILE: {tmp_path / 'missing.pem'} does not exist")
        assert "hunter2" not in err + done.stdout.decode()


# ---- limits between settings, at the worker's start (issue 42, item 7) ----------------------

RETENTION_MS = 7 * 86_400_000  # topics.yaml's delivery.confirmations


def limits(env: dict[str, str], retention_ms: int | None = RETENTION_MS) -> None:
    worker_limits(worker_settings(env), retention_ms, "topics.yaml")


def test_the_shipped_topics_yaml_and_defaults_are_within_the_limits():
    path = ROOT / "topics.yaml"
    assert retention_ms(path, "delivery.confirmations") == RETENTION_MS
    limits({}, retention_ms(path, "delivery.confirmations"))
    # the manifests' values: TRANSCRIPT_SHUTDOWN_TIMEOUT_S=30, the defaults otherwise
    limits({"TRANSCRIPT_SHUTDOWN_TIMEOUT_S": "30", "TRANSCRIPT_SESSION_TIMEOUT_S": "45"})


def test_a_liveness_timeout_below_the_transaction_timeout_is_refused_naming_both():
    with pytest.raises(SettingsError) as caught:
        limits({"TRANSCRIPT_LIVENESS_TIMEOUT_S": "60", "TRANSCRIPT_TRANSACTION_TIMEOUT_S": "300"})
    assert str(caught.value).startswith(
        "invalid environment: TRANSCRIPT_LIVENESS_TIMEOUT_S=60 is below "
        "TRANSCRIPT_TRANSACTION_TIMEOUT_S=300: /livez would fail")
    limits({"TRANSCRIPT_LIVENESS_TIMEOUT_S": "300", "TRANSCRIPT_TRANSACTION_TIMEOUT_S": "300"})
    # at least once has no transactions (and no checkpoints): nothing to hold it to
    limits({"TRANSCRIPT_LIVENESS_TIMEOUT_S": "2", "TRANSCRIPT_PROCESSING_GUARANTEE":
            "at_least_once", "TRANSCRIPT_CHECKPOINT_INTERVAL_S": "1"})


@pytest.mark.parametrize(("env", "says"), [
    ({"TRANSCRIPT_CHECKPOINT_KEEP": "6"},
     "TRANSCRIPT_CHECKPOINT_INTERVAL_S=86400 x TRANSCRIPT_CHECKPOINT_KEEP=6 is 6 days, shorter "
     "than the input's retention (topics.yaml: delivery.confirmations retention.ms=604800000, "
     "7 days): the input older than the oldest checkpoint would be replayed by no audit; set "
     "TRANSCRIPT_CHECKPOINT_KEEP to at least 7"),
    ({"TRANSCRIPT_CHECKPOINT_INTERVAL_S": "1"},
     "TRANSCRIPT_CHECKPOINT_INTERVAL_S=1 x TRANSCRIPT_CHECKPOINT_KEEP=9 is 9 s, shorter than "),
])
def test_a_checkpoint_span_shorter_than_the_input_s_retention_is_refused(env, says):
    with pytest.raises(SettingsError) as caught:
        limits(env)
    assert str(caught.value).startswith(f"invalid environment: {says}")


def test_a_checkpoint_interval_longer_than_the_input_s_retention_is_refused():
    """Then the newest checkpoint can be older than the oldest input left: no start."""
    env = {"TRANSCRIPT_CHECKPOINT_INTERVAL_S": "172800"}  # 2 days, 9 of them kept: 18 days
    limits(env)
    with pytest.raises(SettingsError, match=(
            r"^invalid environment: TRANSCRIPT_CHECKPOINT_INTERVAL_S=172800 is longer than the "
            r"input's retention \(topics.yaml: delivery.confirmations retention.ms=86400000, "
            r"1 days\): .* an audit past retention would have no start; set it to at most "
            r"86400$")):
        limits(env, 86_400_000)


def test_an_input_kept_for_ever_needs_no_checkpoint_span():
    limits({"TRANSCRIPT_CHECKPOINT_INTERVAL_S": "1", "TRANSCRIPT_CHECKPOINT_KEEP": "1"}, None)


def test_every_problem_is_named_at_once():
    with pytest.raises(SettingsError) as caught:
        limits({"TRANSCRIPT_LIVENESS_TIMEOUT_S": "5", "TRANSCRIPT_CHECKPOINT_KEEP": "1"})
    text = str(caught.value)
    assert "TRANSCRIPT_LIVENESS_TIMEOUT_S=5 is below" in text
    assert "; TRANSCRIPT_CHECKPOINT_INTERVAL_S=86400 x TRANSCRIPT_CHECKPOINT_KEEP=1 is" in text


@pytest.mark.parametrize(("env", "says"), [
    ({"TRANSCRIPT_LIVENESS_TIMEOUT_S": "5"},
     "TRANSCRIPT_LIVENESS_TIMEOUT_S=5 is below TRANSCRIPT_TRANSACTION_TIMEOUT_S=10"),
    ({"TRANSCRIPT_CHECKPOINT_KEEP": "1"},
     "TRANSCRIPT_CHECKPOINT_INTERVAL_S=86400 x TRANSCRIPT_CHECKPOINT_KEEP=1 is 1 days, shorter "
     "than the input's retention ("),
])
def test_the_worker_refuses_to_start_before_any_connection(env, says):
    # nothing listens on port 1: a worker that got past its settings would reach no broker
    env = {**os.environ, "KAFKA_BOOTSTRAP": "127.0.0.1:1",
           "TRANSCRIPT_TOPIC_PREFIX": "nowhere.", **env}
    done = subprocess.run([sys.executable, "-m", "workers", "worker"], env=env,
                          capture_output=True, timeout=60)
    assert (done.returncode, done.stdout) == (2, b"")
    err = done.stderr.decode()
    assert err.startswith(f"error: invalid environment: {says}"), err
    assert str(ROOT / "topics.yaml") in err or "LIVENESS" in says


def test_the_worker_reads_the_retention_from_the_topics_file_it_is_given(tmp_path):
    """TRANSCRIPT_TOPICS_FILE: the file `topics apply` read (a test that deletes its oldest
    input itself declares an input kept for ever, and checkpoints every second)."""
    import yaml

    doc = yaml.safe_load((ROOT / "topics.yaml").read_text())
    doc["topics"]["delivery.confirmations"]["configs"]["retention.ms"] = "-1"
    path = tmp_path / "topics.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert retention_ms(path, "delivery.confirmations") is None
    assert topics_file({"TRANSCRIPT_TOPICS_FILE": str(path)}) == path
    assert topics_file({}) == ROOT / "topics.yaml"
    # past its settings it checks its TLS files, before any connection: the next refusal
    env = {**os.environ, "KAFKA_BOOTSTRAP": "127.0.0.1:1", "TRANSCRIPT_TOPIC_PREFIX": "nowhere.",
           "TRANSCRIPT_CHECKPOINT_INTERVAL_S": "1", "TRANSCRIPT_TOPICS_FILE": str(path),
           "KAFKA_SECURITY_PROTOCOL": "SSL", "KAFKA_SSL_CAFILE": str(tmp_path / "none.pem")}
    done = subprocess.run([sys.executable, "-m", "workers", "worker"], env=env,
                          capture_output=True, timeout=60)
    err = done.stderr.decode()
    assert done.returncode == 2 and "KAFKA_SSL_CAFILE" in err, err
    assert "TRANSCRIPT_CHECKPOINT" not in err, err


@pytest.mark.parametrize(("partitions", "buffer_mb", "per_partition"), [
    (8, 16, MAX_INPUT_BATCH_BYTES), (64, 16, MAX_INPUT_BATCH_BYTES),
    (10_000, 16, MAX_INPUT_BATCH_BYTES), (1, 1, 1024 * 1024), (64, 4096, MAX_INPUT_BATCH_BYTES)])
def test_a_fetch_is_bounded_over_all_partitions_and_a_partition_fits_any_batch(
        partitions, buffer_mb, per_partition):
    """TRANSCRIPT_FETCH_BUFFER_MB bounds a fetch response over all partitions; a partition may
    fill up to the largest batch the input holds, whatever the partitions (issue 43: the buffer
    split over 64 partitions, 256 KiB each, brought one partition's batch a fetch)."""
    ws = worker_settings({"TRANSCRIPT_PARTITIONS": str(partitions),
                          "TRANSCRIPT_FETCH_BUFFER_MB": str(buffer_mb)})
    assert ws.fetch_bytes() == buffer_mb * 1024 * 1024
    assert ws.fetch_bytes_per_partition() == per_partition


@pytest.mark.parametrize(("max_batch", "poll"),
                         [(20_000, 2_500), (7, 1), (1, 1), (1_000_000, 125_000)])
def test_a_poll_hands_over_an_eighth_of_a_batch(max_batch, poll):
    """The inbox takes polls while one more fits its bound of a batch (workers.stream.ingest):
    a poll of a whole batch held two batches decoded in the inbox at the peak (issue 43)."""
    ws = worker_settings({"TRANSCRIPT_MAX_BATCH": str(max_batch)})
    assert ws.poll_records() == poll


def test_a_partitions_share_holds_the_largest_batch_the_input_topics_accept():
    """MAX_INPUT_BATCH_BYTES is the input topics' max.message.bytes in topics.yaml: a batch
    larger than a partition's share of a fetch comes only as a response's first partition."""
    topics = yaml.safe_load((ROOT / "topics.yaml").read_text())["topics"]
    for name in ("delivery.confirmations", "transcript.control"):
        assert int(topics[name]["configs"]["max.message.bytes"]) == MAX_INPUT_BATCH_BYTES, name
