"""Settings read once from the environment, validated at start with errors that name the variable.

Secrets (SASL password) are `SecretStr`: masked whenever the settings are printed or logged.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]

# environment variable -> field name
ENV = {
    "KAFKA_BOOTSTRAP": "bootstrap",
    "TRANSCRIPT_TOPIC_PREFIX": "topic_prefix",
    "TRANSCRIPT_REPLICATION_FACTOR": "replication_factor",
    "KAFKA_SECURITY_PROTOCOL": "security_protocol",
    "KAFKA_SASL_MECHANISM": "sasl_mechanism",
    "KAFKA_SASL_USERNAME": "sasl_username",
    "KAFKA_SASL_PASSWORD": "sasl_password",
    "KAFKA_SSL_CAFILE": "ssl_cafile",
    "KAFKA_SSL_CERTFILE": "ssl_certfile",
    "KAFKA_SSL_KEYFILE": "ssl_keyfile",
}


M = TypeVar("M", bound=BaseModel)

# The longest dedupe window a worker accepts (ten years): finite, and far within what
# timedelta and the state's millisecond expiries can hold.
MAX_DEDUPE_WINDOW_DAYS = 3650


class SettingsError(Exception):
    """The environment does not describe a usable configuration; the message names the variable."""


class KafkaSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    bootstrap: str = "127.0.0.1:9092"
    topic_prefix: str = Field(default="", pattern=r"^[A-Za-z0-9._-]*$")
    replication_factor: int | None = Field(default=None, ge=1)
    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None

    @field_validator("bootstrap")
    @classmethod
    def _hosts(cls, value: str) -> str:
        for host in value.split(","):
            name, sep, port = host.strip().rpartition(":")
            if not sep or not name or not port.isdigit():
                raise ValueError(f"expected host:port[,host:port…], got {host.strip()!r}")
        return value

    def topic(self, name: str) -> str:
        """The cluster name of a logical topic (prefix applied)."""
        return f"{self.topic_prefix}{name}"

    def kafka_python_kwargs(self) -> dict[str, Any]:
        """Connection settings for kafka-python clients (admin, producer, consumer)."""
        kwargs: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap.split(","),
            "security_protocol": self.security_protocol,
        }
        if self.security_protocol.startswith("SASL"):
            kwargs.update(
                sasl_mechanism=self.sasl_mechanism or "PLAIN",
                sasl_plain_username=self.sasl_username,
                sasl_plain_password=(
                    self.sasl_password.get_secret_value() if self.sasl_password else None
                ),
            )
        if self.security_protocol.endswith("SSL"):
            kwargs.update(
                ssl_cafile=self.ssl_cafile,
                ssl_certfile=self.ssl_certfile,
                ssl_keyfile=self.ssl_keyfile,
            )
        return kwargs


def kafka_settings(environ: Mapping[str, str] | None = None) -> KafkaSettings:
    """Read KafkaSettings from the environment; raise SettingsError naming the bad variable."""
    settings = _from_env(KafkaSettings, ENV, environ)
    if settings.security_protocol.startswith("SASL") and not (
        settings.sasl_username and settings.sasl_password
    ):
        raise SettingsError(
            "KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD are required with "
            f"KAFKA_SECURITY_PROTOCOL={settings.security_protocol}"
        )
    return settings


WORKER_ENV = {
    "TRANSCRIPT_APP_ID": "app_id",
    "TRANSCRIPT_DEDUPE_WINDOW_DAYS": "dedupe_window_days",
    "TRANSCRIPT_STATE_DIR": "state_dir",
    "TRANSCRIPT_PARTITIONS": "partitions",
    "TRANSCRIPT_LOG_LEVEL": "log_level",
    "TRANSCRIPT_HTTP_HOST": "http_host",
    "TRANSCRIPT_HTTP_PORT": "http_port",
    "TRANSCRIPT_LIVENESS_TIMEOUT_S": "liveness_timeout_s",
    "TRANSCRIPT_SESSION_TIMEOUT_S": "session_timeout_s",
    "TRANSCRIPT_INSTANCE_ID": "instance_id",
    "TRANSCRIPT_MAX_BATCH": "max_batch",
    "TRANSCRIPT_LINGER_MS": "linger_ms",
    "TRANSCRIPT_PROCESSING_GUARANTEE": "processing_guarantee",
    "TRANSCRIPT_SHUTDOWN_TIMEOUT_S": "shutdown_timeout_s",
    "TRANSCRIPT_TRANSACTION_TIMEOUT_S": "transaction_timeout_s",
}


class WorkerSettings(BaseModel):
    """What the worker needs beyond the connection. The app id is the consumer group."""

    model_config = ConfigDict(frozen=True)

    app_id: str = Field(default="transcript-owner", pattern=r"^[A-Za-z0-9._-]+$")
    dedupe_window_days: float = Field(
        default=7.0, gt=0, le=MAX_DEDUPE_WINDOW_DAYS, allow_inf_nan=False
    )
    state_dir: str = "var/state"
    partitions: int = Field(default=8, ge=1)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # README, "Operating": /livez /readyz /metrics; no port, no server (0: any free port)
    http_host: str = Field(default="127.0.0.1", min_length=1, max_length=253,
                           pattern=r"^[A-Za-z0-9.:_-]+$")
    http_port: int | None = Field(default=None, ge=0, le=65535)
    # /livez fails once a batch has been in flight this long (a stuck transaction or broker)
    liveness_timeout_s: float = Field(default=120.0, ge=1.0, le=86400, allow_inf_nan=False)
    session_timeout_s: float = Field(default=10.0, ge=1.0)
    # group.instance.id (a pod name): one per worker process of the group, stable across restarts
    instance_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._-]{1,249}$")
    max_batch: int = Field(default=20_000, ge=1)
    linger_ms: float = Field(default=5.0, ge=0)
    # README, "Processing guarantee": exactly_once commits each input partition's share of a
    # batch in one Kafka transaction; at_least_once is the cheaper mode before 1.1
    processing_guarantee: Literal["exactly_once", "at_least_once"] = "exactly_once"
    # SIGTERM: the batch in flight is finished (or its transactions abort) within this time
    shutdown_timeout_s: float = Field(default=30.0, ge=1.0, le=3600, allow_inf_nan=False)
    # an open transaction of a worker that died is aborted after this (or at once, when the
    # partition's next owner starts); read_committed readers wait for it until then
    transaction_timeout_s: float = Field(default=60.0, ge=1.0, le=900, allow_inf_nan=False)


def worker_settings(environ: Mapping[str, str] | None = None) -> WorkerSettings:
    return _from_env(WorkerSettings, WORKER_ENV, environ)


def _from_env(model: type[M], names: dict[str, str], environ: Mapping[str, str] | None) -> M:
    """Build `model` from the variables in `names`; errors name the variable, not the field."""
    env = os.environ if environ is None else environ
    values = {field: env[var] for var, field in names.items() if env.get(var, "") != ""}
    try:
        return model(**values)
    except ValidationError as exc:
        var_of = {field: var for var, field in names.items()}
        problems = [
            f"{var_of.get(str(e['loc'][0]), e['loc'][0])}: {e['msg']}" for e in exc.errors()
        ]
        raise SettingsError("invalid environment: " + "; ".join(problems)) from None
