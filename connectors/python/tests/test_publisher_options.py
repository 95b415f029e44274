"""The publisher's options from the worker's variables, and what it refuses before any broker
is asked (the broker's side: tests/integration/test_python_connector.py)."""

from __future__ import annotations

import asyncio
import re
import socket
import ssl
import threading
from pathlib import Path
from typing import get_args

import pytest
from transcript_connector import (
    ConfirmationPublisher,
    ConnectorError,
    PublisherOptions,
    PublishError,
    ReaderOptions,
    build_reset,
    publisher_options_from_env,
    reader_options_from_env,
)


def test_defaults_are_the_workers() -> None:
    o = publisher_options_from_env({})
    assert (o.bootstrap, o.topic_name, o.partitions) == (
        "127.0.0.1:9092", "delivery.confirmations", 8)
    assert o.kafka_kwargs()["security_protocol"] == "PLAINTEXT"


def test_the_workers_variables_are_read() -> None:
    o = publisher_options_from_env({
        "KAFKA_BOOTSTRAP": "127.0.0.1:9092,127.0.0.1:9094", "TRANSCRIPT_TOPIC_PREFIX": "t1.",
        "TRANSCRIPT_PARTITIONS": "12", "KAFKA_SECURITY_PROTOCOL": "sasl_plaintext",
        "KAFKA_SASL_MECHANISM": "scram-sha-512", "KAFKA_SASL_USERNAME": "gateway",
        "KAFKA_SASL_PASSWORD": "pw-not-shown"}, transactional_id="gw-1")
    kwargs = o.kafka_kwargs()
    assert (o.topic_name, o.partitions, o.transactional_id) == (
        "t1.delivery.confirmations", 12, "gw-1")
    assert kwargs["bootstrap_servers"] == ["127.0.0.1:9092", "127.0.0.1:9094"]
    assert (kwargs["sasl_mechanism"], kwargs["sasl_plain_username"],
            kwargs["sasl_plain_password"]) == ("SCRAM-SHA-512", "gateway", "pw-not-shown")
    assert "pw-not-shown" not in repr(o)


@pytest.mark.parametrize(("env", "message"), [
    ({"TRANSCRIPT_PARTITIONS": "0"}, "TRANSCRIPT_PARTITIONS: "),
    ({"TRANSCRIPT_PARTITIONS": "eight"}, "TRANSCRIPT_PARTITIONS: "),
    ({"KAFKA_BOOTSTRAP": "127.0.0.1"}, "KAFKA_BOOTSTRAP: "),
    ({"KAFKA_BOOTSTRAP": "127.0.0.1:70000"}, "KAFKA_BOOTSTRAP: "),
    ({"KAFKA_SECURITY_PROTOCOL": "TLS"}, "KAFKA_SECURITY_PROTOCOL: "),
    ({"KAFKA_SASL_MECHANISM": "GSSAPI"}, "KAFKA_SASL_MECHANISM: "),
    ({"TRANSCRIPT_TOPIC_PREFIX": "a b"}, "TRANSCRIPT_TOPIC_PREFIX: "),
])
def test_a_bad_variable_is_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConnectorError, match=f"^invalid environment: {message}"):
        publisher_options_from_env(env)


def test_sasl_needs_both_credentials_and_never_shows_them() -> None:
    o = publisher_options_from_env({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
                                    "KAFKA_SASL_PASSWORD": "hunter2"})
    with pytest.raises(ConnectorError) as caught:
        o.kafka_kwargs()
    assert "KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD are required" in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_who_connects_is_named_without_the_password() -> None:
    o = publisher_options_from_env({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
                                    "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
                                    "KAFKA_SASL_USERNAME": "gw", "KAFKA_SASL_PASSWORD": "hunter2"})
    assert o.who() == "KAFKA_SASL_USERNAME='gw' (SASL SCRAM-SHA-512 over SASL_SSL)"
    assert publisher_options_from_env({}).who() == (
        "this client (KAFKA_SECURITY_PROTOCOL=PLAINTEXT)")


