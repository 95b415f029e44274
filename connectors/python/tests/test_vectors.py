"""Every parity vector (schemas/vectors/session_keys.json) through this package as a gateway
installs it: canonical keys, keys built from routes, partitions, the timestamp verdicts of the
parser, and the pinned tables' digests. The worker's suite runs the same file
(tests/unit/test_vectors.py); a vector that passes there and fails here would mean the
installed package is not the code the worker runs."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transcript_connector import canonical_session_key, partition_for, session_key_for_route
from transcript_connector.parse import Invalid, parse_input

REPO = Path(__file__).resolve().parents[3]
VECTORS = json.loads((REPO / "schemas/vectors/session_keys.json").read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Route:
    channel: str
    peer_kind: str
    peer_id: str
    account_id: str | None = None
    thread_id: str | None = None


def _outcome(call: Any) -> dict[str, str]:
    try:
        return {"expect": call()}
    except ValueError as exc:
        return {"error": str(exc)}


def _wanted(v: dict[str, Any]) -> dict[str, str]:
    return {"error": v["error"]["message"]} if "error" in v else {"expect": v["expect"]}


def test_every_canonical_vector() -> None:
    bad = [v["id"] for v in VECTORS["canonical"]
           if _outcome(lambda v=v: canonical_session_key(v["raw"], v["agent_id"])) != _wanted(v)]
    assert len(VECTORS["canonical"]) > 500 and bad == []


def test_every_route_vector() -> None:
    bad = [v["id"] for v in VECTORS["route"]
           if _outcome(lambda v=v: session_key_for_route(v["agent_id"], Route(**v["route"]),
                                                         v["dm_scope"])) != _wanted(v)]
    assert len(VECTORS["route"]) > 150 and bad == []


def test_every_partition() -> None:
    checked = 0
    for v in VECTORS["canonical"] + VECTORS["route"] + VECTORS["partition"]:
        key = v.get("expect", v.get("key"))
        if key is None or v["partitions"] is None:  # an error, or a key that is not UTF-8
            continue
        for n, p in v["partitions"].items():
            assert partition_for(key, int(n)) == p, (v["id"] if "id" in v else key, n)
            checked += 1
    assert checked > 3000


def test_every_timestamp_verdict() -> None:
    for t in VECTORS["timestamps"]:
        reset = {"schema": "session-reset/1", "session_key": "agent:ops:main",
                 "reset_at": t["text"]}
        parsed = parse_input(json.dumps(reset).encode())
        verdict = "invalid: " + parsed.reason if isinstance(parsed, Invalid) else "valid"
        assert verdict == t["python"], t["text"]


def _digest(strings: Any) -> str:
    """As schemas/vectors/generate.py digests: every code point's result, UTF-16 with surrogates."""
    return hashlib.sha256("\n".join(strings).encode("utf-16-le", "surrogatepass")).hexdigest()


def test_the_installed_tables_are_the_pinned_ones_over_every_code_point() -> None:
    from transcript_connector.unicode_text import UNICODE_VERSION, py_lower, py_strip

    chars = [chr(c) for c in range(0x110000)]
    got = {
        "lower": _digest(py_lower(c) for c in chars),
        "sigma_before": _digest(py_lower("A" + c + "\u03a3") for c in chars),
        "sigma_after": _digest(py_lower("A\u03a3" + c) for c in chars),
        "strip": _digest(py_strip(c + "x" + c) for c in chars),
    }
    assert VECTORS["unicode"] == UNICODE_VERSION
    assert got == {k: VECTORS["unicode_digests"][k] for k in got}
