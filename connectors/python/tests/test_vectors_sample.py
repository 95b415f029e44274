"""Keys and partitions of built records agree with the shared parity vectors
(schemas/vectors/session_keys.json): a sample, the `edge` cases, that a builder can carry."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from transcript_connector import InvalidRecordError, build_confirmation, partition_for

REPO = Path(__file__).resolve().parents[3]
VECTORS = json.loads((REPO / "schemas/vectors/session_keys.json").read_text(encoding="utf-8"))
_AGENT = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _buildable(v: dict[str, Any]) -> bool:
    """An agent id the record's pattern takes, and text JSON can carry (the vectors test the
    canonicaliser on inputs no record holds, too)."""
    return bool(_AGENT.fullmatch(v["agent_id"])) and not _SURROGATE.search(json.dumps(
        v, ensure_ascii=False))


CANONICAL = [v for v in VECTORS["canonical"] if "edge" in v["tags"] and _buildable(v)]
ROUTES = [v for v in VECTORS["route"] if "edge" in v["tags"] and _buildable(v)
          and v["route"]["channel"] and v["route"]["peer_id"]
          and v["route"]["peer_kind"] in ("direct", "group", "channel")]


def _check(v: dict[str, Any], **key: Any) -> None:
    fields: dict[str, Any] = {
        "send_id": "s", "confirmed_at": "2026-05-01T12:00:00Z", "agent_id": v["agent_id"],
        "route": v.get("route", {"channel": "telegram", "peer_kind": "direct", "peer_id": "u"}),
        "origin": {"kind": "message_tool"}, "payload": {"text": "t"},
        "receipt": {"platform_message_ids": []},
    }
    if "error" in v:
        with pytest.raises(InvalidRecordError) as caught:
            build_confirmation(**fields, **key)
        assert caught.value.problem == v["error"]["message"]
        return
    built = build_confirmation(**fields, **key)
    assert built.key == v["expect"]
    assert {n: partition_for(built.key, int(n)) for n in v["partitions"]} == v["partitions"]


def test_the_sample_is_a_sample() -> None:
    assert len(CANONICAL) >= 100 and len(ROUTES) >= 20
    assert any("error" in v for v in CANONICAL) and any("error" in v for v in ROUTES)


@pytest.mark.parametrize("v", CANONICAL, ids=[v["id"] for v in CANONICAL])
def test_a_given_key_is_keyed_as_the_vectors_say(v: dict[str, Any]) -> None:
    _check(v, session_key=v["raw"])


@pytest.mark.parametrize("v", ROUTES, ids=[v["id"] for v in ROUTES])
def test_a_key_built_from_the_route_is_the_vectors(v: dict[str, Any]) -> None:
    _check(v, dm_scope=v["dm_scope"])
