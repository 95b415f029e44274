"""Settings read once from the environment, validated at start with errors that name the variable.

Secrets (SASL password) are `SecretStr`: masked whenever the settings are printed or logged.
TLS has one configuration path: `KafkaSettings.ssl_context()`, which every client gets (kafka-python
through `kafka_python_kwargs()`, the worker's aiokafka producers and faust through the same), and
which `kafka_settings()` builds once at start so that an unusable CA, certificate or key file stops
the command with the variable named.
"""

from __future__ import annotations

import math
import os
import ssl
from collections.abc import Mapping
from typing import Any, Literal, NamedTuple, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from workers.core.errors import OwnerError

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

# The largest record batch delivery.confirmations and transcript.control hold: their
# max.message.bytes in topics.yaml (tests/unit/test_settings.py holds the two equal).
MAX_INPUT_BATCH_BYTES = 2 * 1024 * 1024


class SettingsError(OwnerError):
    """The environment does not describe a usable configuration; the message names the variable."""


class KafkaSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    bootstrap: str = "127.0.0.1:9092"
    topic_prefix: str = Field(default="", pattern=r"^[A-Za-z0-9._-]*$")
    # Kafka's CreateTopics carries it as an INT16 (the brokers' count limits it further)
    replication_factor: int | None = Field(default=None, ge=1, le=32767)
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
        """Every entry a host and a port a client can connect to: a port beyond 65535 would
        pass a digits check and then leave every client retrying for ever."""
        entries = value.split(",")
        for i, entry in enumerate(entries, 1):
            problem = _endpoint_problem(entry.strip())
            if problem is not None:
                where = f"entry {i} of {len(entries)}" if len(entries) > 1 else "the value"
                raise ValueError("must be host:port[,host:port…] with a port from 1 to 65535; "
                                 f"{where} {problem}")
        return value

    def topic(self, name: str) -> str:
        """The cluster name of a logical topic (prefix applied)."""
        return f"{self.topic_prefix}{name}"

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context of every client, or None without TLS (PLAINTEXT, SASL_PLAINTEXT).

        The broker's certificate is verified against KAFKA_SSL_CAFILE (else the system's trust
        store) and its name or IP against the bootstrap host; KAFKA_SSL_CERTFILE and
        KAFKA_SSL_KEYFILE are the client's own certificate (mutual TLS). A new context each call,
        so a client made later reads the files as they are then. Raises SettingsError naming the
        variable whose file is missing, unreadable or not PEM."""
        if not self.security_protocol.endswith("SSL"):
            return None
        return _tls_context(self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile)

    def kafka_python_kwargs(self) -> dict[str, Any]:
        """Connection settings for kafka-python clients (admin, producer, consumer); aiokafka
        takes the same keywords (the worker's producers)."""
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
            kwargs["ssl_context"] = self.ssl_context()
        return kwargs


def _endpoint_problem(entry: str) -> str | None:
    """What is wrong with one `host:port` of KAFKA_BOOTSTRAP, or None (never the host: the
    message must not carry what was typed there)."""
    name, sep, port = entry.rpartition(":")
    if not entry:
        return "is empty"
    if not sep:
        return "has no :port"
    if not name:
        return "has no host before the port"
    if any(c.isspace() or not c.isprintable() for c in name):
        return "has a blank or a control character in its host"
    if not (port.isascii() and port.isdigit()):
        return "has a port that is not a whole number"
    if len(port) > 5 or int(port) > 65535:
        return "has a port above 65535"
    if int(port) == 0:
        return "has port 0"
    return None


def _tls_context(cafile: str | None, certfile: str | None,
                 keyfile: str | None) -> ssl.SSLContext:
    """A client context (TLS 1.2+, the broker's certificate and host name checked) from PEM
    files; SettingsError names the variable of a file that cannot serve."""
    if cafile:  # then only it is trusted, as kafka-python and aiokafka do with a CA file
        _pem_file("KAFKA_SSL_CAFILE", cafile, "CERTIFICATE")
        try:
            context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile)
        except (ssl.SSLError, OSError) as exc:
            raise SettingsError(f"KAFKA_SSL_CAFILE: {cafile} holds no usable CA certificate "
                                f"({_reason(exc)})") from None
    else:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)  # the system's CAs
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if keyfile and not certfile:
        raise SettingsError("KAFKA_SSL_KEYFILE is set without KAFKA_SSL_CERTFILE")
    if certfile:
        _pem_file("KAFKA_SSL_CERTFILE", certfile, "CERTIFICATE")
        key_var, key_path = ("KAFKA_SSL_KEYFILE", keyfile) if keyfile else (
            "KAFKA_SSL_CERTFILE", certfile)
        text = _pem_file(key_var, key_path, "PRIVATE KEY")
        if "ENCRYPTED" in text:
            raise SettingsError(f"{key_var}: {key_path}: the private key is encrypted; "
                                "an unencrypted PEM key is expected")
        try:
            context.load_cert_chain(certfile, keyfile, password=_no_password)
        except (ssl.SSLError, OSError) as exc:
            raise SettingsError(f"KAFKA_SSL_CERTFILE/KAFKA_SSL_KEYFILE: {certfile} and "
                                f"{key_path} are not a usable certificate and key "
                                f"({_reason(exc)})") from None
    return context


