"""Shared bits of `make bench`: environment, topics, preloading, group lag, the worker process."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from kafka import TopicPartition
from kafka.admin import KafkaAdminClient
from transcript_connector.entries_topic import parse_position_key
from transcript_connector.partitioning import partition_for

from tests.integration.harness import CliProcess, GroupLag
from workers.kafka_io import consumer, polls, read
from workers.settings import KafkaSettings

ROOT = Path(__file__).resolve().parent.parent
BOOTSTRAP = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")
PARTITIONS = 8  # the default partition count; bench/run.py --partitions sets the run's own
# the worker's processing guarantee (TRANSCRIPT_PROCESSING_GUARANTEE); the first is the default
GUARANTEES = ("exactly_once", "at_least_once")
# a partition this many offsets behind or fewer is read to see whether they hold any record
MARKER_CHECK_OFFSETS = 1000

assert BOOTSTRAP.split(",")[0].rsplit(":", 1)[0] in ("127.0.0.1", "localhost"), \
    "the benchmark only talks to a broker on loopback"
KS = KafkaSettings(bootstrap=BOOTSTRAP)  # for the workers.kafka_io readers


_run = {"partitions": PARTITIONS, "topics_file": None}  # set_partitions(): this run's


# the worker's packages whose speed or memory a run's figures carry: `pyproject.toml` gives
# ranges and each machine installs fresh, so a run records what it ran on
WORKER_PACKAGES = ("aiokafka", "faust-streaming", "mode-streaming", "rocksdict", "kafka-python",
                   "pydantic", "pydantic-core", "msgspec", "crc32c", "mypy")


def packages() -> dict:
    """The worker interpreter's versions of WORKER_PACKAGES (None: not installed), and which of
    the per-record path's modules run compiled (`make uncompile` makes them slower)."""
    from importlib import metadata

    from workers.compiled import MODULES, status

    found: dict = {}
    for name in WORKER_PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    found["compiled_modules"] = f"{len(status().compiled)} of {len(MODULES)}"
    return found


def partitions() -> int:
    """The run's partition count: of every topic it creates, the worker's TRANSCRIPT_PARTITIONS
    and the preload partitioner (PARTITIONS unless set_partitions() said otherwise)."""
    return _run["partitions"]


# topics.yaml's `defaults:` block up to the digits of its `partitions:`
_DEFAULT_PARTITIONS = re.compile(r"^(defaults:[ \t]*\n(?:(?:[ \t]+.*|[ \t]*)\n)*?"
                                 r"[ \t]+partitions:[ \t]*)(\d+)", re.MULTILINE)


def set_partitions(n: int, workdir: Path) -> None:
    """Every topic of the run on `n` partitions. `topics apply` then reads a copy of topics.yaml
    in `workdir` with its `defaults: partitions:` replaced by `n` (topics.yaml itself when its
    default is `n` already); a topic the file gives a count of its own (faust's leader topic, 1)
    keeps it."""
    if n < 1:
        raise ValueError(f"partitions must be at least 1, not {n}")
    text = (ROOT / "topics.yaml").read_text(encoding="utf-8")
    m = _DEFAULT_PARTITIONS.search(text)
    if m is None:
        raise RuntimeError("topics.yaml: no `defaults: partitions:` line to replace")
    path = None
    if int(m.group(2)) != n:
        path = workdir / "topics.yaml"
        path.write_text(text[:m.start(2)] + str(n) + text[m.end(2):], encoding="utf-8")
        import yaml

        if yaml.safe_load(path.read_text(encoding="utf-8"))["defaults"]["partitions"] != n:
            raise RuntimeError(f"{path}: the default partition count is not {n}")
    _run.update(partitions=n, topics_file=path)


def env_for(prefix: str, **extra: str) -> dict[str, str]:
    e = dict(os.environ)
    e.update(KAFKA_BOOTSTRAP=BOOTSTRAP, TRANSCRIPT_TOPIC_PREFIX=prefix, PYTHONUNBUFFERED="1",
             TRANSCRIPT_PARTITIONS=str(partitions()), **extra)
    return e


