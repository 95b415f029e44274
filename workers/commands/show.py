"""`transcript-owner show SESSION_KEY [--db PATH]`: one session's transcript.

With `--db PATH` it reads the session from a database that `transcript-owner sink sqlite PATH`
keeps (one indexed query; as fresh as the sink's last batch).

Without it, it reads the session's partition of `transcript.entries` from its start to its end,
read_committed. It must: the compacted topic has no index by session. A session's entries lie
anywhere in its partition (compaction keeps the oldest records at the front, interleaved with
every other session of the partition), and a tombstone that erases one can come at any later
offset, so only the whole partition gives compaction's view of one session. That is a tool for
an operator, not for a gateway: a reader that needs sessions per request runs the sink.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path

from workers.topics import format_table


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
            print(f"show: {exc}", file=sys.stderr)
            return 2
        where = args.db
    else:
        raw, partition = from_topic(args.session_key)
        where = f"partition {partition}"
    if args.json:
        for text in raw:
            print(text)
        return 0
    shown = [json.loads(text) for text in raw]
    if not shown:
        print(f"no entries for {args.session_key} ({where})")
        return 0
    print(format_table(
        [(str(e["epoch"]), str(e["seq"]), e["delivered_at"], e["source"],
          f"{e['posted_by']['kind']}:{e['posted_by'].get('name') or e['posted_by']['id']}",
          e["text"] or "[" + ", ".join(m["name"] for m in e["media"]) + "]")
         for e in shown],
        ("epoch", "seq", "delivered_at", "source", "posted by", "text"),
    ))
    return 0


def from_db(path: str, session_key: str) -> list[str]:
    """The session's entries (their JSON, as the topic holds it) in seq order, from a sink
    database opened read-only. LookupError when PATH is no sink database."""
    p = Path(path)
    if not p.is_file():
        raise LookupError(f"no sink database at {path}")
    try:
        db = sqlite3.connect(f"{p.resolve().as_uri()}?mode=ro", uri=True)
        try:
            rows = db.execute("SELECT entry_json FROM entries WHERE session_key = ? "
                              "ORDER BY seq", (session_key,)).fetchall()
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        raise LookupError(f"{path} is not a sink database ({exc})") from None
    return [text for (text,) in rows]


def from_topic(session_key: str) -> tuple[list[str], int]:
    """The session's live entries (compaction's view: the latest value per key) in seq order,
    read from the whole of its partition, and the partition."""
    from workers.kafka_io import read
    from workers.settings import kafka_settings, worker_settings
    from workers.stream.outputs import ENTRIES
    from workers.stream.partitioning import partition_for

    ks, ws = kafka_settings(), worker_settings()  # a SettingsError is reported by the CLI (exit 2)
    prefix = f"{session_key}#".encode()
    entries: dict[bytes, bytes | None] = {}  # latest value per key: compaction's view
    partition = partition_for(session_key, ws.partitions)
    for r in read(ks, ks.topic(ENTRIES), partitions=[partition]):
        if r.key and r.key.startswith(prefix):
            entries[r.key] = r.value
    # keys are <session_key>#<seq, 10 digits>: their order is seq order
    return [v.decode() for k, v in sorted(entries.items()) if v is not None], partition
