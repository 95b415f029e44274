"""`make bench`: throughput and latency of the worker, side by side with baselines of the same run.

    .venv/bin/python bench/run.py [--records 200000] [--rate-seconds 16]
                                  [--recovery-sessions 100000] [--rates 500,1000,2000,5000]
                                  [--modes exactly_once,at_least_once] [--other-rates 1000]
                                  [--baselines all|none|librdkafka,quix,quix_eos,quix_alo]
                                  [--quix-commit-interval 1.0] [--no-scaling]
                                  [--no-chain-cost] [--no-position-cost] [--no-read-cost]
                                  [--read-cost-rate 1000] [--read-cost-seconds S]
                                  [--read-every 10] [--partitions 8] [--only PHASES]
                                  [--results DIR]

One run on the local broker, on fresh topics under a unique prefix (deleted at the end), each
of --partitions partitions (default 8; `topics apply` then reads a copy of topics.yaml in the
run's directory with that default count), the worker's TRANSCRIPT_PARTITIONS and the preload's
partitioner the same:
  (g) the core without Kafka: bench/decide_speed.py --worker over the same generated input
      (a temporary JSON-lines file), its µs per record parsed from its output
  (a) ceiling: aiokafka consume -> produce passthrough, acks=all, commit after acks
  (a2) the same passthrough with librdkafka (confluent-kafka): bench/librdkafka_passthrough.py
  (b) a faust noop agent (concurrency=1) over the same input
  (q) a Quix Streams pipeline doing the worker's per-session work (bench/quix_baseline.py),
      exactly-once and at-least-once, each on its own copy of the input, topics and state,
      measured as (c) is; (a2) and (q) run in the bench virtualenv (bench/baselines.py)
  (c) the worker draining the same preloaded input (first output -> committed lag 0), and
      its peak RSS: VmHWM of the worker process (/proc/<pid>/status) read as lag 0 is seen;
      then too its established TCP connections to the broker (/proc/<pid>/fd sockets among
      /proc/<pid>/net/tcp{,6}) and the transactional ids of its group the broker lists
      (ListTransactions): one producer per exactly-once worker, whatever the partition count
  (d) end-to-end latency at fixed input rates, the worker running throughout (default rates
      500, 1000, 2000 and 5000/s; --rates replaces them)
  (c2) after the first mode's (c) and (d): two worker processes in one consumer group (a state
      dir each) draining their own copy of the preloaded input on topics of their own, measured
      as (c); its events/s over the one-process (c) of the same run is the scaling ratio. Only
      the first mode; --no-scaling leaves it out
  (c) and (d) once per processing guarantee (TRANSCRIPT_PROCESSING_GUARANTEE), one after the
      other, each worker on its own topics (the same input preloaded on each) so that neither
      sees the other's output; the first mode (exactly_once) on the prefix (a) and (b) read
  (c3) the first mode's worker without its hash chain (bench/unchained), its own copy of the
      input: drained as (c), then its latency at 1,000 and 5,000/s (--no-chain-cost skips it)
  (c4) the exactly-once worker without position records (bench/unpositioned: no position
      record in its transactions, no gap watch), its own copy of the input, drained as (c);
      beside the exactly-once (c) of the same run (--no-position-cost skips it)
  (d2) the bound read's cost (bench/read_cost.py), on topics of its own: an exactly-once worker
      and `sink sqlite DB` running, a gateway (the Python connector's publisher and two
      SessionReaders) publishes --read-cost-rate confirmations/s (default 1,000) for
      --read-cost-seconds (default --rate-seconds) over 2,000 sessions and reads every
      --read-every-th (default 10th) back bound to its delivery, from the topic and from the
      sink's database: publish acknowledged -> the read returned the session with that entry,
      p50/p99 of each, beside the entries' end-to-end latency ((d)'s definition) in the same
      window; stale reads and reads without the entry counted (--no-read-cost skips it)
  (e) recovery of the first mode: restart with local RocksDB state kept, and with it wiped
  (h) the capacity model's constants (bench/capacity.py, `plan`): the input's mix through the
      core, what (c) of the first mode left on the broker, (e)'s restore and checkpoint rates;
      and the model's figures for this workload beside what (c) left (capacity.predicted)
then `audit --strict` of all the first mode's worker wrote in (c) and (d), and (f) the SQLite
sink (`sink sqlite --until-end`) over the same entries.
Writes bench/results/latest.json and latest.png, and prints a table. The keys of earlier runs
(throughput.worker, latency_ms, worker_events_per_s, ratio) hold the first mode; the others
have their own (throughput.worker_at_least_once, latency_ms_at_least_once, ...), and
exactly_once_vs_at_least_once holds the ratios. The baselines: throughput.librdkafka_passthrough,
throughput.quix_exactly_once, throughput.quix_at_least_once, worker_vs_quix and
worker_vs_librdkafka (ratios per worker mode) and baselines (versions, settings).
Added for issue 15: throughput.<worker key>.peak_rss_mb (at lag 0 of (c)) and
.peak_rss_mb_after_latency (as the worker is stopped after (d)), peak_rss_mb (per mode);
throughput.worker_two_processes (its input: records.two_processes),
worker_two_processes_events_per_s and scaling_two_processes (c2 over c); core (the
decide_speed figures) and core_us_per_record; targets: each goal of issue 25 (which replaced
issue 15's) with its figure and whether this run met it (judged on the first mode).
Added for issue 24: partitions (the run's count); throughput.<worker key>.connections and
.transactional_ids (at lag 0 of (c)); connections_per_process of (c2). A short run on more
partitions, to set beside a default one:
    .venv/bin/python bench/run.py --partitions 64 --baselines none --no-scaling \
        --records 50000 --rates 1000 --rate-seconds 8 --recovery-sessions 10000
Added for issue 41: throughput.worker_unpositioned ((c4); its input: records.unpositioned) and
positioned_vs_unpositioned (the exactly-once (c) over (c4): events_per_s,
events_per_s_to_last_output, events_per_s_incl_startup); read_cost ((d2), bench/read_cost.py's
docstring defines each figure: entry_ms, ack_ms, read_topic_ms, read_db_ms (p50, p95, p99, max,
measured; for the reads also reads, stale, without_entry, errors, examples and
after_entry_seen), topic_p99_over_entry_ms, db_p99_over_entry_ms, failed_reads, gateway_cpu_s,
...) and read_cost_p99_ms (entry, topic, db); targets holds issue 41's goals beside issue 25's,
each with `issue`. A drain's first and last output ((c), (c2), (c3), (c4)) skip the exactly-once
worker's position records (bench/common.py first_timestamp, last_timestamp): it writes them as
its generation starts, about 0.5 s before its first entry, and after its last, which would
otherwise count as drain time. --only PHASES runs only the phases named (comma-separated, of g,
a, a2, b, q, c, d, c2, c3, c4, d2, audit, f, e, h; d needs c); the others' keys are left out and
their goals "not measured". Issue 41's phases alone, with the (c) they are judged against
(--results elsewhere: tests/unit/test_plan.py reads the committed bench/results/latest.json):
    .venv/bin/python bench/run.py --only c,c4,d2 --modes exactly_once --records 20000 \
        --rate-seconds 8 --results var/bench/results-41
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import baselines, capacity, ceiling, read_cost, report, worker_bench  # noqa: E402
from bench.common import (  # noqa: E402
    BOOTSTRAP,
    GUARANTEES,
    WorkerProc,
    create_topic,
    delete_topics,
    env_for,
    packages,
    preload,
    set_partitions,
    topics_apply,
)
from workers.commands.plan import MEASURED  # noqa: E402
from workers.core.capacity import Constants  # noqa: E402
from workers.core.outputs import CONFIRMATIONS, changelog_topic  # noqa: E402
from workers.synthetic import generate  # noqa: E402

RESULTS = ROOT / "bench" / "results"


T0 = time.monotonic()


def log(msg: str) -> None:
    print(msg, flush=True)


def phase(msg: str) -> None:
    """A step of the run, with the seconds since the run began (where the wall time goes)."""
    log(f"[{time.monotonic() - T0:5.0f}s] {msg}")


def kafka_version() -> str:
    for jar in sorted((ROOT / "deploy/local/lib").glob("kafka_*.jar")):
        if m := re.match(r"kafka_[\d.]+-(.+)\.jar$", jar.name):
            return m.group(1)
    return "unknown"


def faust_noop(prefix: str, n: int, workdir: Path, timeout: float = 300) -> dict:
    out = workdir / "faust-noop.json"
    env = env_for(prefix, BENCH_APP_ID=prefix + "bench-faust-noop",
                  BENCH_TOPIC=prefix + CONFIRMATIONS, BENCH_N=str(n), BENCH_OUT=str(out),
                  BENCH_DATADIR=str(workdir / "faust-noop-data"))
    with (workdir / "faust-noop.log").open("ab") as logf:
        started = time.time()
        proc = subprocess.Popen([sys.executable, "bench/faust_noop.py", "worker", "-l", "warn"],
                                cwd=ROOT, env=env, stdout=logf, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + timeout
            while not out.exists():
                if proc.poll() is not None:
                    raise RuntimeError(f"faust noop exited {proc.returncode}; see {logf.name}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"faust noop did not see {n} events in {timeout}s")
                time.sleep(0.2)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    time.sleep(0.1)
    r = json.loads(out.read_text())
    seconds = r["last"] - r["first"]
    return {"events": r["events"], "seconds": seconds, "events_per_s": r["events"] / seconds,
            "startup_s": r["first"] - started}


def audit(prefix: str, app_id: str, timeout: float = 600) -> dict:
    """`transcript-owner audit --strict` of everything the worker (app `app_id`: its state
    changelog holds the heads the hash chains end at) wrote: correctness after optimising; a
    repeated entry (same key, same content) fails it too."""
    done = subprocess.run([sys.executable, "-m", "workers", "audit", "--strict", "--json",
                           "--no-progress"], cwd=ROOT,
                          env=env_for(prefix, TRANSCRIPT_APP_ID=app_id), capture_output=True,
                          timeout=timeout)
    try:
        report = json.loads(done.stdout)
    except ValueError:
        raise RuntimeError(f"audit exited {done.returncode}: {done.stderr.decode()[-2000:]}") \
            from None
    return {"clean": done.returncode == 0, "strict": True, "seconds": None,
            "expected_entries": report["expected_entries"],
            "actual_entries": report["actual_entries"], "repeats": report["repeats"],
            "diagnostic_repeats": report.get("diagnostic_repeats"),
            "discrepancies": sum(report["discrepancies"].values()),
            # what was found, by kind, and the report's first examples of each (not content)
            "discrepancy_kinds": {k: n for k, n in report["discrepancies"].items() if n},
            "examples": {k: v[:3] for k, v in report.get("examples", {}).items()}}


def sink(prefix: str, workdir: Path, timeout: float = 600) -> dict:
    """(f) `transcript-owner sink sqlite DB --until-end` over everything the worker wrote:
    rows per second from process start to caught up, and the rows it holds."""
    import sqlite3

    db = workdir / "sink.db"
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "workers", "sink", "sqlite", str(db),
                           "--until-end"], cwd=ROOT, env=env_for(prefix), capture_output=True,
                          timeout=timeout)
    seconds = time.monotonic() - began
    if done.returncode != 0:
        raise RuntimeError(f"sink exited {done.returncode}: {done.stderr.decode()[-2000:]}")
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT count(*) FROM entries").fetchone()[0]
        skipped = conn.execute("SELECT count(*) FROM skipped").fetchone()[0]
    return {"rows": rows, "skipped": skipped, "seconds": round(seconds, 2),
            "rows_per_s": rows / seconds}


def core_speed(path: Path, timeout: float = 300) -> dict:
    """(g) `bench/decide_speed.py FILE --worker`: the worker's per-record path without Kafka
    over the run's input; its `handle`, `writes` and `all` lines parsed (µs per record)."""
    done = subprocess.run([sys.executable, "bench/decide_speed.py", str(path), "--worker"],
                          cwd=ROOT, capture_output=True, timeout=timeout,
                          env=dict(os.environ, PYTHONIOENCODING="utf-8"))
    out = done.stdout.decode("utf-8", errors="replace")
    if done.returncode != 0:
        raise RuntimeError(f"decide_speed exited {done.returncode}: "
                           f"{done.stderr.decode(errors='replace')[-2000:]}")
    r: dict = {}
    for line in out.splitlines():
        if m := re.match(r"(\w+)\s+([\d,]+) records/s\s+([\d.]+) µs/record", line):
            r[m.group(1)] = {"records_per_s": int(m.group(2).replace(",", "")),
                             "us_per_record": float(m.group(3))}
        elif m := re.match(r"([\d,]+) records, batches of", line):
            r["records"] = int(m.group(1).replace(",", ""))
    if "all" not in r:
        raise RuntimeError(f"decide_speed: no 'all ... µs/record' line in {out!r}")
    return {"us_per_record": r["all"]["us_per_record"],
            "records_per_s": r["all"]["records_per_s"], "records": r.get("records"),
            "phases": {k: v for k, v in r.items() if k not in ("all", "records")},
            "command": "bench/decide_speed.py FILE --worker"}


