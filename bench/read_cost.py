"""(d2) The bound read's cost (issue 41, DESIGN 1.3 "Reading at a position"): a gateway
publishing confirmations at a fixed rate and reading each sampled one's session back, bound to
its delivery, from the topic and from a sink database, beside the entries' own end-to-end
latency in the same window.

On topics of its own (`prefix`), bench/run.py starts an exactly-once worker (positions are
exactly-once only) and `python -m workers sink sqlite DB` on them, then, in one process (the
gateway):
  - a ConfirmationPublisher (the Python connector's, so its partitioner) publishes
    `rate`/s for `seconds`: message-tool sends with text and a unique send_id, each one entry,
    spread over `sessions` sessions (drawn with a fixed seed). Every `read_every`-th one is
    read, once acknowledged, with two SessionReaders (transcript_connector.reader_async): one
    over the topic, one over the sink's database, both `read(key, at=delivery)`;
  - an aiokafka read_committed consumer of the entries topic, as (d) measures: each entry's
    delay from its publish call to the consumer's seeing it.
Figures, in ms, each over every record (entry, ack) or every sampled read (reads):
  entry_ms       publish called -> the entry seen by a read_committed consumer: (d)'s
                 definition (worker_bench.latency), so comparable with (d) at the same rate
  ack_ms         publish called -> publish returned its Delivery (the broker acknowledged)
  read_topic_ms  publish returned -> read(key, at=delivery) from the topic returned the session
                 with that entry (send_id among its entries)
  read_db_ms     the same from the sink database
  *_p99_over_entry_ms   a read's p99 minus entry_ms's p99 (the goals: <= 10 and <= 50 ms)
  read_*_ms.after_entry_seen   per read, its return minus the moment the entry consumer saw
                 the same entry: how far the reader trails a plain read_committed consumer
  gateway_cpu_s  CPU seconds of each of the gateway's threads over the window (reader threads:
                 `transcript-reader`, and the readers' Kafka I/O, `kafka-io-transcript-owner-
                 reader`); beside gateway_window_s, the window's seconds
A read that ends stale (StaleReadError at its `read_timeout_s` deadline), fails (ReadError) or
returns the session without that entry is counted (`stale`, `errors`, `without_entry`; each
should be 0) with its first examples, and left out of the percentiles.

Before the window: the topic reader reads every session once bound to LATEST (so it holds
them: a gateway reads the sessions it serves, and the window measures the bound read, not a
session's first read from its partition's start; `sessions_per_partition` is raised to hold
them all), the database reader a few, and `warmup_s` of the same traffic, read alike, is
published and left out.

Why a sample (every 10th by default, bench/run.py --read-every): each read asks the cluster for
both topics' partition counts (and a LATEST read the input's last stable offset) on its
reader's one thread, about 1-2 ms of admin round trips here; reading every confirmation (1,000
reads/s per reader, 2,000 in the process) saturates the readers, which then trail by seconds
and end stale: that measures the reader's throughput, not a read's latency. `sources` leaves
one reader out (a probe of the other alone).
"""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from transcript_connector import build_confirmation
from transcript_connector.builders import BuiltRecord
from transcript_connector.errors import ConnectorError, ReadError, StaleReadError
from transcript_connector.publisher import ConfirmationPublisher, Delivery, PublisherOptions
from transcript_connector.reader_async import SessionReader
from transcript_connector.reader_options import ReaderOptions
from transcript_connector.reader_plan import LATEST

from bench.common import BOOTSTRAP, WorkerProc, env_for, partitions
from tests.integration.harness import CliProcess
from workers.core.outputs import ENTRIES

SESSIONS = 2000  # as (d)'s input (workers.synthetic, sessions_n=2000)
READ_EVERY = 10  # every 10th confirmation read back, from each source
READ_TIMEOUT_S = 10.0  # a read's deadline (the reader's default, TRANSCRIPT_READ_TIMEOUT_MS)
WARMUP_S = 2.0
IDLE_S = 5.0  # the entry consumer stops this long after the last ack with nothing new
EXAMPLES = 3


def _pct(values: list[float]) -> dict:
    """p50/p95/p99/max of `values` (ms), as worker_bench.latency takes them."""
    ms = sorted(values)

    def pct(p: float) -> float:
        return round(ms[min(len(ms) - 1, int(p / 100 * len(ms)))], 1) if ms else float("nan")

    return {"p50": pct(50), "p95": pct(95), "p99": pct(99),
            "max": round(ms[-1], 1) if ms else None, "measured": len(ms)}


