"""How an outcome becomes Kafka records: topics, keys, partitions and headers of DESIGN.md.

One place for the wire form of outputs, so the worker writes and `audit` expects the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from schemas import Diagnostic, TranscriptEntry
from workers.core import Outcome
from workers.partitioning import partition_for

CONFIRMATIONS = "delivery.confirmations"
ENTRIES = "transcript.entries"
DIAGNOSTICS = "transcript.diagnostics"
DLQ = "delivery.confirmations.dlq"

# model_dump_json(), as bytes: pydantic-core writes bytes, model_dump_json decodes them to str.
_ENTRY = TranscriptEntry.__pydantic_serializer__
_DIAGNOSTIC = Diagnostic.__pydantic_serializer__


class Source(NamedTuple):
    """Where an input record came from (for dead-letter headers). A NamedTuple: one is built
    per record, at a third of a frozen dataclass's cost."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes


@dataclass(frozen=True, slots=True)
class OutRecord:
    topic: str  # logical name; the shell applies the prefix
    key: bytes | None
    value: bytes
    partition: int | None = None  # None: the producer's murmur2 partitioner on the key
    headers: tuple[tuple[str, bytes], ...] = ()


def entry_key(session_key: str, seq: int) -> bytes:
    return f"{session_key}#{seq:010d}".encode()


def encode(outcome: Outcome, source: Source, partitions: int) -> list[OutRecord]:
    """The records an outcome produces: an entry, its diagnostics, or a dead letter."""
    if outcome.kind == "dead_letter":
        return [dead_letter(source, outcome.error or "invalid record")]
    out: list[OutRecord] = []
    if outcome.entry is not None:
        e = outcome.entry
        out.append(
            OutRecord(
                ENTRIES,
                entry_key(e.session_key, e.seq),
                _ENTRY.to_json(e),
                partition_for(e.session_key, partitions),
            )
        )
    for d in outcome.diagnostics:
        out.append(OutRecord(DIAGNOSTICS, d.session_key.encode(), _DIAGNOSTIC.to_json(d)))
    return out


def dead_letter(source: Source, reason: str) -> OutRecord:
    return OutRecord(
        DLQ,
        source.key,
        source.value,
        None,
        (
            ("error", reason.encode()),
            ("source.topic", source.topic.encode()),
            ("source.partition", str(source.partition).encode()),
            ("source.offset", str(source.offset).encode()),
        ),
    )