def _pem_file(var: str, path: str, block: str) -> str:
    """The text of `path`, which must be a readable file holding a PEM `block`
    (CERTIFICATE, or PRIVATE KEY of any kind)."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            text = f.read(1 << 20)
    except FileNotFoundError:
        raise SettingsError(f"{var}: {path} does not exist") from None
    except IsADirectoryError:
        raise SettingsError(f"{var}: {path} is a directory, not a PEM file") from None
    except OSError as exc:
        raise SettingsError(f"{var}: {path} is not readable ({exc.strerror})") from None
    if not any(line.startswith("-----BEGIN ") and line.rstrip().endswith(f"{block}-----")
               for line in text.splitlines()):
        kind = "a certificate" if block == "CERTIFICATE" else "a private key"
        raise SettingsError(f"{var}: {path} is not PEM holding {kind} "
                            f"(no '-----BEGIN …{block}-----' line)")
    return text


def _no_password() -> bytes:
    """load_cert_chain's password callback: never a prompt on the terminal."""
    raise SettingsError("KAFKA_SSL_KEYFILE: the private key is encrypted; "
                        "an unencrypted PEM key is expected")


def _reason(exc: BaseException) -> str:
    return getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)


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
    tls_files = [var for var, field in ENV.items()
                 if field.startswith("ssl_") and getattr(settings, field)]
    if tls_files and not settings.security_protocol.endswith("SSL"):
        raise SettingsError(
            f"{', '.join(tls_files)} set, but KAFKA_SECURITY_PROTOCOL="
            f"{settings.security_protocol} uses no TLS (SSL or SASL_SSL would)")
    settings.ssl_context()  # built once at start: an unusable file stops here, named
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
    "TRANSCRIPT_TRANSACTION_VERSION": "transaction_version",
    "TRANSCRIPT_CHECKPOINT_INTERVAL_S": "checkpoint_interval_s",
    "TRANSCRIPT_CHECKPOINT_KEEP": "checkpoint_keep",
    "TRANSCRIPT_CHECKPOINT_KEYS_PER_BATCH": "checkpoint_keys_per_batch",
    "TRANSCRIPT_STATE_CACHE_MB": "state_cache_mb",
    "TRANSCRIPT_HEAD_CACHE": "head_cache",
    "TRANSCRIPT_FETCH_BUFFER_MB": "fetch_buffer_mb",
    "TRANSCRIPT_STANDBY_REPLICAS": "standby_replicas",
    "TRANSCRIPT_RESTORE_PROCESSES": "restore_processes",
}


