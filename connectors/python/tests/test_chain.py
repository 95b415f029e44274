"""The hash chain (transcript_connector.chain) on every vector of schemas/vectors/chain.json, the
file the TypeScript port runs too, and on random honest sessions: any one changed byte of a
value or hex digit of a header is found, the honest session gives no finding; every header
stripped or doubled is found, from the entries alone when they were written after the chain
began, and erased entries put back against the worker's head. The connector's virtualenv has
no hypothesis: the sessions come from a seeded random.Random."""

from __future__ import annotations

import json
import random
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from transcript_connector.chain import (
    CHAIN_HEADER,
    CHAIN_SINCE,
    Finding,
    Head,
    Link,
    header_text,
    link,
    parse_chain,
    root,
    verify_session,
    written_seconds,
)
from transcript_connector.entries_topic import chain_header

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
                                       else bytes.fromhex(h["chain"]), h["chain_from"],
                                       h["live_from"])


def _since(v: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(v["chained_since"]) if "chained_since" in v else CHAIN_SINCE


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
    got = verify_session(v["session_key"], _entries(v), _head(v), _since(v))
    assert [f.seq for f in got.findings] == v["finding_seqs"]
    assert [f.problem for f in got.findings] == v["problems"]
    assert (got.chained, got.unchained, got.ok) == (v["chained"], v["unchained"],
                                                    not v["finding_seqs"])
    # headers as bytes (as a Kafka client gives them), entries in another order: the same
    as_bytes = [Link(e.seq, e.value, None if e.chain is None else str(e.chain).encode())
                for e in reversed(_entries(v))]
    assert verify_session(v["session_key"], as_bytes, _head(v), _since(v)) == got


@pytest.mark.parametrize("v", VECTORS["headers"], ids=lambda v: v["name"])
def test_every_header_rule(v: dict[str, Any]) -> None:
    values = [None if x is None else bytes.fromhex(x) for x in v["values"]]
    assert header_text(values) == v["text"]
    assert chain_header([(CHAIN_HEADER, x) for x in values]) == v["text"]  # as the sink reads
    assert chain_header([(b"chain", x) for x in values] + [("other", b"x")]) == v["text"]


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


K = "agent:main:telegram:direct:42"


def _stamped(n: int, written_at: str) -> list[Link]:
    """n entries chained from the root of epoch 0, each written at `written_at`."""
    previous, out = root(K, 0), []
    for seq in range(1, n + 1):
        value = json.dumps({"schema": "transcript-entry/1", "session_key": K, "epoch": 0,
                            "seq": seq, "text": f"m{seq}", "written_at": written_at}).encode()
        previous = link(previous, value)
        out.append(Link(seq, value, previous.hex()))
    return out


def test_every_header_stripped_is_found_from_entries_written_after_the_chain_began() -> None:
    """Before: "verified 0 entries (3 written before the chain)". An entry without a chain is
    written before the chain only when its written_at says so (CHAIN_SINCE)."""
    entries = [e._replace(chain=None) for e in _stamped(3, "2026-12-03T10:00:00Z")]
    got = verify_session(K, entries)
    assert [f.seq for f in got.findings] == [1, 2, 3] and got.unchained == 0
    assert "written_at is not before 2026-12-02T00:00:00Z" in got.findings[0].problem
    legacy = [e._replace(chain=None) for e in _stamped(3, "2026-11-01T10:00:00Z")]
    assert verify_session(K, legacy) == ([], 0, 3)
    # a deployment that upgraded later says when its chain began
    assert verify_session(K, entries, chained_since=datetime.fromisoformat(
        "2026-12-04T00:00:00+00:00")) == ([], 0, 3)


def test_every_header_doubled_is_found() -> None:
    """Before: a record with two `chain` headers was stored with none ("before the chain")."""
    entries = _stamped(3, "2026-11-01T10:00:00Z")
    doubled = [e._replace(chain=chain_header([("chain", str(e.chain).encode())] * 2))
               for e in entries]
    got = verify_session(K, doubled)
    assert [f.seq for f in got.findings] == [1, 2, 3] and got.unchained == 0


def test_erased_entries_put_back_before_the_new_chain_are_found_with_the_workers_head() -> None:
    """Seqs 1..3 erased, the chain started again at 4 (the worker's head: chain_from 4,
    live_from 4); the erased entries put back without headers, written before CHAIN_SINCE so
    the entries alone cannot tell: the head finds each."""
    old = [e._replace(chain=None) for e in _stamped(3, "2026-11-01T10:00:00Z")]
    previous, new = root(K, 1), []
    for seq in (4, 5):
        value = json.dumps({"session_key": K, "epoch": 1, "seq": seq}).encode()
        previous = link(previous, value)
        new.append(Link(seq, value, previous.hex()))
    assert verify_session(K, old + new).ok  # the entries alone: written before the chain
    assert verify_session(K, old + new, Head(6, previous)).ok  # a head that does not say
    got = verify_session(K, old + new, Head(6, previous, 4, 4))
    assert [f.seq for f in got.findings] == [1, 2, 3]
    assert got.findings[0].problem == ("the worker's state erased every seq below 4: this "
                                       "entry was put back")
    assert verify_session(K, new, Head(6, previous, 4, 4)) == ([], 2, 0)


def test_an_unchained_entry_at_or_after_the_heads_chain_start_is_found() -> None:
    """Erased, nothing written since (the head holds no chain, and the next chain starts at
    4): unchained entries appended there passed before, as written before the chain."""
    forged = [Link(s, json.dumps({"session_key": K, "epoch": 1, "seq": s,
                                  "written_at": "2026-11-01T00:00:00Z"}).encode(), None)
              for s in (4, 5)]
    assert verify_session(K, forged, Head(4, None)).ok  # a head that does not say
    got = verify_session(K, forged, Head(4, None, 4, 4))
    assert [f.seq for f in got.findings] == [4, 5]
    assert got.findings[0].problem.startswith("no chain header at or after seq 4, where the "
                                              "worker's state says the chain starts")


def test_written_at_is_read_to_the_second_in_any_offset() -> None:
    assert written_seconds("1970-01-01T00:00:00Z") == 0
    assert written_seconds("2026-12-02T00:00:00Z") == int(CHAIN_SINCE.timestamp())
    for text in ["2026-12-02T00:00:00.999+00:00", "2026-12-01t19:00:00-05:00",
                 "2026-12-02 05:30:00+05:30", "2026-12-02T00:00:00z"]:
        assert written_seconds(text) == int(CHAIN_SINCE.timestamp()), text
    for text in ["2026-12-02T00:00:00", "2026-12-02T00:00:00Z\n", "2026-12-02", None, 1, "",
                 "2026-12-02T00:00:00+0000", "２０２６-12-02T00:00:00Z"]:
        assert written_seconds(text) is None, text