def write_jsonl(records: list[tuple[bytes | None, bytes]]) -> tuple[Path, int]:
    """The records' values, one a line, in a temporary file (decide_speed reads a file);
    a value holding a line break cannot be one line and is left out (counted)."""
    fd, name = tempfile.mkstemp(prefix="bench-input-", suffix=".jsonl")
    left_out = 0
    with os.fdopen(fd, "wb") as f:
        for _, value in records:
            if b"\n" in value or b"\r" in value:
                left_out += 1
                continue
            f.write(value + b"\n")
    return Path(name), left_out


def two_processes(prefix: str, app_id: str, workdir: Path, mode: str) -> dict:
    """(c2) two worker processes of one group (a state dir each) draining the preloaded input
    of `prefix`, measured as (c)."""
    procs = [WorkerProc(prefix, app_id, workdir / f"state-x2-{i}", workdir / f"worker-x2-{i}.log",
                        mode) for i in (1, 2)]
    try:
        return worker_bench.throughput(procs, prefix)
    except Exception:
        log("\n".join(f"--- {w.log}\n{w.tail()}" for w in procs))
        raise
    finally:
        for w in procs:
            w.stop()


def delete_groups(prefix: str) -> None:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    try:
        mine = [g["group_id"] for g in admin.list_groups() if g["group_id"].startswith(prefix)]
        if mine:
            admin.delete_groups(mine)
    except Exception as exc:  # groups are small; topics are what matters
        log(f"  (consumer groups not deleted: {exc})")
    finally:
        admin.close()