def topics_apply(prefix: str, app_id: str) -> None:
    """The deployment's topics, the changelog of worker app `app_id` among them, on the run's
    partition count (set_partitions)."""
    file = [] if _run["topics_file"] is None else ["--file", str(_run["topics_file"])]
    done = subprocess.run([sys.executable, "-m", "workers", "topics", *file, "apply"], cwd=ROOT,
                          env=env_for(prefix, TRANSCRIPT_APP_ID=app_id), capture_output=True,
                          timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"topics apply failed: {done.stderr.decode()}")


def create_topic(name: str, partitions_n: int | None = None) -> None:
    """A topic of `partitions_n` partitions (default: the run's, partitions())."""
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    try:
        admin.create_topics([NewTopic(name, partitions_n or partitions(), 1)])
    finally:
        admin.close()


def delete_topics(prefix: str) -> list[str]:
    admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    try:
        mine = [t for t in admin.list_topics() if t.startswith(prefix)]
        if mine:
            admin.delete_topics(mine)
        return mine
    finally:
        admin.close()


async def _preload(topic: str, records: list[tuple[bytes | None, bytes]]) -> float:
    from aiokafka import AIOKafkaProducer

    p = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all", linger_ms=20,
                         max_batch_size=512 * 1024, max_request_size=4 * 1024 * 1024)
    await p.start()
    t0 = time.perf_counter()
    n = partitions()
    try:
        futures = []
        for key, value in records:
            part = partition_for(key.decode(), n) if key else None
            futures.append(await p.send(topic, value, key=key, partition=part))
        await asyncio.gather(*futures)
    finally:
        await p.stop()
    return time.perf_counter() - t0


def preload(topic: str, records: list[tuple[bytes | None, bytes]]) -> float:
    """Publish records (contract partitioner), wait for every ack; returns seconds taken."""
    return asyncio.run(_preload(topic, records))


class Lag(GroupLag):
    """Committed-offset lag of a group on a topic: the test harness's GroupLag, its probe
    quick (1 s at most, small fetches) and only of partitions MARKER_CHECK_OFFSETS behind or
    fewer; an exactly-once worker's last committed offset of a partition stops before the
    marker of the transaction that wrote its last record (re-keyed copies on the input topic),
    so the offset lag of that partition stays at 1 until its next record arrives."""

    def __init__(self, group: str, topic: str) -> None:
        super().__init__(BOOTSTRAP, group, topic, probe_timeout=1.0,
                         probe_limit=MARKER_CHECK_OFFSETS, check_crcs=False,
                         max_partition_fetch_bytes=64 * 1024, fetch_max_wait_ms=20)

    def wait_zero(self, timeout: float, alive=lambda: True, interval: float = 0.1) -> float:
        """Wall time (time.time()) when lag was first seen at 0 (when that look began)."""
        deadline = time.monotonic() + timeout
        while True:
            looked_at = time.time()
            if self() == 0:
                return looked_at
            if not alive():
                raise RuntimeError("process died while draining")
            if time.monotonic() > deadline:
                raise TimeoutError(f"lag of {self.group} not 0 after {timeout}s ({self()})")
            time.sleep(interval)

    def records(self) -> int:
        """Records a read_committed reader sees in the topic (end offsets count markers too)."""
        return count_records(self.topic)


def count_records(topic: str, timeout: float = 120) -> int:
    """Records of `topic` a read_committed reader sees, from the log start to the end."""
    return sum(1 for _ in read(KS, topic, timeout=timeout, check_crcs=False))


def _output(record) -> bool:  # noqa: ANN001  (a kafka-python ConsumerRecord)
    """Whether `record` is an output of an input record: an exactly-once worker's position
    records (`position/<p>` on transcript.entries, DESIGN 1.3) are not; it writes them as a
    generation starts and as the gap watch passes trailing markers, before the first and
    after the last output of a drain."""
    return parse_position_key(record.key) is None


