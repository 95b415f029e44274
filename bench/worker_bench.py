"""(c) worker throughput, (d) end-to-end latency at fixed rates, (e) recovery after restart."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from transcript_connector.partitioning import partition_for

from bench.common import (
    BOOTSTRAP,
    GUARANTEES,
    ROOT,
    Lag,
    WorkerProc,
    first_timestamp,
    last_timestamp,
    partitions,
    preload,
    transactional_ids,
)
from workers.core.outputs import CONFIRMATIONS, DIAGNOSTICS, DLQ, ENTRIES
from workers.synthetic import generate


def throughput(worker: WorkerProc | Sequence[WorkerProc], prefix: str,
               timeout: float = 400) -> dict:
    """Start the worker on the preloaded input; first output -> committed lag 0.

    `worker` may be several processes of one consumer group (same app id, a state dir each),
    started together and measured as one: from the first output of any to the group's lag 0
    over all partitions. A process's peak RSS (VmHWM) is read as lag 0 is seen, while it still
    runs: its peak over start-up and the drain; so are its established connections to the
    broker (`connections`) and, of a worker, the transactional ids of its group the broker
    knows (`transactional_ids`: one per exactly-once process, whatever the partition count;
    0 at-least-once)."""
    procs = list(worker) if isinstance(worker, Sequence) else [worker]
    lag = Lag(procs[0].group, prefix + CONFIRMATIONS)
    try:
        for w in procs:
            w.start()
        t_zero = lag.wait_zero(timeout, alive=lambda: all(w.alive() for w in procs))
        rss = [w.peak_rss_mb() if hasattr(w, "peak_rss_mb") else None for w in procs]
        conns = [w.connections() if hasattr(w, "connections") else None for w in procs]
        txn_ids = transactional_ids(procs[0].group) if isinstance(procs[0], WorkerProc) \
            else None
        members = group_members(lag.group, lag.topic) if len(procs) > 1 else None
        offsets = sum(lag.consumer.end_offsets(lag.tps).values())
        # re-keyed copies included; counted, as exactly-once adds transaction markers to offsets
        events = lag.records()
    finally:
        lag.close()
    outputs = [prefix + t for t in (ENTRIES, DIAGNOSTICS, DLQ)]
    t_first, t_last = first_timestamp(outputs), last_timestamp(outputs)
    seconds = t_zero - t_first
    # lag 0 needs faust's next offset commit (commit_interval 2.8 s by default); the span to the
    # last output sent shows how much of `seconds` that wait is
    out = {"mode": procs[0].guarantee, "events": events, "offsets": offsets,
           "startup_s": t_first - min(w.started_at for w in procs), "seconds": seconds,
           "events_per_s": events / seconds, "first_to_last_output_s": t_last - t_first,
           "events_per_s_to_last_output": events / (t_last - t_first)}
    if known := [x for x in rss if x is not None]:
        out["peak_rss_mb"] = max(known)  # of the process that peaked highest
    if known := [x for x in conns if x is not None]:
        out["connections"] = max(known)  # to the broker, of the process that had the most
    if txn_ids is not None:
        out["transactional_ids"] = txn_ids
    if len(procs) > 1:
        out["processes"] = len(procs)
        out["peak_rss_mb_per_process"] = rss
        out["connections_per_process"] = conns
        out["partitions_per_member"] = members
    return out


def group_members(group: str, topic: str) -> list[int] | None:
    """Partitions of `topic` assigned to each member of `group` (sorted), as the broker sees
    it; None when it cannot be read."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    try:
        counts = []
        for m in admin.describe_groups([group])[group]["members"]:
            assigned = (m.get("member_assignment") or {}).get("assigned_partitions") or []
            counts.append(sum(len(a["partitions"]) for a in assigned
                              if a["topic"] == topic))
        return sorted(counts)
    except Exception:  # noqa: BLE001  (a detail of the report, never a reason to fail the run)
        return None
    finally:
        admin.close()


