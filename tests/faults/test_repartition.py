"""`repartition` against the real broker (issue 27): 8 -> 16 while a producer publishes, then a
kill -9 in the middle of 16 -> 32 and a rerun; every confirmation gets exactly one outcome. And
(issue 44) a kill -9 while several old partitions move at once, each in a transaction of its
own: the rerun ends every one of them and completes the move, nothing copied twice.

The feed is kafka-python's producer with its default partitioner (murmur2 of the key, as the
connectors'): it follows the input's new count when its metadata refreshes (every 2 s here),
so records are published under the old count during and after each move and re-keyed by the
worker. One worker state directory serves every run: the old partitions' local stores are
stale after a move (their sessions moved out) and must catch up from the changelog.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
from kafka import TopicPartition
from transcript_connector.partitioning import partition_for

from bench.capacity import RESTORED
from tests.conftest import cli
from tests.faults.test_faults import audit, conclude, drained_and_audited, feed, ks  # noqa: F401
from tests.integration.harness import CliProcess, entry_records, group_of, poll_until, wait_drained
from workers.core.layout import LAYOUT, decode_layout
from workers.core.outputs import CONFIRMATIONS, ENTRIES, SESSIONS, changelog_topic, parse_entry_key
from workers.kafka_io import consumer, read

pytestmark = [pytest.mark.kafka, pytest.mark.faults]
RATE = 1_000  # records/s, below the worker's speed: the moves happen with the feed running


def layout(settings):  # noqa: ANN001, ANN201
    return decode_layout((r.key, r.value) for r in read(settings, settings.topic(LAYOUT)))


def entries_per_partition(settings) -> dict[int, int]:  # noqa: ANN001
    c = consumer(settings)
    try:
        topic = settings.topic(ENTRIES)
        tps = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic))]
        ends, starts = c.end_offsets(tps), c.beginning_offsets(tps)
        return {tp.partition: ends[tp] - starts[tp] for tp in tps}
    finally:
        c.close()


def test_repartition_under_load_then_kill_9_during_the_second_move(ks, env, feed, workers,  # noqa: F811
                                                                     tmp_path):
    began = time.monotonic()
    feeder = feed(ks, seed=2727, rate=RATE, records=60_000, open_ended=True,
                  metadata_max_age_ms=2000)
    state = tmp_path / "state"
    w = workers("p8", state)
    poll_until(lambda: sum(entries_per_partition(ks).values()) > 5_000, 300, [w],
               "entries under 8 partitions")
    assert w.stop() == 0, w.tail()

    t = time.monotonic()
    first = cli("repartition", "--partitions", "16", env=env, timeout=600)
    first_s = time.monotonic() - t
    assert first.returncode == 0, first.stderr.decode()
    assert "moved from 8 to 16 partitions" in first.stdout.decode(), first.stdout.decode()
    again = cli("repartition", "--partitions", "16", env=env)
    assert again.returncode == 0 and b"already moved" in again.stdout, again.stdout

    w = workers("p16", state, TRANSCRIPT_PARTITIONS="16")
    before = entries_per_partition(ks)
    poll_until(lambda: sum(entries_per_partition(ks).values()) > sum(before.values()) + 5_000,
               300, [w], "entries under 16 partitions")
    assert w.stop() == 0, w.tail()

    # the second move, killed once it has moved some old partitions and not all
    env16 = {**env, "TRANSCRIPT_PARTITIONS": "16"}
    second = CliProcess(["repartition", "--partitions", "32"], env16, tmp_path / "move.log")
    second.start()
    poll_until(lambda: b"move: partition 5:" in second.log.read_bytes(), 300, [],
               "the second move under way")
    second.kill()
    pending = layout(ks)
    assert not isinstance(pending, str) and pending.pending is not None, pending
    assert 0 < len(pending.pending.moved) < 16, pending.pending.moved
    # no worker may start meanwhile: its count matches neither the input nor the changelog
    for count in ("16", "32"):
        refused = cli("worker", env={**env, "TRANSCRIPT_PARTITIONS": count,
                                     "TRANSCRIPT_STATE_DIR": str(tmp_path / "refused")},
                      timeout=120)
        assert refused.returncode != 0 and b"partitions" in refused.stderr, refused.stderr
    wrong = cli("repartition", "--partitions", "64", env=env16)
    assert wrong.returncode == 2 and b"--partitions 32" in wrong.stderr, wrong.stderr

    t = time.monotonic()
    rerun = cli("repartition", "--partitions", "32", env=env16, timeout=600)
    rerun_s = time.monotonic() - t
    assert rerun.returncode == 0, rerun.stderr.decode()
    assert "resumes" in rerun.stdout.decode(), rerun.stdout.decode()

    env32 = {**env, "TRANSCRIPT_PARTITIONS": "32"}
    w = workers("p32", state, TRANSCRIPT_PARTITIONS="32")
    records, report = drained_and_audited(feeder, env32, ks, [w])
    wait_drained(env["KAFKA_BOOTSTRAP"], group_of(env), ks.topic(CONFIRMATIONS), 300, [w])
    assert w.stop() == 0, w.tail()

    # every entry, old and new, in its session's partition under 32
    homes = strays = 0
    for r in entry_records(ks):
        named = parse_entry_key(r.key)
        assert named is not None, r.key
        homes += 1
        strays += r.partition != partition_for(named[0], 32)
    assert strays == 0 and homes > 0
    done = layout(ks)
    assert not isinstance(done, str) and [(m.old, m.new) for m in done.moves] == [(8, 16),
                                                                                  (16, 32)]
    assert done.pending is None
    conclude("repartition", {
        "records": records, "entry_records": homes,
        "move_8_16_s": round(first_s, 1), "move_16_32_rerun_s": round(rerun_s, 1),
        "move_8_16_output": first.stdout.decode().strip().splitlines()[-1],
        "moved": json.loads(json.dumps({f"{m.old}->{m.new}": sorted(m.entries_ends.items())
                                        for m in done.moves}))},
        report, began, ks)


class OpenTransactions:
    """The partitions of a topic holding records of a transaction not yet ended: their end for
    a read_uncommitted reader (the high watermark) is past the read_committed one (the last
    stable offset). A killed producer's transaction stays open until its id is fenced."""

    def __init__(self, settings, topic: str, partitions: int) -> None:  # noqa: ANN001
        self.tps = [TopicPartition(topic, p) for p in range(partitions)]
        self.committed = consumer(settings)
        self.uncommitted = consumer(settings, isolation_level="read_uncommitted")

    def __call__(self) -> set[int]:
        stable = self.committed.end_offsets(self.tps)
        high = self.uncommitted.end_offsets(self.tps)
        return {tp.partition for tp in self.tps if high[tp] > stable[tp]}

    def close(self) -> None:
        self.committed.close()
        self.uncommitted.close()


