"""`make demo`: publish the scenario beside a running worker, then show what it wrote.

Prints each step with the outcome the rules give, then the transcripts and diagnostics as they
are in Kafka (read_committed), and the dead letters with their reasons.
"""

from __future__ import annotations

import json
import secrets
import sys
from datetime import UTC, datetime

from workers.core.outputs import CONFIRMATIONS, DIAGNOSTICS, DLQ, ENTRIES
from workers.kafka_io import consumer, polls, publish
from workers.scenario import steps
from workers.settings import SettingsError, kafka_settings, worker_settings
from workers.topics import format_table


def main() -> int:
    try:
        ks, ws = kafka_settings(), worker_settings()
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from kafka import TopicPartition

    run = secrets.token_hex(3)
    scenario = steps(run, datetime.now(UTC).replace(microsecond=0))
    print(f"demo run {run}: {len(scenario)} records to {ks.topic(CONFIRMATIONS)}\n")
    print(format_table([(str(i), s.note, s.expect) for i, s in enumerate(scenario, 1)],
                       ("#", "step", "rule says")))

    c = consumer(ks)
    tps = [TopicPartition(ks.topic(t), p) for t in (ENTRIES, DIAGNOSTICS, DLQ)
           for p in sorted(c.partitions_for_topic(ks.topic(t)) or ())]
    c.assign(tps)
    ends = c.end_offsets(tps)
    for tp in tps:
        c.seek(tp, ends[tp])  # only what this run makes
    publish(ks, ks.topic(CONFIRMATIONS), [(s.key, s.value) for s in scenario], ws.partitions)

    want = {
        ENTRIES: sum(s.expect == "written" for s in scenario),
        DLQ: sum(s.expect == "dead_letter" for s in scenario),
    }
    got: dict[str, list] = {ENTRIES: [], DIAGNOSTICS: [], DLQ: []}

    def take(records: list) -> None:
        for r in records:
            if run in (r.key or b"").decode(errors="replace"):
                got[r.topic[len(ks.topic_prefix):]].append(r)

    arriving = polls(c, timeout=60)
    while any(len(got[t]) < n for t, n in want.items()) or not got[DIAGNOSTICS]:
        try:
            take(next(arriving))
        except TimeoutError:
            print("\ntimed out waiting for the worker: is `make run` running?", file=sys.stderr)
            return 1
    # diagnostics trail their entries by at most one poll; take what has arrived by then
    take(next(polls(c, poll_ms=1000)))
    c.close()

    entries = sorted((json.loads(r.value) for r in got[ENTRIES]),
                     key=lambda e: (e["session_key"], e["seq"]))
    print("\ntranscripts (transcript.entries)")
    print(format_table(
        [(e["session_key"], str(e["epoch"]), str(e["seq"]), e["source"],
          f"{e['posted_by']['kind']}:{e['posted_by'].get('name') or e['posted_by']['id']}",
          _short(e["text"]) or "[" + ", ".join(m["name"] for m in e["media"]) + "]")
         for e in entries],
        ("session", "epoch", "seq", "source", "posted by", "text"),
    ))
    diags = [json.loads(r.value) for r in got[DIAGNOSTICS]]
    print("\ndiagnostics (transcript.diagnostics)")
    print(format_table([(d["level"], d["code"], d["session_key"], d["send_id"] or "")
                        for d in diags], ("level", "code", "session", "send_id")))
    print("\ndead letters (delivery.confirmations.dlq)")
    print(format_table([(str(dict(r.headers).get("source.offset", b"").decode()),
                         dict(r.headers)["error"].decode()) for r in got[DLQ]],
                       ("source offset", "error")))
    return 0


def _short(text: str, n: int = 48) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


if __name__ == "__main__":
    raise SystemExit(main())
