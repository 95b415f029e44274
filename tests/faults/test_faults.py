"""Nothing lost or doubled under faults, proven by `audit --strict` on the real broker.

Each test feeds at least 50,000 realistic confirmations (retries, both Rule 1 exceptions,
same-turn replies, resets, legacy keys, invalid records) at a steady rate in the background,
injects its fault while records are still arriving and the worker is busy with them, waits
until the input is drained, and runs `audit --strict --json`, which reads every topic
read_committed, as a transcript reader would. Each requires 0 missing entries, 0 repeated entry
keys, 0 repeated diagnostics and a clean audit (exit 0): the worker is exactly-once. The
measured figures (records, faults, repeats, recovery time per fault, how long the test took)
are written to var/faults/<test>.json and printed, before the assertions, so that a failing
run leaves them too. `make faults` runs this suite alone.

The faults: three kill -9 of the worker at random points; a SIGTERM rolling restart of two
static members, three times round; a second worker joining and leaving; a broker restart; on
the three-node cluster, kill -9 of the broker leading the most input partitions; a wiped local
state.
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from kafka.admin import KafkaAdminClient

from tests.conftest import ROOT, cli
from tests.integration.harness import (
    Collector,
    WorkerProcess,
    group_of,
    poll_until,
    wait_drained,
    wait_members,
    wait_static_members,
)
from workers.core.outputs import CONFIRMATIONS, DIAGNOSTICS, ENTRIES
from workers.kafka_io import producer, read
from workers.settings import KafkaSettings, kafka_settings
from workers.synthetic import generate

pytestmark = [pytest.mark.kafka, pytest.mark.faults]
RECORDS = 50_000
FEED_RATE = 1_500  # records/s: the input arrives over 33 s, well below the worker's speed
# the rolling restart: six restarts take minutes, so a slower feed that runs until they are done
ROLLING_FEED_RATE = 500
SHUTDOWN_TIMEOUT_S = 20  # TRANSCRIPT_SHUTDOWN_TIMEOUT_S given to the restarted workers
SHUTDOWN_MARGIN_S = 5  # for the interpreter's own exit, beyond the worker's contract


@pytest.fixture
def ks(env, topics):
    return kafka_settings(env)


class Feeder(threading.Thread):
    """Publishes the synthetic input at `rate` in the background.

    A worker drains a preloaded backlog of 50,000 records in seconds, so a fault injected
    after it could land on an idle worker; a steady feed keeps records arriving throughout.
    With `open_ended`, it publishes at least `records` and goes on until finish() is called.
    The producer retries through a broker restart (delivery timeout 180 s)."""

    def __init__(self, ks: KafkaSettings, seed: int, *, rate: float = FEED_RATE,
                 records: int = RECORDS, open_ended: bool = False, **producer_options) -> None:
        super().__init__(daemon=True)
        self.ks, self.seed, self.rate, self.records = ks, seed, rate, records
        self.producer_options = producer_options
        self.open_ended, self.errors, self.sent = open_ended, [], 0
        self.enough = threading.Event()  # finish(): an open-ended feed may stop
        self.abandon = threading.Event()  # teardown: stop now, whatever was sent
        self.start()

    def run(self) -> None:
        p = producer(self.ks, **{"linger_ms": 20, "batch_size": 512 * 1024,
                                 "delivery_timeout_ms": 180_000, **self.producer_options})
        topic, t0 = self.ks.topic(CONFIRMATIONS), time.monotonic()
        most = 20 * self.records if self.open_ended else self.records
        try:
            for i, (key, value) in enumerate(generate(most, sessions_n=2000, seed=self.seed)):
                if self.abandon.is_set() or (i >= self.records and self.enough.is_set()):
                    break
                p.send(topic, key=key, value=value).add_errback(self.errors.append)
                self.sent = i + 1
                if i % 500 == 499 and (ahead := (i + 1) / self.rate - (time.monotonic() - t0)) > 0:
                    time.sleep(ahead)  # pacing the load, not waiting for an event
            if not self.abandon.is_set():
                p.flush()
        except Exception as exc:  # noqa: BLE001  (reported by finish())
            self.errors.append(exc)
        finally:
            p.close(timeout=5 if self.abandon.is_set() else None)

    def finish(self, timeout: float = 300) -> int:
        """Wait until every record is published and acked; returns how many."""
        self.enough.set()
        self.join(timeout)
        assert not self.is_alive(), "feeder did not finish"
        assert not self.errors, f"publishing failed: {self.errors[:3]}"
        return self.sent


@pytest.fixture
def feed() -> Iterator[Callable[..., Feeder]]:
    """feed(ks, seed, **options) starts a Feeder; any still running after the test stop."""
    made: list[Feeder] = []

    def make(ks: KafkaSettings, seed: int, **options) -> Feeder:
        made.append(Feeder(ks, seed, **options))
        return made[-1]

    yield make
    for f in made:
        f.abandon.set()
        f.join(30)


def audit(env) -> dict:
    """`audit --strict --json`: its report, and its exit code as "exit"."""
    done = cli("audit", "--strict", "--json", env=env, timeout=600)
    try:
        report = json.loads(done.stdout)
    except ValueError:
        raise AssertionError(f"audit exited {done.returncode} without a report:\n"
                             f"{done.stderr.decode(errors='replace')[-3000:]}") from None
    report["exit"] = done.returncode
    return report


def drained_and_audited(feeder: Feeder, env, ks, workers: list[WorkerProcess]
                        ) -> tuple[int, dict]:
    """Once the whole input is published and committed: how many records, and the audit."""
    records = feeder.finish()
    wait_drained(env["KAFKA_BOOTSTRAP"], group_of(env), ks.topic(CONFIRMATIONS), 600, workers)
    return records, audit(env)


def record(name: str, figures: dict) -> None:
    out = ROOT / "var" / "faults"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(figures, indent=1) + "\n")
    print(f"\n{name}: {json.dumps(figures)}")


def conclude(name: str, figures: dict, report: dict, began: float, ks: KafkaSettings) -> None:
    """Record the figures with the audit's counts, then require exactly-once: nothing
    missing, no entry key and no diagnostic twice, a clean strict audit."""
    found = report["discrepancies"]
    record(name, {**figures, "entries": report["expected_entries"],
                  "missing": found["missing"], "repeats": report["repeats"],
                  "diagnostic_repeats": report["diagnostic_repeats"],
                  "audit_exit": report["exit"], "test_s": round(time.monotonic() - began, 1)})
    assert found["missing"] == 0, \
        f"{found['missing']} entries missing: {report['examples'].get('missing')}"
    assert report["repeats"] == 0, \
        f"{report['repeats']} repeated entry keys (one key written twice, same content): " \
        f"{repeated(ks, ENTRIES, lambda r: r.key.decode())}"
    assert report["diagnostic_repeats"] == 0, \
        f"{report['diagnostic_repeats']} repeated diagnostics (one diagnostic written " \
        f"twice): {repeated(ks, DIAGNOSTICS, diagnostic_id)}"
    assert report["exit"] == 0, f"audit --strict is not clean:\n{json.dumps(report, indent=1)}"


def diagnostic_id(r) -> str:
    """What makes two diagnostics the same one, as `audit` counts them."""
    d = json.loads(r.value)
    return json.dumps([d["session_key"], d["code"], d["level"], d["send_id"], d["at"]])


def repeated(ks: KafkaSettings, topic: str, ident: Callable, most: int = 5) -> list[str]:
    """For a failure message: records of `topic` that a read_committed reader sees more than
    once, with the partition and offsets of each copy. (For diagnostics these include any
    that two decisions make alike, which `audit` does not count as repeats.)"""
    copies: dict[str, list[str]] = {}
    for r in read(ks, ks.topic(topic)):
        if r.value is not None:
            copies.setdefault(ident(r), []).append(f"{r.partition}@{r.offset}")
    return [f"{key} at {where}" for key, where in copies.items() if len(where) > 1][:most]


def wait_entries(entries: Collector, n: int, w: WorkerProcess, timeout: float = 300) -> float:
    """Until at least n entries are readable; returns when (monotonic)."""
    entries.wait_for(lambda r: len(r) >= n, timeout, w)
    return time.monotonic()


class Recovery:
    """Whether every partition has an entry written after `since` (wall clock), by the
    entries' CreateTime: the worker(s) wrote everywhere again, whatever the reader's own
    backlog. The feed is still running then, so every partition gets records."""

    def __init__(self, entries: Collector, since: float) -> None:
        self.since, self.since_ms = since, since * 1000
        self.partitions = len(entries.consumer.assignment())
        self.seen = 0
        self.first: dict[int, float] = {}

    def done(self, records: list) -> bool:
        for r in records[self.seen:]:
            if r.timestamp >= self.since_ms:
                self.first.setdefault(r.partition, r.timestamp / 1000)
        self.seen = len(records)
        return len(self.first) == self.partitions

    def seconds(self) -> float:
        return round(max(self.first.values()) - self.since, 2)


def recovery_after(entries: Collector, since: float, w: WorkerProcess, timeout: float = 300
                   ) -> float:
    """Seconds from `since` until every partition has an entry written after it (Recovery)."""
    recovery = Recovery(entries, since)
    entries.wait_for(recovery.done, timeout, w)
    return recovery.seconds()


def has_written(w: WorkerProcess) -> Callable[[], bool]:
    """Its 10 s report says it has decided records of its own partitions."""
    return lambda: "'written'" in w.log.read_text(errors="replace")


def stop_within(w: WorkerProcess, limit: float) -> tuple[int, float]:
    """SIGTERM; its exit code and how long it took, failing when it runs past `limit`."""
    t0 = time.monotonic()
    try:
        code = w.stop(timeout=limit)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running {limit}s after SIGTERM:\n{w.tail()}") from None
    return code, time.monotonic() - t0


def test_kill_9_at_random_points(ks, env, feed, workers, tmp_path):
    began = time.monotonic()
    feeder = feed(ks, seed=101)
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
    records, report = drained_and_audited(feeder, env, ks, [w])
    assert report["expected_entries"] > 30_000
    stopped = w.stop()
    conclude("kill_9", {"records": records, "kills": len(points), "recovery_s": recoveries},
             report, began, ks)
    assert stopped == 0


def test_sigterm_rolling_restart_x3(ks, env, feed, workers, tmp_path):
    """Two static members (a StatefulSet: each its own state dir and instance id), restarted
    one after the other with SIGTERM, three times round, while records arrive."""
    began = time.monotonic()
    feeder = feed(ks, seed=505, rate=ROLLING_FEED_RATE, open_ended=True)
    entries = Collector(ks, ks.topic(ENTRIES))
    bootstrap, group = env["KAFKA_BOOTSTRAP"], group_of(env)
    pods = {f"pod-{i}": tmp_path / f"state-pod-{i}" for i in range(2)}

    def start(pod: str, incarnation: int) -> WorkerProcess:
        return workers(f"{pod}.{incarnation}", pods[pod], TRANSCRIPT_INSTANCE_ID=pod,
                       TRANSCRIPT_SHUTDOWN_TIMEOUT_S=str(SHUTDOWN_TIMEOUT_S))

    running = {pod: start(pod, 0) for pod in pods}
    members = wait_static_members(bootstrap, group, set(pods), [*running.values()])
    for pod, w in running.items():
        poll_until(has_written(w), 60, [*running.values()], f"{pod} decided records")

    restarts = []
    for round_ in (1, 2, 3):
        for pod in pods:
            others = [w for p, w in running.items() if p != pod]
            t0, m0 = time.time(), time.monotonic()
            code, stop_s = stop_within(running[pod], SHUTDOWN_TIMEOUT_S + SHUTDOWN_MARGIN_S)
            assert code == 0, f"{pod} exited {code} on SIGTERM:\n{running[pod].tail()}"
            w = running[pod] = start(pod, round_)  # the same state dir and instance id
            members = wait_static_members(bootstrap, group, set(pods), [w, *others],
                                          renewed={pod: members[pod]})
            member_s = time.monotonic() - m0
            poll_until(has_written(w), 60, [w, *others], f"{pod} decided records again")
            written_s = time.monotonic() - m0
            restarts.append({"round": round_, "pod": pod, "stop_s": round(stop_s, 2),
                             "member_again_s": round(member_s, 2),
                             "written_again_s": round(written_s, 2),
                             "recovery_s": recovery_after(entries, t0, w)})
    records, report = drained_and_audited(feeder, env, ks, [*running.values()])
    stopped = {pod: w.stop() for pod, w in running.items()}
    conclude("rolling_restart", {
        "records": records, "workers": len(pods), "restarts": len(restarts),
        "shutdown_timeout_s": SHUTDOWN_TIMEOUT_S,
        "stop_s_max": max(r["stop_s"] for r in restarts),
        "recovery_s": [r["recovery_s"] for r in restarts], "per_restart": restarts,
    }, report, began, ks)
    assert stopped == {pod: 0 for pod in pods}


def test_broker_restart(ks, env, feed, workers, tmp_path):
    began = time.monotonic()
    feeder = feed(ks, seed=202)
    entries = Collector(ks, ks.topic(ENTRIES))
    state = tmp_path / "state"
    w = workers("w0", state)
    wait_entries(entries, 10_000, w)
    subprocess.run([str(ROOT / "deploy/local/kafka-down.sh")], check=True, capture_output=True)
    t0 = time.time()
    subprocess.run([str(ROOT / "deploy/local/kafka-up.sh")], check=True, capture_output=True)
    restarts = 0
    # The worker either rides the outage out or exits non-zero (fatal) to be restarted, as an
    # orchestrator would; it must never hang. It may exit after it wrote again: a transaction
    # open through an outage longer than its timeout is aborted by the broker once it is back,
    # and the worker is fenced at its next request. So it is restarted until every partition
    # has entries written after the restart, not only until it has written some.
    entries.close()
    entries = Collector(ks, ks.topic(ENTRIES))
    recovered = Recovery(entries, t0)
    deadline = time.monotonic() + 300
    while not recovered.done(entries.records):
        if not w.alive():
            assert w.proc.returncode != 0, w.tail()
            restarts += 1
            w = workers(f"w{restarts}", state)
        assert time.monotonic() < deadline, w.tail()
        entries.take(500)
    recovery = recovered.seconds()
    records, report = drained_and_audited(feeder, env, ks, [w])
    stopped = w.stop()
    conclude("broker_restart", {"records": records, "broker_restarts": 1,
                                "worker_restarts": restarts, "recovery_s": recovery},
             report, began, ks)
    assert stopped == 0


def test_rebalance_second_worker_joins_and_leaves(ks, env, feed, workers, tmp_path):
    began = time.monotonic()
    feeder = feed(ks, seed=303)
    entries = Collector(ks, ks.topic(ENTRIES))
    w1 = workers("w1", tmp_path / "s1")
    wait_entries(entries, 8_000, w1)
    w2 = workers("w2", tmp_path / "s2")
    wait_members(env["KAFKA_BOOTSTRAP"], group_of(env), 2, [w1, w2])
    poll_until(has_written(w2), 60, [w1, w2], "w2 decided records")
    t0 = time.time()
    assert w2.stop() == 0  # leaves: its partitions move back to w1
    recovery = recovery_after(entries, t0, w1)
    records, report = drained_and_audited(feeder, env, ks, [w1])
    stopped = w1.stop()
    conclude("rebalance", {"records": records, "workers": 2, "recovery_s": recovery},
             report, began, ks)
    assert stopped == 0


def test_kill_9_of_the_busiest_broker_on_three_nodes(cluster, cluster_env, cluster_workers,
                                                     feed):
    """On the three-node cluster (RF 3, min.insync.replicas 2): SIGKILL of the node leading
    the most input partitions while records arrive, then that node started again."""
    began = time.monotonic()
    env = cluster_env
    ks = kafka_settings(env)
    topic_in = ks.topic(CONFIRMATIONS)
    feeder = feed(ks, seed=606)
    entries = Collector(ks, ks.topic(ENTRIES))
    admin = cluster.admin()
    try:
        w = cluster_workers("w0")
        wait_entries(entries, 8_000, w)
        victim, led = cluster.busiest_leader(admin, topic_in)
        cluster.run("kafka-node.sh", "kill", str(victim))
        t0, m0 = time.time(), time.monotonic()
        poll_until(lambda: cluster.in_sync(admin, [topic_in], 2, without=victim), 60, [w],
                   "input partitions failed over to the two live nodes")
        failover_s = round(time.monotonic() - m0, 2)
        recovery = recovery_after(entries, t0, w)
        cluster.run("kafka-node.sh", "start", str(victim))
        prefix = env["TRANSCRIPT_TOPIC_PREFIX"]
        mine = sorted(t for t in admin.list_topics() if t.startswith(prefix))
        poll_until(lambda: cluster.in_sync(admin, mine, 3), 120, [w],
                   f"node {victim} back in sync on every partition")
        back_in_sync_s = round(time.monotonic() - m0, 2)
        records, report = drained_and_audited(feeder, env, ks, [w])
        stopped = w.stop()
    finally:
        entries.close()
        admin.close()
    conclude("broker_kill_9_three_nodes", {
        "records": records, "nodes": 3, "killed_node": victim, "input_partitions_led": led,
        "failover_s": failover_s, "recovery_s": recovery, "back_in_sync_s": back_in_sync_s,
    }, report, began, ks)
    assert stopped == 0


def test_wiped_local_state_recovers_from_changelog(ks, env, feed, workers, tmp_path):
    began = time.monotonic()
    feeder = feed(ks, seed=404)
    entries = Collector(ks, ks.topic(ENTRIES))
    state = tmp_path / "state"
    w = workers("w0", state)
    wait_entries(entries, 15_000, w)
    w.kill()
    shutil.rmtree(state)
    t0 = time.time()
    w = workers("w1", state)
    recovery = recovery_after(entries, t0, w)
    records, report = drained_and_audited(feeder, env, ks, [w])
    stopped = w.stop()
    conclude("wiped_state", {"records": records, "kills": 1, "recovery_s": recovery},
             report, began, ks)
    assert stopped == 0


def test_a_stalled_worker_is_fenced_when_its_partitions_move(ks, env, feed, workers, tmp_path):
    """A zombie: the worker is frozen (SIGSTOP) in the middle of its work, past its session
    timeout, while a second worker takes its partitions over (it waits until the zombie's open
    transaction has timed out). Woken (SIGCONT), whatever it still tries to commit is refused by
    the broker (its offsets carry an older generation): it exits 70; or, if it noticed the
    rebalance first, it rejoins the group. Either way a read_committed reader sees nothing twice
    and nothing missing."""
    began = time.monotonic()
    feeder = feed(ks, seed=606)
    entries = Collector(ks, ks.topic(ENTRIES))
    bootstrap, group = env["KAFKA_BOOTSTRAP"], group_of(env)
    zombie = workers("zombie", tmp_path / "s1")
    wait_entries(entries, 8_000, zombie)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)

    def members() -> tuple[str, list[str]]:
        desc = admin.describe_groups([group])[group]
        return desc["group_state"], [m["member_id"] for m in desc["members"]]

    try:
        state, frozen = members()
        assert state == "Stable" and len(frozen) == 1, (state, frozen)
        zombie.proc.send_signal(signal.SIGSTOP)
        t0 = time.time()
        try:
            heir = workers("heir", tmp_path / "s2")
            # the frozen member is removed at its session timeout; the heir is alone
            poll_until(lambda: (s := members())[0] == "Stable" and len(s[1]) == 1
                       and s[1] != frozen, 90, [heir], "the heir alone in the group")
            poll_until(has_written(heir), 60, [heir], "the heir decided records")
            recovery = recovery_after(entries, t0, heir)
        finally:
            zombie.proc.send_signal(signal.SIGCONT)
    finally:
        admin.close()
    # the woken worker may exit (70) at any point from here, as its orchestrator would see
    records, report = drained_and_audited(feeder, env, ks, [heir])
    zombie_exit = zombie.proc.poll()
    zombie_stop = zombie.stop() if zombie_exit is None else None
    heir_stop = heir.stop()
    conclude("zombie_fenced", {"records": records, "zombie_exit": zombie_exit,
                               "recovery_s": recovery}, report, began, ks)
    assert zombie_exit in (None, 70), f"the woken worker exited {zombie_exit}:\n{zombie.tail()}"
    assert (zombie_stop, heir_stop) in ((None, 0), (0, 0))