def _tagged(n: int, seed: int, tag: str, start: datetime) -> list[tuple[bytes | None, bytes, str]]:
    """Synthetic records with send_ids made unique to this phase (retries keep theirs equal)."""
    out = []
    for key, value in generate(n, sessions_n=2000, seed=seed, start=start):
        sid = None
        try:
            record = json.loads(value)
        except ValueError:
            record = None
        if isinstance(record, dict) and isinstance(record.get("send_id"), str):
            sid = record["send_id"] = f"{tag}-{record['send_id']}"
            value = json.dumps(record).encode()
        out.append((key, value, sid))
    return out


async def _latency(prefix: str, rate: int, seconds: float, seed: int, idle_s: float) -> dict:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP

    n = int(rate * seconds)
    start = datetime(2026, 2, 1, tzinfo=UTC) + timedelta(days=seed)
    records = _tagged(n, seed, f"lat{rate}", start)
    topic, entries = prefix + CONFIRMATIONS, prefix + ENTRIES
    consumer = AIOKafkaConsumer(bootstrap_servers=BOOTSTRAP, isolation_level="read_committed",
                                enable_auto_commit=False, group_id=None)
    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all", linger_ms=1)
    await consumer.start()
    await producer.start()
    n_parts = partitions()
    tps = [ATP(entries, p) for p in range(n_parts)]
    consumer.assign(tps)
    await consumer.seek_to_end(*tps)
    for tp in tps:
        await consumer.position(tp)
    sent: dict[str, float] = {}
    got: dict[str, float] = {}
    done = asyncio.Event()

    async def consume() -> None:
        idle_since = None
        while True:
            batch = await consumer.getmany(timeout_ms=100)
            now = time.perf_counter()
            for recs in batch.values():
                for r in recs:
                    try:
                        sid = json.loads(r.value).get("send_id")
                    except (ValueError, AttributeError):
                        continue
                    if sid in sent and sid not in got:
                        got[sid] = now - sent[sid]
            if done.is_set():
                if batch:
                    idle_since = None
                elif idle_since is None:
                    idle_since = now
                elif now - idle_since > idle_s:
                    return

    reader = asyncio.create_task(consume())
    try:
        futures = []
        t0 = time.perf_counter()
        i = 0
        while i < n:
            due = min(n, int((time.perf_counter() - t0) * rate) + 1)
            while i < due:
                key, value, sid = records[i]
                part = partition_for(key.decode(), n_parts) if key else None
                if sid is not None:
                    sent.setdefault(sid, time.perf_counter())
                futures.append(await producer.send(topic, value, key=key, partition=part))
                i += 1
            await asyncio.sleep(0.002)
        await asyncio.gather(*futures)
        produced_s = time.perf_counter() - t0
        done.set()
        await reader
    finally:
        done.set()
        await producer.stop()
        await consumer.stop()
    ms = sorted(v * 1000 for v in got.values())

    def pct(p: float) -> float:
        return round(ms[min(len(ms) - 1, int(p / 100 * len(ms)))], 1) if ms else float("nan")

    return {"p50": pct(50), "p95": pct(95), "p99": pct(99), "max": round(ms[-1], 1) if ms else None,
            "records": n, "entries_measured": len(ms), "achieved_rate": round(n / produced_s, 1)}


def latency(prefix: str, rate: int, seconds: float, seed: int, idle_s: float = 5.0) -> dict:
    """Publish `rate`/s for `seconds`; each entry's delay from its send to a read_committed
    reader. Reading stops `idle_s` after the last ack with no entry arriving (an exactly-once
    worker's entries become readable only when its transaction commits)."""
    return asyncio.run(_latency(prefix, rate, seconds, seed, idle_s))


def _probe(prefix: str, tag: str) -> bytes:
    """Publish one new confirmation that must become an entry; returns its send_id."""
    for key, value in generate(200, sessions_n=50, seed=4242):
        rec = json.loads(value) if value.startswith(b'{"schema": "delivery-confirmation/1"') \
            else None
        if (rec and "session_key" in rec and key == rec["session_key"].encode()
                and rec["origin"]["kind"] == "message_tool" and "text" in rec["payload"]
                and "media" not in rec["payload"] and "destination_agent_id" not in rec):
            rec["send_id"] = f"probe-{tag}-{uuid.uuid4().hex[:8]}"
            p = KafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all")
            p.send(prefix + CONFIRMATIONS, key=key, value=json.dumps(rec).encode(),
                   partition=partition_for(key.decode(), partitions())).get(timeout=30)
            p.close()
            return rec["send_id"]
    raise RuntimeError("no probe record found")