def confirmations(n: int, sessions: int, seed: int, tag: str) -> list[tuple[str, BuiltRecord]]:
    """`n` (send_id, record): message-tool sends with text, each an entry of its session, the
    sessions drawn from `sessions` with `seed`; send_ids unique to `tag`."""
    rng = random.Random(seed)
    now = datetime.now(UTC).isoformat(timespec="milliseconds")
    out = []
    for i in range(n):
        s = rng.randrange(sessions)
        send_id = f"{tag}-{i}"
        out.append((send_id, build_confirmation(
            send_id=send_id, confirmed_at=now, agent_id="bench",
            session_key=f"agent:bench:telegram:direct:u{s}",
            route={"channel": "telegram", "peer_kind": "direct", "peer_id": f"u{s}"},
            origin={"kind": "message_tool"}, payload={"text": f"bench read {send_id}"},
            receipt={"platform_message_ids": [send_id]})))
    return out


def thread_cpu_s() -> dict[str, float]:
    """CPU seconds (user + system) each live thread of this process has used, by thread name
    (/proc/self/task/<tid>/stat; threads of one name summed): where the gateway's time goes."""
    import os
    import threading

    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for t in threading.enumerate():
        try:
            fields = Path(f"/proc/self/task/{t.native_id}/stat").read_text().rsplit(")", 1)[1]
        except (OSError, IndexError):
            continue
        utime, stime = (int(x) for x in fields.split()[11:13])
        name = t.name.split(" (")[0]
        out[name] = out.get(name, 0.0) + (utime + stime) / tick
    return out


class _Reads:
    """One source's sampled reads: each one's ms, and what went wrong."""

    def __init__(self) -> None:
        self.ms: list[float] = []
        self.returned: dict[str, float] = {}  # send_id -> perf_counter() as it returned
        self.reads = self.stale = self.without_entry = self.errors = 0
        self.examples: list[str] = []

    def failed(self, counter: str, what: str) -> None:
        setattr(self, counter, getattr(self, counter) + 1)
        if len(self.examples) < EXAMPLES:
            self.examples.append(what[:300])

    def figures(self) -> dict:
        return {**_pct(self.ms), "reads": self.reads, "stale": self.stale,
                "without_entry": self.without_entry, "errors": self.errors,
                "examples": self.examples}


class _Window:
    """One paced window of publishes and sampled reads (the warm-up's or the measured one)."""

    def __init__(self, publisher: ConfirmationPublisher,
                 readers: dict[str, SessionReader], read_timeout_s: float) -> None:
        self.publisher, self.readers, self.read_timeout_s = publisher, readers, read_timeout_s
        self.sent: dict[str, float] = {}  # send_id -> perf_counter() as publish was called
        self.acked: list[float] = []  # ms
        self.publish_errors: list[str] = []
        self.reads = {kind: _Reads() for kind in readers}
        self.last_ack = 0.0

    async def run(self, records: list[tuple[str, BuiltRecord]], rate: int,
                  read_every: int) -> float:
        """Publishes `records` at `rate`/s, reads every `read_every`-th; the seconds the
        publishing took (first call to last acknowledgement)."""
        tasks = []
        t0 = time.perf_counter()
        i, n = 0, len(records)
        while i < n:
            due = min(n, int((time.perf_counter() - t0) * rate) + 1)
            while i < due:
                send_id, record = records[i]
                tasks.append(asyncio.create_task(self._one(send_id, record, i % read_every == 0)))
                i += 1
            await asyncio.sleep(0.002)
        await asyncio.gather(*tasks)
        return self.last_ack - t0

    async def _one(self, send_id: str, record: BuiltRecord, read: bool) -> None:
        self.sent[send_id] = time.perf_counter()
        try:
            delivery = await self.publisher.publish(record)
        except ConnectorError as exc:
            self.publish_errors.append(f"{send_id}: {exc}"[:300])
            return
        acked = self.last_ack = time.perf_counter()
        self.acked.append((acked - self.sent[send_id]) * 1000)
        if read:
            await asyncio.gather(*(self._read(kind, reader, delivery, send_id, acked)
                                   for kind, reader in self.readers.items()))

    async def _read(self, kind: str, reader: SessionReader, delivery: Delivery, send_id: str,
                    acked: float) -> None:
        r = self.reads[kind]
        r.reads += 1
        where = f"{send_id} at {delivery.partition}:{delivery.offset}"
        try:
            read = await reader.read(delivery.key, at=delivery, timeout_s=self.read_timeout_s)
        except StaleReadError as exc:
            r.failed("stale", f"{where}: {exc}")
            return
        except ConnectorError as exc:
            r.failed("errors", f"{where}: {type(exc).__name__}: {exc}")
            return
        returned = time.perf_counter()
        if any(e.entry.send_id == send_id for e in read.entries):
            r.ms.append((returned - acked) * 1000)
            r.returned[send_id] = returned
        else:
            r.failed("without_entry", f"{where}: returned at position "
                     f"{read.position.input_offset} (needed {read.needed}) with "
                     f"{len(read.entries)} entries, not this one")


