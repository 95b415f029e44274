"""Settings come from the environment; a bad one stops a command with the variable named."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

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