SHORT = {"exactly_once": "eos", "at_least_once": "alo"}
# the phases, in the order they run (--only)
PHASES = ("g", "a", "a2", "b", "q", "c", "d", "r", "c2", "c3", "c4", "d2", "audit", "f", "e", "h")


def compare(result: dict, a: str, b: str) -> dict:
    """Mode `a` over mode `b`: throughput and latency percentiles (rates measured in both)."""
    return compare_keys(result, (worker_key(result, a), latency_key(result, a)),
                        (worker_key(result, b), latency_key(result, b)))


def compare_keys(result: dict, a: tuple[str, str], b: tuple[str, str]) -> dict:
    """Run `a` over run `b`, each (its throughput key, its latency key)."""
    tp = result["throughput"]
    ta, tb = tp[a[0]], tp[b[0]]
    la, lb = result[a[1]], result[b[1]]
    out: dict = {"events_per_s": round(ta["events_per_s"] / tb["events_per_s"], 3),
                 "events_per_s_to_last_output": round(ta["events_per_s_to_last_output"]
                                                      / tb["events_per_s_to_last_output"], 3),
                 "latency": {}}
    for rate in la:
        if rate in lb:
            out["latency"][rate] = {p: round(la[rate][p] / lb[rate][p], 2) if lb[rate][p] else None
                                    for p in ("p50", "p95", "p99")}
    return out


