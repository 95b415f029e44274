"""`transcript-owner repartition --partitions N` against the real broker: what it refuses, and
what readers see across a move from 8 to 16 partitions.

Refusals (exit 2, one line on stderr naming what to do, no traceback, nothing changed): a count
that is not a larger multiple of today's, a worker still in the group, an erase on
transcript.control the workers have not forwarded, a malformed transcript.layout (which `audit`
refuses too), a topic missing. A refusal that came after "begin" would leave a move record in
transcript.layout and a half-grown deployment, so each test checks that no topic changed.

Across a move, every reader must find every entry: the move copies entries into their
sessions' new partitions and trims the old copies, so a sink database made under 8 and caught up
under 16 must hold exactly the topic's live entries; `show` of a session that moved must list
its entries written before and after the move, contiguous; `audit --strict` must replay the
input epoch by epoch and find nothing; and a connector's retry of a send confirmed before the
move, published to the session's new partition, must still be a duplicate (the dedupe state
moved with the session).
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient
from transcript_connector.partitioning import partition_for

from tests.conftest import cli
from tests.faults.test_faults import audit
from tests.integration.harness import (
    committed_input,
    entry_records,
    group_of,
    poll_until,
    wait_drained,
    wait_members,
)
from tests.integration.test_sink import db_entries, live_entries
from workers.core.checkpoint_format import CHECKPOINTS
from workers.core.layout import LAYOUT, decode_layout
from workers.core.outputs import CONFIRMATIONS, CONTROL, ENTRIES, parse_entry_key
from workers.kafka_io import end_offsets, publish, read
from workers.settings import KafkaSettings, kafka_settings

pytestmark = [pytest.mark.kafka]


@pytest.fixture
def ks(env, topics) -> KafkaSettings:
    return kafka_settings(env)


def partition_counts(ks: KafkaSettings) -> dict[str, int]:
    """Every topic of this test's prefix and its partition count."""
    admin = KafkaAdminClient(**ks.kafka_python_kwargs())
    try:
        mine = [t for t in admin.list_topics() if t.startswith(ks.topic_prefix)]
        return {t["name"]: len(t["partitions"]) for t in admin.describe_topics(mine)}
    finally:
        admin.close()


def layout_records(ks: KafkaSettings) -> list[tuple[bytes | None, bytes | None]]:
    return [(r.key, r.value) for r in read(ks, ks.topic(LAYOUT))]


def refused(done, *words: str) -> str:  # noqa: ANN001
    """The command exited 2 with one line on stderr, no traceback, naming each of `words`."""
    err = done.stderr.decode(errors="replace")
    assert done.returncode == 2, f"exit {done.returncode}\n{done.stdout.decode()}\n{err}"
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for w in words:
        assert w in lines[0], f"{w!r} not in: {lines[0]}"
    return lines[0]


def unchanged(ks: KafkaSettings, before: dict[str, int],
              layout: list[tuple[bytes | None, bytes | None]] | None = None) -> None:
    """No topic gained a partition (the move's topics still have 8), and transcript.layout holds
    `layout` (default: no record: no move begun)."""
    now = partition_counts(ks)
    assert now == before, now
    for name in (CONFIRMATIONS, CONTROL, ENTRIES, CHECKPOINTS):
        assert now[ks.topic(name)] == 8, now
    assert layout_records(ks) == (layout or [])


def ok(done) -> str:  # noqa: ANN001
    assert done.returncode == 0, \
        f"exit {done.returncode}\n{done.stdout.decode()}\n{done.stderr.decode(errors='replace')}"
    return done.stdout.decode()


def assert_clean(report: dict) -> None:
    assert report["discrepancies"]["missing"] == 0, report["examples"].get("missing")
    assert report["repeats"] == 0, report
    assert report["exit"] == 0, json.dumps(report, indent=1)


def sessions_of(live: dict[str, str]) -> dict[str, set[int]]:
    """session key -> the seqs of its live entries."""
    out: dict[str, set[int]] = {}
    for key in live:
        named = parse_entry_key(key.encode())
        assert named is not None, key
        out.setdefault(named[0], set()).add(named[1])
    return out


