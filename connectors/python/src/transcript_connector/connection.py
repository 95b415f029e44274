"""How a connector's clients reach Kafka: the options both the publisher and the session reader
take (bootstrap, topic prefix, security), read from the worker's variables, and the checks a
connect makes before kafka-python's clients do.

kafka-python retries a refused TLS handshake or SASL authentication until its bootstrap
timeout and then says only `Unable to bootstrap`; `check_tls` and `check_sasl` make one
connection first so that the reason reaches the user (never the password).
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from kafka.errors import (
    KafkaConnectionError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from transcript_connector.errors import ConnectorError

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]

# environment variable -> connection option: the worker's names (workers/settings.py ENV)
CONNECTION_ENV = {
    "KAFKA_BOOTSTRAP": "bootstrap",
    "TRANSCRIPT_TOPIC_PREFIX": "topic_prefix",
    "KAFKA_SECURITY_PROTOCOL": "security_protocol",
    "KAFKA_SASL_MECHANISM": "sasl_mechanism",
    "KAFKA_SASL_USERNAME": "sasl_username",
    "KAFKA_SASL_PASSWORD": "sasl_password",
    "KAFKA_SSL_CAFILE": "ssl_cafile",
    "KAFKA_SSL_CERTFILE": "ssl_certfile",
    "KAFKA_SSL_KEYFILE": "ssl_keyfile",
}

Options = TypeVar("Options", bound="ConnectionOptions")

MAX_REQUEST_TIMEOUT_MS = 300_000  # 5 minutes


class ConnectionOptions(BaseModel):
    """Where Kafka is and who connects: the fields every connector client shares."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bootstrap: str = "127.0.0.1:9092"
    topic_prefix: str = Field(default="", pattern=r"^[A-Za-z0-9._-]*$")
    client_id: str = "transcript-owner-connector"
    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism = "PLAIN"
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None  # masked when the options are printed
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    # a request Kafka has not answered in 5 minutes (ten times the clients' default) is a broker
    # gone: longer only hides it (issue 42: 1e30 was accepted)
    request_timeout_ms: int = Field(default=30_000, ge=1000, le=MAX_REQUEST_TIMEOUT_MS)

    @field_validator("bootstrap")
    @classmethod
    def _hosts(cls, value: str) -> str:
        for entry in value.split(","):
            host, sep, port = entry.strip().rpartition(":")
            if not (host and sep and port.isascii() and port.isdigit()
                    and 0 < int(port) <= 65535):
                raise ValueError("expected host:port[,host:port…] with ports 1..65535")
        return value

    def kafka_kwargs(self) -> dict[str, Any]:
        """kafka-python's connection settings (admin, producer and consumer alike), as the
        worker's KafkaSettings.kafka_python_kwargs gives them."""
        kwargs: dict[str, Any] = {
            "bootstrap_servers": [b.strip() for b in self.bootstrap.split(",")],
            "security_protocol": self.security_protocol,
            "client_id": self.client_id,
            "request_timeout_ms": self.request_timeout_ms,
        }
        if self.security_protocol.startswith("SASL"):
            if not (self.sasl_username and self.sasl_password):
                raise ConnectorError("KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD are required "
                                     f"with KAFKA_SECURITY_PROTOCOL={self.security_protocol}")
            kwargs.update(sasl_mechanism=self.sasl_mechanism,
                          sasl_plain_username=self.sasl_username,
                          sasl_plain_password=self.sasl_password.get_secret_value())
        tls = [v for v, f in CONNECTION_ENV.items() if f.startswith("ssl_") and getattr(self, f)]
        if self.security_protocol.endswith("SSL"):
            kwargs["ssl_context"] = self._ssl_context()
        elif tls:
            raise ConnectorError(f"{', '.join(tls)} set, but KAFKA_SECURITY_PROTOCOL="
                                 f"{self.security_protocol} uses no TLS (SSL or SASL_SSL would)")
        return kwargs

    def who(self) -> str:
        """Who connects, for an error message: the SASL user and mechanism, never the
        password."""
        if self.security_protocol.startswith("SASL"):
            return (f"KAFKA_SASL_USERNAME={self.sasl_username!r} (SASL {self.sasl_mechanism} "
                    f"over {self.security_protocol})")
        return f"this client (KAFKA_SECURITY_PROTOCOL={self.security_protocol})"

    def _ssl_context(self) -> ssl.SSLContext:
        """TLS 1.2+, the broker's certificate checked against KAFKA_SSL_CAFILE (else the system's
        CAs) and its host name; a client certificate for mutual TLS (the key may be in the
        certificate's file, as the worker allows)."""
        if self.ssl_keyfile and not self.ssl_certfile:
            raise ConnectorError("KAFKA_SSL_KEYFILE is set without KAFKA_SSL_CERTFILE")
        try:
            context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ssl_cafile)
        except (ssl.SSLError, OSError) as exc:
            raise ConnectorError(f"KAFKA_SSL_CAFILE: {self.ssl_cafile} holds no usable CA "
                                 f"certificate ({type(exc).__name__})") from None
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.ssl_certfile:
            try:
                context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile,
                                        password=_no_password)
            except (ssl.SSLError, OSError, ConnectorError) as exc:
                raise ConnectorError(
                    f"KAFKA_SSL_CERTFILE/KAFKA_SSL_KEYFILE: {self.ssl_certfile} and "
                    f"{self.ssl_keyfile or self.ssl_certfile} are not a usable certificate and "
                    f"unencrypted key ({type(exc).__name__})") from None
        return context