def first_timestamp(topics: list[str]) -> float | None:
    """Earliest output's CreateTime (seconds) over the topics: when the first output was sent.
    Each partition is read read_committed from its first record at or after time 0 up to its
    first output (position records skipped: _output)."""
    c = consumer(KS, check_crcs=False, max_partition_fetch_bytes=64 * 1024)
    try:
        tps = [TopicPartition(t, p)
               for t in topics for p in sorted(c.partitions_for_topic(t) or ())]
        ends = c.end_offsets(tps)
        starts = {tp: ot.offset for tp, ot in c.offsets_for_times({tp: 0 for tp in tps}).items()
                  if ot is not None and ot.offset < ends[tp]}
        if not starts:
            return None
        c.assign(list(starts))
        for tp, o in starts.items():
            c.seek(tp, o)
        found: dict[TopicPartition, float] = {}
        try:
            for batch in polls(c, {tp: ends[tp] for tp in starts}, timeout=20, poll_ms=200):
                for r in batch:
                    tp = TopicPartition(r.topic, r.partition)
                    if tp not in found and _output(r):
                        found[tp] = r.timestamp / 1000
                        c.seek(tp, ends[tp])  # this partition is done
        except TimeoutError:
            pass
        return min(found.values()) if found else None
    finally:
        c.close()


def last_timestamp(topics: list[str], back: int = 200) -> float | None:
    """Latest output's CreateTime (seconds) over the topics' partition tails: the last output.

    Reads the last `back` offsets of each partition read_committed: on a topic written in
    transactions the last offset is a transaction marker, not a record; position records are
    skipped (_output)."""
    c = consumer(KS, check_crcs=False)
    try:
        tps = [TopicPartition(t, p)
               for t in topics for p in sorted(c.partitions_for_topic(t) or ())]
        ends = {tp: e for tp, e in c.end_offsets(tps).items() if e > 0}
        c.assign(list(ends))
        for tp, e in ends.items():
            c.seek(tp, max(0, e - back))
        best = None
        try:
            for batch in polls(c, ends, timeout=20, poll_ms=200):
                for r in batch:
                    if _output(r):
                        best = max(best or 0, r.timestamp / 1000)
        except TimeoutError:
            pass
        return best
    finally:
        c.close()


WORKER_ARGV = ("-m", "workers", "worker")


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            pass
    return out


