"""A session reader's options: the connection (ConnectionOptions, the worker's variables) and
how much it holds and how often it looks, with the connector's own variables for them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from transcript_connector.connection import CONNECTION_ENV, ConnectionOptions, options_from_env
from transcript_connector.reader_plan import ENTRIES, INPUT, LAYOUT

# the connector's own variables (no worker reads them) -> option
READER_ENV = {
    "TRANSCRIPT_READ_TIMEOUT_MS": "timeout_ms",
    "TRANSCRIPT_READ_SESSIONS_PER_PARTITION": "sessions_per_partition",
    "TRANSCRIPT_READ_DB_POLL_MS": "db_poll_ms",
}


class ReaderOptions(ConnectionOptions):
    """How a session reader reaches the cluster (ConnectionOptions) and reads.

    `timeout_ms`: a read's deadline when the call gives none. `sessions_per_partition`: the
    sessions the topic source keeps per partition, least recently read dropped first (a read
    of a session not held reads its partition from the start). `db_poll_ms`: how often the
    database source looks for a sink's new commit while a read waits."""

    client_id: str = "transcript-owner-reader"
    timeout_ms: int = Field(default=10_000, ge=1, le=600_000)
    sessions_per_partition: int = Field(default=1000, ge=1, le=1_000_000)
    db_poll_ms: int = Field(default=5, ge=1, le=1000)

    @property
    def input_topic(self) -> str:
        return f"{self.topic_prefix}{INPUT}"

    @property
    def entries_topic(self) -> str:
        return f"{self.topic_prefix}{ENTRIES}"

    @property
    def layout_topic(self) -> str:
        """transcript.layout: the moves `transcript-owner repartition` made (their counts)."""
        return f"{self.topic_prefix}{LAYOUT}"


def reader_options_from_env(environ: Mapping[str, str], **overrides: Any) -> ReaderOptions:
    """Options from the worker's variables (docs/configuration.md): KAFKA_BOOTSTRAP,
    TRANSCRIPT_TOPIC_PREFIX, KAFKA_SECURITY_PROTOCOL, KAFKA_SASL_*, KAFKA_SSL_*, and the
    reader's TRANSCRIPT_READ_TIMEOUT_MS, TRANSCRIPT_READ_SESSIONS_PER_PARTITION,
    TRANSCRIPT_READ_DB_POLL_MS; empty counts as unset. ConnectorError names the variable
    (never its value). The partition count is always the topic's own."""
    return options_from_env(ReaderOptions, {**CONNECTION_ENV, **READER_ENV}, environ, overrides)


__all__ = ["READER_ENV", "ReaderOptions", "reader_options_from_env"]
