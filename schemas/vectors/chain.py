"""Write schemas/vectors/chain.json: the hash-chain vectors both connector packages run.

    python schemas/vectors/chain.py           # rewrite the file (make vectors)
    python schemas/vectors/chain.py --check   # exit 1 if it is stale

Every expectation is computed by transcript_connector.chain (the contract, DESIGN 1.2
"Tamper evidence"):
- `roots`: root(session_key, epoch) for keys with `#`, `:`, multi-byte UTF-8 and huge epochs;
- `links`: link(previous, value) over values of several sizes;
- `sessions`: a session's live entries (seq, value as UTF-8 text, chain header or null) and
  optionally the worker's head (next_seq, chain, chain_from, live_from) and a `chained_since`
  other than CHAIN_SINCE, with the seqs of the findings verify_session reports and the
  counts of chained and unchained entries. Cases: honest, reset, after an erasure, written
  before the chain, and each kind of tampering (a changed byte, a removed, inserted, moved
  or re-chained entry, a stripped, doubled or malformed header, every header stripped, erased
  entries put back, the end cut off), entries without a chain dated by their `written_at` in
  each form the entry schema allows and some it does not, and values read strictly (UTF-8
  JSON without NaN; seq and epoch integers, not 2.0 or true; huge epochs), with a case's
  values in hex (`"hex": true`) where they are not UTF-8. `problems` are the findings' texts,
  beside `finding_seqs`;
- `headers`: the values of a record's `chain` headers (hex, or null for a null value) and the
  text header_text makes of them (the sink stores it; null: no header).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "connectors/python/src"))

from datetime import datetime  # noqa: E402

from transcript_connector.chain import (  # noqa: E402
    CHAIN_SINCE,
    Head,
    header_text,
    link,
    root,
    verify_session,
)

OUT = HERE / "chain.json"
BEFORE = "2026-11-30T08:00:00Z"  # written before CHAIN_SINCE: no worker chained then
AFTER = "2026-12-03T08:00:00Z"  # at or after it: a worker of 1.2 chained it
KEYS = ["agent:main:main", "agent:main:telegram:direct:42", "agent:a:k#1", "agent:é:chat:日本",
        "agent:main:slack:channel:c1:thread:1700000000.000100"]


def entry(key: str, epoch: int, seq: int, text: str = "hi", written_at: object = None) -> bytes:
    """A transcript-entry/1 value (only the members the chain reads need to be real; no
    `written_at` unless given)."""
    doc = {"schema": "transcript-entry/1", "session_key": key, "epoch": epoch, "seq": seq,
           "text": text, **({} if written_at is None else {"written_at": written_at})}
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()


def chained(key: str, values: list[tuple[int, bytes]], start: bytes | None = None
            ) -> list[list[Any]]:
    """[seq, value, chain hex] for entries written one after the other from `start`."""
    out, previous = [], start
    for seq, value in values:
        epoch = json.loads(value)["epoch"]
        previous = link(root(key, epoch) if previous is None else previous, value)
        out.append([seq, value.decode(), previous.hex()])
    return out


def sessions() -> list[dict[str, Any]]:
    k = "agent:main:telegram:direct:42"
    honest = chained(k, [(s, entry(k, 0, s, f"message {s}")) for s in range(1, 6)])
    reset = chained(k, [(1, entry(k, 0, 1)), (2, entry(k, 1, 2)), (3, entry(k, 3, 3))])
    erased = chained(k, [(s, entry(k, 2, s)) for s in (7, 8, 9)])  # 1..6 erased: epoch 2
    legacy = [[s, entry(k, 0, s, written_at=BEFORE).decode(), None] for s in (1, 2)] + chained(
        k, [(s, entry(k, 0, s)) for s in (3, 4)])
    head = Head(6, bytes.fromhex(honest[-1][2]))

    def changed(rows: list[list[Any]], i: int) -> list[list[Any]]:
        rows = [list(r) for r in rows]
        rows[i][1] = rows[i][1].replace("message", "messagE")
        return rows

    rechained = chained(k, [(s, entry(k, 0, s, "forged" if s == 3 else f"message {s}"))
                            for s in range(1, 6)])
    moved = [list(r) for r in honest]
    moved[1][1], moved[2][1] = moved[2][1], moved[1][1]
    moved[1][2], moved[2][2] = moved[2][2], moved[1][2]
    stamped = chained(k, [(s, entry(k, 0, s, f"message {s}", AFTER)) for s in range(1, 6)])
    stamped_head = Head(6, bytes.fromhex(stamped[-1][2]), 1, 1)
    gone = [[s, entry(k, 1, s, "erased", AFTER).decode(), None] for s in range(1, 7)]
    again = chained(k, [(s, entry(k, 2, s, written_at=AFTER)) for s in (7, 8, 9)])
    again_head = Head(10, bytes.fromhex(again[-1][2]), 7, 7)
    late = [[s, entry(k, 0, s, written_at=AFTER).decode(), None] for s in (1, 2)] + chained(
        k, [(s, entry(k, 0, s, written_at=AFTER)) for s in (3, 4)])
    late_chain = bytes.fromhex(late[-1][2])

    def stripped(rows: list[list[Any]]) -> list[list[Any]]:
        return [[s, v, None] for s, v, _ in rows]

    cases: list[tuple[str, list[list[Any]], Head | None]] = [
        ("honest", honest, head),
        ("honest, no head", honest, None),
        ("resets continue the chain", reset, None),
        ("after an erasure the chain starts at the root of its epoch", erased,
         Head(10, bytes.fromhex(erased[-1][2]))),
        ("written before the chain, then chained", legacy, None),
        ("no entry since the chain began", [], Head(3, None)),
        ("one byte changed", changed(honest, 2), head),
        ("the first entry changed", changed(honest, 0), head),
        ("an entry removed", honest[:2] + honest[3:], head),
        ("the first entry removed", honest[1:], head),
        ("the last entry removed", honest[:-1], head),
        ("an entry inserted at the end", honest + chained(
            k, [(6, entry(k, 0, 6, "forged"))], bytes.fromhex(honest[-1][2])), head),
        ("two entries moved", moved, head),
        ("rewritten and chained again", rechained, head),
        ("a header stripped", [r if r[0] != 4 else [4, r[1], None] for r in honest], head),
        ("a header malformed", [r if r[0] != 4 else [4, r[1], r[2].upper()] for r in honest],
         head),
        ("a value of another seq", [r if r[0] != 2 else [2, entry(k, 0, 3).decode(), r[2]]
                                    for r in honest], None),
        ("entries where the state has none", honest, Head(6, None)),
        ("no entries where the state has a chain", [], head),
        ("a header empty (as stored for one repeated, null or not ASCII)",
         [r if r[0] != 2 else [2, r[1], ""] for r in honest], head),
        ("every header stripped, written after the chain began", stripped(stamped), None),
        ("every header stripped, written before the chain began (as written before it)",
         stripped(legacy[:2]) + stripped([[s, entry(k, 0, s, written_at=BEFORE).decode(), None]
                                         for s in (3, 4)]), None),
        ("every header stripped, with the worker's head", stripped(stamped), stamped_head),
        ("the first header stripped, written after the chain began",
         [r if r[0] != 1 else [1, r[1], None] for r in stamped], None),
        ("erased entries put back without headers before the new chain", gone + again, None),
        ("erased entries put back, with the worker's head", gone + again, again_head),
        ("erased entries put back with their old headers, with the worker's head",
         chained(k, [(s, entry(k, 1, s, "erased", AFTER)) for s in range(1, 7)]) + again,
         again_head),
        ("erased entries written before the chain put back, the head's live_from not known",
         [[s, entry(k, 1, s, "erased", BEFORE).decode(), None] for s in range(1, 7)] + again,
         Head(10, again_head.chain, 7, None)),
        ("unchained entries after an erasure, the state holding no chain",
         [[s, entry(k, 2, s, written_at=BEFORE).decode(), None] for s in (7, 8)],
         Head(7, None, 7, 7)),
        ("written before the chain after CHAIN_SINCE (a late upgrade): the head decides", late,
         Head(5, late_chain, 3, 1)),
        ("a late upgrade without the head: the entries cannot tell", late, None),
        ("a late upgrade, the head's live_from not known: the date decides", late,
         Head(5, late_chain, 3, None)),
        ("a head written before it recorded where its chain starts", late,
         Head(5, late_chain)),
    ]
    out = []
    since = {"every header stripped, written after the chain began, with a later "
             "chained_since": (stripped(stamped), SINCE_LATER)}
    for name, rows, h in cases + strict_values(k) + dated(k) + [
            (n, r, None) for n, (r, _) in since.items()]:
        rows = [[s, v if isinstance(v, bytes) else v.encode(), c] for s, v, c in rows]
        binary = not all(_utf8(v) for _, v, _ in rows)
        at = since[name][1] if name in since else CHAIN_SINCE
        result = verify_session(k, [(s, v, c) for s, v, c in rows], h, at)
        out.append({
            "name": name, "session_key": k,
            "entries": [[s, v.hex() if binary else v.decode(), c] for s, v, c in rows],
            **({"hex": True} if binary else {}),
            "head": None if h is None else {"next_seq": h.next_seq,
                                            "chain": None if h.chain is None else h.chain.hex(),
                                            "chain_from": h.chain_from,
                                            "live_from": h.live_from},
            **({} if at == CHAIN_SINCE else {"chained_since": _stamp(at)}),
            "finding_seqs": [f.seq for f in result.findings],
            "problems": [f.problem for f in result.findings],
            "chained": result.chained, "unchained": result.unchained,
        })
    return out


SINCE_LATER = datetime.fromisoformat("2026-12-05T00:00:00Z")


def dated(k: str) -> list[tuple[str, list[list[Any]], Head | None]]:
    """One entry without a chain, its `written_at` read as both verifiers must read it: before
    CHAIN_SINCE (2026-12-02T00:00:00Z) it was written before the chain, at or after it (or
    unreadable) it should have one."""
    def one(written_at: object, raw: str | None = None) -> list[list[Any]]:
        value = entry(k, 0, 1, written_at=written_at) if raw is None else raw.encode()
        return [[1, value, None]]

    forms = [
        "2026-12-01T23:59:59Z", "2026-12-02T00:00:00Z", "2026-12-01T23:59:59.999999999Z",
        "2026-12-02T01:59:59+02:00", "2026-12-02T02:00:00+02:00", "2026-12-01T19:59:59-04:00",
        "2026-12-01T20:00:00-04:00", "2026-12-01t23:59:59z", "2026-12-01 23:59:59Z",
        "2026-11-31T23:59:59Z", "2025-02-29T00:00:00Z", "2026-13-01T00:00:00Z",
        "2000-03-01T00:00:00+23:59", "1970-01-01T00:00:00Z", "0000-01-01T00:00:00Z",
        "9999-12-31T23:59:59Z", "2026-12-01T23:59:59", "2026-12-01T23:59:59+0000",
        "2026-12-01T23:59Z", "2026-12-01T23:59:59.Z", "2026-12-01T23:59:59Z\n",
        " 2026-12-01T23:59:59Z", "２０２６-12-01T23:59:59Z", "2026-12-01T23:59:59ZZ", "",
    ]
    out: list[tuple[str, list[list[Any]], Head | None]] = [
        (f"written_at {f!r}", one(f), None) for f in forms]
    key = json.dumps(k)
    out += [
        ("no written_at", one(None), None),
        ("written_at a number", one(1_700_000_000), None),
        ("written_at null", one(None, f'{{"session_key":{key},"seq":1,"epoch":0,'
                                       '"written_at":null}'), None),
        ("the last of two written_at counts", one(None, f'{{"session_key":{key},"seq":1,'
                                                        '"epoch":0,"written_at":"2026-12-03T00:'
                                                        '00:00Z","written_at":"2026-12-01T00:'
                                                        '00:00Z"}'), None),
        ("written_at escaped", one(None, f'{{"session_key":{key},"seq":1,"epoch":0,'
                                         '"written_at":"2026-12-01T00:00:00\\u005a"}'), None),
        ("a value that is no entry, without a chain", one(None, "[1]"), None),
    ]
    return out


def strict_values(k: str) -> list[tuple[str, list[list[Any]], Head | None]]:
    """Honestly chained entries whose values the verifier must read as Python does: seq 2 (or
    seq 1, from the root of `epoch`) is the value given, raw bytes, with the fields around it."""
    key = json.dumps(k)

    def raw(seq: str = "2", epoch: str = "0", extra: str | bytes = "") -> bytes:
        return (f'{{"schema":"transcript-entry/1","session_key":{key},"epoch":{epoch},'
                f'"seq":{seq},"text":"hi"').encode() + (
                    extra.encode() if isinstance(extra, str) else extra) + b"}"

    def honest(values: list[bytes], epoch: int) -> list[list[Any]]:
        """[seq, value, chain hex] for seqs 1, 2, … written from the root of `epoch`."""
        out, previous = [], root(k, epoch)
        for seq, value in enumerate(values, 1):
            previous = link(previous, value)
            out.append([seq, value, previous.hex()])
        return out

    def second(value: bytes) -> list[list[Any]]:
        """seq 1 and 3 ordinary, seq 2 `value`."""
        return honest([entry(k, 0, 1), value, entry(k, 0, 3)], 0)

    def first(value: bytes, epoch: int = 0) -> list[list[Any]]:
        """seq 1 `value` (chained from the root of `epoch`), seq 2 ordinary."""
        return honest([value, entry(k, epoch, 2)], epoch)

    big = 10**4300 - 1  # 4300 digits: as many as Python's int() reads by default
    return [
        ("seq 2.0 is not seq 2", second(raw(seq="2.0")), None),
        ("seq 2e0 is not seq 2", second(raw(seq="2e0")), None),
        ('seq "2" is not seq 2', second(raw(seq='"2"')), None),
        ("seq true is not seq 1", first(raw(seq="true")), None),
        ("seq -0 is not seq 2", second(raw(seq="-0")), None),
        ("no seq", second(raw().replace(b',"seq":2', b"")), None),
        ("the last of two seqs counts", second(raw(seq="5", extra=',"seq":2')), None),
        ("the last of two seqs counts, and it is not 2", second(raw(extra=',"seq":5')), None),
        ("epoch 0.0 is not a whole number", second(raw(epoch="0.0")), None),
        ("epoch -1", second(raw(epoch="-1")), None),
        ("epoch false", second(raw(epoch="false")), None),
        ("epoch null", second(raw(epoch="null")), None),
        ("epoch -0 is 0", first(raw(seq="1", epoch="-0")), None),
        ("epoch 2**64, the root's decimal", first(raw(seq="1", epoch=str(2**64)), 2**64), None),
        ("epoch of 4300 digits", first(raw(seq="1", epoch=str(big)), big), None),
        ("a number of 4301 digits is not JSON to Python", second(raw(extra=',"n":1' + "0" * 4300)),
         None),
        ("a float of 4301 digits is", second(raw(extra=',"n":1' + "0" * 4300 + ".5")), None),
        ("1e400 is a number", second(raw(extra=',"n":-1e400')), None),
        ("NaN is not JSON", second(raw(extra=',"n":NaN')), None),
        ("Infinity is not JSON", second(raw(extra=',"n":[1,-Infinity]')), None),
        ("a byte-order mark", second(b"\xef\xbb\xbf" + raw()), None),
        ("JSON whitespace around", second(b" \t\r\n" + raw() + b"\n "), None),
        ("a form feed is not JSON whitespace", second(raw() + b"\x0c"), None),
        ("no-break space is not JSON whitespace", second(raw() + "\u00a0".encode()), None),
        ("data after the object", second(raw() + b"{}"), None),
        ("a raw control character in a string", second(raw(extra=',"t":"a\x01b"')), None),
        ("escapes in the session key",
         second(raw().replace(b'"agent:main:', rb'"\u0061gent:main\u003a')), None),
        ("a lone surrogate escape is JSON", second(raw(extra=',"t":"\\ud800"')), None),
        ("a bad escape", second(raw(extra=',"t":"\\x41"')), None),
        ("nested values", second(raw(extra=',"n":' + "[{\"a\":" * 40 + "[]" + "}]" * 40)),
         None),
        ("a trailing comma", second(raw(extra=",")), None),
        ("a leading zero", second(raw(extra=',"n":01')), None),
        ("an array", second(b"[" + raw() + b"]"), None),
        ("a string", second(b'"{}"'), None),
        ("another session's key", second(raw().replace(b":42", b":43")), None),
        ("not UTF-8", second(raw(extra=b',"t":"\xff"')), None),
        ("an encoded surrogate is not UTF-8", second(raw(extra=b',"t":"\xed\xa0\x80"')),
         None),
        ("UTF-16 is not UTF-8", second(raw().decode().encode("utf-16")), None),
        ("empty", second(b""), None),
    ]


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def headers() -> list[dict[str, Any]]:
    """The one rule for a record's `chain` header values (hex; None: a null value)."""
    hexed = root(KEYS[0], 0).hex().encode()
    cases: list[tuple[str, list[bytes | None]]] = [
        ("none", []),
        ("one", [hexed]),
        ("one, not hex: its text", [b"not hex, still its text"]),
        ("one, uppercase: its text", [hexed.upper()]),
        ("one, empty", [b""]),
        ("two, equal", [hexed, hexed]),
        ("two, one empty", [hexed, b""]),
        ("three", [hexed, hexed, hexed]),
        ("one, null", [None]),
        ("one, not ASCII", [hexed[:63] + "é".encode()]),
        ("one, a byte 0x80", [b"\x80"]),
        ("one, ASCII control characters", [b"\x00\x7f"]),
    ]
    return [{"name": name, "values": [None if v is None else v.hex() for v in values],
             "text": header_text(values)} for name, values in cases]


def _utf8(value: bytes) -> bool:
    try:
        value.decode()
    except UnicodeDecodeError:
        return False
    return True


def vectors() -> dict[str, Any]:
    values = [b"", b"{}", entry(KEYS[3], 0, 1, "ü" * 300), b"x" * 3000]
    return {
        "roots": [{"session_key": key, "epoch": epoch, "root": root(key, epoch).hex()}
                  for key in KEYS for epoch in (0, 1, 7, 2**53 - 1)],
        "links": [{"previous": root(KEYS[0], i).hex(), "value": v.decode(),
                   "chain": link(root(KEYS[0], i), v).hex()} for i, v in enumerate(values)],
        "sessions": sessions(),
        "headers": headers(),
    }


def render() -> str:
    return json.dumps(vectors(), ensure_ascii=True, sort_keys=True, indent=1) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is stale: run `make vectors`", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
