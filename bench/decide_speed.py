"""Throughput of the core, phase by phase, streaming a JSON-lines input file.

    python bench/decide_speed.py /tmp/in.jsonl [--limit N]
    python bench/decide_speed.py /tmp/in.jsonl --worker [--limit N] [--batch 2000]

Default: times each phase of replay separately on the same stream: parse
(schemas.parse_input), decide (workers.core.step on the parsed record: state lookup, rules,
state store; no parsing, no output) and render (replay's output line). File reading and
writing are not timed. Streams, so memory stays what replay needs (the session states).

--worker: the worker's per-record path without Kafka (workers.processor without the awaits).
Every record arrives keyed by its canonical key on its home partition (as connectors send
it), states stay in a cache dict, and each changed session's state is encoded once per batch.
Two passes over the file, fresh state each: one timing the stages of Owner.handle apart
(parse, key, partition, decide, encode) and the state writes (to_bytes), one timing
Owner.handle whole. Then from_bytes of every session's final state (a cache miss). The file
is read into memory first.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from itertools import islice
from time import perf_counter

from schemas import Invalid, parse_input
from workers.core import (
    DEFAULT_DEDUPE_WINDOW,
    EMPTY_STATE,
    SessionState,
    decide_keyed,
    session_key_of,
    step,
)
from workers.outputs import Source, encode
from workers.owner import Owner
from workers.partitioning import murmur2, partition_for
from workers.replay import render

WRITTEN_AT = datetime(2025, 4, 1, tzinfo=UTC)
PARTITIONS = 8


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file")
    parser.add_argument("--limit", type=int, default=None, help="first N lines only")
    parser.add_argument("--worker", action="store_true", help="time the worker's path")
    parser.add_argument("--batch", type=int, default=2000, help="records per batch (--worker)")
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.file, args.limit, args.batch)
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
    _report(n, [("parse", parse_s), ("decide", decide_s), ("render", render_s)])
    return 0


def worker(path: str, limit: int | None, batch: int) -> int:
    """Both --worker passes and their report, then from_bytes of every final state."""
    sources = _sources(path, limit)
    n = len(sources)
    stages = _staged(sources, batch)
    handle_s, to_bytes_s, states = _whole(sources, batch)
    print(f"{n:,} records, {len(states):,} sessions, batches of {batch:,}")
    _report(n, list(stages.items()))
    print("Owner.handle whole:")
    _report(n, [("handle", handle_s), ("to_bytes", to_bytes_s)])
    stored = [state.to_bytes() for state in states]
    t0 = perf_counter()
    for data in stored:
        SessionState.from_bytes(data)
    secs = perf_counter() - t0
    entries = sum(len(state.seen) for state in states) / len(states)
    print(f"from_bytes {secs / len(stored) * 1e6:8.1f} µs/state ({entries:,.0f} entries each)")
    return 0


def _sources(path: str, limit: int | None) -> list[Source]:
    """The file's records as the worker receives them: keyed, on their home partition."""
    out: list[Source] = []
    with open(path, "rb") as f:
        for offset, line in enumerate(islice(f, limit)):
            value = line.rstrip(b"\r\n")
            record = parse_input(value)
            key = None if isinstance(record, Invalid) else session_key_of(record)
            if isinstance(key, str):
                raw = key.encode()
                home = (murmur2(raw) & 0x7FFFFFFF) % PARTITIONS  # not partition_for: left cold
                out.append(Source("in", home, offset, raw, value))
            else:
                out.append(Source("in", offset % PARTITIONS, offset, None, value))
    return out


def _staged(sources: list[Source], batch: int) -> dict[str, float]:
    """Owner._step's stages, timed apart, then the batch's state writes."""
    times = dict.fromkeys(("parse", "key", "partition", "decide", "encode", "to_bytes"), 0.0)
    cache: dict[str, SessionState] = {}
    for at in range(0, len(sources), batch):
        changed: dict[str, SessionState] = {}
        for source in sources[at : at + batch]:
            t0 = perf_counter()
            record = parse_input(source.value)
            t1 = perf_counter()
            times["parse"] += t1 - t0
            if isinstance(record, Invalid):
                continue
            key = session_key_of(record)
            t2 = perf_counter()
            times["key"] += t2 - t1
            if isinstance(key, Invalid):
                continue
            partition_for(key, PARTITIONS)
            t3 = perf_counter()
            state = cache.get(key, EMPTY_STATE)
            new, outcome = decide_keyed(
                state, record, key, written_at=WRITTEN_AT, dedupe_window=DEFAULT_DEDUPE_WINDOW
            )
            t4 = perf_counter()
            encode(outcome, source, PARTITIONS)
            t5 = perf_counter()
            times["partition"] += t3 - t2
            times["decide"] += t4 - t3
            times["encode"] += t5 - t4
            if new is not state:
                cache[key] = changed[key] = new
        times["to_bytes"] += _write(changed)
    return times


def _whole(sources: list[Source], batch: int) -> tuple[float, float, list[SessionState]]:
    """Seconds in Owner.handle and in to_bytes, and the final states."""
    owner = Owner(PARTITIONS, DEFAULT_DEDUPE_WINDOW, lambda: WRITTEN_AT)
    cache: dict[str, SessionState] = {}

    def load(key: str) -> SessionState:
        return cache.get(key, EMPTY_STATE)

    handle_s = to_bytes_s = 0.0
    for at in range(0, len(sources), batch):
        changed: dict[str, SessionState] = {}
        t0 = perf_counter()
        for source in sources[at : at + batch]:
            s = owner.handle(source, load)
            if s.new_state is not None and s.session_key is not None:
                cache[s.session_key] = changed[s.session_key] = s.new_state
        handle_s += perf_counter() - t0
        to_bytes_s += _write(changed)
    return handle_s, to_bytes_s, list(cache.values())


def _write(changed: dict[str, SessionState]) -> float:
    """Seconds to encode each changed session's state once, as the worker does per batch."""
    t0 = perf_counter()
    for state in changed.values():
        state.to_bytes()
    return perf_counter() - t0


def _report(n: int, rows: list[tuple[str, float]]) -> None:
    for name, secs in [*rows, ("all", sum(secs for _, secs in rows))]:
        print(f"{name:9s} {n / secs:10,.0f} records/s  {secs / n * 1e6:6.2f} µs/record")


if __name__ == "__main__":
    raise SystemExit(main())