def _input_kept(workdir: Path) -> Path:
    """A copy of topics.yaml whose input keeps its records for ever (retention.ms -1)."""
    import yaml

    doc = yaml.safe_load((ROOT / "topics.yaml").read_text(encoding="utf-8"))
    doc["topics"]["delivery.confirmations"]["configs"]["retention.ms"] = "-1"
    path = workdir / "topics-input-kept.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def _probe_written(prefix: str, worker: WorkerProc, tag: str, timeout: float = 300) -> float:
    """Publish a probe confirmation, start `worker`, and return the seconds from its start to
    the probe's entry (read_committed). The worker is left running."""
    c = KafkaConsumer(bootstrap_servers=BOOTSTRAP, isolation_level="read_committed",
                      enable_auto_commit=False)
    try:
        tps = [TopicPartition(prefix + ENTRIES, p) for p in range(partitions())]
        c.assign(tps)
        c.seek_to_end()
        for tp in tps:
            c.position(tp)
        sid = _probe(prefix, tag)
        worker.start()
        deadline = time.monotonic() + timeout
        while True:
            if not worker.alive():
                raise RuntimeError(f"worker died:\n{worker.tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"probe not written in {timeout}s:\n{worker.tail()}")
            for recs in c.poll(timeout_ms=100).values():
                for r in recs:
                    if json.loads(r.value).get("send_id") == sid:
                        return round(time.time() - worker.started_at, 2)
    finally:
        c.close()


def restore(prefix: str, worker: WorkerProc) -> dict:
    """A lost node: `worker` (stopped) restarted with its state dir wiped. Its start to a new
    record's entry, and the restore its log reports (changelog records applied, seconds)."""
    from bench.capacity import restored

    shutil.rmtree(worker.env["TRANSCRIPT_STATE_DIR"], ignore_errors=True)
    worker.log = worker.log.with_name(worker.log.stem + "-restore.log")
    try:
        seconds = _probe_written(prefix, worker, "restore")
        peak = worker.peak_rss_mb()  # over the restore and the probe's batch
    finally:
        worker.stop()
    records, restore_s = restored(worker.log)
    return {"start_to_entry_s": seconds, "records": records, "seconds": restore_s,
            "records_per_s": round(records / restore_s, 1) if restore_s else None,
            "peak_rss_mb": peak}


def recovery(prefix: str, workdir: Path, n: int, log,  # noqa: ANN001
             guarantee: str = GUARANTEES[0]) -> dict:
    """State of `n` sessions, then restart times: local RocksDB kept, and state dir wiped."""
    preload(prefix + CONFIRMATIONS, list(generate(n, sessions_n=n, seed=11)))
    state = workdir / "state-recovery"
    # the state is built with a checkpoint every second (the capacity model's checkpoint
    # rate, bench/capacity.py, read from this log); the restarts below run without. Nine
    # checkpoints a second apart do not span topics.yaml's 7 days of input, which the worker
    # refuses at start (workers.settings.worker_limits): this one is told of an input kept for
    # ever, as nothing audits it past retention
    first = WorkerProc(prefix, "bench-recovery", state, workdir / "worker-recovery-first.log",
                       guarantee, TRANSCRIPT_CHECKPOINT_INTERVAL_S="1",
                       TRANSCRIPT_TOPICS_FILE=str(_input_kept(workdir)))
    worker = WorkerProc(prefix, "bench-recovery", state, workdir / "worker-recovery.log",
                        guarantee)
    lag = Lag(worker.group, prefix + CONFIRMATIONS)
    try:
        first.start()
        t = time.time()
        lag.wait_zero(500, alive=first.alive)
        log(f"  recovery: {n} records over {n} sessions processed in {time.time() - t:.1f}s "
            f"(incl. start-up)")
    finally:
        lag.close()
        first.stop()
    out = {}
    for mode in ("local", "from_changelog"):
        if mode == "from_changelog":
            shutil.rmtree(state)
        try:
            out[mode] = _probe_written(prefix, worker, mode)
        finally:
            worker.stop()
        log(f"  recovery {mode}: {out[mode]}s from worker start to the probe's entry")
    return out
