"""A dead letter always fits the DLQ topic: a record too large carries its first bytes and
`truncated: <original size>` (DESIGN rule 1), and the `error` header is bounded."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from schemas import MAX_RECORD_BYTES, Invalid, parse_input
from workers.core import dead_letter as dead_letter_outcome
from workers.core.outputs import (
    DEAD_LETTER_MAX_ERROR,
    DEAD_LETTER_MAX_KEY,
    DEAD_LETTER_MAX_VALUE,
    DLQ,
    Source,
    dead_letter,
    encode,
)
from workers.topics import load_topics

ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024
PRODUCER_MAX_REQUEST = 4 * MIB  # the worker's producer (workers.stream.clients.producer_factory)


def dlq_limit() -> int:
    (spec,) = [s for s in load_topics(ROOT / "topics.yaml") if s.name == DLQ]
    return int(spec.config_map["max.message.bytes"])


def batch_size(key: bytes | None, value: bytes, headers) -> int:
    """Bytes of the record batch the producer sends for this one record (uncompressed), what the
    broker compares with max.message.bytes."""
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 16 * MIB)
    assert builder.append(0, timestamp=None, key=key, value=value, headers=list(headers))
    return len(builder.build())


def src(value: bytes, key: bytes | None = b"agent:ops:main") -> Source:
    return Source("p.delivery.confirmations", 3, 1234, key, value)


def test_a_small_record_is_carried_whole_with_its_position():
    record = dead_letter(src(b"\xff not json"), "not JSON: bad byte")
    assert (record.topic, record.key, record.value) == (DLQ, b"agent:ops:main", b"\xff not json")
    assert record.headers == (
        ("error", b"not JSON: bad byte"),
        ("source.topic", b"p.delivery.confirmations"),
        ("source.partition", b"3"),
        ("source.offset", b"1234"),
    )


def test_a_3_mib_record_that_passed_the_broker_gzipped_is_cut_to_fit_the_dlq():
    # what the issue saw: 3 MiB of JSON, gzip-compressed well under the input topic's 2 MiB
    text = json.dumps({"schema": "delivery-confirmation/1", "payload": {
        "text": os.urandom(3 * MIB // 2).hex()}}).encode()
    assert len(text) > 3 * MIB and len(gzip.compress(text)) < 2 * MIB
    record = dead_letter(src(text), f"oversize: {len(text)} bytes > 1 MiB")
    headers = dict(record.headers)
    assert headers["truncated"] == str(len(text)).encode()
    assert record.value == text[:DEAD_LETTER_MAX_VALUE]
    size = batch_size(record.key, record.value, record.headers)
    assert size <= dlq_limit() and size <= PRODUCER_MAX_REQUEST
    assert batch_size(b"agent:ops:main", text, ()) > dlq_limit()  # whole, it would not fit


def test_every_record_the_size_rule_accepts_is_carried_whole():
    assert DEAD_LETTER_MAX_VALUE == MAX_RECORD_BYTES
    at_limit = b"x" * MAX_RECORD_BYTES
    assert dead_letter(src(at_limit), "not JSON").value == at_limit
    assert "truncated" not in dict(dead_letter(src(at_limit), "not JSON").headers)
    over = dead_letter(src(at_limit + b"y"), "oversize")
    assert over.value == at_limit and dict(over.headers)["truncated"] == b"1048577"


def test_the_largest_dead_letter_fits_every_limit():
    """Key, value and reason all at their worst: still within the DLQ topic and the request."""
    record = dead_letter(
        Source("p" * 249, 2**31 - 1, 2**63 - 1, b"k" * (2 * MIB), b"v" * (2 * MIB)),
        "é" * 100_000,
    )
    headers = dict(record.headers)
    assert headers["truncated"] == str(2 * MIB).encode()
    assert headers["truncated.key"] == str(2 * MIB).encode()
    assert len(record.key) == DEAD_LETTER_MAX_KEY
    size = batch_size(record.key, record.value, record.headers)
    assert size <= dlq_limit() and size <= PRODUCER_MAX_REQUEST


@pytest.mark.parametrize("reason", ["é" * 5000, "x" * 5000, "a" + "😀" * 3000])
def test_a_long_reason_is_cut_at_a_character_and_marked(reason):
    error = dict(dead_letter(src(b"{}"), reason).headers)["error"]
    assert len(error) <= DEAD_LETTER_MAX_ERROR
    text = error.decode("utf-8")  # still valid UTF-8
    assert text.endswith("…") and reason.startswith(text[:-1])
    assert len(error.decode()) > 100  # cut, not emptied


def test_a_short_reason_is_kept_as_is():
    reason = "schema: field required; " * 40  # about 1,000 bytes
    assert dict(dead_letter(src(b"{}"), reason).headers)["error"] == reason.encode()


def test_an_oversize_record_is_dead_lettered_truncated_on_the_workers_path():
    value = b'{"schema": "delivery-confirmation/1", "pad": "' + b"x" * (3 * MIB) + b'"}'
    invalid = parse_input(value)
    assert isinstance(invalid, Invalid)
    (record,) = encode(dead_letter_outcome(invalid.reason), src(value), 8)
    assert record.topic == DLQ and len(record.value) == DEAD_LETTER_MAX_VALUE
    headers = dict(record.headers)
    assert headers["truncated"] == str(len(value)).encode()
    assert headers["error"].decode().startswith("oversize")