def db_session(db: Path, session: str) -> list[dict]:
    c = sqlite3.connect(db)
    try:
        rows = c.execute("SELECT entry_json FROM entries WHERE session_key = ? ORDER BY seq",
                         (session,)).fetchall()
    finally:
        c.close()
    return [json.loads(j) for (j,) in rows]


# --- refusals ---------------------------------------------------------------------------------


def test_a_count_that_is_not_a_larger_multiple_is_refused(ks, env):
    before = partition_counts(ks)
    refused(cli("repartition", "--partitions", "12", env=env), "--partitions 12",
            "not a multiple of 8")
    for n in ("8", "4"):
        refused(cli("repartition", "--partitions", n, env=env), f"--partitions {n}",
                "only add partitions", "larger count")
    unchanged(ks, before)


def test_a_running_worker_is_refused(ks, env, workers):
    before = partition_counts(ks)
    w = workers("running")
    wait_members(env["KAFKA_BOOTSTRAP"], group_of(env), 1, [w])
    refused(cli("repartition", "--partitions", "16", "--wait-empty", "1", env=env),
            group_of(env), "1 member:", "stop every worker")
    assert w.alive()
    unchanged(ks, before)
    assert w.stop() == 0, w.tail()


def test_an_erase_not_forwarded_by_the_workers_is_refused(ks, env):
    before = partition_counts(ks)
    ok(cli("forget", "agent:ops:telegram:direct:u1", "--reason", "x", "--force", env=env))
    assert sum(end_offsets(ks, ks.topic(CONTROL)).values()) == 1
    refused(cli("repartition", "--partitions", "16", env=env), ks.topic(CONTROL),
            "not forwarded", "start the workers until their lag on it is 0")
    unchanged(ks, before)


def test_a_malformed_layout_record_is_refused_by_repartition_and_audit(ks, env):
    before = partition_counts(ks)
    garbage = [(b"move/8-16", b"garbage")]
    publish(ks, ks.topic(LAYOUT), garbage)
    refused(cli("repartition", "--partitions", "16", env=env), ks.topic(LAYOUT), "not JSON")
    unchanged(ks, before, garbage)
    done = cli("audit", env=env, timeout=300)
    err = done.stderr.decode(errors="replace")
    assert done.returncode == 2, f"exit {done.returncode}\n{done.stdout.decode()}\n{err}"
    assert ks.topic(LAYOUT) in err and "Traceback" not in err, err


def test_a_missing_topic_is_refused(ks, env):
    gone = ks.topic(CHECKPOINTS)
    admin = KafkaAdminClient(**ks.kafka_python_kwargs())
    try:
        admin.delete_topics([gone])
        poll_until(lambda: gone not in admin.list_topics(), 60, [], f"{gone} deleted")
    finally:
        admin.close()
    before = partition_counts(ks)
    assert gone not in before
    refused(cli("repartition", "--partitions", "16", env=env), gone, "does not exist",
            "topics apply")
    assert partition_counts(ks) == before
    assert all(before[ks.topic(t)] == 8 for t in (CONFIRMATIONS, CONTROL, ENTRIES))
    assert layout_records(ks) == []


# --- across a move ----------------------------------------------------------------------------


