"""Nothing lost or doubled under faults, proven by `audit` on the real broker.

Each test feeds at least 50,000 realistic confirmations (retries, both Rule 1 exceptions,
same-turn replies, resets, legacy keys, invalid records), injects its fault while the worker
is busy, waits until the input is drained, and requires a clean audit. The measured figures
(records, kills, repeats seen by a read_committed reader, recovery time) are written to
var/faults/<test>.json and printed.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import time

import pytest

from tests.conftest import ROOT, cli
from tests.integration.harness import (
    Collector,
    WorkerProcess,
    group_of,
    poll_until,
    wait_drained,
    wait_members,
)
from workers.kafka_io import producer
from workers.outputs import CONFIRMATIONS, ENTRIES
from workers.settings import kafka_settings
from workers.synthetic import generate

pytestmark = [pytest.mark.kafka, pytest.mark.faults]
RECORDS = 50_000


@pytest.fixture
def ks(env, topics):
    return kafka_settings(env)


@pytest.fixture
def feed(ks):
    """Publish RECORDS synthetic confirmations; returns how many."""
    def publish(seed: int) -> int:
        p = producer(ks, linger_ms=20, batch_size=512 * 1024)
        topic = ks.topic(CONFIRMATIONS)
        for key, value in generate(RECORDS, sessions_n=2000, seed=seed):
            p.send(topic, key=key, value=value)
        p.flush()
        p.close()
        return RECORDS
    return publish


def audit(env) -> dict:
    done = cli("audit", "--json", env=env, timeout=600)
    report = json.loads(done.stdout)
    assert done.returncode == 0, json.dumps(report, indent=1)
    return report


def record(name: str, figures: dict) -> None:
    out = ROOT / "var" / "faults"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(figures, indent=1) + "\n")
    print(f"\n{name}: {json.dumps(figures)}")


def wait_entries(entries: Collector, n: int, w: WorkerProcess, timeout: float = 300) -> float:
    """Until at least n entries are readable; returns when (monotonic)."""
    entries.wait_for(lambda r: len(r) >= n, timeout, w)
    return time.monotonic()


def test_kill_9_at_random_points(ks, env, feed, workers, tmp_path):
    records = feed(seed=101)
    entries = Collector(ks, ks.topic(ENTRIES))
    rng = random.Random(7)
    points = sorted(rng.uniform(0.1, 0.8) for _ in range(3))
    expected_total = 36_000  # about 73% of the input is written (see replay); points are fractions
    state = tmp_path / "state"  # every restart keeps the killed worker's local state
    w = workers("w0", state)
    recoveries = []
    for i, fraction in enumerate(points, 1):
        wait_entries(entries, int(expected_total * fraction), w)
        w.kill()  # SIGKILL: no shutdown, no commit, no flush
        before = len(entries.records)
        t0 = time.monotonic()
        w = workers(f"w{i}", state)
        recoveries.append(round(wait_entries(entries, before + 1, w) - t0, 2))
    wait_drained(env["KAFKA_BOOTSTRAP"], group_of(env), ks.topic(CONFIRMATIONS), 600, [w])
    report = audit(env)
    assert report["expected_entries"] > 30_000
    record("kill_9", {"records": records, "kills": len(points), "repeats": report["repeats"],
                      "recovery_s": recoveries, "entries": report["expected_entries"]})
    assert w.stop() == 0


def test_broker_restart(ks, env, feed, workers, tmp_path):
    records = feed(seed=202)
    entries = Collector(ks, ks.topic(ENTRIES))
    state = tmp_path / "state"
    w = workers("w0", state)
    wait_entries(entries, 10_000, w)
    subprocess.run([str(ROOT / "deploy/local/kafka-down.sh")], check=True, capture_output=True)
    t0 = time.monotonic()
    subprocess.run([str(ROOT / "deploy/local/kafka-up.sh")], check=True, capture_output=True)
    restarts = 0
    # The worker either rides the outage out or exits non-zero (fatal) to be restarted, as an
    # orchestrator would; it must never hang.
    entries = Collector(ks, ks.topic(ENTRIES))
    deadline = time.monotonic() + 120
    while len(entries.records) <= 10_000:
        if not w.alive():
            assert w.proc.returncode != 0
            restarts += 1
            w = workers(f"w{restarts}", state)
        assert time.monotonic() < deadline, w.tail()
        for recs in entries.consumer.poll(timeout_ms=500).values():
            entries.records.extend(recs)
    recovery = round(time.monotonic() - t0, 2)
    wait_drained(env["KAFKA_BOOTSTRAP"], group_of(env), ks.topic(CONFIRMATIONS), 600, [w])
    report = audit(env)
    record("broker_restart", {"records": records, "broker_restarts": 1,
                              "worker_restarts": restarts, "repeats": report["repeats"],
                              "recovery_s": recovery, "entries": report["expected_entries"]})
    assert w.stop() == 0


def test_rebalance_second_worker_joins_and_leaves(ks, env, feed, workers, tmp_path):
    records = feed(seed=303)
    entries = Collector(ks, ks.topic(ENTRIES))
    w1 = workers("w1", tmp_path / "s1")
    wait_entries(entries, 8_000, w1)
    w2 = workers("w2", tmp_path / "s2")
    wait_members(env["KAFKA_BOOTSTRAP"], group_of(env), 2, [w1, w2])
    # its 10 s report says it has decided records of its own partitions
    poll_until(lambda: "'written'" in w2.log.read_text(), 60, [w1, w2], "w2 decided records")
    assert w2.stop() == 0  # leaves: its partitions move back to w1
    t0 = time.monotonic()
    before = len(entries.records)
    recovery = round(wait_entries(entries, before + 1, w1) - t0, 2)
    wait_drained(env["KAFKA_BOOTSTRAP"], group_of(env), ks.topic(CONFIRMATIONS), 600, [w1])
    report = audit(env)
    record("rebalance", {"records": records, "workers": 2, "repeats": report["repeats"],
                         "recovery_s": recovery, "entries": report["expected_entries"]})
    assert w1.stop() == 0


def test_wiped_local_state_recovers_from_changelog(ks, env, feed, workers, tmp_path):
    records = feed(seed=404)
    entries = Collector(ks, ks.topic(ENTRIES))
    state = tmp_path / "state"
    w = workers("w0", state)
    wait_entries(entries, 15_000, w)
    w.kill()
    shutil.rmtree(state)
    before = len(entries.records)
    t0 = time.monotonic()
    w = workers("w1", state)
    recovery = round(wait_entries(entries, before + 1, w) - t0, 2)
    wait_drained(env["KAFKA_BOOTSTRAP"], group_of(env), ks.topic(CONFIRMATIONS), 600, [w])
    report = audit(env)
    record("wiped_state", {"records": records, "kills": 1, "repeats": report["repeats"],
                           "recovery_s": recovery, "entries": report["expected_entries"]})
    assert w.stop() == 0
