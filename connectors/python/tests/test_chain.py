"""The hash chain (transcript_connector.chain) on every vector of schemas/vectors/chain.json, the
file the TypeScript port runs too, and on random honest sessions: any one changed byte of a
value or hex digit of a header is found, the honest session gives no finding. The connector's
virtualenv has no hypothesis: the sessions come from a seeded random.Random."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from transcript_connector.chain import (
    CHAIN_HEADER,
    Finding,
    Head,
    Link,
    link,
    parse_chain,
    root,
    verify_session,
)

REPO = Path(__file__).resolve().parents[3]
VECTORS = json.loads((REPO / "schemas/vectors/chain.json").read_text(encoding="utf-8"))
TEXTS = ["hi", "héllo", "日本語のテキスト", "👩‍👧 family", "Ωμέγα\u2028line", "a\u0000b\u001b[2J",
         "", "\"quoted\" \\ back", "ü" * 200]


def _entries(v: dict[str, Any]) -> list[Link]:
    return [Link(seq, bytes.fromhex(value) if v.get("hex") else value.encode(), chain)
            for seq, value, chain in v["entries"]]


def _head(v: dict[str, Any]) -> Head | None:
    h = v["head"]
    return None if h is None else Head(h["next_seq"], None if h["chain"] is None
                                       else bytes.fromhex(h["chain"]))


def test_the_header_and_the_vectors() -> None:
    assert CHAIN_HEADER == "chain"
    assert len(VECTORS["roots"]) >= 20 and len(VECTORS["links"]) >= 4
    assert len(VECTORS["sessions"]) >= 50 and any(v.get("hex") for v in VECTORS["sessions"])


@pytest.mark.parametrize("v", VECTORS["roots"], ids=lambda v: f"{v['session_key']}@{v['epoch']}")
def test_every_root(v: dict[str, Any]) -> None:
    assert root(v["session_key"], v["epoch"]).hex() == v["root"]


def test_every_link() -> None:
    for v in VECTORS["links"]:
        assert link(bytes.fromhex(v["previous"]), v["value"].encode()).hex() == v["chain"]


@pytest.mark.parametrize("v", VECTORS["sessions"], ids=lambda v: v["name"])
def test_every_session(v: dict[str, Any]) -> None:
    got = verify_session(v["session_key"], _entries(v), _head(v))
    assert [f.seq for f in got.findings] == v["finding_seqs"]
    assert [f.problem for f in got.findings] == v["problems"]
    assert (got.chained, got.unchained, got.ok) == (v["chained"], v["unchained"],
                                                    not v["finding_seqs"])
    # headers as bytes (as a Kafka client gives them), entries in another order: the same
    as_bytes = [Link(e.seq, e.value, None if e.chain is None else str(e.chain).encode())
                for e in reversed(_entries(v))]
    assert verify_session(v["session_key"], as_bytes, _head(v)) == got


def test_headers_that_are_not_64_lowercase_hex_digits() -> None:
    good = root("agent:a:main", 0).hex()
    assert parse_chain(good) == parse_chain(good.encode()) == bytes.fromhex(good)
    for bad in [good.upper(), good[:63] + "A", good[:63], good + "0", good[:63] + "g",
                " " + good[1:], good[:62] + "é", good[:63] + "٠", ""]:
        assert parse_chain(bad) is None, bad
        assert parse_chain(bad.encode()) is None, bad
    assert parse_chain(None) is None


def test_an_empty_session() -> None:
    assert verify_session("agent:a:main", []) == ([], 0, 0)
    assert verify_session("agent:a:main", [], Head(1, None)).ok
    assert [str(f) for f in verify_session("agent:a:main", [], Head(4, b"\0" * 32)).findings] == [
        "seq 3: the worker's state holds a chain through this seq, and no chained entry is left: "
        "removed"]


def _honest(rng: random.Random) -> tuple[str, list[Link], Head]:
    """A session as the worker writes it: from the first seq after an erasure (or 1), resets
    between entries (epoch up), random texts; the chain from the root of the first's epoch."""
    key = rng.choice(["agent:main:main", "agent:é:chat:日本", "agent:a:k#0000000001"])
    seq, epoch = rng.choice([1, 1, rng.randint(2, 40)]), rng.randint(0, 3)
    previous, entries = root(key, epoch), []
    for n in range(rng.randint(1, 6)):
        epoch += 0 if n == 0 else rng.choice([0, 0, 0, 1, 2])  # resets since the last entry
        text = "".join(rng.choice(TEXTS) for _ in range(rng.randint(0, 3)))
        value = json.dumps({"schema": "transcript-entry/1", "session_key": key, "epoch": epoch,
                            "seq": seq, "text": text}, ensure_ascii=rng.random() < 0.3,
                           separators=(",", ":")).encode()
        previous = link(previous, value)
        entries.append(Link(seq, value, previous.hex()))
        seq += 1
    return key, entries, Head(seq, previous)


@pytest.mark.parametrize("seed", range(12))
def test_any_one_changed_byte_or_hex_digit_is_found(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(4):
        key, entries, head = _honest(rng)
        for h in (head, None):
            assert verify_session(key, entries, h) == ([], len(entries), 0)
        for i, entry in enumerate(entries):
            for at in range(len(entry.value)):  # every byte, to one other value
                changed = bytearray(entry.value)
                changed[at] = (changed[at] + rng.randint(1, 255)) % 256
                tampered = entries[:i] + [entry._replace(value=bytes(changed))] + entries[i + 1:]
                h = rng.choice([head, None])
                assert not verify_session(key, tampered, h).ok, (key, i, at)
            chain = str(entry.chain)
            for at in range(64):  # every hex digit, to one other
                digit = rng.choice([d for d in "0123456789abcdef" if d != chain[at]])
                tampered = entries[:i] + [entry._replace(chain=chain[:at] + digit + chain[at + 1:])
                                          ] + entries[i + 1:]
                h = rng.choice([head, None])
                assert not verify_session(key, tampered, h).ok, (key, i, at)


def test_findings_name_their_seq() -> None:
    key, entries, head = _honest(random.Random(99))
    found = verify_session(key, entries[:-1], head).findings
    assert found == [Finding(head.next_seq - 1, found[0].problem)]
    assert str(found[0]).startswith(f"seq {head.next_seq - 1}: ")
