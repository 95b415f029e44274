"""Nothing lost or doubled under faults, proven by `audit` on the real broker.

Each test feeds at least 50,000 realistic confirmations (retries, both Rule 1 exceptions,
same-turn replies, resets, legacy keys, invalid records) at a steady rate in the background,
injects its fault while records are still arriving and the worker is busy with them, waits
until the input is drained, and requires a clean audit. The measured figures
(records, kills, repeats seen by a read_committed reader, recovery time) are written to
var/faults/<test>.json and printed.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import threading
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
FEED_RATE = 1_500  # records/s: the input arrives over 33 s, well below the worker's speed


@pytest.fixture
def ks(env, topics):
    return kafka_settings(env)


class Feeder(threading.Thread):
    """Publishes the synthetic input at FEED_RATE in the background.

    A worker drains a preloaded backlog of 50,000 records in seconds, so a fault injected
    after it could land on an idle worker; a steady feed keeps records arriving throughout.
    The producer retries through a broker restart (delivery timeout 180 s)."""

    def __init__(self, ks, seed: int) -> None:
        super().__init__(daemon=True)
        self.ks, self.seed, self.errors = ks, seed, []
        self.start()

    def run(self) -> None:
        p = producer(self.ks, linger_ms=20, batch_size=512 * 1024, delivery_timeout_ms=180_000)
        topic, t0 = self.ks.topic(CONFIRMATIONS), time.monotonic()
        try:
            for i, (key, value) in enumerate(generate(RECORDS, sessions_n=2000, seed=self.seed)):
                p.send(topic, key=key, value=value).add_errback(self.errors.append)
                if i % 500 == 499 and (ahead := (i + 1) / FEED_RATE - (time.monotonic() - t0)) > 0:
                    time.sleep(ahead)  # pacing the load, not waiting for an event
            p.flush()
        except Exception as exc:  # noqa: BLE001  (reported by finish())
            self.errors.append(exc)
        finally:
            p.close()

    def finish(self, timeout: float = 300) -> int:
        """Wait until every record is published and acked; returns how many."""
        self.join(timeout)
        assert not self.is_alive(), "feeder did not finish"
        assert not self.errors, f"publishing failed: {self.errors[:3]}"
        return RECORDS


@pytest.fixture
def feed(ks):
    return lambda seed: Feeder(ks, seed)


def audit(env) -> dict:
    done = cli("audit", "--json", env=env, timeout=600)
    report = json.loads(done.stdout)
    assert done.returncode == 0, json.dumps(report, indent=1)
    return report


def drained_and_audited(feeder: Feeder, env, ks, w: WorkerProcess) -> tuple[int, dict]:
    """Once the whole input is published and committed: how many records, and the audit."""
    records = feeder.finish()
    wait_drained(env["KAFKA_BOOTSTRAP"], group_of(env), ks.topic(CONFIRMATIONS), 600, [w])
    return records, audit(env)


def record(name: str, figures: dict) -> None:
    out = ROOT / "var" / "faults"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(figures, indent=1) + "\n")
    print(f"\n{name}: {json.dumps(figures)}")


def wait_entries(entries: Collector, n: int, w: WorkerProcess, timeout: float = 300) -> float:
    """Until at least n entries are readable; returns when (monotonic)."""
    entries.wait_for(lambda r: len(r) >= n, timeout, w)
    return time.monotonic()


def recovery_after(entries: Collector, since: float, w: WorkerProcess, timeout: float = 300
                   ) -> float:
    """Seconds from `since` (wall clock) until every partition has an entry written after it,
    by the entries' CreateTime: when the worker(s) wrote everywhere again, whatever the
    reader's own backlog. The feed is still running then, so every partition gets records."""
    since_ms, seen, first = since * 1000, [0], {}
    partitions = len(entries.consumer.assignment())

    def done(records: list) -> bool:
        for r in records[seen[0]:]:
            if r.timestamp >= since_ms:
                first.setdefault(r.partition, r.timestamp / 1000)
        seen[0] = len(records)
        return len(first) == partitions

    entries.wait_for(done, timeout, w)
    return round(max(first.values()) - since, 2)


def test_kill_9_at_random_points(ks, env, feed, workers, tmp_path):
    feeder = feed(seed=101)
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
        t0 = time.time()
        w = workers(f"w{i}", state)
        recoveries.append(recovery_after(entries, t0, w))
    records, report = drained_and_audited(feeder, env, ks, w)
    assert report["expected_entries"] > 30_000
    record("kill_9", {"records": records, "kills": len(points), "repeats": report["repeats"],
                      "recovery_s": recoveries, "entries": report["expected_entries"]})
    assert w.stop() == 0


def test_broker_restart(ks, env, feed, workers, tmp_path):
    feeder = feed(seed=202)
    entries = Collector(ks, ks.topic(ENTRIES))
    state = tmp_path / "state"
    w = workers("w0", state)
    wait_entries(entries, 10_000, w)
    subprocess.run([str(ROOT / "deploy/local/kafka-down.sh")], check=True, capture_output=True)
    t0 = time.time()
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
    recovery = recovery_after(entries, t0, w)
    records, report = drained_and_audited(feeder, env, ks, w)
    record("broker_restart", {"records": records, "broker_restarts": 1,
                              "worker_restarts": restarts, "repeats": report["repeats"],
                              "recovery_s": recovery, "entries": report["expected_entries"]})
    assert w.stop() == 0


def test_rebalance_second_worker_joins_and_leaves(ks, env, feed, workers, tmp_path):
    feeder = feed(seed=303)
    entries = Collector(ks, ks.topic(ENTRIES))
    w1 = workers("w1", tmp_path / "s1")
    wait_entries(entries, 8_000, w1)
    w2 = workers("w2", tmp_path / "s2")
    wait_members(env["KAFKA_BOOTSTRAP"], group_of(env), 2, [w1, w2])
    # its 10 s report says it has decided records of its own partitions
    poll_until(lambda: "'written'" in w2.log.read_text(), 60, [w1, w2], "w2 decided records")
    t0 = time.time()
    assert w2.stop() == 0  # leaves: its partitions move back to w1
    recovery = recovery_after(entries, t0, w1)
    records, report = drained_and_audited(feeder, env, ks, w1)
    record("rebalance", {"records": records, "workers": 2, "repeats": report["repeats"],
                         "recovery_s": recovery, "entries": report["expected_entries"]})
    assert w1.stop() == 0


def test_wiped_local_state_recovers_from_changelog(ks, env, feed, workers, tmp_path):
    feeder = feed(seed=404)
    entries = Collector(ks, ks.topic(ENTRIES))
    state = tmp_path / "state"
    w = workers("w0", state)
    wait_entries(entries, 15_000, w)
    w.kill()
    shutil.rmtree(state)
    t0 = time.time()
    w = workers("w1", state)
    recovery = recovery_after(entries, t0, w)
    records, report = drained_and_audited(feeder, env, ks, w)
    record("wiped_state", {"records": records, "kills": 1, "repeats": report["repeats"],
                           "recovery_s": recovery, "entries": report["expected_entries"]})
    assert w.stop() == 0