async def _entries_seen(topic: str, window: _Window, done: asyncio.Event, started: asyncio.Event,
                        got: dict[str, float], idle_s: float) -> None:
    """(d)'s consumer: read_committed from the entries' end; each sent send_id's delay from its
    publish call to the poll that returned it. Ends `idle_s` after `done` with nothing new, or
    once every sent send_id is seen."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATP

    consumer = AIOKafkaConsumer(bootstrap_servers=BOOTSTRAP, isolation_level="read_committed",
                                enable_auto_commit=False, group_id=None)
    await consumer.start()
    try:
        tps = [ATP(topic, p) for p in range(partitions())]
        consumer.assign(tps)
        await consumer.seek_to_end(*tps)
        for tp in tps:
            await consumer.position(tp)
        started.set()
        idle_since = None
        sent = window.sent
        while True:
            batch = await consumer.getmany(timeout_ms=100)
            now = time.perf_counter()
            for recs in batch.values():
                for r in recs:
                    try:
                        sid = json.loads(r.value).get("send_id")
                    except (ValueError, AttributeError, TypeError):
                        continue
                    if sid in sent and sid not in got:
                        got[sid] = now - sent[sid]
            if done.is_set():
                if len(got) >= len(sent):
                    return
                if batch:
                    idle_since = None
                elif idle_since is None:
                    idle_since = now
                elif now - idle_since > idle_s:
                    return
    finally:
        await consumer.stop()


async def _wait_database(options: ReaderOptions, db: Path, alive: Callable[[], bool],
                         timeout_s: float = 120) -> SessionReader:
    """A SessionReader over the sink's database, once the sink has made it (with positions)."""
    deadline = time.monotonic() + timeout_s
    while True:
        reader = SessionReader(options, database=db)
        try:
            await reader.connect()
            return reader
        except ReadError as exc:
            await reader.close()
            if not alive():
                raise RuntimeError("the sink exited before making its database") from exc
            if time.monotonic() > deadline:
                raise TimeoutError(f"no sink database after {timeout_s}s: {exc}") from exc
            await asyncio.sleep(0.2)