def _argv(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def own_pid(pid: int, argv_tail: tuple[str, ...] = WORKER_ARGV) -> int:
    """The process running `argv_tail` (`python -m workers worker`): `pid` itself when it is
    (Popen of an argv list execs the interpreter directly), else its first descendant that is
    (a wrapper shell or launcher in between); `pid` when none is found."""
    todo, seen = [pid], set()
    while todo:
        p = todo.pop(0)
        if p in seen:
            continue
        seen.add(p)
        argv = [a for a in _argv(p) if a]
        if tuple(argv[1:1 + len(argv_tail)]) == argv_tail:
            return p
        todo += _children(p)
    return pid


def peak_rss_mb(pid: int) -> float | None:
    """VmHWM of /proc/<pid>/status (the resident set's high-water mark since the process
    started) in MB (2^20 bytes); None when the process is gone or the field is missing."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)  # kB
    except (OSError, ValueError, IndexError):
        pass
    return None


BROKER_PORTS = frozenset(int(hp.rsplit(":", 1)[1]) for hp in BOOTSTRAP.split(","))
TCP_ESTABLISHED = "01"


def broker_connections(pid: int, ports: frozenset[int] = BROKER_PORTS) -> int | None:
    """Established TCP connections of process `pid` to the broker: its sockets (the inodes of
    /proc/<pid>/fd) among the entries of /proc/<pid>/net/tcp and tcp6 in state 01
    (ESTABLISHED) whose remote port is one of `ports`; None when the process is gone."""
    inodes = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return None
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    n = 0
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            # sl local_address rem_address st ... uid timeout inode
            if len(f) > 9 and f[3] == TCP_ESTABLISHED and f[9] in inodes \
                    and int(f[2].rsplit(":", 1)[1], 16) in ports:
                n += 1
    return n


def transactional_ids(group: str) -> int | None:
    """Transactional ids the broker knows whose names begin `<group>-` (the worker's are
    `<group>-<worker>`): ListTransactions (KafkaAdminClient.list_transactions) lists every id
    its coordinators hold, ended transactions' too; None when it cannot be read."""
    admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    try:
        listed = admin.list_transactions()
        return len({t.transactional_id for ts in listed.values() for t in ts
                    if t.transactional_id.startswith(group + "-")})
    except Exception:  # noqa: BLE001  (a detail of the report, never a reason to fail the run)
        return None
    finally:
        admin.close()


class WorkerProc(CliProcess):
    """`python -m workers worker` with its own app id, state dir and processing guarantee
    (TRANSCRIPT_PROCESSING_GUARANTEE): the tests' CliProcess, with what the bench reads of it.
    `peak_rss_mb()` reads the worker process's VmHWM; stop() reads it too, just before the
    SIGTERM (`peak_rss_mb_at_stop`). `connections()` counts its established connections to the
    broker. `unchained`: the worker writes no hash chain (bench/unchained/sitecustomize.py, the
    bench's only switch for it), to measure the chain's cost. `unpositioned`: the worker writes
    no position records and runs no gap watch (bench/unpositioned/sitecustomize.py), to measure
    the positions' cost. `env`: more of its environment."""

    def __init__(self, prefix: str, app_id: str, state_dir: Path, log: Path,
                 guarantee: str = GUARANTEES[0], unchained: bool = False,
                 unpositioned: bool = False, **env: str) -> None:
        if guarantee not in GUARANTEES:
            raise ValueError(f"processing guarantee {guarantee!r} is not one of {GUARANTEES}")
        if unchained and unpositioned:
            raise ValueError("one bench switch at a time: Python imports one sitecustomize")
        self.guarantee = guarantee
        switch = "unchained" if unchained else "unpositioned" if unpositioned else None
        extra = dict(env) if switch is None else {**env, "PYTHONPATH": os.pathsep.join(
            p for p in (str(ROOT / "bench" / switch), os.environ.get("PYTHONPATH")) if p)}
        super().__init__(list(WORKER_ARGV[2:]), env_for(
            prefix, TRANSCRIPT_APP_ID=app_id, TRANSCRIPT_STATE_DIR=str(state_dir),
            TRANSCRIPT_SESSION_TIMEOUT_S="6", TRANSCRIPT_PROCESSING_GUARANTEE=guarantee,
            **extra), log)
        self.group = prefix + app_id
        self.started_at = 0.0
        self.peak_rss_at_stop_mb: float | None = None

    def start(self) -> WorkerProc:  # type: ignore[override]
        self.started_at = time.time()
        self.peak_rss_at_stop_mb = None
        super().start()
        return self

    def pid(self) -> int | None:
        """The worker's own PID (not a wrapper's), while it runs."""
        return own_pid(self.proc.pid) if self.alive() else None  # type: ignore[union-attr]

    def peak_rss_mb(self) -> float | None:
        """The worker's peak resident set so far (VmHWM), MB; None when it is not running."""
        pid = self.pid()
        return None if pid is None else peak_rss_mb(pid)

    def connections(self) -> int | None:
        """The worker's established TCP connections to the broker now (broker_connections);
        None when it is not running."""
        pid = self.pid()
        return None if pid is None else broker_connections(pid)

    def stop(self, timeout: float = 60) -> int | None:  # type: ignore[override]
        """SIGTERM and wait; a worker that does not end by then is killed (a bench goes on)."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.peak_rss_at_stop_mb = self.peak_rss_mb()
        try:
            return super().stop(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.returncode