def tasks_of(pid: int) -> list[int]:
    """The move's task processes: children of `pid` that multiprocessing spawned as workers
    (not its resource tracker, which ends by itself once the command is gone), from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            command = (stat.parent / "cmdline").read_bytes()
        except OSError:  # it ended meanwhile
            continue
        if int(fields[1]) == pid and b"spawn_main" in command:
            found.append(int(stat.parent.name))
    return found


def running(pid: int) -> bool:
    """The process is there and not a zombie (ended, not yet reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def test_kill_9_while_several_partitions_move_at_once_then_a_rerun(ks, env, workers,  # noqa: F811
                                                                   tmp_path):
    began = time.monotonic()
    done = cli("loadgen", "--count", "240000", "--sessions", "120000", "--seed", "44",
               "--no-progress", env=env, timeout=600)
    assert done.returncode == 0, done.stderr.decode()
    w = workers("p8", tmp_path / "state")
    wait_drained(env["KAFKA_BOOTSTRAP"], group_of(env), ks.topic(CONFIRMATIONS), 600, [w])
    assert w.stop() == 0, w.tail()

    # killed once a partition is moved and at least two others are inside their transactions
    # at once (their changelog holds records not yet committed), with --parallel 4
    changelog = changelog_topic(ks.topic_prefix, "transcript-owner", SESSIONS)
    open_now = OpenTransactions(ks, changelog, 8)
    move = CliProcess(["repartition", "--partitions", "16", "--parallel", "4"], env,
                      tmp_path / "move.log")
    move.start()
    tasks: list[int] = []

    def several_open_and_frozen() -> bool:
        """Once a partition is moved: every task stopped (SIGSTOP), then two transactions open
        at once, or the tasks go on. None can commit between what the test sees and the
        kill, so the rerun finds partitions moved, partitions half-copied, and the rest."""
        assert move.alive(), f"the move ended first:\n{move.tail()}"
        if b"move: partition " not in move.log.read_bytes():
            return False
        tasks[:] = tasks_of(move.proc.pid)
        signal_all(tasks, signal.SIGSTOP)
        if len(open_now()) >= 2:
            return True
        signal_all(tasks, signal.SIGCONT)
        return False

    try:
        poll_until(several_open_and_frozen, 300, [], "two old partitions inside their "
                   "transactions", interval=0.01)
        move.kill()  # the stopped tasks die with it (PR_SET_PDEATHSIG), mid-transaction
        poll_until(lambda: not any(map(running, tasks)), 60, [],
                   "the killed command's tasks ended with it")
        tasks.clear()
        left_open = open_now()  # the dead tasks' transactions: open until the rerun fences them
        pending = layout(ks)
        assert not isinstance(pending, str) and pending.pending is not None, pending
        assert 0 < len(pending.pending.moved) < 8 and len(left_open) >= 2, (pending, left_open)
        assert not left_open & pending.pending.moved

        rerun = cli("repartition", "--partitions", "16", env=env, timeout=600)
        assert rerun.returncode == 0, rerun.stderr.decode()
        out = rerun.stdout.decode()
        assert "resumes" in out and "moved from 8 to 16 partitions" in out, out
        moved_again = {int(p) for p in re.findall(r"move: partition (\d+):", out)}
        assert moved_again == set(range(8)) - pending.pending.moved, out
        assert not open_now(), "a transaction of the killed run is still open"
    finally:
        signal_all(tasks, signal.SIGCONT)  # never leave a stopped process behind
        open_now.close()

    final = layout(ks)
    assert not isinstance(final, str) and final.pending is None
    assert final.moves[-1].moved == set(range(8))
    env16 = {**env, "TRANSCRIPT_PARTITIONS": "16"}
    w = workers("p16", tmp_path / "state", TRANSCRIPT_PARTITIONS="16")
    poll_until(lambda: RESTORED.search(w.log.read_bytes()) is not None, 300, [w],
               "the restore after the move")
    done = cli("loadgen", "--count", "1", "--sessions", "1", "--seed", "45", "--no-progress",
               env=env16)
    assert done.returncode == 0, done.stderr.decode()
    wait_drained(env["KAFKA_BOOTSTRAP"], group_of(env), ks.topic(CONFIRMATIONS), 300, [w])
    assert w.stop() == 0, w.tail()
    keys: set[bytes] = set()
    strays = repeated = 0
    for r in entry_records(ks):
        named = parse_entry_key(r.key)
        assert named is not None, r.key
        strays += r.partition != partition_for(named[0], 16)
        repeated += r.key in keys
        keys.add(r.key)
    assert strays == 0 and repeated == 0 and len(keys) > 120_000, (strays, repeated, len(keys))
    report = audit(env16)
    conclude("repartition_parallel_kill_9", {
        "records": 240_000, "entry_records": len(keys), "killed_with_open": sorted(left_open),
        "moved_before_kill": sorted(pending.pending.moved)}, report, began, ks)
