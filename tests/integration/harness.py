"""Running the real worker as a process, feeding it, and awaiting what it writes."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path

from kafka import KafkaConsumer, TopicPartition
from transcript_connector.entries_topic import parse_position_key

from workers.core.outputs import ENTRIES
from workers.kafka_io import consumer, polls, ranges_with_records, read
from workers.settings import KafkaSettings

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "deploy/local"
# the three-node cluster: clients on +0/+2/+4, controllers on +1/+3/+5
CLUSTER_PORT = int(os.environ.get("KAFKA_3N_PORT", "19092"))
CLUSTER_BOOTSTRAP = ",".join(f"127.0.0.1:{CLUSTER_PORT + 2 * i}" for i in range(3))


class CliProcess:
    """`python -m workers ARGS…` as a process; its output goes to a log file."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.args, self.env, self.log = args, env, log
        self.proc: subprocess.Popen | None = None

    def start(self, nofile: int | None = None) -> CliProcess:
        """nofile: the process's file limit (RLIMIT_NOFILE, soft and hard), to run it short."""
        out = self.log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "workers", *self.args], cwd=ROOT, env=self.env,
            stdout=out, stderr=subprocess.STDOUT,
            preexec_fn=None if nofile is None else partial(_limit_files, nofile),
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


def _limit_files(n: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


class WorkerProcess(CliProcess):
    """`python -m workers worker` with its own state dir."""

    def __init__(self, env: dict[str, str], state_dir: Path, log: Path, **extra: str) -> None:
        super().__init__(["worker"], {**env, "TRANSCRIPT_STATE_DIR": str(state_dir),
                                      "TRANSCRIPT_SESSION_TIMEOUT_S": "6", **extra}, log)


def entry_records(ks: KafkaSettings, **options) -> list:
    """Every record of transcript.entries a read_committed reader sees (`read`'s options), less
    the worker's position records (DESIGN 1.3): the entries and their tombstones."""
    return [r for r in read(ks, ks.topic(ENTRIES), **options)
            if parse_position_key(r.key) is None]


def without_positions(records: list) -> list:
    """`records` of transcript.entries less its position records."""
    return [r for r in records if parse_position_key(r.key) is None]


class Collector:
    """A read_committed consumer over every partition of a topic, kept open across waits. Of
    transcript.entries it collects the entries and tombstones in `records`, and the worker's
    position records (DESIGN 1.3) apart, in `positions`."""

    def __init__(self, ks: KafkaSettings, topic: str, from_end: bool = False) -> None:
        """`from_end`: only what is written from now on (a test over a large backlog)."""
        self.consumer = consumer(ks)
        parts = self.consumer.partitions_for_topic(topic) or set()
        self.consumer.assign([TopicPartition(topic, p) for p in sorted(parts)])
        if from_end:
            self.consumer.seek_to_end()
        else:
            self.consumer.seek_to_beginning()
        self.records: list = []
        self.positions: list = []
        self._entries = topic.endswith(ENTRIES)

    def wait_for(
        self, done: Callable[[list], bool], timeout: float, worker: WorkerProcess | None = None
    ) -> list:
        """Poll until `done(records)` holds; fail with the worker's log on time-out or death."""
        arriving = polls(self.consumer, timeout=timeout)
        while not done(self.records):
            if worker is not None and not worker.alive():
                raise AssertionError(f"worker exited ({worker.proc.returncode}):\n{worker.tail()}")
            try:
                batch = next(arriving)
            except TimeoutError:
                tail = worker.tail() if worker else ""
                raise AssertionError(f"timed out with {len(self.records)} records\n{tail}") \
                    from None
            self._add(batch)
        return self.records

    def take(self, timeout_ms: int = 100) -> None:
        """One poll's records, whatever arrived (nothing, when nothing did)."""
        for batch in self.consumer.poll(timeout_ms=timeout_ms).values():
            self._add(batch)

    def _add(self, batch: list) -> None:
        if self._entries:
            self.positions.extend(r for r in batch if parse_position_key(r.key) is not None)
            batch = [r for r in batch if parse_position_key(r.key) is None]
        self.records.extend(batch)

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


class GroupLag:
    """How far a consumer group is behind on a topic, its clients kept open across looks: 0
    exactly when it has committed past every committed record (all of them count if it
    committed none); None while the cluster cannot tell (a retriable error, e.g. the
    coordinator is moving).

    Records, not offsets: transaction markers take offsets too and are never delivered, so a
    partition whose last offset is a commit marker (the worker writes its re-keyed records
    to the input in transactions; a connector may publish in them) keeps "end offset -
    committed offset" at 1 for good. So each partition with an offset gap is probed with a
    read_committed reader (`ranges_with_records`, `probe_timeout` seconds at most): a gap that
    holds no committed record counts 0, any other counts its offsets (at least as many as its
    records). Partitions without a gap are not read: a drained topic costs one look at the
    offsets; nor is any when a gap is wider than `probe_limit` offsets (then every gap counts).
    `reader_options`: the probing consumer's (kafka-python's KafkaConsumer)."""

    def __init__(self, bootstrap: str, group: str, topic: str, *, probe_timeout: float = 5.0,
                 probe_limit: int | None = None, **reader_options) -> None:
        from kafka.admin import KafkaAdminClient

        self.bootstrap, self.group, self.topic = bootstrap, group, topic
        self.probe_timeout, self.probe_limit = probe_timeout, probe_limit
        self.reader_options = reader_options
        self.admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        # read_uncommitted: the log end
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        self.tps = [TopicPartition(topic, p)
                    for p in sorted(self.consumer.partitions_for_topic(topic))]
        self._reader: KafkaConsumer | None = None

    def behind(self) -> dict[TopicPartition, tuple[int, int]] | None:
        """The partitions whose committed offset is below the end: (committed, end); None
        while the cluster cannot tell."""
        from kafka.errors import KafkaError

        ends = self.consumer.end_offsets(self.tps)
        try:
            offsets = self.admin.list_group_offsets(self.group).get(self.group, {})
        except KafkaError as exc:
            if getattr(exc, "retriable", False):
                return None
            raise
        gaps = {}
        for tp in self.tps:
            committed = offsets[tp].offset if tp in offsets else 0
            committed = max(committed, 0)  # -1: nothing committed for this partition
            if ends[tp] > committed:
                gaps[tp] = (committed, ends[tp])
        return gaps

    def __call__(self) -> int | None:
        gaps = self.behind()
        if not gaps:
            return None if gaps is None else 0
        if self.probe_limit is not None \
                and max(end - start for start, end in gaps.values()) > self.probe_limit:
            return sum(end - start for start, end in gaps.values())
        if self._reader is None:
            self._reader = KafkaConsumer(
                bootstrap_servers=self.bootstrap, isolation_level="read_committed",
                enable_auto_commit=False, auto_offset_reset="earliest", **self.reader_options)
        holding = ranges_with_records(self._reader, gaps, self.probe_timeout)
        return sum(end - start for tp, (start, end) in gaps.items() if tp in holding)

    def close(self) -> None:
        self.admin.close()
        self.consumer.close()
        if self._reader is not None:
            self._reader.close()


def group_lag(bootstrap: str, group: str, topic: str) -> int | None:
    """GroupLag's one look, its clients closed again."""
    lag = GroupLag(bootstrap, group, topic)
    try:
        return lag()
    finally:
        lag.close()


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
    """Until the group has committed every input record (re-keyed copies included); offsets
    that hold only transaction markers or aborted records need no commit (`group_lag`)."""
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


def wait_static_members(bootstrap: str, group: str, instances: set[str],
                        workers: list[WorkerProcess], *, renewed: dict[str, str] | None = None,
                        timeout: float = 90) -> dict[str, str]:
    """Until the group is Stable with exactly the static members `instances` (their
    TRANSCRIPT_INSTANCE_ID), each in `renewed` under a member id other than the one given
    there (it has joined again since). Returns instance id -> member id."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    found: dict[str, str] = {}

    def settled() -> bool:
        desc = admin.describe_groups([group])[group]
        found.clear()
        found.update({m.get("group_instance_id") or "": m["member_id"] for m in desc["members"]})
        return (desc["group_state"] == "Stable" and len(desc["members"]) == len(instances)
                and set(found) == instances
                and all(found[i] != old for i, old in (renewed or {}).items()))

    try:
        poll_until(settled, timeout, workers, f"stable static members {sorted(instances)}")
    finally:
        admin.close()
    return dict(found)


def group_of(env: dict[str, str]) -> str:
    return env["TRANSCRIPT_TOPIC_PREFIX"] + "transcript-owner"


class Cluster:
    """The three-node local cluster (`KAFKA_NODES=3 deploy/local/kafka-up.sh`) on ports
    CLUSTER_PORT.., its data in `data_dir`: not the session broker. Started and torn down by
    the `cluster` fixture (tests/conftest.py)."""

    def __init__(self, data_dir: Path) -> None:
        self.env = {
            k: v for k, v in os.environ.items()
            if not k.startswith("KAFKA_") or k in ("KAFKA_START_TIMEOUT", "KAFKA_STOP_TIMEOUT")
        }
        self.env.update(
            KAFKA_NODES="3", KAFKA_PORT=str(CLUSTER_PORT),
            KAFKA_CONTROLLER_PORT=str(CLUSTER_PORT + 1), KAFKA_DATA_DIR=str(data_dir),
            KAFKA_HEAP_OPTS="-Xmx512m -Xms128m",
        )

    def run(self, *cmd: str, timeout: float = 180) -> str:
        """A deploy/local script against this cluster; fails with its output unless exit 0."""
        done = subprocess.run([str(SCRIPTS / cmd[0]), *cmd[1:]], env=self.env, cwd=ROOT,
                              capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def client_env(self, prefix: str) -> dict[str, str]:
        """Environment for a `transcript-owner` subprocess on this cluster: RF 3 topics
        under `prefix`, nothing inherited that would point it elsewhere."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("KAFKA_", "TRANSCRIPT_"))}
        env.update(KAFKA_BOOTSTRAP=CLUSTER_BOOTSTRAP, TRANSCRIPT_TOPIC_PREFIX=prefix,
                   TRANSCRIPT_REPLICATION_FACTOR="3", PYTHONUNBUFFERED="1")
        return env

    def admin(self):  # noqa: ANN201
        from kafka.admin import KafkaAdminClient

        return KafkaAdminClient(bootstrap_servers=CLUSTER_BOOTSTRAP.split(","),
                                request_timeout_ms=20000)

    @staticmethod
    def busiest_leader(admin, topic: str) -> tuple[int, int]:
        """The node leading the most partitions of `topic`, and how many it leads."""
        leaders = Counter(p["leader_id"] for p in describe(admin, [topic])[topic])
        node, led = leaders.most_common(1)[0]
        assert node in (1, 2, 3), leaders
        return node, led

    @staticmethod
    def in_sync(admin, topics: list[str], n: int, without: int | None = None) -> bool:
        """Every partition of `topics` led by a live node other than `without`, with n
        replicas in sync; False while the admin client cannot tell (it may be reconnecting)."""
        try:
            found = describe(admin, topics)
        except Exception:  # noqa: BLE001
            return False
        return all(p["leader_id"] not in (without, -1) and len(p["isr_nodes"]) == n
                   for parts in found.values() for p in parts)


def describe(admin, topics: list[str]) -> dict[str, list[dict]]:
    """Each topic's partitions as the admin client describes them (leader, replicas, ISR)."""
    return {t["name"]: t["partitions"] for t in admin.describe_topics(topics)}


def committed_input(env: dict[str, str], topic: str) -> dict[int, int]:
    """Where the worker stands: the group's committed offset of each partition of `topic`
    that has one above 0 (the end offsets may be past it by a transaction marker)."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=env["KAFKA_BOOTSTRAP"])
    try:
        committed = admin.list_group_offsets(group_of(env)).get(group_of(env), {})
    finally:
        admin.close()
    return {tp.partition: o.offset for tp, o in committed.items()
            if tp.topic == topic and o.offset > 0}


def checkpointed_at(ks: KafkaSettings, offsets: dict[int, int]) -> bool:
    """Each partition has a checkpoint at or after its offset in `offsets`."""
    from workers.core.checkpoint_format import CHECKPOINTS, parse_key, read_manifest
    from workers.kafka_io import read

    at: dict[int, int] = {}
    for r in read(ks, ks.topic(CHECKPOINTS)):
        kind, p, _, _ = parse_key(r.key)
        if kind == "m" and r.value is not None:
            at[p] = max(at.get(p, -1), read_manifest(r.value, p)["input_offset"])
    return all(at.get(p, -1) >= off for p, off in offsets.items())
