"""A lost node (issue 44): one of two workers is killed -9 and its state directory wiped while
confirmations arrive. The survivor takes its partitions over, ending the dead worker's open
transaction itself (workers.stream.fencing) and, with standbys (TRANSCRIPT_STANDBY_REPLICAS=1,
the default), restoring only the changelog's tail, since it has kept those partitions' state
warm (workers.stream.standby). Without standbys (0, beside it) it restores everything the dead
worker wrote since it took the partitions.

Figures (var/faults/lost_node_<n>_standbys.json): when every input partition had an entry
written after the kill, in seconds after the kill and after the group's session timeout (6 s
here); the changelog records the failover applied against those the dead worker wrote; whether
a departed transaction was ended. Times are recorded, never asserted; what is asserted is that
the standbys did their work: the failover applied at most a quarter of what the dead worker
wrote (without standbys, all of it), and exactly-once held (`audit --strict`).
"""

from __future__ import annotations

import re
import shutil
import time

import pytest
from kafka import TopicPartition

from tests.conftest import cli
from tests.faults.test_faults import (  # noqa: F401  (ks, feed: fixtures)
    conclude,
    drained_and_audited,
    feed,
    ks,
    recovery_after,
    wait_entries,
)
from tests.integration.harness import Collector, group_of, poll_until, wait_drained, wait_members
from workers.core.outputs import CONFIRMATIONS, ENTRIES, SESSIONS, changelog_topic
from workers.core.warmup import WARM_LAG
from workers.settings import worker_settings

pytestmark = [pytest.mark.kafka, pytest.mark.faults]
SESSION_TIMEOUT_S = 6  # the harness's TRANSCRIPT_SESSION_TIMEOUT_S
SCALE_SESSIONS = 1_000_000
ASSIGNED = re.compile(r"assigned input partitions \[([0-9, ]*)\]: (.*?(\d+) changelog records "
                      r"applied.*)")


def assignments(log) -> list[tuple[list[int], int, str]]:  # noqa: ANN001
    """Each assignment the worker logged: its partitions, the changelog records its restore
    applied, and the line's text."""
    return [([int(p) for p in m.group(1).split(", ") if p], int(m.group(3)), m.group(2))
            for m in ASSIGNED.finditer(log.read_text(errors="replace"))]


def changelog_ends(env, ks, partitions: list[int]) -> dict[int, int]:  # noqa: ANN001, F811
    topic = changelog_topic(ks.topic_prefix, worker_settings(env).app_id, SESSIONS)
    from kafka import KafkaConsumer

    c = KafkaConsumer(bootstrap_servers=env["KAFKA_BOOTSTRAP"], isolation_level="read_committed")
    try:
        ends = c.end_offsets([TopicPartition(topic, p) for p in partitions])
    finally:
        c.close()
    return {tp.partition: o for tp, o in ends.items()}


@pytest.mark.parametrize("replicas", [1, 0])
def test_a_lost_node_with_and_without_standbys(replicas, ks, env, feed, workers,  # noqa: F811
                                               tmp_path):
    lost_node(replicas, ks, env, feed, workers, tmp_path,  # noqa: F811
              f"lost_node_{replicas}_standbys")


@pytest.mark.scale
@pytest.mark.parametrize("replicas", [1, 0])
def test_a_lost_node_at_a_million_sessions(replicas, ks, env, feed, workers,  # noqa: F811
                                           tmp_path):
    """The same over the state of 1,000,000 sessions (`make faults`: about 5 minutes each):
    the lost worker drains them first, so its partitions' changelog holds about a million
    records, which the survivor restores whole without a standby."""
    done = cli("loadgen", "--count", str(SCALE_SESSIONS), "--sessions", str(SCALE_SESSIONS),
               "--seed", "44", "--no-progress", env=env, timeout=1800)
    assert done.returncode == 0, done.stderr.decode()
    lost_node(replicas, ks, env, feed, workers, tmp_path,  # noqa: F811
              f"lost_node_{replicas}_standbys_1m_sessions", drain_first=True)


