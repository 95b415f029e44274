"""Throughput of the core without Kafka, streaming a JSON-lines input file.

    python bench/decide_speed.py /tmp/in.jsonl [--limit N]
    python bench/decide_speed.py /tmp/in.jsonl --worker [--limit N] [--batch 2000]

Default: replay's path (Owner.handle over a MemoryState, then replay's output line), timed
per record. File reading and writing are not timed.

--worker: the worker's per-record path without Kafka (workers.stream.processor without the awaits):
every record arrives keyed by its canonical key on its home partition (as connectors send
it), decided by Owner.handle over the worker's SessionStore, whose partition stores are
dicts here; each batch's writes are taken and applied as the worker does after the changelog
send. Then the size of the stored state records. The file is read into memory first.
"""

from __future__ import annotations

import argparse
import bisect
from datetime import UTC, datetime
from itertools import islice
from time import perf_counter

from transcript_connector.partitioning import murmur2

from schemas import Invalid, parse_input
from workers.commands.replay import render
from workers.core import DEFAULT_DEDUPE_WINDOW, MemoryState, session_key_of
from workers.core.outputs import Source
from workers.core.owner import Owner, apply
from workers.stream.session_store import SessionStore

WRITTEN_AT = datetime(2027, 1, 1, tzinfo=UTC)  # after every synthetic record: no skew
PARTITIONS = 8


class DictStore(dict):
    """A partition store as SessionStore reads it: get, and items from a key in key order."""

    def items(self, from_key: bytes = b""):  # type: ignore[override]
        keys = sorted(self)
        for k in keys[bisect.bisect_left(keys, from_key):]:
            yield k, self[k]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file")
    parser.add_argument("--limit", type=int, default=None, help="first N lines only")
    parser.add_argument("--worker", action="store_true", help="time the worker's path")
    parser.add_argument("--batch", type=int, default=2000, help="records per batch (--worker)")
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.file, args.limit, args.batch)
    state = MemoryState()
    owner = Owner(None, DEFAULT_DEDUPE_WINDOW, lambda: WRITTEN_AT)
    handle_s = render_s = 0.0
    n = 0
    with open(args.file, "rb") as f:
        for n, line in enumerate(islice(f, args.limit), 1):
            t0 = perf_counter()
            step = owner.handle(Source("replay", 0, n, None, line.rstrip(b"\r\n")), state)
            apply(state, step)
            t1 = perf_counter()
            assert step.decided is not None
            render(n, step.decided)
            render_s += perf_counter() - t1
            handle_s += t1 - t0
    print(f"{n:,} records, {len(state.heads):,} sessions, {len(state.seens):,} send_ids")
    _report(n, [("handle", handle_s), ("render", render_s)])
    return 0


def worker(path: str, limit: int | None, batch: int) -> int:
    sources = _sources(path, limit)
    n = len(sources)
    dbs = [DictStore() for _ in range(PARTITIONS)]
    store = SessionStore(dbs.__getitem__, DEFAULT_DEDUPE_WINDOW)
    owner = Owner(PARTITIONS, DEFAULT_DEDUPE_WINDOW, lambda: WRITTEN_AT)
    handle_s = write_s = 0.0
    for at in range(0, n, batch):
        t0 = perf_counter()
        for source in sources[at : at + batch]:
            store.partition = source.partition
            apply(store, owner.handle(source, store))
        t1 = perf_counter()
        for p, k, v in store.take_writes():
            if v is None:
                dbs[p].pop(k, None)
            else:
                dbs[p][k] = v
        write_s += perf_counter() - t1
        handle_s += t1 - t0
    values = [v for db in dbs for v in db.values()]
    print(f"{n:,} records, batches of {batch:,}; {len(values):,} state records, largest "
          f"{max(map(len, values), default=0)} bytes, {sum(map(len, values)):,} bytes in all")
    _report(n, [("handle", handle_s), ("writes", write_s)])
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


def _report(n: int, rows: list[tuple[str, float]]) -> None:
    for name, secs in [*rows, ("all", sum(secs for _, secs in rows))]:
        print(f"{name:9s} {n / secs:10,.0f} records/s  {secs / n * 1e6:6.2f} µs/record")


if __name__ == "__main__":
    raise SystemExit(main())
