"""`make bench`: throughput and latency of the worker, side by side with baselines of the same run.

    .venv/bin/python bench/run.py [--records 200000] [--rate-seconds 16]
                                  [--recovery-sessions 100000]

One run on the local broker, on fresh topics under a unique prefix (deleted at the end):
  (a) ceiling: aiokafka consume -> produce passthrough, acks=all, commit after acks
  (b) a faust noop agent (concurrency=1) over the same input
  (c) the worker draining the same preloaded input (first output -> committed lag 0)
  (d) end-to-end latency at fixed input rates, the worker running throughout
  (e) recovery: restart with local RocksDB state kept, and with the state dir wiped
then `audit` of all the worker wrote in (c) and (d).
Writes bench/results/latest.json and latest.png, and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
import traceback
import uuid
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import ceiling, report, worker_bench  # noqa: E402
from bench.common import (  # noqa: E402
    BOOTSTRAP,
    WorkerProc,
    create_topic,
    delete_topics,
    env_for,
    preload,
    topics_apply,
)
from workers.outputs import CONFIRMATIONS  # noqa: E402
from workers.synthetic import generate  # noqa: E402

RESULTS = ROOT / "bench" / "results"


def log(msg: str) -> None:
    print(msg, flush=True)


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


def audit(prefix: str, timeout: float = 600) -> dict:
    """`transcript-owner audit` of everything the worker wrote: correctness after optimising."""
    done = subprocess.run([sys.executable, "-m", "workers", "audit", "--json", "--no-progress"],
                          cwd=ROOT, env=env_for(prefix), capture_output=True, timeout=timeout)
    report = json.loads(done.stdout)
    return {"clean": done.returncode == 0, "seconds": None,
            "expected_entries": report["expected_entries"],
            "actual_entries": report["actual_entries"], "repeats": report["repeats"],
            "discrepancies": sum(report["discrepancies"].values())}


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rates", default="500,1000,2000")
    parser.add_argument("--rate-seconds", type=float, default=16.0)
    parser.add_argument("--recovery-sessions", type=int, default=100_000)
    args = parser.parse_args(argv)

    wall0 = time.monotonic()
    run_id = uuid.uuid4().hex[:8]
    prefix = f"bench{run_id}."
    workdir = ROOT / "var" / "bench" / run_id
    workdir.mkdir(parents=True, exist_ok=True)
    n = args.records
    rates = [int(x) for x in args.rates.split(",")]
    result: dict = {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"nproc": os.cpu_count(), "python": platform.python_version(),
                    "kafka": kafka_version(), "platform": platform.platform()},
        "prefix": prefix,
        "records": {"throughput": n, "latency_per_rate": {str(r): int(r * args.rate_seconds)
                                                          for r in rates},
                    "recovery_sessions": args.recovery_sessions},
        "throughput": {}, "latency_ms": {}, "recovery_s": {}, "missing": [],
    }
    log(f"bench run {run_id}: prefix {prefix!r}, logs in {workdir}")
    worker = WorkerProc(prefix, "bench-worker", workdir / "state-main", workdir / "worker.log")
    try:
        topics_apply(prefix, "bench-worker")
        src, dst = prefix + CONFIRMATIONS, prefix + "bench.passthrough"
        create_topic(dst)
        t = time.monotonic()
        records = list(generate(n, sessions_n=2000, seed=1))
        log(f"generated {n:,} records in {time.monotonic() - t:.1f}s; preloading")
        log(f"  preloaded in {preload(src, records):.1f}s")
        del records

        log("(a) ceiling: aiokafka passthrough")
        result["throughput"]["ceiling"] = ceiling.run(src, dst, prefix + "bench-ceiling", n)
        log(f"  {result['throughput']['ceiling']}")

        log("(b) faust noop agent")
        try:
            result["throughput"]["faust_noop"] = faust_noop(prefix, n, workdir)
            log(f"  {result['throughput']['faust_noop']}")
        except Exception as exc:
            result["missing"].append(f"faust noop: {exc}")
            log(traceback.format_exc())

        log("(c) worker draining the preloaded input")
        result["throughput"]["worker"] = worker_bench.throughput(worker, prefix)
        log(f"  {result['throughput']['worker']}")

        log("(d) end-to-end latency at fixed rates (worker keeps running)")
        for i, rate in enumerate(rates):
            if not worker.alive():
                raise RuntimeError(f"worker died:\n{worker.tail()}")
            lat = worker_bench.latency(prefix, rate, args.rate_seconds, seed=100 + i)
            result["latency_ms"][str(rate)] = lat
            log(f"  {rate}/s: {lat}")
        worker.stop()

        log("audit of all the worker wrote (replays the input)")
        t = time.monotonic()
        result["audit"] = audit(prefix)
        result["audit"]["seconds"] = round(time.monotonic() - t, 1)
        log(f"  {result['audit']}")
        if not result["audit"]["clean"]:
            result["missing"].append("audit: NOT clean")

        log(f"(e) recovery with {args.recovery_sessions:,} sessions of state")
        try:
            rec_prefix = prefix + "rec."
            topics_apply(rec_prefix, "bench-recovery")
            result["recovery_s"] = worker_bench.recovery(rec_prefix, workdir,
                                                         args.recovery_sessions, log)
        except Exception as exc:
            result["missing"].append(f"recovery: {exc}")
            log(traceback.format_exc())
    finally:
        worker.stop()
        deleted = delete_topics(prefix)
        delete_groups(prefix)
        log(f"cleanup: worker stopped, {len(deleted)} topics under {prefix!r} deleted")

    tp = result["throughput"]
    result["ceiling_events_per_s"] = round(tp["ceiling"]["events_per_s"], 1)
    result["faust_noop_events_per_s"] = round(tp.get("faust_noop", {}).get("events_per_s",
                                                                          float("nan")), 1)
    result["worker_events_per_s"] = round(tp["worker"]["events_per_s"], 1)
    result["worker_startup_s"] = round(tp["worker"]["startup_s"], 2)
    result["ratio"] = round(result["worker_events_per_s"] / result["ceiling_events_per_s"], 3)
    result["wall_s"] = round(time.monotonic() - wall0, 1)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "latest.json").write_text(json.dumps(result, indent=2) + "\n")
    try:
        report.chart(result, RESULTS / "latest.png")
    except Exception as exc:
        log(f"chart not written: {exc}")
    log("")
    log(report.table(result))
    log(f"\nwrote {RESULTS / 'latest.json'} and {RESULTS / 'latest.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
