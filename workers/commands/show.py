"""`transcript-owner show SESSION_KEY [--db PATH]`: one session's transcript.

With `--db PATH` it reads the session from a database that `transcript-owner sink sqlite PATH`
keeps (one indexed query; as fresh as the sink's last batch).

Without it, it reads the session's partition of `transcript.entries` from its start to its end,
read_committed. It must: the compacted topic has no index by session. A session's entries lie
anywhere in its partition (compaction keeps the oldest records at the front, interleaved with
every other session of the partition), and a tombstone that erases one can come at any later
offset, so only the whole partition gives compaction's view of one session. That is a tool for
an operator, not for a gateway: a reader that needs sessions per request runs the sink.

Either way a session is its exact entry keys (`<session_key>#<10 digits>`, parsed by
`parse_entry_key`) or its rows' `session_key`, never a key prefix: session `K#1` is not part of
`K` (DESIGN 1.2). From the topic, a live value the sink would skip (not a valid entry of its key)
is not shown either, so both sources print the same. The table view shows control and bidi
characters of any field escaped (`\\x1b`, `\\u202e`), so transcript text cannot drive the
terminal; `--json` prints each entry's JSON exactly as stored.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path

from workers.topics import format_table

# C0, DEL and C1 (CSI is \x9b), the line and paragraph separators, and the bidi formatting
# characters (embeddings, overrides, isolates, marks): each shown as its escape
_UNSAFE = [*range(0x20), *range(0x7F, 0xA0), 0x061C, 0x200E, 0x200F, 0x2028, 0x2029,
           *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_VISIBLE = {c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}" for c in _UNSAFE} | {
    0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}


def visible(text: object) -> str:
    """`text` for a terminal: no character in it can move the cursor, set a title, ring or
    reorder the line; each such character is shown as its escape, one line per field."""
    return str(text).translate(_VISIBLE)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session_key", metavar="SESSION_KEY",
                        help="canonical key, e.g. agent:ops:telegram:direct:42")
    parser.add_argument("--json", action="store_true", help="print entries as JSON lines")
    parser.add_argument(
        "--db", metavar="PATH",
        help="read from a sink database (transcript-owner sink sqlite PATH) instead of "
             "reading the session's whole partition of the topic")


def run(args: argparse.Namespace) -> int:
    if args.db is not None:
        try:
            raw = from_db(args.db, args.session_key)
        except LookupError as exc:
            print(f"show: {visible(exc)}", file=sys.stderr)
            return 2
        where = args.db
    else:
        raw, partition, skipped = from_topic(args.session_key)
        where = f"partition {partition}"
        if skipped:
            print(f"show: {skipped} live records of the session are not valid entries of "
                  "their key (not shown; the sink skips them too)", file=sys.stderr)
    if args.json:
        for text in raw:
            print(text)
        return 0
    shown = [json.loads(text) for text in raw]
    if not shown:
        print(visible(f"no entries for {args.session_key} ({where})"))
        return 0
    print(format_table(
        [tuple(visible(cell) for cell in (
            e["epoch"], e["seq"], e["delivered_at"], e["source"],
            f"{e['posted_by']['kind']}:{e['posted_by'].get('name') or e['posted_by']['id']}",
            e["text"] or "[" + ", ".join(m["name"] for m in e["media"]) + "]"))
         for e in shown],
        ("epoch", "seq", "delivered_at", "source", "posted by", "text"),
    ))
    return 0


def from_db(path: str, session_key: str) -> list[str]:
    """The session's entries (their JSON, as the topic holds it) in seq order, from a sink
    database opened read-only. LookupError when PATH is no sink database."""
    from workers.commands.sink import SCHEMA_VERSION, sink_format

    p = Path(path)
    if not p.is_file():
        raise LookupError(f"no sink database at {path}")
    try:
        db = sqlite3.connect(f"{p.resolve().as_uri()}?mode=ro", uri=True)
        try:
            if sink_format(db) not in (1, SCHEMA_VERSION):  # format 1: an earlier sink's
                raise LookupError(f"{path} is not a sink database")
            rows = db.execute("SELECT entry_json FROM entries WHERE session_key = ? "
                              "ORDER BY seq", (session_key,)).fetchall()
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        raise LookupError(f"{path} is not a sink database ({exc})") from None
    return [text for (text,) in rows]


def from_topic(session_key: str) -> tuple[list[str], int, int]:
    """The session's live entries (compaction's view: the latest value per key) in seq order,
    read from the whole of its partition; the partition; how many live values were skipped."""
    from transcript_connector.partitioning import partition_for

    from workers.commands.sink import Upsert, classify
    from workers.core.outputs import ENTRIES, parse_entry_key
    from workers.kafka_io import read
    from workers.settings import kafka_settings, worker_settings

    ks, ws = kafka_settings(), worker_settings()  # a SettingsError is reported by the CLI (exit 2)
    latest: dict[int, tuple[bytes, bytes | None]] = {}  # seq -> (key, value): compaction's view
    partition = partition_for(session_key, ws.partitions)
    for r in read(ks, ks.topic(ENTRIES), partitions=[partition]):
        parsed = parse_entry_key(r.key)
        if parsed is not None and parsed[0] == session_key:
            latest[parsed[1]] = (r.key, r.value)
    shown, skipped = [], 0
    for seq in sorted(latest):
        key, value = latest[seq]
        if value is None:
            continue
        change = classify(key, value)  # the sink's rule: a valid entry of this key
        if isinstance(change, Upsert):
            shown.append(change.entry_json)
        else:
            skipped += 1
    return shown, partition, skipped
