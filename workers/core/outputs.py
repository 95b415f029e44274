"""How an outcome becomes Kafka records: topics, keys, partitions and headers of DESIGN.md.

One place for the wire form of outputs, so the worker writes and `audit` expects the same bytes.
"""

from __future__ import annotations

from typing import NamedTuple

from transcript_connector.chain import CHAIN_HEADER
from transcript_connector.entries_topic import entry_key, parse_entry_key  # noqa: F401  (re-exported)
from transcript_connector.partitioning import partition_for

from schemas import MAX_RECORD_BYTES, Diagnostic, SessionErasure
from workers.core import Outcome

CONFIRMATIONS = "delivery.confirmations"
ENTRIES = "transcript.entries"
DIAGNOSTICS = "transcript.diagnostics"
DLQ = "delivery.confirmations.dlq"
ERASURES = "transcript.erasures"
CONTROL = "transcript.control"  # the operator's: session-erase/1 only (workers/core/control.py)

SESSIONS = "sessions"  # the worker's faust table (its changelog and local state are checked)


def changelog_topic(topic_prefix: str, app_id: str, table: str) -> str:
    """faust's name for a table's changelog: `<app id>-<table>-changelog`, where faust's app id
    is the prefixed TRANSCRIPT_APP_ID (topics.yaml: `{app_id}-sessions-changelog`)."""
    return f"{topic_prefix}{app_id}-{table}-changelog"


# A dead letter must fit the DLQ topic (max.message.bytes 2 MiB in topics.yaml, measured on the
# record batch) and the producer's request (4 MiB), whatever arrived: an input record passes the
# broker compressed and can be far larger uncompressed. So the value is cut to rule 1's size
# limit (every record that is not oversize is carried whole) and the key and the `error` header
# are bounded too: at most 1 MiB + 16 KiB + 2.5 KiB of value, key and headers (DESIGN rule 1).
DEAD_LETTER_MAX_VALUE = MAX_RECORD_BYTES  # 1 MiB; more: the first bytes and `truncated: <size>`
DEAD_LETTER_MAX_KEY = 16 * 1024  # more: the first bytes and `truncated.key: <size>`
DEAD_LETTER_MAX_ERROR = 2048  # bytes of the `error` header (UTF-8, cut at a character)

# model_dump_json(), as bytes: pydantic-core writes bytes, model_dump_json decodes them to str.
_DIAGNOSTIC = Diagnostic.__pydantic_serializer__
_ERASURE = SessionErasure.__pydantic_serializer__


class Source(NamedTuple):
    """Where an input record came from (for dead-letter headers). A NamedTuple: one is built
    per record, at a third of a frozen dataclass's cost."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None  # None: Kafka's null value (a tombstone), a dead letter
    headers: tuple[tuple[str, bytes], ...] | list | None = ()  # as the client gives them


class OutRecord(NamedTuple):  # a NamedTuple, as Source: one or more are built per record
    topic: str  # logical name; the shell applies the prefix
    key: bytes | None
    value: bytes | None  # None: a tombstone (an erased entry)
    partition: int | None = None  # None: the producer's murmur2 partitioner on the key
    headers: tuple[tuple[str, bytes], ...] = ()


def encode(outcome: Outcome, source: Source, partitions: int) -> list[OutRecord]:
    """The records an outcome produces: an entry, its diagnostics, or a dead letter."""
    if outcome.kind == "dead_letter":
        return [dead_letter(source, outcome.error or "invalid record")]
    out: list[OutRecord] = []
    if outcome.erasure is not None:
        # tombstones of every entry the session had, in seq order, then the erasure record
        # (same transaction: a read_committed reader sees both or neither)
        er = outcome.erasure
        home = partition_for(er.session_key, partitions)
        out.extend(OutRecord(ENTRIES, entry_key(er.session_key, seq), None, home)
                   for seq in range(1, er.through_seq + 1))
        out.append(OutRecord(ERASURES, er.session_key.encode(),
                             _ERASURE.to_json(er, by_alias=True)))
    if outcome.entry_json is not None:
        key = outcome.session_key or ""  # a written outcome always has its session key
        chain = () if outcome.chain is None else ((CHAIN_HEADER, outcome.chain.hex().encode()),)
        out.append(OutRecord(ENTRIES, entry_key(key, outcome.seq), outcome.entry_json,
                             partition_for(key, partitions), chain))
    for d in outcome.diagnostics:
        out.append(OutRecord(DIAGNOSTICS, d.session_key.encode(), _DIAGNOSTIC.to_json(d)))
    return out


def dead_letter(source: Source, reason: str) -> OutRecord:
    """The original record with its reason and position; a record too large for the DLQ topic
    carries its first bytes and the header `truncated` with the value's original size."""
    key, value = source.key, source.value
    headers = [
        ("error", _bounded_utf8(reason, DEAD_LETTER_MAX_ERROR)),
        ("source.topic", source.topic.encode()),
        ("source.partition", str(source.partition).encode()),
        ("source.offset", str(source.offset).encode()),
    ]
    if value is not None and len(value) > DEAD_LETTER_MAX_VALUE:  # None: a tombstone
        headers.append(("truncated", str(len(value)).encode()))
        value = value[:DEAD_LETTER_MAX_VALUE]
    if key is not None and len(key) > DEAD_LETTER_MAX_KEY:
        headers.append(("truncated.key", str(len(key)).encode()))
        key = key[:DEAD_LETTER_MAX_KEY]
    return OutRecord(DLQ, key, value, None, tuple(headers))


def _bounded_utf8(text: str, limit: int) -> bytes:
    """`text` as UTF-8 in at most `limit` bytes: cut at a character boundary, marked with …."""
    raw = text.encode("utf-8", "replace")
    if len(raw) <= limit:
        return raw
    ellipsis = "…".encode()
    return raw[: limit - len(ellipsis)].decode("utf-8", "ignore").encode() + ellipsis