def lost_node(replicas: int, ks, env, feed, workers, tmp_path, name: str,  # noqa: ANN001, F811
              drain_first: bool = False) -> None:
    began = time.monotonic()
    standbys = {"TRANSCRIPT_STANDBY_REPLICAS": str(replicas)}
    lost_dir = tmp_path / "lost"
    if drain_first:  # the lost worker holds every partition's state; the survivor none
        lost = workers("lost", lost_dir, **standbys)
        wait_drained(env["KAFKA_BOOTSTRAP"], group_of(env), ks.topic(CONFIRMATIONS), 1800, [lost])
        entries = Collector(ks, ks.topic(ENTRIES), from_end=True)
        feeder = feed(ks, seed=440 + replicas)
        survivor = workers("survivor", tmp_path / "survivor", **standbys)
        first = lost
    else:
        entries = Collector(ks, ks.topic(ENTRIES))
        feeder = feed(ks, seed=440 + replicas)
        survivor = workers("survivor", tmp_path / "survivor", **standbys)
        wait_entries(entries, 2_000, survivor)
        lost = workers("lost", lost_dir, **standbys)
        first = survivor
    wait_members(env["KAFKA_BOOTSTRAP"], group_of(env), 2, [survivor, lost])

    def shared() -> bool:  # each owns some: with standbys, the second's after its warm-up
        a, b = assignments(survivor.log), assignments(lost.log)
        return bool(a and b and a[-1][0] and b[-1][0]
                    and sorted(a[-1][0] + b[-1][0]) == list(range(8)))

    poll_until(shared, 300, [lost, survivor], "the partitions shared by the two workers")
    theirs = assignments(lost.log)[-1][0]
    at_takeover = changelog_ends(env, ks, theirs)
    if replicas:
        poll_until(lambda: f"standbys of partitions {theirs} caught up" in
                   survivor.log.read_text(), 300, [survivor, lost],
                   "the survivor's standbys of the other's partitions caught up")
    wait_entries(entries, len(entries.records) + 10_000, first)

    before = len(assignments(survivor.log))
    lost.kill()
    t0 = time.time()
    shutil.rmtree(lost_dir)
    at_kill = changelog_ends(env, ks, theirs)
    written = sum(at_kill[p] - at_takeover[p] for p in theirs)
    recovery = recovery_after(entries, t0, survivor)
    poll_until(lambda: len(assignments(survivor.log)) > before, 60, [survivor],
               "the survivor's takeover")
    failover = assignments(survivor.log)[-1]
    fenced = "ended the open transactions of departed workers" in survivor.log.read_text()
    records, report = drained_and_audited(feeder, env, ks, [survivor])
    stopped = survivor.stop()
    conclude(name, {
        "records": records, "standby_replicas": replicas, "recovery_s": recovery,
        "after_session_timeout_s": round(recovery - SESSION_TIMEOUT_S, 2),
        "lost_partitions": theirs, "changelog_written_by_lost": written,
        "changelog_of_lost_partitions": sum(at_kill.values()),
        "applied_at_failover": failover[1], "restore_line": failover[2],
        "departed_transaction_ended": fenced,
    }, report, began, ks)
    assert stopped == 0
    assert sorted(failover[0]) == list(range(8))
    assert written >= 2_000, "too little state was written for the restore to tell"
    if replicas:  # the standbys had all but the tail
        assert failover[1] <= written / 4, (failover, written)
    else:  # the survivor's stores of those partitions are as old as the lost worker's takeover
        assert failover[1] >= written * 0.9, (failover, written)


def test_a_third_worker_joins_and_takes_partitions_only_warm(ks, env, feed,  # noqa: F811
                                                             workers, tmp_path):
    joins(ks, env, feed, workers, tmp_path, "third_worker_joins")


@pytest.mark.scale
def test_a_third_worker_joins_at_a_million_sessions(ks, env, feed, workers,  # noqa: F811
                                                    tmp_path):
    """The same over the state of 1,000,000 sessions (`make faults`): the two workers drain it
    first, so a partition cold would take seconds to restore."""
    done = cli("loadgen", "--count", str(SCALE_SESSIONS), "--sessions", str(SCALE_SESSIONS),
               "--seed", "45", "--no-progress", env=env, timeout=1800)
    assert done.returncode == 0, done.stderr.decode()
    joins(ks, env, feed, workers, tmp_path, "third_worker_joins_1m_sessions", drain_first=True)