def test_a_port_without_tls_is_refused_at_connect() -> None:
    """connect() makes one TLS handshake first: a listener that answers in plain text is named
    at once (kafka-python alone would retry until its bootstrap timeout)."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(4096)  # the ClientHello
            conn.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()

    async def run() -> None:
        p = ConfirmationPublisher(publisher_options_from_env({
            "KAFKA_BOOTSTRAP": f"127.0.0.1:{port}", "KAFKA_SECURITY_PROTOCOL": "SSL"}))
        with pytest.raises(PublishError) as caught:
            async with p:
                pass
        assert str(caught.value) == (f"cannot connect: TLS: Kafka at 127.0.0.1:{port} does not "
                                     "speak TLS on that port (KAFKA_SECURITY_PROTOCOL=SSL)")

    try:
        asyncio.run(run())
    finally:
        thread.join(10)
        server.close()


def test_tls_files_need_a_tls_protocol(tmp_path: Path) -> None:
    o = publisher_options_from_env({"KAFKA_SSL_CAFILE": str(tmp_path / "ca.pem")})
    with pytest.raises(ConnectorError, match="KAFKA_SSL_CAFILE set, but KAFKA_SECURITY_PROTOCOL"):
        o.kafka_kwargs()


def test_tls_builds_the_context_from_the_workers_files(tmp_path: Path) -> None:
    system = publisher_options_from_env({"KAFKA_SECURITY_PROTOCOL": "SSL"}).kafka_kwargs()
    context = system["ssl_context"]
    assert isinstance(context, ssl.SSLContext) and context.check_hostname
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    (tmp_path / "ca.pem").write_text("not a certificate")
    for env, message in [
        ({"KAFKA_SSL_CAFILE": str(tmp_path / "ca.pem")}, "KAFKA_SSL_CAFILE: "),
        ({"KAFKA_SSL_KEYFILE": str(tmp_path / "k.pem")}, "KAFKA_SSL_KEYFILE is set without"),
        ({"KAFKA_SSL_CERTFILE": str(tmp_path / "none.pem")},
         "KAFKA_SSL_CERTFILE/KAFKA_SSL_KEYFILE"),
    ]:
        o = publisher_options_from_env({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
                                        "KAFKA_SASL_USERNAME": "u", "KAFKA_SASL_PASSWORD": "p",
                                        **env})
        with pytest.raises(ConnectorError, match=message):
            o.kafka_kwargs()


def test_nothing_is_sent_before_connect_and_transactions_need_an_id() -> None:
    record = build_reset(session_key="agent:ops:main", reset_at="2026-05-01T00:00:00Z")

    async def run() -> None:
        p = ConfirmationPublisher(publisher_options_from_env({}))
        with pytest.raises(PublishError, match="not connected"):
            await p.publish(record)
        with pytest.raises(PublishError, match="transactional_id"):
            async with p.transaction():
                pass
        await p.close()

    asyncio.run(run())


def test_a_missing_codec_is_refused_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    from kafka import codec

    monkeypatch.setattr(codec, "has_zstd", lambda: False)
    with pytest.raises(ConnectorError, match=r"transcript-connector\[zstd\]"):
        ConfirmationPublisher(publisher_options_from_env({}, compression="zstd"))


# ---- every timeout and interval bounded (issue 42, item 7) ----

def _bounds(model: type, name: str) -> tuple[object, object]:
    low = high = None
    for m in model.model_fields[name].metadata:
        low = getattr(m, "ge", getattr(m, "gt", low))
        high = getattr(m, "le", high)
    return low, high


def test_every_numeric_option_has_a_lowest_and_a_highest_value() -> None:
    """1e30 was accepted for TRANSCRIPT_PARTITIONS_CHECK_MS (a publisher that never sees a
    repartition) and for every timeout."""
    for model in (PublisherOptions, ReaderOptions):
        for name, info in model.model_fields.items():
            types = (info.annotation, *get_args(info.annotation))
            if int in types or float in types:
                low, high = _bounds(model, name)
                assert low is not None and high is not None, f"{model.__name__}.{name}"


@pytest.mark.parametrize(("env", "option", "highest"), [
    ({"TRANSCRIPT_PARTITIONS_CHECK_MS": "1" + "0" * 30}, None, 300_000),
    ({"TRANSCRIPT_PARTITIONS_CHECK_MS": "300001"}, None, 300_000),
    ({}, {"delivery_timeout_ms": 10**30}, 900_000),
    ({}, {"transaction_timeout_ms": 900_001}, 900_000),
    ({}, {"request_timeout_ms": 300_001}, 300_000),
])
def test_past_its_highest_value_an_option_is_refused_naming_it(env, option, highest) -> None:
    name = next(iter(env)) if env else next(iter(option))
    with pytest.raises(ConnectorError, match=(
            f"^invalid environment: {name}: Input should be less than or equal to {highest}$")):
        publisher_options_from_env(env, **(option or {}))
    if env:  # the highest value itself is accepted
        o = publisher_options_from_env({name: str(highest)})
        assert o.partitions_check_ms == highest
    else:
        delivery = {"delivery_timeout_ms": highest} if name == "request_timeout_ms" else {}
        o = publisher_options_from_env({}, **{name: highest, **delivery})
        assert getattr(o, name) == highest


def test_a_delivery_timeout_below_the_request_timeout_is_refused_naming_both() -> None:
    """kafka-python would refuse the producer at connect, naming neither."""
    with pytest.raises(ConnectorError) as caught:
        publisher_options_from_env({}, delivery_timeout_ms=20_000, request_timeout_ms=30_000)
    assert str(caught.value) == (
        "invalid environment: delivery_timeout_ms=20000 is below request_timeout_ms=30000: a "
        "record must be given at least one request's time (kafka-python refuses the producer)")
    assert publisher_options_from_env({}, delivery_timeout_ms=30_000,
                                      request_timeout_ms=30_000).delivery_timeout_ms == 30_000


@pytest.mark.parametrize(("env", "option", "says"), [
    ({"TRANSCRIPT_READ_TIMEOUT_MS": "1" + "0" * 30}, {}, "TRANSCRIPT_READ_TIMEOUT_MS: "),
    ({"TRANSCRIPT_READ_TIMEOUT_MS": "600001"}, {}, "TRANSCRIPT_READ_TIMEOUT_MS: Input should be "
     "less than or equal to 600000"),
    ({"TRANSCRIPT_READ_SESSIONS_PER_PARTITION": "1000001"}, {},
     "TRANSCRIPT_READ_SESSIONS_PER_PARTITION: Input should be less than or equal to 1000000"),
    ({"TRANSCRIPT_READ_DB_POLL_MS": "1001"}, {},
     "TRANSCRIPT_READ_DB_POLL_MS: Input should be less than or equal to 1000"),
    ({}, {"request_timeout_ms": 10**30}, "request_timeout_ms: Input should be less than or "
     "equal to 300000"),
])
def test_the_reader_s_options_are_bounded_too(env, option, says) -> None:
    with pytest.raises(ConnectorError, match=f"^invalid environment: {re.escape(says)}"):
        reader_options_from_env(env, **option)
