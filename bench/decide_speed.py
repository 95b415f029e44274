"""Throughput of the core without Kafka, streaming a JSON-lines input file.

    python bench/decide_speed.py /tmp/in.jsonl [--limit N]
    python bench/decide_speed.py /tmp/in.jsonl --worker [--limit N] [--batch 2000]
        [--partitions 8] [--rocksdb]
    python bench/decide_speed.py /tmp/in.jsonl --stages [--limit N] [--batch 2000]

Default: replay's path (Owner.handle over a MemoryState, then replay's output line), timed
per record. File reading and writing are not timed.

--stages: where --worker's microseconds go. The parts that are functions of the record alone
(parse, session key, partition) and of the step's result (encode, store the step) are timed
in passes of their own over the same records; `decide` is what is left of the whole step
(reading the state, the rules, the entry's JSON and chain). Each figure is a mean.

--worker: the worker's per-record path without Kafka (workers.stream.processor without the awaits):
every record arrives keyed by its canonical key on its home partition (as connectors send
it), decided by Owner.handle over the worker's SessionStore, whose partition stores are
dicts here; each batch's writes are taken and applied as the worker does after the changelog
send. Then the size of the stored state records. The file is read into memory first.
The session store holds as many heads as the worker's does by default (its `head_cache`
setting; --head-cache to try another). With --rocksdb the partition stores are the worker's
RocksDB stores (workers.stream.store_memory, its default `state_cache_mb` budget, in a temporary
directory), each batch's writes one write batch a partition, as the worker applies them after
its commit.
"""

from __future__ import annotations

import argparse
import bisect
import gc
import tempfile
from datetime import UTC, datetime
from itertools import islice
from time import perf_counter

from transcript_connector.partitioning import murmur2, partition_for

from schemas import Invalid, parse_input, read_input
from workers.commands.replay import render
from workers.core import DEFAULT_DEDUPE_WINDOW, MemoryState, session_key_of
from workers.core.outputs import Source, encode
from workers.core.owner import Owner, Step, apply
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
    parser.add_argument("--stages", action="store_true", help="--worker, in stages")
    parser.add_argument("--partitions", type=int, default=PARTITIONS,
                        help="input partitions (--worker)")
    parser.add_argument("--rocksdb", action="store_true",
                        help="--worker over the worker's RocksDB stores, not dicts")
    parser.add_argument("--head-cache", type=int, default=None,
                        help="heads the session store holds (--worker; the worker's default)")
    args = parser.parse_args(argv)
    if args.stages:
        return stages(args.file, args.limit, args.batch, args.head_cache)
    if args.worker:
        if not args.rocksdb:
            return worker(args.file, args.limit, args.batch, args.partitions,
                          head_cache=args.head_cache)
        with tempfile.TemporaryDirectory(prefix="decide-speed-") as folder:
            return worker(args.file, args.limit, args.batch, args.partitions, folder,
                          args.head_cache)
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


def worker(path: str, limit: int | None, batch: int, partitions: int,
           rocksdb: str | None = None, head_cache: int | None = None) -> int:
    """--worker; over RocksDB stores in the folder `rocksdb` if given."""
    sources, dbs, store, owner = _worker_path(
        path, limit, partitions, None if rocksdb is None else _rocksdb_stores(rocksdb, partitions),
        head_cache)
    n = len(sources)
    handle_s = write_s = 0.0
    for at in range(0, n, batch):
        t0 = perf_counter()
        for source in sources[at : at + batch]:
            store.partition = source.partition
            apply(store, owner.handle(source, store))
        t1 = perf_counter()
        _write(store, dbs)
        write_s += perf_counter() - t1
        handle_s += t1 - t0
    values = [v for db in dbs for v in db.values()]
    print(f"{n:,} records, batches of {batch:,}; {len(values):,} state records, largest "
          f"{max(map(len, values), default=0)} bytes, {sum(map(len, values)):,} bytes in all; "
          f"{partitions} partitions, {'RocksDB' if rocksdb else 'dicts'}")
    _report(n, [("handle", handle_s), ("writes", write_s)])
    return 0


