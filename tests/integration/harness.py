"""Running the real worker as a process, feeding it, and awaiting what it writes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from kafka import KafkaConsumer, TopicPartition

from workers.settings import KafkaSettings

ROOT = Path(__file__).resolve().parents[2]


class WorkerProcess:
    """`python -m workers worker` with its own state dir; output goes to a log file."""

    def __init__(self, env: dict[str, str], state_dir: Path, log: Path, **extra: str) -> None:
        self.env = dict(env, TRANSCRIPT_STATE_DIR=str(state_dir), TRANSCRIPT_SESSION_TIMEOUT_S="6",
                        **extra)
        self.log = log
        self.proc: subprocess.Popen | None = None

    def start(self) -> WorkerProcess:
        out = self.log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "workers", "worker"], cwd=ROOT, env=self.env,
            stdout=out, stderr=subprocess.STDOUT,
        )
        return self

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM and wait: a clean shutdown must end by itself."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=30)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])


class Collector:
    """A read_committed consumer over every partition of a topic, kept open across waits."""

    def __init__(self, ks: KafkaSettings, topic: str) -> None:
        self.consumer = KafkaConsumer(
            **ks.kafka_python_kwargs(), isolation_level="read_committed",
            enable_auto_commit=False, auto_offset_reset="earliest",
        )
        parts = self.consumer.partitions_for_topic(topic) or set()
        self.consumer.assign([TopicPartition(topic, p) for p in sorted(parts)])
        self.consumer.seek_to_beginning()
        self.records: list = []

    def wait_for(
        self, done: Callable[[list], bool], timeout: float, worker: WorkerProcess | None = None
    ) -> list:
        """Poll until `done(records)` holds; fail with the worker's log on time-out or death."""
        deadline = time.monotonic() + timeout
        while not done(self.records):
            if worker is not None and not worker.alive():
                raise AssertionError(f"worker exited ({worker.proc.returncode}):\n{worker.tail()}")
            if time.monotonic() > deadline:
                tail = worker.tail() if worker else ""
                raise AssertionError(f"timed out with {len(self.records)} records\n{tail}")
            for recs in self.consumer.poll(timeout_ms=500).values():
                self.records.extend(recs)
        return self.records

    def values(self) -> list[dict]:
        return [json.loads(r.value) for r in self.records]

    def close(self) -> None:
        self.consumer.close()


def replay_entries(lines: list[bytes], env: dict[str, str]) -> list[dict]:
    """What `transcript-owner replay` writes for these input lines, in output order."""
    done = subprocess.run(
        [sys.executable, "-m", "workers", "replay", "-"], cwd=ROOT, env=env,
        input=b"\n".join(lines) + b"\n", capture_output=True, timeout=300, check=True,
    )
    return [o["entry"] for o in map(json.loads, done.stdout.splitlines()) if "entry" in o]


def without_written_at(entries: list[dict]) -> list[dict]:
    return [{k: v for k, v in e.items() if k != "written_at"} for e in entries]


def group_lag(bootstrap: str, group: str, topic: str) -> int | None:
    """Records of `topic` the group has not committed yet (all of them if it committed none);
    None while the cluster cannot tell (a retriable error, e.g. the coordinator is moving)."""
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        ends = consumer.end_offsets(tps)
        try:
            offsets = admin.list_group_offsets(group).get(group, {})
        except KafkaError as exc:
            if getattr(exc, "retriable", False):
                return None
            raise
        return sum(ends[tp] - (offsets[tp].offset if tp in offsets else 0) for tp in tps)
    finally:
        admin.close()
        consumer.close()


def poll_until(done: Callable[[], bool], timeout: float, workers: list[WorkerProcess],
               what: str, interval: float = 0.3) -> None:
    """Until `done()` holds, for state only an external observer can see (group lag, group
    membership, a worker's log): Kafka pushes no event for it, so this is the one place that
    polls. Fails at once when a worker dies, and with its log on time-out."""
    deadline = time.monotonic() + timeout
    while not done():
        for w in workers:
            if not w.alive():
                raise AssertionError(f"worker exited ({w.proc.returncode}):\n{w.tail()}")
        if time.monotonic() > deadline:
            tail = workers[0].tail() if workers else ""
            raise AssertionError(f"{what}: not within {timeout}s\n{tail}")
        time.sleep(interval)


def wait_drained(bootstrap: str, group: str, topic: str, timeout: float,
                 workers: list[WorkerProcess]) -> None:
    """Until the group has committed every input record (re-keyed copies included)."""
    poll_until(lambda: group_lag(bootstrap, group, topic) == 0, timeout, workers,
               "input drained")


def wait_members(bootstrap: str, group: str, n: int, workers: list[WorkerProcess],
                 timeout: float = 90) -> None:
    """Until the group is Stable with n members: the rebalance has happened."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)

    def stable() -> bool:
        desc = admin.describe_groups([group])[group]
        return desc["group_state"] == "Stable" and len(desc["members"]) == n

    try:
        poll_until(stable, timeout, workers, f"{n} stable members")
    finally:
        admin.close()


def group_of(env: dict[str, str]) -> str:
    return env["TRANSCRIPT_TOPIC_PREFIX"] + "transcript-owner"