def test_readers_find_every_entry_across_a_move_and_a_retry_stays_a_duplicate(ks, env, workers,
                                                                                tmp_path):
    bootstrap, group, topic = env["KAFKA_BOOTSTRAP"], group_of(env), ks.topic(CONFIRMATIONS)
    env16 = {**env, "TRANSCRIPT_PARTITIONS": "16"}
    state, db = tmp_path / "state", tmp_path / "gateway.db"

    # under 8 partitions: entries, a sink database of them
    ok(cli("loadgen", "--count", "3000", "--sessions", "300", "--seed", "5", env=env))
    w = workers("w8", state)
    wait_drained(bootstrap, group, topic, 180, [w])
    assert w.stop() == 0, w.tail()
    before, _ = live_entries(ks)
    assert len(before) > 1000, len(before)
    ok(cli("sink", "sqlite", str(db), "--until-end", env=env))
    assert db_entries(db) == before
    committed = committed_input(env, topic)

    # a confirmation decided "written" before the move, of a session that moves
    by_session = {}
    for e in map(json.loads, before.values()):
        by_session.setdefault(e["session_key"], []).append(e["send_id"])
    retry = None
    for r in read(ks, topic):
        if r.key is None or partition_for(r.key.decode(), 8) == partition_for(r.key.decode(), 16):
            continue
        try:
            doc = json.loads(r.value)
        except ValueError:
            continue
        if isinstance(doc, dict) and doc.get("schema") == "delivery-confirmation/1" \
                and by_session.get(r.key.decode(), []).count(doc.get("send_id")) == 1:
            retry = (r.key, r.value)
            break
    assert retry is not None, "no written confirmation of a session that moves"

    moved = ok(cli("repartition", "--partitions", "16", env=env, timeout=300))
    assert "moved from 8 to 16 partitions" in moved, moved
    layout = decode_layout(layout_records(ks))
    assert not isinstance(layout, str), layout
    assert [(m.old, m.new, m.done_at is not None) for m in layout.moves] == [(8, 16, True)]
    assert layout.moves[0].input_offsets == tuple(committed.get(p, 0) for p in range(8))
    assert layout.moves[0].moved == frozenset(range(8))
    counts = partition_counts(ks)
    assert all(counts[ks.topic(t)] == 16 for t in (CONFIRMATIONS, CONTROL, ENTRIES, CHECKPOINTS))
    assert live_entries(ks)[0] == before  # the move copied every live entry, lost none

    # under 16: more entries, into sessions old and new
    w = workers("w16", state, TRANSCRIPT_PARTITIONS="16")
    ok(cli("loadgen", "--count", "3000", "--sessions", "300", "--seed", "6", env=env16))
    wait_drained(bootstrap, group, topic, 180, [w])
    after, _ = live_entries(ks)
    assert set(before) < set(after)
    strays = [r.key for r in entry_records(ks)
              if r.partition != partition_for(parse_entry_key(r.key)[0], 16)]
    assert strays == [], strays[:5]

    # the sink, caught up under 16: exactly the topic's live entries
    ok(cli("sink", "sqlite", str(db), "--until-end", env=env16))
    rows = db_entries(db)
    assert set(rows) == set(after), (sorted(set(after) - set(rows))[:3],
                                     sorted(set(rows) - set(after))[:3])
    assert rows == after

    # show: a session that moved, with entries from before and after the move
    old, new = sessions_of(before), sessions_of(after)
    moving = sorted(s for s in old if partition_for(s, 8) != partition_for(s, 16)
                    and new[s] - old[s])
    assert moving, "no session that moved got entries after the move"
    session = moving[0]
    shown = cli("show", session, "--json", env=env16)
    entries = [json.loads(line) for line in ok(shown).splitlines()]
    assert [e["seq"] for e in entries] == list(range(1, len(new[session]) + 1)), entries
    assert {e["seq"] for e in entries} == new[session]
    assert entries == db_session(db, session)
    from_db = cli("show", session, "--db", str(db), "--json", env=env16)
    assert ok(from_db) == shown.stdout.decode()

    assert_clean(audit(env16))

    # a connector's retry of a send written before the move, to the session's new partition
    key, value = retry
    publish(ks, topic, [(key, value)], partitions=16)
    wait_drained(bootstrap, group, topic, 120, [w])
    again, _ = live_entries(ks)
    assert sessions_of(again)[key.decode()] == new[key.decode()]
    assert again == after
    assert_clean(audit(env16))
    assert w.stop() == 0, w.tail()

    done = ok(cli("repartition", "--partitions", "16", env=env16))
    assert "already moved" in done, done
    assert decode_layout(layout_records(ks)) == layout


# --- erasure, forget and the workers across a move (issue 42, items 1-3) ----------------------


def erasures_of(ks: KafkaSettings, session: str) -> list[dict]:
    from workers.core.outputs import ERASURES

    return [json.loads(r.value) for r in read(ks, ks.topic(ERASURES))
            if r.key == session.encode() and r.value is not None]