def _no_password() -> bytes:
    """load_cert_chain's password callback: never a prompt on the terminal."""
    raise ConnectorError("the private key is encrypted")


def options_from_env(cls: type[Options], names: Mapping[str, str], environ: Mapping[str, str],
                     overrides: Mapping[str, Any]) -> Options:
    """`cls` from the variables `names` maps to its fields (empty counts as unset), then
    `overrides`. ConnectorError names the variable (never its value)."""
    values: dict[str, Any] = {f: environ[v].strip() for v, f in names.items() if environ.get(v, "")}
    if "sasl_mechanism" in values:
        values["sasl_mechanism"] = values["sasl_mechanism"].upper()
    if "security_protocol" in values:
        values["security_protocol"] = values["security_protocol"].upper()
    try:
        return cls(**{**values, **overrides})
    except ValidationError as exc:
        var = {f: v for v, f in names.items()}
        problems = []
        for e in exc.errors(include_input=False, include_url=False):
            if e["loc"]:
                problems.append(f"{var.get(str(e['loc'][0]), e['loc'][0])}: {e['msg']}")
            else:  # a limit between options: its message names them
                problems.append(str(e["ctx"]["error"]) if "error" in e.get("ctx", {})
                                else e["msg"])
        raise ConnectorError("invalid environment: " + "; ".join(problems)) from None


def check_tls(options: ConnectionOptions, kwargs: dict[str, Any],
              error: type[ConnectorError]) -> None:
    """One TLS handshake with the clients' context, to the first bootstrap server that
    takes a connection: kafka-python retries a certificate that does not verify (or a port
    without TLS) until its bootstrap timeout and then says only `Unable to bootstrap`, so
    an untrusted broker would look like an unreachable one. Anything but a TLS refusal
    (nothing listening, a time-out) passes: the clients retry and report that themselves.
    A refusal raises `error`."""
    context: ssl.SSLContext | None = kwargs.get("ssl_context")
    if context is None:
        return
    o = options
    for server in o.bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        host = host.strip("[]")
        try:
            with socket.create_connection((host, int(port)),
                                          timeout=min(o.request_timeout_ms / 1000, 10)) \
                    as raw, context.wrap_socket(raw, server_hostname=host):
                return
        except ssl.SSLCertVerificationError as exc:
            trust = (f"KAFKA_SSL_CAFILE={o.ssl_cafile}" if o.ssl_cafile
                     else "the system's trust store (KAFKA_SSL_CAFILE is unset)")
            raise error(
                f"cannot connect: TLS: the certificate of Kafka at {server.strip()} did not "
                f"verify against {trust}: {exc.verify_message or exc.reason}") from None
        except ssl.SSLError as exc:
            if exc.reason == "WRONG_VERSION_NUMBER":
                raise error(
                    f"cannot connect: TLS: Kafka at {server.strip()} does not speak TLS on "
                    f"that port (KAFKA_SECURITY_PROTOCOL={o.security_protocol})") from None
        except OSError:
            pass