def worker_key(result: dict, mode: str) -> str:
    """throughput[...] of a mode: "worker" for the default (first) mode, as in earlier runs."""
    return "worker" if mode == result["processing_guarantee"] else f"worker_{mode}"


def latency_key(result: dict, mode: str) -> str:
    return "latency_ms" if mode == result["processing_guarantee"] else f"latency_ms_{mode}"


def exit_on_sigterm() -> None:
    """`kill` ends a run as Ctrl-C does: through its `finally` blocks, which stop the workers it
    started and delete its topics. Killed without this, a run left its worker running (beside
    whatever ran next) and its topics on the broker. A second SIGTERM ends it at once."""
    def end(signum: int, _frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, end)


def main(argv: list[str] | None = None) -> int:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000,
                        help="preloaded input of (a), (b) and of (c) in each mode")
    parser.add_argument("--sessions", type=int, default=2000,
                        help="sessions the preloaded input is drawn over (loadgen's mix)")
    parser.add_argument("--rates", default="500,1000,2000,5000",
                        help="input rates of (d) in the default (first) mode (issue 25's "
                             "goals are at 1000 and 5000)")
    parser.add_argument("--other-rates", default=None,
                        help="input rates of (d) in the other modes (default: --rates)")
    parser.add_argument("--rate-seconds", type=float, default=16.0)
    parser.add_argument("--recovery-sessions", type=int, default=100_000)
    parser.add_argument("--modes", default=",".join(GUARANTEES),
                        help="the worker's processing guarantees (TRANSCRIPT_PROCESSING_GUARANTEE) "
                             "to measure, each on its own topics; the first is the default mode: "
                             "the keys of earlier runs, the audit and (e) are of it")
    parser.add_argument("--baselines", default="all",
                        help="baselines of issue 15 to run, comma-separated: librdkafka, "
                             "quix_exactly_once, quix_at_least_once; quix (both), quix_eos, "
                             "quix_alo, all (default), none")
    parser.add_argument("--quix-commit-interval", type=float, default=1.0,
                        help="seconds between the Quix pipeline's checkpoints (its offset "
                             "commit; a transaction exactly-once). Quix's default is 5")
    parser.add_argument("--no-chain-cost", dest="chain_cost", action="store_false",
                        help="leave out (c3), the first mode's worker without its hash chain "
                             "(bench/unchained), measured beside the worker with it")
    parser.add_argument("--no-position-cost", dest="position_cost", action="store_false",
                        help="leave out (c4), the exactly-once worker without position records "
                             "(bench/unpositioned), drained beside (c)")
    parser.add_argument("--no-read-cost", dest="read_cost", action="store_false",
                        help="leave out (d2), the bound read's cost (bench/read_cost.py)")
    parser.add_argument("--read-cost-rate", type=int, default=1000,
                        help="(d2): confirmations/s the gateway publishes (issue 41's goals are "
                             "at 1000)")
    parser.add_argument("--read-cost-seconds", type=float, default=None,
                        help="(d2): seconds it publishes (default: --rate-seconds)")
    parser.add_argument("--read-every", type=int, default=read_cost.READ_EVERY,
                        help="(d2): every Nth confirmation is read back, from the topic and "
                             "from the sink's database (default 10; 1: every one)")
    parser.add_argument("--no-scaling", dest="scaling", action="store_false",
                        help="leave out (c2), two worker processes of the first mode")
    parser.add_argument("--partitions", type=int, default=8,
                        help="partitions of every topic the run creates (the worker's "
                             "TRANSCRIPT_PARTITIONS, the preload's partitioner); default 8")
    parser.add_argument("--results", type=Path, default=RESULTS,
                        help="directory for latest.json and latest.png")
    parser.add_argument("--only", default=None, metavar="PHASES",
                        help="run only these phases, comma-separated, of "
                             f"{','.join(PHASES)} (d needs c; a2 and q also need --baselines); "
                             "default: all")
    args = parser.parse_args(argv)
    only = set(PHASES)
    if args.only is not None:
        only = {x.strip() for x in args.only.split(",") if x.strip()}
        if not only or only - set(PHASES):
            parser.error(f"--only: phases of {', '.join(PHASES)}")
        if only & {"d", "r"} and "c" not in only:
            parser.error("--only: d and r run on what c drained: name c too")
    if args.read_every < 1:
        parser.error("--read-every: 1 or more")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or len(set(modes)) != len(modes) or set(modes) - set(GUARANTEES):
        parser.error(f"--modes: distinct values of {', '.join(GUARANTEES)}")
    primary = modes[0]
    if not 1 <= args.partitions <= 10_000:  # TRANSCRIPT_PARTITIONS' range
        parser.error("--partitions: 1 to 10000")
    try:
        chosen = baselines.parse(args.baselines)
    except ValueError as exc:
        parser.error(f"--baselines: {exc}")
    # --only: a baseline runs when its phase is named too; the switches of (c2), (c3), (c4),
    # (d2) are their phases
    chosen = [b for b in chosen if ("q" if b.startswith("quix") else "a2") in only]
    args.scaling = args.scaling and "c2" in only
    args.chain_cost = args.chain_cost and "c3" in only
    # (c4) is judged against the exactly-once (c): only when that mode is measured
    args.position_cost = args.position_cost and "c4" in only and "exactly_once" in modes
    args.read_cost = args.read_cost and "d2" in only
    read_seconds = args.rate_seconds if args.read_cost_seconds is None \
        else args.read_cost_seconds

    global T0
    wall0 = T0 = time.monotonic()
    run_id = uuid.uuid4().hex[:8]
    prefix = f"bench{run_id}."
    workdir = ROOT / "var" / "bench" / run_id
    workdir.mkdir(parents=True, exist_ok=True)
    set_partitions(args.partitions, workdir)
    n = args.records
    rates = [int(x) for x in args.rates.split(",")]
    other_rates = [int(x) for x in args.other_rates.split(",")] if args.other_rates else rates
    mode_rates = {m: rates if m == primary else other_rates for m in modes}
    # the default mode on the prefix the baselines read (as in earlier runs); the others on
    # their own prefix under it: own input, outputs, changelog, group and transactional ids
    prefixes = {m: prefix if m == primary else f"{prefix}{SHORT[m]}." for m in modes}
    app_ids = {m: "bench-worker" if m == primary else f"bench-worker-{SHORT[m]}" for m in modes}
    x2_prefix, x2_app_id = f"{prefix}x2.", "bench-worker-x2"  # (c2): own input, outputs, group
    nc_prefix, nc_app_id = f"{prefix}nc.", "bench-worker-nc"  # (c3): likewise
    np_prefix, np_app_id = f"{prefix}np.", "bench-worker-np"  # (c4): likewise
    rd_prefix, rd_app_id = f"{prefix}rd.", "bench-worker-rd"  # (d2): own topics, input empty
    # (c3)'s latency: at the targets' rates (1,000 and 5,000/s) where measured, else the first two
    nc_rates = [r for r in rates if r in (1000, 5000)] or rates[:2]
    result: dict = {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"nproc": os.cpu_count(), "python": platform.python_version(),
                    "kafka": kafka_version(), "platform": platform.platform(),
                    "packages": packages()},
        "prefix": prefix,
        "partitions": args.partitions,
        "sessions": args.sessions,
        "processing_guarantee": primary,  # of throughput.worker, latency_ms, audit, recovery_s
        "modes": modes,
        "prefixes": prefixes,
        "records": {"throughput": n, "latency_per_rate": {str(r): int(r * args.rate_seconds)
                                                          for r in rates},
                    "latency_rates": {m: mode_rates[m] for m in modes},
                    "recovery_sessions": args.recovery_sessions,
                    "two_processes": n if args.scaling else None,
                    "unpositioned": n if args.position_cost else None},
        "phases": [x for x in PHASES if x in only],
        "throughput": {}, "latency_ms": {}, "recovery_s": {}, "missing": [],
    }
    for m in modes:
        result.setdefault(latency_key(result, m), {})
    if chosen:
        try:
            result["baselines"] = {"selected": chosen, "versions": baselines.versions(),
                                   "quix_commit_interval_s": args.quix_commit_interval}
        except Exception as exc:
            result["missing"].append(f"baselines {', '.join(chosen)}: {exc}")
            chosen = []
    quix_runs = [b for b in chosen if b.startswith("quix")]
    log(f"bench run {run_id}: prefix {prefix!r}, modes {', '.join(modes)}, "
        f"{args.partitions} partitions, logs in {workdir}")
    worker: WorkerProc | None = None
    drained: dict | None = None  # (h): what (c) left on the broker
    try:
        for m in modes:
            topics_apply(prefixes[m], app_ids[m])
        if args.scaling:
            topics_apply(x2_prefix, x2_app_id)
        if args.chain_cost:
            topics_apply(nc_prefix, nc_app_id)
        if args.position_cost:
            topics_apply(np_prefix, np_app_id)
        if args.read_cost:
            topics_apply(rd_prefix, rd_app_id)
        for b in quix_runs:  # the deployment's topics, outputs on the broker's append time
            topics_apply(baselines.quix_prefix(prefix, b), baselines.QUIX_APP_ID)
            baselines.log_append_time(baselines.quix_prefix(prefix, b))
        src, dst = prefix + CONFIRMATIONS, prefix + "bench.passthrough"
        if "a" in only:
            create_topic(dst)
        if "librdkafka" in chosen:
            create_topic(dst + "-librdkafka")
        t = time.monotonic()
        records = list(generate(n, sessions_n=args.sessions, seed=1))
        phase(f"generated {n:,} records in {time.monotonic() - t:.1f}s; preloading")
        mixed: dict = {}
        if "h" in only:
            t = time.monotonic()
            mixed = capacity.mix(records)
            log(f"  (h) the input's mix through the core in {time.monotonic() - t:.1f}s: "
                f"{mixed}")
        for m in modes:  # (a) and (b) read the first mode's
            if "c" in only or (m == primary and only & {"a", "a2", "b"}):
                log(f"  preloaded for {m} in "
                    f"{preload(prefixes[m] + CONFIRMATIONS, records):.1f}s")
        for b in quix_runs:
            log(f"  preloaded for {b} in "
                f"{preload(baselines.quix_prefix(prefix, b) + CONFIRMATIONS, records):.1f}s")
        if args.scaling:
            log(f"  preloaded for two processes in "
                f"{preload(x2_prefix + CONFIRMATIONS, records):.1f}s")
        if args.chain_cost:
            log(f"  preloaded for the worker without its chain in "
                f"{preload(nc_prefix + CONFIRMATIONS, records):.1f}s")
        if args.position_cost:
            log(f"  preloaded for the worker without positions in "
                f"{preload(np_prefix + CONFIRMATIONS, records):.1f}s")
        jsonl, left_out = write_jsonl(records) if "g" in only else (None, 0)
        del records

        if jsonl is not None:
            phase("(g) the core without Kafka: bench/decide_speed.py --worker over the same "
                  "input")
            try:
                result["core"] = core_speed(jsonl)
                result["core"]["left_out"] = left_out
                log(f"  {result['core']}")
            except Exception as exc:
                result["missing"].append(f"core (decide_speed): {exc}")
                log(traceback.format_exc())
            finally:
                jsonl.unlink(missing_ok=True)

        if "a" in only:
            phase("(a) ceiling: aiokafka passthrough")
            result["throughput"]["ceiling"] = ceiling.run(src, dst, prefix + "bench-ceiling", n)
            log(f"  {result['throughput']['ceiling']}")

        if "librdkafka" in chosen:
            phase("(a2) librdkafka passthrough (confluent-kafka)")
            try:
                result["throughput"]["librdkafka_passthrough"] = baselines.librdkafka(
                    src, dst + "-librdkafka", prefix + "bench-librdkafka", n,
                    workdir / "librdkafka.log")
                log(f"  {result['throughput']['librdkafka_passthrough']}")
            except Exception as exc:
                result["missing"].append(f"librdkafka passthrough: {exc}")
                log(traceback.format_exc())

        if "b" in only:
            phase("(b) faust noop agent")
            try:
                result["throughput"]["faust_noop"] = faust_noop(prefix, n, workdir)
                log(f"  {result['throughput']['faust_noop']}")
            except Exception as exc:
                result["missing"].append(f"faust noop: {exc}")
                log(traceback.format_exc())

        for b in quix_runs:
            mode = baselines.BASELINES[b]
            qp = baselines.quix_prefix(prefix, b)
            quix = baselines.QuixProc(qp, workdir / f"state-{baselines.SHORT[b]}",
                                      workdir / f"{b}.log", mode, args.quix_commit_interval)
            phase(f"(q) Quix Streams, {mode}: draining the preloaded input")
            try:
                r = worker_bench.throughput(quix, qp)
                r["commit_interval_s"] = args.quix_commit_interval
                result["throughput"][b] = r
                log(f"  {r}")
            except Exception as exc:
                result["missing"].append(f"{b}: {exc}")
                log(traceback.format_exc() + quix.tail())
            finally:
                if (rc := quix.stop()) not in (0, None, -signal.SIGTERM):
                    result["missing"].append(f"{b}: exited {rc}; see {quix.log}")

        for m in modes:
            if "c" in only:
                mp = prefixes[m]
                worker = WorkerProc(mp, app_ids[m], workdir / f"state-{SHORT[m]}",
                                    workdir / f"worker-{SHORT[m]}.log", m)
                try:
                    phase(f"(c) worker, {m}: draining the preloaded input")
                    key = worker_key(result, m)
                    result["throughput"][key] = worker_bench.throughput(worker, mp)
                    log(f"  {result['throughput'][key]}")
                    if m == primary and "h" in only:
                        try:
                            drained = capacity.measure_drained(
                                mp, changelog_topic(mp, app_ids[m], "sessions"),
                                args.partitions)
                            log(f"  (h) what the drain left: {drained['measured']}")
                        except Exception as exc:
                            result["missing"].append(f"capacity, the drain's bytes: {exc}")
                            log(traceback.format_exc())

                    if "d" in only:
                        phase(f"(d) worker, {m}: end-to-end latency at fixed rates (worker "
                              "keeps running)")
                    for i, rate in enumerate(mode_rates[m] if "d" in only else []):
                        if not worker.alive():
                            raise RuntimeError(f"worker died:\n{worker.tail()}")
                        lat = worker_bench.latency(mp, rate, args.rate_seconds, seed=100 + i)
                        result[latency_key(result, m)][str(rate)] = lat
                        log(f"  {rate}/s: {lat}")
                except Exception as exc:
                    if m == primary:
                        raise
                    result["missing"].append(f"worker {m}: {exc}")
                    log(traceback.format_exc())
                finally:
                    worker.stop()
                    if (w := result["throughput"].get(worker_key(result, m))) is not None:
                        w["peak_rss_mb_after_latency"] = worker.peak_rss_at_stop_mb

            if m == primary and "r" in only:
                phase(f"(r) restore, {m}: (c)'s state dir wiped, the worker restarted")
                try:
                    result["restore"] = worker_bench.restore(prefixes[m], worker)
                    log(f"  {result['restore']}")
                except Exception as exc:
                    result["missing"].append(f"restore: {exc}")
                    log(traceback.format_exc())

            if m == primary and args.scaling:
                phase(f"(c2) two worker processes, {m}, one group: draining the preloaded input")
                try:
                    x2 = two_processes(x2_prefix, x2_app_id, workdir, m)
                    result["throughput"]["worker_two_processes"] = x2
                    log(f"  {x2}")
                except Exception as exc:
                    result["missing"].append(f"two worker processes: {exc}")
                    log(traceback.format_exc())

        if args.chain_cost:
            phase(f"(c3) worker, {primary}, without its hash chain (bench/unchained): draining "
                  "the preloaded input, then latency")
            nc = WorkerProc(nc_prefix, nc_app_id, workdir / "state-nc", workdir / "worker-nc.log",
                            primary, unchained=True)
            try:
                result["throughput"]["worker_unchained"] = worker_bench.throughput(nc, nc_prefix)
                log(f"  {result['throughput']['worker_unchained']}")
                result["latency_ms_unchained"] = {}
                for i, rate in enumerate(nc_rates):
                    if not nc.alive():
                        raise RuntimeError(f"worker died:\n{nc.tail()}")
                    lat = worker_bench.latency(nc_prefix, rate, args.rate_seconds, seed=100 + i)
                    result["latency_ms_unchained"][str(rate)] = lat
                    log(f"  {rate}/s: {lat}")
            except Exception as exc:
                result["missing"].append(f"worker without its chain: {exc}")
                log(traceback.format_exc())
            finally:
                nc.stop()

        if args.position_cost:
            phase("(c4) worker, exactly_once, without position records (bench/unpositioned): "
                  "draining the preloaded input")
            unpos = WorkerProc(np_prefix, np_app_id, workdir / "state-np",
                               workdir / "worker-np.log", "exactly_once", unpositioned=True)
            try:
                result["throughput"]["worker_unpositioned"] = worker_bench.throughput(
                    unpos, np_prefix)
                log(f"  {result['throughput']['worker_unpositioned']}")
            except Exception as exc:
                result["missing"].append(f"worker without positions: {exc}")
                log(traceback.format_exc())
            finally:
                unpos.stop()

        if args.read_cost:
            phase(f"(d2) bound reads at {args.read_cost_rate:,}/s (bench/read_cost.py): "
                  "exactly-once worker and sink running, reads from the topic and the database")
            try:
                rc = read_cost.read_cost(rd_prefix, rd_app_id, workdir, log,
                                         rate=args.read_cost_rate, seconds=read_seconds,
                                         read_every=args.read_every)
                result["read_cost"] = rc
                log(f"  {rc}")
                try:  # what it wrote, positions included
                    rc["audit"] = audit(rd_prefix, rd_app_id)
                    log(f"  (d2) audit --strict: {rc['audit']}")
                    if not rc["audit"]["clean"]:
                        result["missing"].append("read cost: audit NOT clean")
                except Exception as exc:
                    result["missing"].append(f"read cost, audit: {exc}")
                    log(traceback.format_exc())
            except Exception as exc:
                result["missing"].append(f"read cost: {exc}")
                log(traceback.format_exc())

        if "audit" in only:
            phase(f"audit --strict of all the {primary} worker wrote (replays the input)")
            t = time.monotonic()
            try:
                result["audit"] = audit(prefix, app_ids[primary])
                result["audit"]["seconds"] = round(time.monotonic() - t, 1)
                result["audit"]["mode"] = primary
                log(f"  {result['audit']}")
                if not result["audit"]["clean"]:
                    result["missing"].append("audit: NOT clean")
            except Exception as exc:
                result["missing"].append(f"audit: {exc}")
                log(traceback.format_exc())

        if "f" in only:
            phase("(f) the SQLite sink over every entry the worker wrote (--until-end)")
            try:
                result["sink"] = sink(prefix, workdir)
                log(f"  {result['sink']}")
                audited = result.get("audit", {}).get("actual_entries")
                if audited is not None and result["sink"]["rows"] != audited:
                    result["missing"].append(f"sink: {result['sink']['rows']} rows, the audit "
                                             f"read {audited} entries")
            except Exception as exc:
                result["missing"].append(f"sink: {exc}")
                log(traceback.format_exc())

        if "e" in only:
            phase(f"(e) recovery, {primary}, with {args.recovery_sessions:,} sessions of state")
            try:
                rec_prefix = prefix + "rec."
                topics_apply(rec_prefix, "bench-recovery")
                result["recovery_s"] = worker_bench.recovery(rec_prefix, workdir,
                                                             args.recovery_sessions, log, primary)
            except Exception as exc:
                result["missing"].append(f"recovery: {exc}")
                log(traceback.format_exc())

        if "h" in only:
            phase("(h) the capacity model's constants (bench/capacity.py), and its figures for "
                  "this workload beside what (c) measured")
            try:
                if drained is None:
                    raise RuntimeError("(c) measured nothing")
                measured = capacity.constants(result, mixed, drained["sizes"],
                                              workdir / "worker-recovery.log",
                                              workdir / "worker-recovery-first.log")
                result["capacity"] = {
                    "constants": measured, "mix": mixed, "sizes": drained["sizes"],
                    # the committed constants (workers/commands/plan.py), measured on an earlier run
                    "predicted": capacity.predict(MEASURED, args.sessions, n, args.partitions,
                                                  drained["measured"]),
                    "predicted_with_this_run": capacity.predict(
                        Constants.from_dict(measured, "this run"), args.sessions, n,
                        args.partitions, drained["measured"])}
                log(f"  {result['capacity']['constants']}")
            except Exception as exc:
                result["missing"].append(f"capacity: {exc}")
                log(traceback.format_exc())
    finally:
        if worker is not None:
            worker.stop()
        deleted = delete_topics(prefix) + delete_topics("changelog__" + prefix)  # Quix's
        delete_groups(prefix)
        phase(f"cleanup: worker stopped, {len(deleted)} topics under {prefix!r} deleted")

    tp = result["throughput"]
    ceiling_eps = tp["ceiling"]["events_per_s"] if "ceiling" in tp else float("nan")
    result["ceiling_events_per_s"] = round(ceiling_eps, 1)
    result["faust_noop_events_per_s"] = round(tp.get("faust_noop", {}).get("events_per_s",
                                                                          float("nan")), 1)
    for m in modes:
        if (w := tp.get(worker_key(result, m))) is None:
            continue
        key = worker_key(result, m)
        result[f"{key}_events_per_s"] = round(w["events_per_s"], 1)
        result[f"{key}_startup_s"] = round(w["startup_s"], 2)
        result["ratio" if m == primary else f"ratio_{m}"] = round(
            w["events_per_s"] / ceiling_eps, 3)
    for x in tp.values():
        if "startup_s" in x and "mode" in x:  # (c) and (q): from process start to lag 0
            x["events_per_s_incl_startup"] = x["events"] / (x["seconds"] + x["startup_s"])
    if (rd := tp.get("librdkafka_passthrough")) is not None:
        result["librdkafka_events_per_s"] = round(rd["events_per_s"], 1)
        result["worker_vs_librdkafka"] = {
            m: round(tp[worker_key(result, m)]["events_per_s"] / rd["events_per_s"], 3)
            for m in modes if worker_key(result, m) in tp}
    for b in quix_runs:
        if (q := tp.get(b)) is None:
            continue
        result[f"{b}_events_per_s"] = round(q["events_per_s"], 1)
        result[f"{b}_startup_s"] = round(q["startup_s"], 2)
        mode = baselines.BASELINES[b]
        if (w := tp.get(worker_key(result, mode)) if mode in modes else None) is not None:
            result.setdefault("worker_vs_quix", {})[mode] = {
                k: round(w[k] / q[k], 3) for k in ("events_per_s", "events_per_s_incl_startup",
                                                   "events_per_s_to_last_output")}
    for m in modes:
        if (w := tp.get(worker_key(result, m))) is not None and "peak_rss_mb" in w:
            result.setdefault("peak_rss_mb", {})[m] = w["peak_rss_mb"]
    if (x2 := tp.get("worker_two_processes")) is not None:
        result["worker_two_processes_events_per_s"] = round(x2["events_per_s"], 1)
        if (one := tp.get("worker")) is not None:
            result["scaling_two_processes"] = {
                k: round(x2[k] / one[k], 3) for k in ("events_per_s", "events_per_s_incl_startup",
                                                      "events_per_s_to_last_output")}
    if (core := result.get("core")) is not None:
        result["core_us_per_record"] = core["us_per_record"]
    if {"exactly_once", "at_least_once"} <= {m for m in modes if worker_key(result, m) in tp}:
        result["exactly_once_vs_at_least_once"] = compare(result, "exactly_once",
                                                          "at_least_once")
    if "worker_unchained" in tp and "worker" in tp:
        result["chained_vs_unchained"] = compare_keys(
            result, ("worker", "latency_ms"), ("worker_unchained", "latency_ms_unchained"))
    if (np_ := tp.get("worker_unpositioned")) is not None \
            and (eos := tp.get(worker_key(result, "exactly_once"))) is not None:
        result["positioned_vs_unpositioned"] = {
            k: round(eos[k] / np_[k], 3) for k in ("events_per_s", "events_per_s_incl_startup",
                                                   "events_per_s_to_last_output")}
    if (rc := result.get("read_cost")) is not None:
        result["read_cost_p99_ms"] = {"entry": rc["entry_ms"]["p99"],
                                      **{k: rc[f"read_{k}_ms"]["p99"] for k in ("topic", "db")
                                         if f"read_{k}_ms" in rc}}
    result["targets"] = report.targets(result)
    result["wall_s"] = round(time.monotonic() - wall0, 1)
    out = args.results
    out.mkdir(parents=True, exist_ok=True)
    (out / "latest.json").write_text(json.dumps(result, indent=2) + "\n")
    try:
        report.chart(result, out / "latest.png")
    except Exception as exc:
        log(f"chart not written: {exc}")
    log("")
    log(report.table(result))
    log(f"\nwrote {out / 'latest.json'} and {out / 'latest.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
