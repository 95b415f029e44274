"""`transcript-owner show SESSION_KEY`: one session's transcript, read from its partition."""

from __future__ import annotations

import argparse
import json

from workers.settings import kafka_settings, worker_settings
from workers.stream.outputs import ENTRIES
from workers.stream.partitioning import partition_for
from workers.topics import format_table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session_key", metavar="SESSION_KEY",
                        help="canonical key, e.g. agent:ops:telegram:direct:42")
    parser.add_argument("--json", action="store_true", help="print entries as JSON lines")


def run(args: argparse.Namespace) -> int:
    ks, ws = kafka_settings(), worker_settings()  # a SettingsError is reported by the CLI (exit 2)
    from workers.kafka_io import read

    prefix = f"{args.session_key}#".encode()
    entries: dict[bytes, dict | None] = {}  # latest value per key: compaction's view
    partition = partition_for(args.session_key, ws.partitions)
    for r in read(ks, ks.topic(ENTRIES), partitions=[partition]):
        if r.key and r.key.startswith(prefix):
            entries[r.key] = None if r.value is None else json.loads(r.value)
    shown = sorted((e for e in entries.values() if e), key=lambda e: e["seq"])
    if args.json:
        for e in shown:
            print(json.dumps(e))
        return 0
    if not shown:
        print(f"no entries for {args.session_key} (partition {partition})")
        return 0
    print(format_table(
        [(str(e["epoch"]), str(e["seq"]), e["delivered_at"], e["source"],
          f"{e['posted_by']['kind']}:{e['posted_by'].get('name') or e['posted_by']['id']}",
          e["text"] or "[" + ", ".join(m["name"] for m in e["media"]) + "]")
         for e in shown],
        ("epoch", "seq", "delivered_at", "source", "posted by", "text"),
    ))
    return 0
