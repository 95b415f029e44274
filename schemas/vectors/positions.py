"""Write schemas/vectors/positions.json: what a record of transcript.entries is to a reader
(DESIGN 1.3, "Reading at a position"), the vectors both connector packages run.

    python schemas/vectors/positions.py           # rewrite the file (make vectors)
    python schemas/vectors/positions.py --check   # exit 1 if it is stale

Every expectation is computed by transcript_connector.entries_topic (the contract):
- `keys`: a key (hex) -> the partition of `position/<p>`, or null (not a position key: an entry
  key, a near miss with a leading zero, a sign, a space, too many digits);
- `records`: a key and value (hex; value null: a tombstone) read from partition `read_from`
  -> `kind` ("entry", "erased", "position" or "skip") and, for a position, its partition,
  offsets and `at` in UTC milliseconds since the epoch.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "connectors/python/src"))

from transcript_connector.entries_topic import (  # noqa: E402
    Delete,
    Positioned,
    Upsert,
    classify,
    parse_position_key,
)

OUT = HERE / "positions.json"

KEYS = [b"position/0", b"position/7", b"position/63", b"position/2147483647",
        b"position/9999999999", b"position/00", b"position/07", b"position/-1", b"position/+1",
        b"position/ 1", b"position/1 ", b"position/", b"position", b"Position/1",
        b"position/1#0000000001", b"agent:a:main#0000000001", b"position/1/2",
        b"position/\xd9\xa1", b"position/12345678901", b"", b"x/position/1"]


def value(partition: Any = 3, input_offset: Any = 100, control_offset: Any = 4,
          at: Any = "2026-12-04T10:00:00.250Z", **extra: Any) -> bytes:
    doc = {"schema": "input-position/1", "partition": partition, "input_offset": input_offset,
           "control_offset": control_offset, "at": at, **extra}
    return json.dumps(doc, separators=(",", ":")).encode()


ENTRY = (b'{"schema":"transcript-entry/1","session_key":"agent:a:main","epoch":0,"seq":1,'
         b'"entry_id":"e1","send_id":"s1","role":"assistant","agent_id":"a","text":"hi",'
         b'"media":[],"source":"automation_result","posted_by":{"kind":"job","id":"j"},'
         b'"delivered_at":"2026-12-04T10:00:00Z","written_at":"2026-12-04T10:00:00Z",'
         b'"platform_message_ids":["1"]}')

RECORDS: list[tuple[bytes, bytes | None, int]] = [
    (b"position/3", value(), 3),
    (b"position/3", value(at="2026-12-04T11:00:00.250+01:00"), 3),
    (b"position/3", value(unknown_field="ignored"), 3),
    (b"position/3", value(input_offset=0, control_offset=0), 3),
    (b"position/3", value(input_offset=2**63 - 1), 3),
    (b"position/3", value(input_offset=2**63), 3),
    (b"position/3", value(input_offset=-1), 3),
    (b"position/3", value(input_offset=1.5), 3),
    (b"position/3", value(input_offset="100"), 3),
    (b"position/3", value(input_offset=True), 3),
    (b"position/3", value(partition=4), 3),
    (b"position/3", value(), 4),
    (b"position/3", value(at="2026-12-04 10:00:00"), 3),
    (b"position/3", value(at="1700000000"), 3),
    (b"position/3", value(at="3000-01-02T00:00:00Z"), 3),
    (b"position/3", b'{"schema":"input-position/2","partition":3,"input_offset":1,'
                    b'"control_offset":1,"at":"2026-12-04T10:00:00Z"}', 3),
    (b"position/3", b'{"schema":"input-position/1","partition":3,"input_offset":1,'
                    b'"input_offset":2,"control_offset":1,"at":"2026-12-04T10:00:00Z"}', 3),
    (b"position/3", b"not json", 3),
    (b"position/3", b"[]", 3),
    (b"position/3", None, 3),
    (b"position/03", value(), 3),
    (b"agent:a:main#0000000001", ENTRY, 3),
    (b"agent:a:main#0000000001", None, 3),
    (b"agent:a:main#0000000001", value(), 3),
    (b"agent:a:main", ENTRY, 3),
]


def _record(key: bytes, val: bytes | None, read_from: int) -> dict[str, Any]:
    found = classify(key, val, (), read_from)
    out: dict[str, Any] = {"key": key.hex(), "value": None if val is None else val.hex(),
                           "read_from": read_from}
    if isinstance(found, Positioned):
        p = found.position
        out.update(kind="position", partition=p.partition, input_offset=p.input_offset,
                   control_offset=p.control_offset, at_ms=round(p.at.timestamp() * 1000))
    else:
        out["kind"] = ("entry" if isinstance(found, Upsert)
                       else "erased" if isinstance(found, Delete) else "skip")
    return out


def vectors() -> dict[str, Any]:
    return {
        "keys": [{"key": k.hex(), "partition": parse_position_key(k)} for k in KEYS],
        "records": [_record(*r) for r in RECORDS],
    }


def render() -> str:
    return json.dumps(vectors(), indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not OUT.is_file() or OUT.read_text("utf-8") != text:
            print(f"{OUT} is stale: run make vectors", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
