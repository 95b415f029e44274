"""Write connectors/typescript/test/fixtures/entries-cases.json: records of transcript.entries as
transcript_connector.entries_topic.classify decides them, beyond schemas/vectors/positions.json
(the JSON parser's edges: NaN, surrogates, depth, duplicates, big integers; timestamps; an
entry's fields in pydantic's lax mode). test/unit/entries-topic.test.ts holds the TypeScript
port to every one.

    .venv/bin/python connectors/typescript/scripts/entries_cases.py          # rewrite the file
    .venv/bin/python connectors/typescript/scripts/entries_cases.py --check  # exit 1: stale
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
OUT = ROOT / "connectors/typescript/test/fixtures/entries-cases.json"
sys.path.insert(0, str(ROOT / "connectors/python/src"))

from transcript_connector.entries_topic import Delete, Positioned, Upsert, classify  # noqa: E402

P = (
    '{"schema":"input-position/1","partition":3,"input_offset":100,"control_offset":4,'
    '"at":"2026-12-04T10:00:00.250Z"'
)
E = dict(
    schema="transcript-entry/1",
    session_key="agent:a:main",
    epoch=0,
    seq=1,
    entry_id="e1",
    send_id="s1",
    role="assistant",
    agent_id="a",
    text="hi",
    media=[],
    source="automation_result",
    posted_by={"kind": "job", "id": "j"},
    delivered_at="2026-12-04T10:00:00Z",
    written_at="2026-12-04T10:00:00Z",
    platform_message_ids=["1"],
)
ES = json.dumps(E, separators=(",", ":"))
cases: list[tuple[str, bytes | None, bytes, int]] = []


def pos(name, tail, read_from=3, key="position/3"):
    cases.append((name, key.encode(), (P + tail).encode("utf-8", "surrogatepass"), read_from))


def posraw(name, raw, read_from=3, key=b"position/3"):
    cases.append((name, key, raw, read_from))


def ent(name, text):
    cases.append((name, b"agent:a:main#0000000001", text.encode("utf-8", "surrogatepass"), 3))


def entf(name, field, v):
    ent(
        name,
        ES.replace(f'"{field}":{json.dumps(E[field], separators=(",", ":"))}', f'"{field}":{v}', 1),
    )


pos("NaN in an unknown member", ',"x":NaN}')
pos("Infinity and -Infinity", ',"x":[Infinity,-Infinity,1E400]}')
pos("a lone surrogate escape", ',"x":"\\ud800"}')
pos("a high surrogate, then no low one", ',"x":"\\ud800\\u0041"}')
pos("a surrogate pair", ',"x":"\\ud83d\\ude00"}')
posraw("a BOM", b"\xef\xbb\xbf" + (P + "}").encode())
posraw("not UTF-8 in a member", (P + ',"x":"').encode() + b'\xff"}')
pos("whitespace around", "} \n\t\r")
pos("data after the document", "}x")
pos("200 arrays deep", ',"x":' + "[" * 199 + "1" + "]" * 199 + "}")
pos("201 arrays deep", ',"x":' + "[" * 200 + "1" + "]" * 200 + "}")
pos("201 deep, the last one empty", ',"x":' + "[" * 200 + "]" * 200 + "}")
pos("202 deep, the last one empty", ',"x":' + "[" * 201 + "]" * 201 + "}")
pos("201 objects deep", ',"x":' + '{"a":' * 200 + "1" + "}" * 200 + "}")
pos("a duplicate deep inside", ',"x":{"a":[{"b":1,"b":2}]}}')
pos("a duplicate of an unknown member", ',"x":1,"x":2}')
pos("an integer of 4300 digits", ',"x":' + "9" * 4300 + "}")
pos("an integer of 4301 digits", ',"x":' + "9" * 4301 + "}")
posraw("-0 is 0", (P.replace('"input_offset":100', '"input_offset":-0') + "}").encode())
posraw("1e2 is a float", (P.replace('"input_offset":100', '"input_offset":1e2') + "}").encode())
posraw("100.0 is a float", (P.replace('"input_offset":100', '"input_offset":100.0') + "}").encode())
posraw(
    "a partition past int32", (P.replace('"partition":3', '"partition":2147483648') + "}").encode()
)
posraw("lowercase t and z", (P.replace("T10", "t10").replace('Z"', 'z"') + "}").encode())
posraw("a space for the T", (P.replace("T10", " 10") + "}").encode())
posraw("offset +23:59", (P.replace(".250Z", "+23:59") + "}").encode())
posraw("offset +24:00", (P.replace(".250Z", "+24:00") + "}").encode())
posraw("offset -00:00", (P.replace('Z"', '-00:00"') + "}").encode())
posraw("a leap second", (P.replace("00.250Z", "60Z") + "}").encode())
posraw("no offset", (P.replace(".250Z", "") + "}").encode())
posraw(
    "1969 local, 1970 UTC",
    (P.replace("2026-12-04T10:00:00.250Z", "1969-12-31T23:30:00-01:00") + "}").encode(),
)
posraw(
    "1970-01-01T00:00:00Z",
    (P.replace("2026-12-04T10:00:00.250Z", "1970-01-01T00:00:00Z") + "}").encode(),
)
posraw(
    "a microsecond before 1970",
    (P.replace("2026-12-04T10:00:00.250Z", "1969-12-31T23:59:59.999999Z") + "}").encode(),
)
posraw(
    "the last microsecond",
    (P.replace("2026-12-04T10:00:00.250Z", "2999-12-31T23:59:59.0000009Z") + "}").encode(),
)
posraw(
    "past the last second",
    (P.replace("2026-12-04T10:00:00.250Z", "2999-12-31T23:59:59.000001Z") + "}").encode(),
)
posraw("29 February 2025", (P.replace("2026-12-04", "2025-02-29") + "}").encode())
posraw("29 February 2024", (P.replace("2026-12-04", "2024-02-29") + "}").encode())
posraw("a trailing newline in at", (P.replace(".250Z", ".250Z\\n") + "}").encode())
posraw("at is a number", (P.replace('"2026-12-04T10:00:00.250Z"', "1796378400") + "}").encode())
posraw("schema_ is an unknown member", (P + ',"schema_":"x"}').encode())
posraw("no schema", (P.replace('"schema":"input-position/1",', "") + "}").encode())
posraw("not an object", b'"position"')
posraw("null", b"null")
posraw("empty", b"")
posraw("a position key with no value partition", (P.replace('"partition":3,', "") + "}").encode())
posraw(
    "read from partition 3, key and value 4",
    (P.replace('"partition":3', '"partition":4') + "}").encode(),
    3,
    b"position/4",
)
posraw(
    "key and value 4, read from partition 4",
    (P.replace('"partition":3', '"partition":4') + "}").encode(),
    4,
    b"position/4",
)
posraw("a key that is no UTF-8", ES.encode(), 3, b"agent:a:main\xff#0000000001")
posraw("no key", ES.encode(), 3, None)
for v in [
    '"1"',
    "1.0",
    "true",
    '" 1"',
    '"1.00"',
    '"1."',
    '".0"',
    '"\\u00a01\\u00a0"',
    '"\\ufeff1"',
    '"\\u00851"',
    '"\\u001c1"',
    '"1\\n"',
    '"\\u0661"',
    '"1e0"',
    '"+0001"',
    '"1_0"',
    '""',
    "1.0000000000000002",
    "1e300",
    "-1",
    "0",
    "2",
]:
    entf(f"seq {v}", "seq", v)
for v in [
    '"2"',
    "2.0",
    "true",
    "false",
    "1.5",
    "-1",
    "-0",
    "-0.0",
    '"-0"',
    "123456789012345678901234567890",
    '"18446744073709551616"',
    "1E400",
    "NaN",
    '"1e0"',
    "1e300",
    "9.2e18",
    "9.3e18",
]:
    entf(f"epoch {v}", "epoch", v)
for v in [
    '"2026-12-04T10:00:00+23:59"',
    '"2026-12-04T24:00:00Z"',
    '"0001-01-01T00:00:00Z"',
    '"2026-12-04T10:00:00"',
    '"2026-12-04T10:00:00.Z"',
]:
    entf(f"delivered_at {v}", "delivered_at", v)
entf("send_id of 512 astral characters", "send_id", json.dumps("\U0001f600" * 512))
entf("send_id of 513 characters", "send_id", json.dumps("x" * 513))
entf("send_id empty", "send_id", '""')
entf("agent_id of 64", "agent_id", json.dumps("a" * 64))
entf("agent_id of 65", "agent_id", json.dumps("a" * 65))
entf("agent_id with a newline", "agent_id", '"a\\n"')
entf("agent_id uppercase", "agent_id", '"A"')
entf("role user", "role", '"user"')
entf("source unknown", "source", '"other"')
entf("text a number", "text", "1")
entf("media null", "media", "null")
entf("media item with a url", "media", '[{"kind":"k","name":"n","url":"u"}]')
entf("media item without a name", "media", '[{"kind":"k"}]')
entf("posted_by extra member", "posted_by", '{"kind":"job","id":"j","x":1}')
entf("posted_by name null", "posted_by", '{"kind":"job","id":"j","name":null}')
entf("posted_by name 1", "posted_by", '{"kind":"job","id":"j","name":1}')
entf("posted_by kind other", "posted_by", '{"kind":"user","id":"j"}')
entf("platform_message_ids of a number", "platform_message_ids", "[1]")
entf("platform_message_ids a string", "platform_message_ids", '"ab"')
entf("session_key of another session", "session_key", '"agent:a:other"')
entf("session_key a number", "session_key", "1")
ent("a duplicate text (the last wins)", ES[:-1] + ',"text":"x"}')
ent("a duplicate seq (the last wins: 2)", ES[:-1] + ',"seq":2}')
ent("NaN in an unknown member", ES[:-1] + ',"z":NaN}')
ent("no text", ES.replace('"text":"hi",', ""))
ent("an array", "[]")
ent("a lone surrogate in text", ES.replace('"hi"', '"\\udc00"'))


def render() -> str:
    out = []
    for name, key, val, rf in cases:
        r = classify(key, val, (), rf)
        kind = (
            "position"
            if isinstance(r, Positioned)
            else "entry"
            if isinstance(r, Upsert)
            else "erased"
            if isinstance(r, Delete)
            else "skip"
        )
        item = {
            "name": name,
            "key": None if key is None else key.hex(),
            "value": val.hex(),
            "read_from": rf,
            "kind": kind,
        }
        if isinstance(r, Positioned):
            item.update(
                input_offset=str(r.position.input_offset),
                at_ms=round(r.position.at.timestamp() * 1000),
            )
        if isinstance(r, Upsert):
            item.update(epoch=str(r.epoch))
        out.append(item)
    return json.dumps(out, indent=0, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not OUT.is_file() or OUT.read_text("utf-8") != text:
            print(f"{OUT} is stale: run {Path(__file__).relative_to(ROOT)}", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