def confirm(ks: KafkaSettings, session: str, send_ids: list[str], partitions: int) -> None:
    values = [json.dumps({
        "schema": "delivery-confirmation/1", "send_id": s,
        "confirmed_at": datetime.now(UTC).isoformat(),  # after any erasure: written
        "agent_id": "ops", "session_key": session,
        "route": {"channel": "telegram", "peer_kind": "direct", "peer_id": "x"},
        "origin": {"kind": "message_tool"}, "payload": {"text": f"message {s}"},
        "receipt": {"platform_message_ids": [s]}}).encode() for s in send_ids]
    publish(ks, ks.topic(CONFIRMATIONS), [(session.encode(), v) for v in values],
            partitions=partitions)


def test_a_session_erased_before_and_after_a_move_at_one_control_offset_is_erased_twice(
        ks, env, workers, tmp_path):
    """A ticket is remembered per (session, control offset); after a move the session's next
    erase comes from a new control partition whose offsets start at 0 again, so both erases
    share offset 0. Both must hold, and `audit` (which replays every control range of a family
    before its input) must find nothing (issue 42, item 1)."""
    bootstrap, group, topic = env["KAFKA_BOOTSTRAP"], group_of(env), ks.topic(CONFIRMATIONS)
    env16 = {**env, "TRANSCRIPT_PARTITIONS": "16"}
    state = tmp_path / "state"
    session = next(k for k in (f"agent:ops:telegram:direct:twice{i}" for i in range(200))
                   if partition_for(k, 16) >= 8)  # its control partition is new after the move
    confirm(ks, session, ["a1", "a2"], 8)
    w = workers("w8", state)
    wait_drained(bootstrap, group, topic, 120, [w])
    first = cli("forget", session, "--reason", "first", "--wait", "60", env=env)
    assert ok(first) and "offset 0" in first.stdout.decode(), first.stdout.decode()
    assert w.stop() == 0, w.tail()

    ok(cli("repartition", "--partitions", "16", env=env, timeout=300))
    w = workers("w16", state, TRANSCRIPT_PARTITIONS="16")
    confirm(ks, session, ["b1", "b2"], 16)
    wait_drained(bootstrap, group, topic, 120, [w])
    # show with a stale TRANSCRIPT_PARTITIONS reads the topics' own count (issue 42, item 2):
    # 8 would address partition partition_for(session, 8), which holds none of it
    shown = ok(cli("show", session, "--verify", env={**env, "TRANSCRIPT_PARTITIONS": "8"}))
    assert "message b1" in shown and "message b2" in shown, shown
    assert "chain: verified 2 entries" in shown, shown
    second = cli("forget", session, "--reason", "second", "--wait", "60", env=env16)
    assert ok(second) and "offset 0" in second.stdout.decode(), second.stdout.decode()
    wait_drained(bootstrap, group, topic, 120, [w])
    assert w.stop() == 0, w.tail()

    live = sessions_of(live_entries(ks)[0])
    assert session not in live, live.get(session)
    erasures = erasures_of(ks, session)  # both, until compaction keeps the latest
    assert [(e["through_seq"], e["reason"]) for e in erasures] == [(2, "first"), (4, "second")]
    assert_clean(audit(env16))