async def _measure(prefix: str, db: Path, rate: int, seconds: float, sessions: int,
                   read_every: int, read_timeout_s: float, warmup_s: float, seed: int,
                   alive: Callable[[], bool], log: Callable[[str], None],
                   sources: tuple[str, ...] = ("topic", "db")) -> dict:
    options = ReaderOptions(bootstrap=BOOTSTRAP, topic_prefix=prefix,
                            sessions_per_partition=max(1000, sessions))
    publisher = ConfirmationPublisher(PublisherOptions(bootstrap=BOOTSTRAP, topic_prefix=prefix,
                                                       partitions=partitions()))
    n = int(rate * seconds)
    warm = confirmations(int(rate * warmup_s), sessions, seed, f"rdwarm{seed}")
    records = confirmations(n, sessions, seed + 1, f"rd{seed}")
    keys = sorted({f"agent:bench:telegram:direct:u{s}" for s in range(sessions)})
    await publisher.connect()
    topic_reader = SessionReader(options)
    db_reader: SessionReader | None = None
    try:
        await topic_reader.connect()
        db_reader = await _wait_database(options, db, alive)
        readers = {k: v for k, v in (("topic", topic_reader), ("db", db_reader))
                   if k in sources}
        # every session held by the topic reader; the worker's first positions awaited (60 s)
        t = time.monotonic()
        warmed = await asyncio.gather(*(topic_reader.read(k, at=LATEST, timeout_s=60)
                                        for k in keys), return_exceptions=True)
        if bad := [x for x in warmed if isinstance(x, BaseException)]:
            raise RuntimeError(f"{len(bad)} of {len(keys)} sessions not read at latest: {bad[0]}")
        on_db = await asyncio.gather(*(db_reader.read(k, at=LATEST, timeout_s=60)
                                       for k in keys[:partitions() * 4]), return_exceptions=True)
        if bad := [x for x in on_db if isinstance(x, BaseException)]:
            raise RuntimeError(f"sink database not caught up: {bad[0]}")
        log(f"  (d2) {len(keys):,} sessions held by the topic reader, the sink's database "
            f"read, in {time.monotonic() - t:.1f}s; warm-up: {len(warm):,} confirmations")
        await _Window(publisher, readers, read_timeout_s).run(warm, rate, read_every)

        window = _Window(publisher, readers, read_timeout_s)
        got: dict[str, float] = {}
        done, started = asyncio.Event(), asyncio.Event()
        seen = asyncio.create_task(_entries_seen(prefix + ENTRIES, window, done, started, got,
                                                 IDLE_S))
        await started.wait()
        cpu0, wall0 = thread_cpu_s(), time.perf_counter()
        try:
            published_s = await window.run(records, rate, read_every)
        finally:
            done.set()
        cpu = {k: round(v - cpu0.get(k, 0.0), 2) for k, v in thread_cpu_s().items()}
        cpu_wall = time.perf_counter() - wall0
        await seen
        held = await topic_reader.partitions()
    finally:
        for reader in (db_reader, topic_reader):
            if reader is not None:
                await reader.close()
        await publisher.close()
    entry = _pct([v * 1000 for v in got.values()])
    out = {
        "rate": rate, "seconds": seconds, "records": n, "sessions": sessions,
        "read_every": read_every, "read_timeout_s": read_timeout_s, "warmup_records": len(warm),
        "achieved_rate": round(n / published_s, 1) if published_s > 0 else None,
        "entry_ms": entry, "entries_missing": n - len(got), "ack_ms": _pct(window.acked),
        # CPU the gateway process's threads used over the window (publishing and reads), and
        # the window's seconds: a reader's thread near 1 CPU second a second is saturated
        "gateway_cpu_s": dict(sorted(cpu.items(), key=lambda kv: -kv[1])),
        "gateway_window_s": round(cpu_wall, 2),
        # what the topic reader holds after the window: sessions, and the records it read from
        # the entries topic since it connected (more than the topic holds: it read some again)
        "topic_reader": {"sessions": sum(h.sessions for h in held.values()),
                         "records_read": sum(h.records_read for h in held.values())},
        "publish_errors": len(window.publish_errors),
        "publish_error_examples": window.publish_errors[:EXAMPLES],
    }
    for kind in readers:
        out[f"read_{kind}_ms"] = window.reads[kind].figures()
        # the read's return behind the entry consumer's seeing the same entry (negative: first)
        out[f"read_{kind}_ms"]["after_entry_seen"] = _pct([
            (at - window.sent[sid] - got[sid]) * 1000
            for sid, at in window.reads[kind].returned.items() if sid in got])
        p99 = out[f"read_{kind}_ms"]["p99"]
        out[f"{kind}_p99_over_entry_ms"] = (round(p99 - entry["p99"], 1)
                                            if p99 == p99 and entry["p99"] == entry["p99"]
                                            else None)  # NaN: nothing measured
    out["failed_reads"] = sum(out[f"read_{k}_ms"][c] for k in readers
                              for c in ("stale", "without_entry", "errors"))
    return out


def sink_rows(db: Path) -> int | None:
    """Rows of the sink's `entries` (read-only), None when it cannot be read."""
    try:
        with sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True) as conn:
            return int(conn.execute("SELECT count(*) FROM entries").fetchone()[0])
    except sqlite3.Error:
        return None


def read_cost(prefix: str, app_id: str, workdir: Path, log: Callable[[str], None], *,
              rate: int = 1000, seconds: float = 16.0, sessions: int = SESSIONS,
              read_every: int = READ_EVERY, read_timeout_s: float = READ_TIMEOUT_S,
              warmup_s: float = WARMUP_S, seed: int = 410,
              sources: tuple[str, ...] = ("topic", "db")) -> dict:
    """(d2) on the deployment under `prefix` (its topics applied, nothing in them): an
    exactly-once worker (app `app_id`) and a sink running, the gateway measured as the module's
    docstring says; both processes stopped after."""
    worker = WorkerProc(prefix, app_id, workdir / "state-rd", workdir / "worker-rd.log",
                        "exactly_once")
    db = workdir / "read-cost-sink.db"
    sink = CliProcess(["sink", "sqlite", str(db)], env_for(prefix), workdir / "sink-rd.log")
    worker.start()
    sink.start()
    try:
        out = asyncio.run(_measure(prefix, db, rate, seconds, sessions, read_every,
                                   read_timeout_s, warmup_s, seed,
                                   lambda: worker.alive() and sink.alive(), log, sources))
    except Exception:
        log(f"--- {worker.log}\n{worker.tail()}\n--- {sink.log}\n{sink.tail()}")
        raise
    finally:
        for p in (sink, worker):
            if p.alive():
                try:
                    p.stop(60)
                except Exception:  # noqa: BLE001  (a bench goes on)
                    p.kill()
    out["sink_rows"] = sink_rows(db)
    return out