class WorkerSettings(BaseModel):
    """What the worker needs beyond the connection. The app id is the consumer group."""

    model_config = ConfigDict(frozen=True)

    app_id: str = Field(default="transcript-owner", pattern=r"^[A-Za-z0-9._-]+$")
    dedupe_window_days: float = Field(
        default=7.0, gt=0, le=MAX_DEDUPE_WINDOW_DAYS, allow_inf_nan=False
    )
    state_dir: str = "var/state"
    # far above any topic of this deployment (8 by default) and finite
    partitions: int = Field(default=8, ge=1, le=10_000)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # docs/operating.md, "Endpoints": /livez /readyz /metrics; no port, no server (0: any
    # free port)
    http_host: str = Field(default="127.0.0.1", min_length=1, max_length=253,
                           pattern=r"^[A-Za-z0-9.:_-]+$")
    http_port: int | None = Field(default=None, ge=0, le=65535)
    # /livez fails once a batch has been in flight this long (a stuck transaction or broker)
    liveness_timeout_s: float = Field(default=120.0, ge=1.0, le=86400, allow_inf_nan=False)
    # at most the broker's default group.max.session.timeout.ms (30 min)
    session_timeout_s: float = Field(default=10.0, ge=1.0, le=1800, allow_inf_nan=False)
    # group.instance.id (a pod name): one per worker process of the group, stable across restarts
    instance_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._-]{1,249}$")
    # the worker holds at most 2 batches of input decoded (one waiting, one decided) and a fetch
    # response: this bounds what it holds in memory too
    max_batch: int = Field(default=20_000, ge=1, le=1_000_000)
    # a batch of fewer records waits this long to fill: a second adds a second to latency
    linger_ms: float = Field(default=1.0, ge=0, le=1000, allow_inf_nan=False)
    # docs/guarantees.md, "Processing guarantee": exactly_once commits each input partition's
    # share of a batch in one Kafka transaction; at_least_once is the cheaper mode before 1.1
    processing_guarantee: Literal["exactly_once", "at_least_once"] = "exactly_once"
    # SIGTERM: the batch in flight is finished (or its transactions abort) within this time
    shutdown_timeout_s: float = Field(default=30.0, ge=1.0, le=3600, allow_inf_nan=False)
    # an open transaction of a worker that died or froze is aborted after this (or at once, when
    # the worker restarts with the same id); a partition's next owner and read_committed
    # readers wait for it until then. 10 s as Kafka Streams' exactly-once default: a batch's
    # transaction lasts well under a second
    transaction_timeout_s: float = Field(default=10.0, ge=1.0, le=900, allow_inf_nan=False)
    # Kafka's transaction protocol: "auto" speaks v2 (KIP-890, Kafka >= 4.0) where the cluster
    # has finalized transaction.version 2, else v1; "1" always v1 (docs/configuration.md)
    transaction_version: Literal["auto", "1"] = "auto"
    # audit past input retention (core/checkpoint_format.py): a copy of each partition's state
    # per interval, `keep` of them (interval x keep must exceed the input's retention)
    checkpoint_interval_s: float = Field(default=86400.0, ge=0.1, le=7 * 86400,
                                         allow_inf_nan=False)
    checkpoint_keep: int = Field(default=9, ge=1, le=1000)
    # state keys of checkpoints one batch (so one transaction) carries at most: a larger
    # partition's checkpoint is spread over batches
    checkpoint_keys_per_batch: int = Field(default=100_000, ge=100, le=10_000_000)
    # memory (docs/configuration.md, "Memory"): what the worker holds does not grow with its
    # sessions or partitions beyond these. The partition stores' block cache and memtables
    # together (workers.stream.store_memory). 32: 64 held some 20 MB more at a million sessions
    # on 64 partitions and drained no faster (docs/performance.md)
    state_cache_mb: int = Field(default=32, ge=8, le=65_536)
    # sessions' heads kept decoded between batches (a head not here is read from its store)
    head_cache: int = Field(default=20_000, ge=0, le=10_000_000)
    # input fetched ahead, over all partitions: the most a fetch response holds; a partition
    # may fill up to MAX_INPUT_BATCH_BYTES of it. 4: 8 held some 24 MB more at a million
    # sessions on 64 partitions for about 5% more drain, 16 some 35 MB more again
    # (docs/performance.md)
    fetch_buffer_mb: int = Field(default=4, ge=1, le=4096)
    # workers that keep each partition's state warm beside its owner (workers.stream.standby);
    # fewer while the group has fewer other members
    standby_replicas: int = Field(default=1, ge=0, le=16)
    # processes a large restore is split over (workers.stream.restore_processes); each holds
    # its stores' cache (TRANSCRIPT_STATE_CACHE_MB) while it runs. 1: the worker restores alone
    restore_processes: int = Field(default=2, ge=1, le=64)

    def fetch_bytes(self) -> int:
        """The most one fetch response holds, over all partitions (the consumer's
        fetch_max_bytes)."""
        return self.fetch_buffer_mb * 1024 * 1024

    def poll_records(self) -> int:
        """The most records one poll of the consumer hands the inbox: an eighth of a batch, so
        the inbox stops taking polls an eighth short of a batch and never holds more than one
        decoded (what waits beyond it stays in the fetch response, as bytes)."""
        return max(1, self.max_batch // 8)

    def fetch_bytes_per_partition(self) -> int:
        """What one partition may fill of a fetch response: the largest record batch the input
        topics hold, so a whole batch always fits. A smaller share is no bound: the broker
        fills only the response's first partition past its share, and sends the others the
        share's bytes of their next batch, which the consumer cannot read and throws away (at 64
        partitions and 256 KiB each, some 16 MB a response for one partition's 500 records)."""
        return min(self.fetch_bytes(), MAX_INPUT_BATCH_BYTES)


def worker_settings(environ: Mapping[str, str] | None = None) -> WorkerSettings:
    return _from_env(WorkerSettings, WORKER_ENV, environ)


def worker_limits(ws: WorkerSettings, input_retention_ms: int | None, topics_file: str) -> None:
    """The limits between settings that only the exactly-once worker runs by (issue 42), checked
    at its start (other commands read the same variables and ignore these). SettingsError names
    every variable involved, and the value each must reach. `input_retention_ms`: topics.yaml's
    delivery.confirmations retention.ms (None: kept for ever), read from `topics_file`.

    - TRANSCRIPT_LIVENESS_TIMEOUT_S at least TRANSCRIPT_TRANSACTION_TIMEOUT_S: a batch's
      transaction may be open until its timeout and still commit; /livez failing sooner gets a
      worker restarted (by its own pod's probe) that Kafka still waits for, and the restart
      aborts its transaction and starts a restore.
    - TRANSCRIPT_CHECKPOINT_INTERVAL_S at most the input's retention: else, for part of every
      interval, no checkpoint lies within the retained input, and an audit past retention has
      no start (exit 2).
    - TRANSCRIPT_CHECKPOINT_INTERVAL_S x TRANSCRIPT_CHECKPOINT_KEEP at least the retention: the
      kept checkpoints reach back to the oldest input Kafka keeps, so an audit replays all of it
      (docs/audit-and-erasure.md); a shorter span leaves the input before the oldest checkpoint
      replayed by no audit, its entries only checked for presence.
    """
    if ws.processing_guarantee != "exactly_once":
        return  # no transactions and no checkpoints
    problems = []
    if ws.liveness_timeout_s < ws.transaction_timeout_s:
        problems.append(
            f"TRANSCRIPT_LIVENESS_TIMEOUT_S={_num(ws.liveness_timeout_s)} is below "
            f"TRANSCRIPT_TRANSACTION_TIMEOUT_S={_num(ws.transaction_timeout_s)}: /livez would fail "
            "(and the pod's probe restart the worker) while a batch's transaction can still "
            "commit; set the liveness timeout to at least the transaction timeout")
    if input_retention_ms is not None:
        retention_s = input_retention_ms / 1000
        where = (f"the input's retention ({topics_file}: delivery.confirmations retention.ms="
                 f"{input_retention_ms}, {_span(retention_s)})")
        interval, keep = ws.checkpoint_interval_s, ws.checkpoint_keep
        if interval > retention_s:
            problems.append(
                f"TRANSCRIPT_CHECKPOINT_INTERVAL_S={_num(interval)} is longer than {where}: "
                "for part of every interval no checkpoint would lie within the retained input, "
                "and an audit past retention would have no start; set it to at most "
                f"{_num(retention_s)}")
        elif interval * keep < retention_s:
            problems.append(
                f"TRANSCRIPT_CHECKPOINT_INTERVAL_S={_num(interval)} x TRANSCRIPT_CHECKPOINT_KEEP="
                f"{keep} is {_span(interval * keep)}, shorter than {where}: the input older than "
                "the oldest checkpoint would be replayed by no audit; set "
                f"TRANSCRIPT_CHECKPOINT_KEEP to at least {math.ceil(retention_s / interval)} "
                "(at most 1000) or a longer interval")
    if problems:
        raise SettingsError("invalid environment: " + "; ".join(problems))


def _span(seconds: float) -> str:
    days = seconds / 86400
    return f"{days:g} days" if days >= 1 else f"{seconds:g} s"


def _from_env(model: type[M], names: dict[str, str], environ: Mapping[str, str] | None) -> M:
    """Build `model` from the variables in `names`; errors name the variable, not the field."""
    env = os.environ if environ is None else environ
    values = {field: env[var] for var, field in names.items() if env.get(var, "") != ""}
    try:
        return model(**values)
    except ValidationError as exc:
        var_of = {field: var for var, field in names.items()}
        problems = []
        for e in exc.errors():
            field = str(e["loc"][0])
            var = var_of.get(field, field)
            if (span := numeric_range(model, field)) is not None:
                problems.append(f"{var}: must be {span.text()}; {span.problem(values[field])}")
            elif e["type"] == "value_error":
                problems.append(f"{var}: {e['ctx']['error']}")
            else:
                problems.append(f"{var}: {e['msg']}")
        raise SettingsError("invalid environment: " + "; ".join(problems)) from None


class NumericRange(NamedTuple):
    """The range of a numeric setting, from its field's bounds: every one has a finite
    lowest and highest value (a setting of inf or 1e300 would pass a lower bound alone and
    then stall the worker), and an error names the range and what is wrong with the value
    without repeating the value."""

    lowest: float
    above: bool  # the lowest value itself is excluded (gt)
    highest: float
    whole: bool

    def text(self) -> str:
        kind = "a whole number" if self.whole else "a finite number"
        if self.above:
            return f"{kind} above {_num(self.lowest)} and at most {_num(self.highest)}"
        return f"{kind} from {_num(self.lowest)} to {_num(self.highest)}"

    def problem(self, raw: str) -> str:
        try:
            x = float(raw)
        except ValueError:
            return "the value is not a number"
        if math.isnan(x):
            return "the value is NaN"
        if math.isinf(x):
            return "the value is infinite"
        if self.above and x <= self.lowest:
            return f"the value is not above {_num(self.lowest)}"
        if x < self.lowest:
            return f"the value is below {_num(self.lowest)}"
        if x > self.highest:
            return f"the value is above {_num(self.highest)}"
        return "the value is not a whole number"


def numeric_range(model: type[BaseModel], field: str) -> NumericRange | None:
    """The range of `field` if it is a numeric setting (int or float), else None. Raises
    TypeError for a numeric field without both bounds: none may be unbounded."""
    info = model.model_fields.get(field)
    types = (info.annotation, *get_args(info.annotation)) if info is not None else ()
    if int not in types and float not in types:
        return None
    lowest = highest = None
    above = False
    for bound in info.metadata:  # Field's ge, gt and le (annotated_types' Ge, Gt, Le)
        if hasattr(bound, "ge"):
            lowest = bound.ge
        elif hasattr(bound, "gt"):
            lowest, above = bound.gt, True
        elif hasattr(bound, "le"):
            highest = bound.le
    if lowest is None or highest is None:
        raise TypeError(f"{model.__name__}.{field}: a numeric setting needs both bounds")
    return NumericRange(float(lowest), above, float(highest), float not in types)


def _num(x: float) -> str:
    return str(int(x)) if x.is_integer() else str(x)
