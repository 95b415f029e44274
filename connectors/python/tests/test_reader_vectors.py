"""schemas/vectors/positions.json through this package as a gateway installs it: what each key is
(`keys`) and what each record of transcript.entries is to a reader (`records`), by `classify`,
the one rule every reader (the sink, show, the session readers in both languages) applies."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from transcript_connector.entries_topic import (
    Delete,
    Positioned,
    Skip,
    Upsert,
    classify,
    parse_position_key,
    position_value,
)

REPO = Path(__file__).resolve().parents[3]
VECTORS = json.loads((REPO / "schemas/vectors/positions.json").read_text(encoding="utf-8"))
AT = datetime(2026, 12, 4, 10, 0, tzinfo=UTC)


def _hex(text: str | None) -> bytes | None:
    return None if text is None else bytes.fromhex(text)


def test_the_file_has_both_kinds_of_vectors() -> None:
    assert len(VECTORS["keys"]) >= 10 and len(VECTORS["records"]) >= 20
    kinds = {v["kind"] for v in VECTORS["records"]}
    assert kinds == {"entry", "erased", "position", "skip"}


@pytest.mark.parametrize("vector", VECTORS["keys"], ids=lambda v: v["key"])
def test_a_key_is_a_position_key_of_its_partition_or_none(vector: dict[str, Any]) -> None:
    key, partition = _hex(vector["key"]), vector["partition"]
    assert parse_position_key(key) == partition
    if partition is None or partition > 2**31 - 1:  # no position a record can hold
        found = classify(key, position_value(0, 1, 0, AT), (), 0, 0)
        assert not isinstance(found, Positioned)
    else:  # the worker's own value for that partition, read from it, is a position
        found = classify(key, position_value(partition, 5, 2, AT), (), partition, 9)
        assert isinstance(found, Positioned)
        assert found.position[:3] == (partition, 5, 2) and found.position.offset == 9


@pytest.mark.parametrize("vector", VECTORS["records"],
                         ids=lambda v: f"{v['kind']}-{(v['value'] or '')[:24]}")
def test_a_record_is_what_the_file_says(vector: dict[str, Any]) -> None:
    found = classify(_hex(vector["key"]), _hex(vector["value"]), (), vector["read_from"], 17)
    kind = {Upsert: "entry", Delete: "erased", Positioned: "position", Skip: "skip"}
    assert kind[type(found)] == vector["kind"], found
    if isinstance(found, Positioned):
        p = found.position
        assert (p.partition, p.input_offset, p.control_offset, p.offset) == (
            vector["partition"], vector["input_offset"], vector["control_offset"], 17)
        assert p.at is not None and round(p.at.timestamp() * 1000) == vector["at_ms"]
    if isinstance(found, Skip):  # a reason that names fields, never the content
        assert found.reason and "transcript-entry/1" not in found.reason