def check_sasl(options: ConnectionOptions, kwargs: dict[str, Any]) -> None:
    """One connection as the clients make it (TLS, SASL handshake and authentication), to
    the first bootstrap server that completes or refuses one: kafka-python's clients retry
    a failed authentication until their bootstrap timeout (30 s) and then say only `Unable
    to bootstrap`. Raises SaslAuthenticationFailedError or UnsupportedSaslMechanismError
    (the caller names the user, the mechanism and the variables; never the password).

    kafka-python (3.0) drops the broker's error response when the connection's close
    arrives with it (about every other time) and sees only `socket disconnected`: a close
    after the broker answered ApiVersions is one in SASL, which the broker does only to
    refuse; it is tried again for the broker's reason, then refused without it. Anything
    else (nothing listening, a time-out) passes, as in check_tls."""
    if not options.security_protocol.startswith("SASL"):
        return
    try:
        from kafka.net import KafkaConnectionManager, NetworkSelector
    except ImportError:  # another kafka-python's internals: its clients report alone
        return
    timeout_ms = min(options.request_timeout_ms, 10_000)
    for server in range(len(options.bootstrap.split(","))):
        for attempt in range(3):
            net = NetworkSelector(**kwargs)
            manager = KafkaConnectionManager(net, **kwargs)
            try:
                net.run(_authenticate, manager, server, timeout_ms)
            except (SaslAuthenticationFailedError, UnsupportedSaslMechanismError):
                raise
            except _ClosedInSasl:
                if attempt == 2:
                    raise SaslAuthenticationFailedError(
                        "the broker closed the connection during SASL authentication "
                        "(kafka-python lost its reason)") from None
            except Exception:  # noqa: BLE001  (not reachable: the clients say so)
                break
            else:
                return
            finally:
                manager.close()
                net.close()


async def _authenticate(manager: Any, server: int, timeout_ms: int) -> None:
    """One connection to bootstrap server `server` (its index), through kafka-python's
    connection manager: raises what ended its initialisation (TLS, SASL), if anything did."""
    node_id = manager.cluster.bootstrap_brokers()[server].node_id
    conn = manager.get_connection(node_id, timeout_ms=timeout_ms, pop_on_close=False,
                                  refresh_metadata_on_err=False, reset_backoff_on_connect=False)
    try:
        await manager.wait_for(conn.init_future, timeout_ms)
    except KafkaConnectionError as exc:
        if conn.broker_version_data is not None and "socket disconnected" in str(exc):
            raise _ClosedInSasl from exc  # ApiVersions was answered: closed in SASL
        raise


class _ClosedInSasl(Exception):
    """The broker closed the connection after ApiVersions, during SASL: its refusal."""


def reason(exc: BaseException) -> str:
    """`Class: message`, without kafka-python's repetitions of the class (`[Error 58]
    SaslAuthenticationFailedError: SaslAuthenticationFailedError: …`)."""
    name, text = type(exc).__name__, " ".join(str(exc).split())
    for head in (f"[Error {getattr(exc, 'errno', '')}] {name}: ", f"{name}: "):
        text = text.removeprefix(head)
    text = text.removeprefix(f"{name}: ")
    return f"{name}: {text}" if text else name


__all__ = [
    "CONNECTION_ENV",
    "ConnectionOptions",
    "SaslMechanism",
    "SecurityProtocol",
    "check_sasl",
    "check_tls",
    "options_from_env",
    "reason",
]