def test_forget_refuses_a_stale_count_and_a_move_in_progress(ks, env):
    """`forget` keys the erase for the topics' own count: one TRANSCRIPT_PARTITIONS contradicts
    is refused, naming the count, and so is a move not done (issue 42, item 2)."""
    session = "agent:ops:telegram:direct:stale"
    admin = KafkaAdminClient(**ks.kafka_python_kwargs())
    try:
        from kafka.admin import NewPartitions

        admin.create_partitions({ks.topic(t): NewPartitions(16)
                                 for t in (CONFIRMATIONS, CONTROL, ENTRIES)})
    finally:
        admin.close()
    poll_until(lambda: all(partition_counts(ks)[ks.topic(t)] == 16
                           for t in (CONFIRMATIONS, CONTROL, ENTRIES)), 60, [], "16 partitions")
    stale = cli("forget", session, "--reason", "x", "--force", env={
        **env, "TRANSCRIPT_PARTITIONS": "8"})
    forget_refused(stale, "16 partitions", "TRANSCRIPT_PARTITIONS says 8",
                   "TRANSCRIPT_PARTITIONS=16")
    assert sum(end_offsets(ks, ks.topic(CONTROL)).values()) == 0  # nothing published
    unset = {k: v for k, v in env.items() if k != "TRANSCRIPT_PARTITIONS"}
    done = ok(cli("forget", session, "--reason", "x", "--force", env=unset))
    assert f"partition {partition_for(session, 16)} offset 0" in done, done

    from workers.core.layout import Move, encode_move, move_key

    publish(ks, ks.topic(LAYOUT), [(move_key(16, 32), encode_move(
        Move(16, 32, (0,) * 16, (0,) * 16, "2026-12-04T00:00:00+00:00")))])
    forget_refused(cli("forget", session, "--reason", "x", "--force", env=unset),
                   "repartition 16 -> 32 is not done", "--partitions 32")


def forget_refused(done, *words: str) -> None:  # noqa: ANN001
    """`forget` exited 2 with one line on stderr naming each of `words`, and published nothing."""
    err = done.stderr.decode(errors="replace")
    assert done.returncode == 2 and done.stdout == b"", (done.returncode, done.stdout, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("forget: ") and "Traceback" not in err, err
    for w in words:
        assert w in lines[0], f"{w!r} not in: {lines[0]}"


def test_a_worker_refuses_a_move_in_progress_and_the_move_refuses_a_worker_that_ran(
        ks, env, workers, tmp_path):
    """A move records itself in transcript.layout before it changes anything. A worker that
    starts then refuses (exit 2, naming the move); one that joined before the record stops
    the move before its first change, and once it has committed anything the move begins
    again from the new offsets: no record is decided by a worker and then moved or trimmed
    (issue 42, item 3)."""
    from workers.commands.repartition import Mover, say

    bootstrap, group, topic = env["KAFKA_BOOTSTRAP"], group_of(env), ks.topic(CONFIRMATIONS)
    env16 = {**env, "TRANSCRIPT_PARTITIONS": "16"}
    state = tmp_path / "state"
    ok(cli("loadgen", "--count", "400", "--sessions", "40", "--seed", "9", env=env))
    w = workers("w8", state)
    wait_drained(bootstrap, group, topic, 120, [w])

    # the race repartition's first look cannot see: a worker in the group as the move begins
    from workers.commands.repartition import MoveRefused
    from workers.core.outputs import SESSIONS, changelog_topic

    mover = Mover(ks, group, changelog_topic(ks.topic_prefix, "transcript-owner", SESSIONS), say)
    try:
        mover._layout()
        move = mover._begin(None, 8, 16, mover._counts())
        with pytest.raises(MoveRefused, match="1 member"):
            mover._still_stopped(move, 1)  # before the grow: nothing changed yet
        # the worker decides more input meanwhile: the move's recorded offsets are stale now
        ok(cli("loadgen", "--count", "200", "--sessions", "40", "--seed", "10", env=env))
        wait_drained(bootstrap, group, topic, 120, [w])
        assert w.stop() == 0, w.tail()
        with pytest.raises(MoveRefused, match="committed offsets since the move 8 -> 16 began"):
            mover._still_stopped(move, 30)
    finally:
        mover.admin.close()
    assert partition_counts(ks)[ks.topic(ENTRIES)] == 8  # nothing grown
    late = workers("late", tmp_path / "late")  # a worker started with the move in progress
    assert late.proc.wait(timeout=120) == 2, late.tail()
    assert "repartition 8 -> 16 is in progress" in late.log.read_text(), late.tail()

    moved = ok(cli("repartition", "--partitions", "16", env=env, timeout=300))
    assert "moved from 8 to 16 partitions" in moved, moved
    w = workers("w16", state, TRANSCRIPT_PARTITIONS="16")
    ok(cli("loadgen", "--count", "200", "--sessions", "40", "--seed", "11", env=env16))
    wait_drained(bootstrap, group, topic, 120, [w])
    assert w.stop() == 0, w.tail()
    assert_clean(audit(env16))
