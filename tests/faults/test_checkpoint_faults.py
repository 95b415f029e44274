"""Checkpoints under faults: kill -9, SIGTERM and a rebalance while a checkpoint is being written.

The worker checkpoints every second (TRANSCRIPT_CHECKPOINT_INTERVAL_S=1) and copies at most 1,000
state keys a batch (TRANSCRIPT_CHECKPOINT_KEYS_PER_BATCH), so each partition's checkpoint is
spread over several of its transactions and one is being written nearly all the time, while a
steady feed of realistic confirmations arrives. The fault is injected at an observed event: a
checkpoint record appears to a read_uncommitted reader; the worker is frozen (SIGSTOP) at once and
the fault applied only when that record's transaction is still open (the partition's
read_committed end, its last stable offset, is at or below it), else it is woken and the next one
is awaited. Then the worker is restarted (or the two go on), the input drained, and:
  (a) a read_committed reader sees whole checkpoints only: every manifest, where it stands in
      the log, has all its chunks, of its id and copy, with as many state keys as it says, in
      key order and none twice; and the transaction that was open at the fault is all visible or
      not at all (SIGTERM and the rebalance: visible, the batch in flight commits);
  (b) after delete_records on the input up to checkpoints (before the fault on even partitions,
      after it on odd ones), `audit --strict` is clean, replaying exactly the input after them;
  (c) the entries are exactly once: no key twice, and each the entry `replay` of the input gives.
The large-state test measures a checkpoint of 250,000 state keys of one partition against the
transaction timeout: each of its transactions carries at most KEYS_PER_BATCH keys. Figures go to
var/faults/checkpoint_*.json.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

from tests.conftest import ROOT, keeping_input
from tests.faults.test_faults import record
from tests.integration.harness import (
    WorkerProcess,
    entry_records,
    group_of,
    poll_until,
    wait_drained,
)
from workers.core.checkpoint_format import CHECKPOINTS, KEYS_PER_BATCH, Checkpoint, decode
from workers.core.outputs import CONFIRMATIONS
from workers.kafka_io import end_offsets, producer, read
from workers.settings import KafkaSettings, kafka_settings
from workers.stream.checkpoints import Checkpointer
from workers.synthetic import generate

pytestmark = [pytest.mark.kafka, pytest.mark.faults]
PARTITIONS = 8
RATE = 1_500  # confirmations/s
RECORDS = 15_000  # at least; the feed goes on until the test has what it needs
CHECKPOINTING = {  # a checkpoint a second, kept, each spread over a few transactions
    "TRANSCRIPT_CHECKPOINT_INTERVAL_S": "1", "TRANSCRIPT_CHECKPOINT_KEEP": "1000",
    "TRANSCRIPT_CHECKPOINT_KEYS_PER_BATCH": "1000", "TRANSCRIPT_SHUTDOWN_TIMEOUT_S": "20"}


@pytest.fixture
def env(env, tmp_path):
    """The input kept for ever: its oldest records are deleted by the test, and the worker
    checkpoints every second (tests.conftest.keeping_input)."""
    return keeping_input(env, tmp_path)


@pytest.fixture
def ks(env, topics):
    return kafka_settings(env)


class Feed(threading.Thread):
    """Publishes synthetic confirmations (canonical keys only, so that `replay` of the lines in
    order is what the worker does per partition) at RATE until finish(), at least RECORDS."""

    def __init__(self, ks: KafkaSettings, seed: int) -> None:
        super().__init__(daemon=True)
        self.ks, self.seed, self.sent, self.errors = ks, seed, [], []
        self.enough, self.abandon = threading.Event(), threading.Event()
        self.start()

    def run(self) -> None:
        p = producer(self.ks, linger_ms=20)
        topic, t0 = self.ks.topic(CONFIRMATIONS), time.monotonic()
        try:
            for i, (key, value) in enumerate(generate(20 * RECORDS, seed=self.seed,
                                                      legacy_rate=0.0)):
                if self.abandon.is_set() or (i >= RECORDS and self.enough.is_set()):
                    break
                p.send(topic, key=key, value=value).add_errback(self.errors.append)
                self.sent.append(value)
                if i % 250 == 249 and (ahead := (i + 1) / RATE - (time.monotonic() - t0)) > 0:
                    time.sleep(ahead)  # pacing the load, not waiting for an event
            p.flush()
        except Exception as exc:  # noqa: BLE001  (reported by finish())
            self.errors.append(exc)
        finally:
            p.close(timeout=5)

    def finish(self) -> list[bytes]:
        self.enough.set()
        self.join(120)
        assert not self.is_alive() and not self.errors, self.errors[:3]
        return self.sent


@pytest.fixture
def feed() -> Iterator[Callable[[KafkaSettings, int], Feed]]:
    made: list[Feed] = []
    yield lambda ks, seed: made.append(Feed(ks, seed)) or made[-1]
    for f in made:
        f.abandon.set()
        f.join(30)


@pytest.fixture
def start(env, topics, tmp_path) -> Iterator[Callable[..., WorkerProcess]]:
    """start(name, state, session_timeout_s=None): a checkpointing worker; killed after the
    test if still alive (woken first, should it be frozen)."""
    made: list[WorkerProcess] = []

    def make(name: str, state: Path, session_timeout_s: float | None = None) -> WorkerProcess:
        w = WorkerProcess(env, state, tmp_path / f"{name}.log", **CHECKPOINTING)
        if session_timeout_s is not None:
            w.env["TRANSCRIPT_SESSION_TIMEOUT_S"] = str(session_timeout_s)
        made.append(w.start())
        return w

    yield make
    for w in made:
        if w.alive():
            w.proc.send_signal(signal.SIGCONT)
            w.kill()


@dataclass
class Caught:
    """The worker frozen while a transaction of checkpoint records is open: per checkpoints
    partition, the offsets [last stable offset, log end) of that transaction so far."""

    at: float  # wall clock
    open: dict[int, tuple[int, int]]
    misses: int  # checkpoint records seen when no transaction of them was open any more
    records: dict[int, list] = field(default_factory=dict)  # those offsets' records


def catch_a_checkpoint_in_flight(ks: KafkaSettings, w: WorkerProcess, timeout: float = 60,
                                 mid_copy: bool = False) -> Caught:
    """Once every partition has a complete checkpoint (for the audit to start from one taken
    before the fault), freeze `w` (SIGSTOP) at a checkpoint record whose transaction is still
    open; with `mid_copy`, only one that holds a later part of a copy (a chunk after the first:
    the copy's first chunks committed in earlier transactions, its manifest still to come)."""
    wait_checkpointed_after(ks, 0, [w])
    topic = ks.topic(CHECKPOINTS)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    watch = KafkaConsumer(**ks.kafka_python_kwargs(), enable_auto_commit=False,
                          fetch_max_wait_ms=20)  # read_uncommitted: records of open transactions
    stable = KafkaConsumer(**ks.kafka_python_kwargs(), isolation_level="read_committed")
    try:
        watch.assign(tps)
        watch.seek_to_end()
        deadline, misses = time.monotonic() + timeout, 0
        while True:
            assert time.monotonic() < deadline, f"no checkpoint caught in flight\n{w.tail()}"
            assert w.alive(), w.tail()
            if not watch.poll(timeout_ms=200):  # returns as soon as a record arrives
                continue
            w.proc.send_signal(signal.SIGSTOP)
            at = time.time()
            # the end first: a commit marker the broker writes after the stop (the worker sent
            # EndTxn just before it) lands between two reads; read in this order it makes the
            # stable offset pass the end, a miss, rather than a closed transaction look open
            end, lso = watch.end_offsets(tps), stable.end_offsets(tps)
            opened = {tp.partition: (lso[tp], end[tp]) for tp in tps if lso[tp] < end[tp]}
            if opened and (not mid_copy or any(
                    r.key.startswith(b"c/") and json.loads(r.value)["chunk"] > 0
                    for rs in records_at(ks, opened, committed=False).values() for r in rs)):
                return Caught(at, opened, misses)
            misses += 1
            w.proc.send_signal(signal.SIGCONT)
            watch.seek_to_end()
    finally:
        watch.close()
        stable.close()


def records_at(ks: KafkaSettings, ranges: dict[int, tuple[int, int]], committed: bool
               ) -> dict[int, list]:
    """The records of the checkpoints topic in these offset ranges, as a read_uncommitted
    (every record written) or read_committed reader sees them."""
    topic = ks.topic(CHECKPOINTS)
    c = KafkaConsumer(**ks.kafka_python_kwargs(), enable_auto_commit=False,
                      isolation_level="read_committed" if committed else "read_uncommitted")
    out: dict[int, list] = {p: [] for p in ranges}
    try:
        tps = {TopicPartition(topic, p): r for p, r in ranges.items()}
        c.assign(list(tps))
        for tp, (first, _) in tps.items():
            c.seek(tp, first)
        ends = c.end_offsets(list(tps))
        pending = {tp for tp in tps if c.position(tp) < min(tps[tp][1], ends[tp])}
        while pending:
            for tp, recs in c.poll(timeout_ms=500).items():
                out[tp.partition].extend(r for r in recs if r.offset < tps[tp][1])
            pending = {tp for tp in pending if c.position(tp) < min(tps[tp][1], ends[tp])}
    finally:
        c.close()
    return out


def whole_checkpoints(ks: KafkaSettings) -> tuple[dict[int, list[Checkpoint]], dict]:
    """(a): read_committed, in log order, every manifest must find all its chunks (of its id and
    copy) before it, holding its count of state keys, in key order, none twice; chunks no
    manifest names are from copies that were interrupted (counted). Returns the complete
    checkpoints each partition holds now, and counts."""
    topic, found, counts = ks.topic(CHECKPOINTS), {}, Counter()
    for p in range(PARTITIONS):
        latest: dict[bytes, dict] = {}
        copies, named = set(), set()
        records = []
        for r in read(ks, topic, partitions=[p]):
            records.append((r.key, r.value))
            doc = json.loads(r.value)
            latest[r.key] = doc
            if r.key.startswith(b"c/"):
                copies.add(doc["copy"])
                continue
            counts["manifests"] += 1
            named.add(doc["copy"])
            slot = r.key.split(b"/")[2]
            chunks = [latest.get(b"c/%d/%s/%06d" % (p, slot, i)) for i in range(doc["chunks"])]
            assert all(c is not None and (c["id"], c["copy"], c["chunk"]) == (
                doc["id"], doc["copy"], i) for i, c in enumerate(chunks)), \
                f"partition {p} offset {r.offset}: a manifest without its chunks: {doc}"
            keys = [k for c in chunks for k, _ in c["items"]]
            assert len(keys) == doc["keys"], (p, r.offset, len(keys), doc)
            assert keys == sorted(set(keys)), f"partition {p} offset {r.offset}: a mixed copy"
        counts["interrupted_copies"] += len(copies - named)
        found[p] = decode(records)
        assert found[p], f"partition {p}: no complete checkpoint"
    return found, dict(counts)


def in_flight_outcome(ks: KafkaSettings, caught: Caught) -> str:
    """The transaction open at the fault, as a read_committed reader sees it now: "committed"
    (all of its records) or "aborted" (none); anything else fails."""
    seen = records_at(ks, caught.open, committed=True)
    outcome = set()
    for p, (first, end) in caught.open.items():
        offsets = {r.offset for r in seen[p]}
        assert offsets in (set(), set(range(first, end))), \
            f"partition {p}: part of the transaction open at the fault is visible: " \
            f"{sorted(offsets)} of {first}..{end - 1}"
        outcome.add("committed" if offsets else "aborted")
    assert len(outcome) == 1, outcome
    return outcome.pop()


def wait_checkpointed_after(ks: KafkaSettings, since: float, workers: list[WorkerProcess],
                            timeout: float = 60) -> None:
    """Until every partition has a complete checkpoint taken after `since` (wall clock)."""
    topic = ks.topic(CHECKPOINTS)
    c = KafkaConsumer(**ks.kafka_python_kwargs(), enable_auto_commit=False,
                      isolation_level="read_committed", auto_offset_reset="earliest")
    done: set[int] = set()
    try:
        c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        c.seek_to_beginning()

        def checkpointed() -> bool:
            for tp, recs in c.poll(timeout_ms=200).items():
                for r in recs:
                    if r.key.startswith(b"m/") and datetime.fromisoformat(
                            json.loads(r.value)["taken_at"]).timestamp() >= since:
                        done.add(tp.partition)
            return len(done) == PARTITIONS

        poll_until(checkpointed, timeout, workers, "a checkpoint of every partition after the "
                   "fault", interval=0)
    finally:
        c.close()


def truncate_and_audit(ks: KafkaSettings, env, found: dict[int, list[Checkpoint]],
                       fault_at: float, lines: list[bytes], work: Path) -> dict:
    """(b) and (c): the input deleted up to a checkpoint of each partition (the newest before the
    fault on even partitions, the newest after it on odd ones), `audit --strict`; then the
    entries against `replay` of the input. Returns figures."""
    source = ks.topic(CONFIRMATIONS)
    chosen = {}
    for p, ckpts in found.items():
        before = [c for c in ckpts if datetime.fromisoformat(c.taken_at).timestamp() < fault_at]
        after = [c for c in ckpts if datetime.fromisoformat(c.taken_at).timestamp() >= fault_at]
        chosen[p] = (before if p % 2 == 0 and before else after or before)[-1]
    ends = end_offsets(ks, source)
    admin = KafkaAdminClient(bootstrap_servers=env["KAFKA_BOOTSTRAP"])
    try:
        admin.delete_records({TopicPartition(source, p): c.input_offset
                              for p, c in chosen.items() if c.input_offset > 0})
    finally:
        admin.close()
    # the replay of every line beside the audit (two cores)
    (work / "input.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    with (work / "input.jsonl").open("rb") as given, (work / "replay.jsonl").open("wb") as out:
        replay = subprocess.Popen([sys.executable, "-m", "workers", "replay", "-"], cwd=ROOT,
                                  env=env, stdin=given, stdout=out, stderr=subprocess.DEVNULL)
        audited = subprocess.run([sys.executable, "-m", "workers", "audit", "--strict", "--json"],
                                 cwd=ROOT, env=env, capture_output=True, timeout=300)
        assert replay.wait(timeout=300) == 0
    replayed = (work / "replay.jsonl").read_bytes()
    report = json.loads(audited.stdout or b"{}")
    assert audited.returncode == 0, \
        f"audit --strict exited {audited.returncode}:\n{audited.stderr.decode()[-2000:]}\n" \
        f"{json.dumps(report, indent=1)[:4000]}"
    assert report["clean"]
    # it replayed from those checkpoints: exactly the input records after them
    assert report["input_records"] == sum(ends[p] - c.input_offset for p, c in chosen.items())

    expected = {}
    for line in replayed.splitlines():
        if "entry" in (o := json.loads(line)):
            e = o["entry"]
            expected[f"{e['session_key']}#{e['seq']:010d}"] = without_written_at(e)
    copies = Counter()
    got = {}
    for r in entry_records(ks):
        if r.value is not None:
            copies[r.key] += 1
            got[r.key.decode()] = without_written_at(json.loads(r.value))
    repeated = [k for k, n in copies.items() if n > 1]
    assert not repeated, f"{len(repeated)} entry keys written twice: {repeated[:5]}"
    assert got == expected, f"{len(set(got) ^ set(expected))} keys differ from replay; " \
        f"{sum(got[k] != expected[k] for k in set(got) & set(expected))} contents differ"
    return {"entries": len(got), "audit_input_records": report["input_records"],
            "audit_from_offsets": {p: c.input_offset for p, c in chosen.items()}}


def without_written_at(entry: dict) -> dict:
    return {k: v for k, v in entry.items() if k != "written_at"}


def conclude(name: str, ks: KafkaSettings, env, caught: Caught, fault_at: float,
             lines: list[bytes], began: float, work: Path, **figures) -> str:
    """(a), (b), (c) after the fault; the figures recorded first. Returns the outcome of the
    transaction that was open at the fault."""
    outcome = in_flight_outcome(ks, caught)
    found, counts = whole_checkpoints(ks)
    kinds = Counter("manifest" if r.key.startswith(b"m/") else
                    f"chunk {json.loads(r.value)['chunk']}"
                    for rs in caught.records.values() for r in rs)
    figures = {"records": len(lines), "in_flight": {p: list(r) for p, r in caught.open.items()},
               "in_flight_records": dict(kinds), "in_flight_outcome": outcome,
               "misses_before_caught": caught.misses, **counts, **figures}
    record(f"checkpoint_{name}", figures)
    figures.update(truncate_and_audit(ks, env, found, fault_at, lines, work))
    figures["test_s"] = round(time.monotonic() - began, 1)
    record(f"checkpoint_{name}", figures)
    return outcome


def checkpoint_and_drain(ks: KafkaSettings, env, w: WorkerProcess, f: Feed) -> list[bytes]:  # noqa: ANN001
    """The restarted worker checkpoints again, the feed ends, the input drains, `w` stops
    cleanly; the lines fed."""
    wait_checkpointed_after(ks, time.time(), [w])
    lines = f.finish()
    wait_drained(env["KAFKA_BOOTSTRAP"], group_of(env), ks.topic(CONFIRMATIONS), 120, [w])
    assert w.stop() == 0
    return lines


def test_kill_9_while_a_checkpoint_is_written(ks, env, feed, start, tmp_path):
    began = time.monotonic()
    state = tmp_path / "state"
    w = start("w0", state)
    f = feed(ks, 711)
    caught = catch_a_checkpoint_in_flight(ks, w, mid_copy=True)
    caught.records = records_at(ks, caught.open, committed=False)
    w.kill()  # SIGKILL of the frozen worker: its open transaction is left as it was
    w = start("w1", state)  # its producers' start aborts (or completes) that transaction
    lines = checkpoint_and_drain(ks, env, w, f)
    conclude("kill_9", ks, env, caught, caught.at, lines, began, tmp_path)


def test_sigterm_while_a_checkpoint_is_written(ks, env, feed, start, tmp_path):
    """SIGTERM lands in the batch that writes checkpoint records: that batch commits (its
    checkpoint records with it), the worker exits 0, the restart goes on."""
    began = time.monotonic()
    state = tmp_path / "state"
    w = start("w0", state)
    f = feed(ks, 712)
    caught = catch_a_checkpoint_in_flight(ks, w)
    caught.records = records_at(ks, caught.open, committed=False)
    w.proc.send_signal(signal.SIGTERM)  # delivered when it wakes
    w.proc.send_signal(signal.SIGCONT)
    assert w.proc.wait(timeout=30) == 0, w.tail()
    w = start("w1", state)
    lines = checkpoint_and_drain(ks, env, w, f)
    assert conclude("sigterm", ks, env, caught, caught.at, lines, began, tmp_path) == "committed"


def test_a_second_worker_joins_while_a_checkpoint_is_written(ks, env, feed, start, tmp_path):
    """The rebalance begins (the group is preparing it, the second worker has joined) while the
    first worker's checkpoint transaction is open: that batch commits before its partitions
    are revoked, the copy in progress is abandoned, and both workers checkpoint what they own."""
    began = time.monotonic()
    admin = KafkaAdminClient(bootstrap_servers=env["KAFKA_BOOTSTRAP"])
    group = group_of(env)

    def group_state() -> tuple[str, int]:
        desc = admin.describe_groups([group])[group]
        return desc["group_state"], len(desc["members"])

    try:
        # a longer session: the first worker stays a member while it is frozen
        w1 = start("w1", tmp_path / "s1", session_timeout_s=15)
        f = feed(ks, 713)
        caught = catch_a_checkpoint_in_flight(ks, w1)
        try:
            w2 = start("w2", tmp_path / "s2", session_timeout_s=15)
            poll_until(lambda: group_state()[0] == "PreparingRebalance", 60, [w1, w2],
                       "the second worker joined: a rebalance in progress")
        finally:
            w1.proc.send_signal(signal.SIGCONT)
        caught.records = records_at(ks, caught.open, committed=False)
        poll_until(lambda: group_state() == ("Stable", 2), 60, [w1, w2], "two stable members")
        resumed = time.time()
        wait_checkpointed_after(ks, resumed, [w1, w2])
        lines = f.finish()
        wait_drained(env["KAFKA_BOOTSTRAP"], group, ks.topic(CONFIRMATIONS), 120,
                     [w1, w2])
    finally:
        admin.close()
    assert (w1.stop(), w2.stop()) == (0, 0)
    for w in (w1, w2):
        assert "checkpoints of partitions" in w.log.read_text(), w.tail()
    outcome = conclude("rebalance", ks, env, caught, caught.at, lines, began, tmp_path)
    # A batch's transaction commits: faust's revocation waits for its messages. A checkpoint of
    # partitions gone quiet is a transaction of no input message, which nothing waits for: the
    # group refuses its offsets once the rebalance completes, and it aborts (taken again later).
    overtaken = "a quiet partition's checkpoint was overtaken by a rebalance"
    assert outcome == "committed" or (outcome == "aborted"
                                      and overtaken in w1.log.read_text()), (outcome, w1.tail())


LARGE = 250_000  # state keys of one partition


def large_store(path: Path, n: int):  # noqa: ANN201
    """A partition store of n state keys shaped as the worker's: a head and nine remembered
    send_ids per session."""
    import rocksdict

    from workers.core import Seen, SessionHead, head_key, seen_key

    at = datetime(2026, 6, 1, tzinfo=UTC)
    db = rocksdict.Rdict(str(path), options=rocksdict.Options(raw_mode=True))
    batch, i = rocksdict.WriteBatch(raw_mode=True), 0
    while i < n:
        session = f"agent:ops:telegram:direct:u{i:08d}"
        batch.put(head_key(session), SessionHead(0, 10, at).to_bytes())
        for k in range(min(9, n - i - 1)):
            batch.put(seen_key(session, f"outbound-delivery:{i}:{k}"),
                      Seen(at, "f" * 32).to_bytes())
        i += 10
    db.write(batch)
    return db


def test_a_large_checkpoint_is_spread_over_bounded_transactions(ks, tmp_path):
    """One partition of 250,000 state keys, checkpointed as the worker does (Checkpointer, its
    default bound) and each batch's records committed in a transaction of that partition's
    producer, the store changing between the batches: no transaction holds more than
    KEYS_PER_BATCH state keys (before, the whole partition went into one, unbounded), and the
    checkpoint read back read_committed is exactly the state where it began. Measured: each
    transaction's build and send+commit time, against the 60 s transaction timeout."""
    import asyncio

    from workers.stream.batch_send import send_all
    from workers.stream.clients import producer_factory

    db = large_store(tmp_path / "p0", LARGE)
    state = list(db.items())
    assert len(state) == LARGE
    c = Checkpointer(ks.topic(CHECKPOINTS), 10.0, 3)
    c.due(100.0)
    assert c.due(110.0)
    transactions: list[dict] = []

    async def checkpoint() -> None:
        p = producer_factory(ks, "checkpoint-bound", 60.0)(f"{ks.topic_prefix}bound-0")
        await p.start()
        try:
            while not transactions or c.due(110.0):
                out = c.take(110.0, {0: 42}, lambda _: db)
                records = out.get(0, [])
                t0 = time.monotonic()
                await p.begin_transaction()
                await send_all(p, records)
                await p.commit_transaction()
                keys, size, built = c.last
                transactions.append({"keys": keys, "bytes": size, "records": len(records),
                                     "build_s": round(built, 3),
                                     "send_commit_s": round(time.monotonic() - t0, 3)})
                for n, (key, _) in enumerate(db.items()):  # the batch's own state writes
                    if n >= 1000:
                        break
                    del db[key]
        finally:
            await p.stop()

    asyncio.run(checkpoint())
    read_back = decode((r.key, r.value) for r in read(ks, ks.topic(CHECKPOINTS), partitions=[0]))
    record("checkpoint_large_state", {
        "state_keys": LARGE, "keys_per_batch": KEYS_PER_BATCH, "transactions": transactions,
        "transaction_timeout_s": 60,
        "before_one_transaction": {"keys": LARGE,
                                   "bytes": sum(t["bytes"] for t in transactions)}})
    assert all(t["keys"] <= KEYS_PER_BATCH for t in transactions), transactions
    assert len(transactions) == -(-LARGE // KEYS_PER_BATCH)  # 3: 100,000 + 100,000 + 50,000
    assert [(x.input_offset, len(x.items)) for x in read_back] == [(42, LARGE)]
    assert read_back[0].items == state
