"""Throughput of the core, phase by phase, streaming a JSON-lines input file.

    python bench/decide_speed.py /tmp/in.jsonl [--limit N]

Times each phase of replay separately on the same stream: parse (schemas.parse_input),
decide (workers.core.step on the parsed record: state lookup, rules, state store; no
parsing, no output) and render (replay's output line). File reading and writing are not
timed. Streams, so memory stays what replay needs (the session states).
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from itertools import islice
from time import perf_counter

from schemas import parse_input
from workers.core import SessionState, step
from workers.replay import render

WRITTEN_AT = datetime(2025, 4, 1, tzinfo=UTC)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file")
    parser.add_argument("--limit", type=int, default=None, help="first N lines only")
    args = parser.parse_args(argv)
    states: dict[str, SessionState] = {}
    parse_s = decide_s = render_s = 0.0
    n = 0
    with open(args.file, "rb") as f:
        for n, line in enumerate(islice(f, args.limit), 1):
            t0 = perf_counter()
            item = parse_input(line.rstrip(b"\r\n"))
            t1 = perf_counter()
            outcome = step(states, item, written_at=WRITTEN_AT)
            t2 = perf_counter()
            render(n, outcome)
            t3 = perf_counter()
            parse_s += t1 - t0
            decide_s += t2 - t1
            render_s += t3 - t2
    print(f"{n:,} records, {len(states):,} sessions")
    total = parse_s + decide_s + render_s
    for name, secs in (
        ("parse", parse_s),
        ("decide", decide_s),
        ("render", render_s),
        ("all", total),
    ):
        print(f"{name:7s} {n / secs:10,.0f} records/s  {secs / n * 1e6:6.1f} µs/record")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