def joins(ks, env, feed, workers, tmp_path, name: str,  # noqa: ANN001, F811
          drain_first: bool = False) -> None:
    """Two workers share the partitions under load; a third joins. The leader holds back the
    moves to it until it has warmed standbys of them up; then it takes them with only the tail
    to restore. Recorded: the longest any input partition went without an entry from just
    before the join until every worker owns partitions (by the entries' CreateTime)."""
    began = time.monotonic()
    group, bootstrap = group_of(env), env["KAFKA_BOOTSTRAP"]
    a = workers("a", tmp_path / "a")
    b = workers("b", tmp_path / "b")
    if drain_first:
        wait_drained(bootstrap, group, ks.topic(CONFIRMATIONS), 1800, [a, b])
    entries = Collector(ks, ks.topic(ENTRIES), from_end=drain_first)
    feeder = feed(ks, seed=450)
    wait_members(bootstrap, group, 2, [a, b])
    wait_entries(entries, len(entries.records) + 5_000, a)
    t_join = time.time()
    c = workers("c", tmp_path / "c")

    def owning() -> bool:
        last = [assignments(w.log) for w in (a, b, c)]
        return all(x and x[-1][0] for x in last) and \
            sorted(p for x in last for p in x[-1][0]) == list(range(8))

    poll_until(owning, 600, [a, b, c], "three workers owning partitions")
    t_owned = time.time()
    until = t_owned + 3  # every partition written after it: each gap is over by then
    entries.wait_for(lambda rs: {r.partition for r in rs if r.timestamp / 1000 > until}
                     == set(range(8)), 300, a)
    gaps = longest_gaps(entries.records, t_join - 1, until)
    taken = [x for x in assignments(c.log) if x[0]]
    leaders = [w for w in (a, b, c) if "held back moves" in w.log.read_text()]
    warmed = "warmed up partitions" in c.log.read_text()
    records, report = drained_and_audited(feeder, env, ks, [a, b, c])
    stopped = [w.stop() for w in (a, b, c)]
    conclude(name, {
        "records": records, "longest_gap_s": max(gaps.values()),
        "gap_by_partition_s": gaps, "join_to_owning_s": round(t_owned - t_join, 2),
        "gaps_over_1s": gap_spans(entries.records, t_join - 1, until),
        "third_takes": [{"partitions": x[0], "restore": x[2]} for x in taken],
        "held_back": bool(leaders), "warmed_up": warmed,
    }, report, began, ks)
    assert stopped == [0, 0, 0]
    assert leaders and warmed, "the join's moves were not held back for a warm-up"
    assert all(x[1] <= WARM_LAG for x in taken), taken


def longest_gaps(records: list, since: float, until: float) -> dict[int, float]:
    """Per input partition, the longest time in [since, until] without an entry written
    (counting from `since` to the first and from the last to `until`), by CreateTime."""
    by: dict[int, list[float]] = {p: [] for p in range(8)}
    for r in records:
        t = r.timestamp / 1000
        if since <= t <= until:
            by[r.partition].append(t)
    gaps = {}
    for p, ts in sorted(by.items()):
        ts = [since, *sorted(ts), until]
        gaps[p] = round(max(b - a for a, b in zip(ts, ts[1:], strict=False)), 3)
    return gaps


def gap_spans(records: list, since: float, until: float, over: float = 1.0) -> list[str]:
    """Where the gaps longer than `over` were (partition: from-to, wall clock): to read them
    against the workers' logs."""
    by: dict[int, list[float]] = {p: [] for p in range(8)}
    for r in records:
        t = r.timestamp / 1000
        if since <= t <= until:
            by[r.partition].append(t)
    out = []
    for p, ts in sorted(by.items()):
        ts = [since, *sorted(ts), until]
        out += [f"{p}: {_clock(a)}-{_clock(b)}" for a, b in zip(ts, ts[1:], strict=False)
                if b - a > over]
    return out


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}"