def stages(path: str, limit: int | None, batch: int, head_cache: int | None = None) -> int:
    sources, dbs, store, owner = _worker_path(path, limit, head_cache=head_cache)
    n = len(sources)
    whole = _whole(sources, dbs, store, owner, batch)
    # the steps again, untimed, for the passes that start from them; what a pass keeps is
    # frozen before the next, so that no pass pays for collecting what earlier ones hold
    _, dbs, store, owner = _worker_path(path, 0, head_cache=head_cache)
    steps: list[Step] = []
    for at in range(0, n, batch):
        for source in sources[at : at + batch]:
            store.partition = source.partition
            steps.append(owner.handle(source, store))
            apply(store, steps[-1])
        _write(store, dbs)
    gc.collect()
    gc.freeze()
    t0 = perf_counter()
    records = [read_input(s.value) for s in sources]  # type: ignore[arg-type]
    parse_s = perf_counter() - t0
    valid = [r for r in records if not isinstance(r, Invalid)]
    gc.freeze()
    t0 = perf_counter()
    keys = [session_key_of(r) for r in valid]
    key_s = perf_counter() - t0
    names = [k for k in keys if isinstance(k, str)]
    gc.freeze()
    t0 = perf_counter()
    for k in names:
        partition_for(k, PARTITIONS)
    partition_s = perf_counter() - t0
    decided = [(st.decided, src) for st, src in zip(steps, sources, strict=True)
               if st.decided is not None]
    gc.freeze()
    t0 = perf_counter()
    for outcome, src in decided:
        encode(outcome, src, PARTITIONS)
    encode_s = perf_counter() - t0
    # storing the steps again, into an empty store of its own (writes only)
    again = SessionStore([DictStore() for _ in range(PARTITIONS)].__getitem__,
                         DEFAULT_DEDUPE_WINDOW, store.cache_size)
    stored = [(st, src.partition) for st, src in zip(steps, sources, strict=True)
              if st.head is not None or st.seen is not None]
    gc.freeze()
    t0 = perf_counter()
    for at in range(0, len(stored), batch):
        for st, p in stored[at : at + batch]:
            again.partition = p
            apply(again, st)
        for _ in again.take_writes():
            pass
    store_s = perf_counter() - t0
    gc.unfreeze()
    rest = whole - parse_s - key_s - partition_s - encode_s - store_s
    print(f"{n:,} records, batches of {batch:,}; the whole step as --worker runs it: "
          f"{whole / n * 1e6:.2f} µs/record")
    for name, secs in (("parse", parse_s), ("key", key_s), ("partition", partition_s),
                       ("decide", rest), ("encode", encode_s), ("store", store_s)):
        print(f"{name:9s} {secs / n * 1e6:6.2f} µs/record  {secs / whole:6.1%}")
    return 0


def _whole(sources: list[Source], dbs: list[DictStore], store: SessionStore, owner: Owner,
           batch: int) -> float:
    """Seconds of --worker's loop: every batch handled and stored, its writes applied."""
    t0 = perf_counter()
    for at in range(0, len(sources), batch):
        for source in sources[at : at + batch]:
            store.partition = source.partition
            apply(store, owner.handle(source, store))
        _write(store, dbs)
    return perf_counter() - t0


def _worker_path(path: str, limit: int | None, partitions: int = PARTITIONS,
                 dbs: list | None = None, head_cache: int | None = None,
                 ) -> tuple[list[Source], list, SessionStore, Owner]:
    """The input as the worker receives it, its partition stores (`dbs`, or dicts), session
    store (the worker's head cache unless `head_cache`) and owner."""
    from workers.settings import WorkerSettings

    if dbs is None:
        dbs = [DictStore() for _ in range(partitions)]
    if head_cache is None:
        head_cache = WorkerSettings().head_cache
    return (_sources(path, limit, partitions), dbs,
            SessionStore(dbs.__getitem__, DEFAULT_DEDUPE_WINDOW, head_cache),
            Owner(partitions, DEFAULT_DEDUPE_WINDOW, lambda: WRITTEN_AT))


def _rocksdb_stores(folder: str, partitions: int) -> list:
    """The worker's partition stores: its options, one shared budget (the default)."""
    import rocksdict

    from workers.settings import WorkerSettings
    from workers.stream.store_memory import StoreMemory, StoreOptions

    shared = StoreOptions(StoreMemory(WorkerSettings().state_cache_mb), partitions)
    return [rocksdict.Rdict(f"{folder}/{p}", options=shared.options())
            for p in range(partitions)]


def _write(store: SessionStore, dbs: list) -> None:
    """A batch's writes applied to the partition stores, as the worker does after its commit."""
    if dbs and not isinstance(dbs[0], DictStore):  # RocksDB: a write batch a partition
        import rocksdict

        batches: dict[int, rocksdict.WriteBatch] = {}
        for p, k, v in store.take_writes():
            batch = batches.get(p)
            if batch is None:
                batch = batches[p] = rocksdict.WriteBatch(raw_mode=True)
            if v is None:
                batch.delete(k)
            else:
                batch.put(k, v)
        for p, batch in batches.items():
            dbs[p].write(batch)
        return
    for p, k, v in store.take_writes():
        if v is None:
            dbs[p].pop(k, None)
        else:
            dbs[p][k] = v


def _sources(path: str, limit: int | None, partitions: int = PARTITIONS) -> list[Source]:
    """The file's records as the worker receives them: keyed, on their home partition."""
    out: list[Source] = []
    with open(path, "rb") as f:
        for offset, line in enumerate(islice(f, limit)):
            value = line.rstrip(b"\r\n")
            record = parse_input(value)
            key = None if isinstance(record, Invalid) else session_key_of(record)
            if isinstance(key, str):
                raw = key.encode()
                home = (murmur2(raw) & 0x7FFFFFFF) % partitions  # not partition_for: left cold
                out.append(Source("in", home, offset, raw, value))
            else:
                out.append(Source("in", offset % partitions, offset, None, value))
    return out


def _report(n: int, rows: list[tuple[str, float]]) -> None:
    for name, secs in [*rows, ("all", sum(secs for _, secs in rows))]:
        print(f"{name:9s} {n / secs:10,.0f} records/s  {secs / n * 1e6:6.2f} µs/record")


if __name__ == "__main__":
    raise SystemExit(main())
