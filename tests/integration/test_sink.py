"""`transcript-owner sink sqlite PATH` on the real broker: the database holds what a
read_committed reader of `transcript.entries` counts, tombstones delete rows, invalid records are
skipped and counted, a restart resumes from the offsets stored in SQLite, `show --db` reads it,
and two members of a group share one database.

The helpers here (SinkProcess, live_entries, wait_sink_matches, audit triggers) are used by
tests/faults/test_sink_faults.py as well.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections import Counter
from pathlib import Path

import pytest
from transcript_connector.entries_topic import parse_position_key
from transcript_connector.partitioning import partition_for

from tests.conftest import cli
from tests.integration.harness import CliProcess, group_of, wait_drained
from workers.commands.sink import SinkDB
from workers.core.outputs import CONFIRMATIONS, ENTRIES
from workers.kafka_io import producer, publish, read
from workers.settings import KafkaSettings, kafka_settings
from workers.synthetic import generate

pytestmark = pytest.mark.kafka


class SinkProcess(CliProcess):
    """`python -m workers sink sqlite PATH …`."""

    def __init__(self, env: dict[str, str], db: Path, log: Path, *args: str) -> None:
        super().__init__(["sink", "sqlite", str(db), *args], env, log)
        self.db = db


@pytest.fixture
def ks(env, topics) -> KafkaSettings:
    return kafka_settings(env)


@pytest.fixture
def sinks(env, topics, tmp_path):
    """sinks(db, *args) starts a sink process; any still alive are killed after the test."""
    made: list[SinkProcess] = []

    def make(db: Path, *args: str, name: str | None = None) -> SinkProcess:
        s = SinkProcess(env, db, tmp_path / f"{name or f'sink{len(made)}'}.log", *args)
        made.append(s)
        return s.start()

    yield make
    for s in made:
        if s.alive():
            s.kill()


def live_entries(ks: KafkaSettings) -> tuple[dict[str, str], Counter]:
    """What a read_committed reader of the entries topic counts: the latest value of each key
    that is not a tombstone (key -> value), and how often each key occurs (tombstones too);
    position records (DESIGN 1.3) are no entries."""
    latest: dict[str, str | None] = {}
    seen: Counter = Counter()
    for r in read(ks, ks.topic(ENTRIES)):
        if parse_position_key(r.key) is not None:
            continue
        k = r.key.decode()
        latest[k] = None if r.value is None else r.value.decode()
        seen[k] += 1
    return {k: v for k, v in latest.items() if v is not None}, seen


def db_entries(db: Path) -> dict[str, str]:
    """The sink database's rows, keyed as the topic keys them."""
    c = sqlite3.connect(db)
    try:
        rows = c.execute("SELECT session_key, seq, entry_json FROM entries").fetchall()
    finally:
        c.close()
    keys = [f"{s}#{q:010d}" for s, q, _ in rows]
    assert len(set(keys)) == len(keys)
    return {k: j for k, (_, _, j) in zip(keys, rows, strict=True)}


def count(db: Path, sql: str) -> int:
    c = sqlite3.connect(db)
    try:
        return c.execute(sql).fetchone()[0]
    except sqlite3.OperationalError:  # not created yet
        return 0
    finally:
        c.close()


def wait_sink_matches(db: Path, expected: dict[str, str], sink: SinkProcess,
                      timeout: float = 120) -> dict[str, str]:
    """Until the database holds exactly `expected` (key -> entry JSON)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = db_entries(db) if db.exists() else {}
        except sqlite3.OperationalError:  # the sink made the file and not yet its tables
            got = {}
        if got == expected:
            return got
        if not sink.alive():
            raise AssertionError(f"sink exited ({sink.proc.returncode}):\n{sink.tail()}")
        if time.monotonic() > deadline:
            missing, extra = set(expected) - set(got), set(got) - set(expected)
            raise AssertionError(f"{len(got)} rows, {len(expected)} expected; missing "
                                 f"{sorted(missing)[:3]}, extra {sorted(extra)[:3]}\n"
                                 f"{sink.tail()}")
        time.sleep(0.3)


def with_audit_triggers(db: Path, topic: str) -> None:
    """Create the sink database and count every row write in `applied`, in the sink's own
    transactions: a rolled-back batch leaves nothing there, a batch applied twice leaves
    its keys twice. (The database is the sink's own from then on, so these stay.)"""
    SinkDB(db, topic).close()
    c = sqlite3.connect(db)
    c.executescript("""
        CREATE TABLE applied (k TEXT NOT NULL);
        CREATE TRIGGER applied_insert AFTER INSERT ON entries BEGIN
            INSERT INTO applied VALUES (new.session_key || '#' || printf('%010d', new.seq)); END;
        CREATE TRIGGER applied_update AFTER UPDATE ON entries BEGIN
            INSERT INTO applied VALUES (new.session_key || '#' || printf('%010d', new.seq)); END;
        CREATE TRIGGER applied_delete AFTER DELETE ON entries BEGIN
            INSERT INTO applied VALUES (old.session_key || '#' || printf('%010d', old.seq)); END;
    """)
    c.close()


def repeats(db: Path, occurrences: Counter) -> int:
    """Row writes beyond one per record of the topic: a record applied twice."""
    c = sqlite3.connect(db)
    try:
        applied = Counter(k for (k,) in c.execute("SELECT k FROM applied"))
    finally:
        c.close()
    return sum(max(0, n - occurrences[k]) for k, n in applied.items())


def entry(session_key: str, seq: int, text: str = "hello") -> dict:
    return {
        "schema": "transcript-entry/1", "session_key": session_key, "epoch": 0, "seq": seq,
        "entry_id": f"{session_key}/{seq}", "send_id": f"send-{seq}", "role": "assistant",
        "agent_id": "ops", "text": text, "media": [], "source": "message_tool",
        "posted_by": {"kind": "agent", "id": "ops"},
        "delivered_at": "2026-01-01T00:00:00Z", "written_at": "2026-01-01T00:00:01Z",
        "platform_message_ids": [],
    }


def put(ks: KafkaSettings, records: list[tuple[str, int, bytes | None]]) -> None:
    """(session_key, seq, value) records straight onto the entries topic, in its partitions."""
    p = producer(ks)
    for sk, seq, value in records:
        p.send(ks.topic(ENTRIES), key=f"{sk}#{seq:010d}".encode(), value=value,
               partition=partition_for(sk, 8))
    p.flush()
    p.close()


def put_entries(ks: KafkaSettings, sessions: int, per_session: int, first_seq: int = 1) -> None:
    put(ks, [(f"agent:ops:telegram:direct:s{s}", q, json.dumps(entry(
        f"agent:ops:telegram:direct:s{s}", q)).encode())
        for s in range(sessions) for q in range(first_seq, first_seq + per_session)])


def test_the_sink_holds_what_a_read_committed_reader_counts(ks, env, workers, sinks, tmp_path):
    """The worker's transactional entries (markers, a reset, every rule) into the database;
    `show --db` prints a session as `show` reads it from the topic."""
    publish(ks, ks.topic(CONFIRMATIONS), generate(3000, sessions_n=150, seed=11), 8)
    w = workers()
    wait_drained(env["KAFKA_BOOTSTRAP"], group_of(env), ks.topic(CONFIRMATIONS), 120, [w])
    expected, _ = live_entries(ks)
    assert len(expected) > 1500
    db = tmp_path / "gateway.db"
    sink = sinks(db)
    wait_sink_matches(db, expected, sink)
    assert count(db, "SELECT count(*) FROM skipped") == 0
    # each partition's position is the furthest the topic holds, stored with the rows it covers
    furthest: dict[int, int] = {}
    for r in read(ks, ks.topic(ENTRIES)):
        if (p := parse_position_key(r.key)) is not None:
            furthest[p] = max(furthest.get(p, 0), json.loads(r.value)["input_offset"])
    assert len(furthest) == 8
    c = sqlite3.connect(db)
    try:
        stored = dict(c.execute("SELECT partition, input_offset FROM positions").fetchall())
    finally:
        c.close()
    assert stored == furthest

    session = json.loads(next(iter(expected.values())))["session_key"]
    from_db = cli("show", session, "--db", str(db), "--json", env=env)
    from_topic = cli("show", session, "--json", env=env)
    assert from_db.returncode == 0, from_db.stderr.decode()
    assert from_db.stdout == from_topic.stdout
    shown = [json.loads(line) for line in from_db.stdout.splitlines()]
    assert [e["seq"] for e in shown] == list(range(1, len(shown) + 1))
    table = cli("show", session, "--db", str(db), env=env).stdout.decode().splitlines()
    assert table[0].split()[:2] == ["epoch", "seq"] and len(table) == 2 + len(shown)
    assert sink.stop() == 0
    w.stop()


def test_a_tombstone_deletes_its_row_and_an_invalid_record_is_skipped(ks, env, sinks, tmp_path):
    put_entries(ks, sessions=5, per_session=4)
    db = tmp_path / "s.db"
    sink = sinks(db)
    expected, _ = live_entries(ks)
    wait_sink_matches(db, expected, sink)

    victim = "agent:ops:telegram:direct:s3"
    put(ks, [(victim, 2, None),  # erase entry 2
             (victim, 9, b"{not json: secret words"),
             (victim, 10, json.dumps({"schema": "transcript-entry/1", "text": "secret words"})
              .encode()),
             (victim, 5, json.dumps(entry(victim, 5, "after the bad ones")).encode())])
    expected, _ = live_entries(ks)
    assert f"{victim}#{2:010d}" not in expected
    del expected[f"{victim}#{9:010d}"], expected[f"{victim}#{10:010d}"]  # skipped, not stored
    wait_sink_matches(db, expected, sink)
    assert count(db, "SELECT count(*) FROM entries") == 20 - 1 + 1
    assert count(db, "SELECT count(*) FROM skipped") == 2
    assert sink.alive()
    assert sink.stop() == 0
    log = sink.log.read_text()
    assert log.count("WARNING") == 2 and "secret" not in log
    assert "2 records skipped" in log


def test_a_restart_resumes_from_the_offsets_in_sqlite(ks, env, sinks, tmp_path):
    """SIGTERM exits 0 with its batch committed; the next start reads only what is new (not
    from offset 0, not from a group's offsets); no record is applied twice."""
    topic = ks.topic(ENTRIES)
    db = tmp_path / "s.db"
    with_audit_triggers(db, topic)
    put_entries(ks, sessions=40, per_session=25)
    first = sinks(db, name="first")
    expected, _ = live_entries(ks)
    wait_sink_matches(db, expected, first)
    assert first.stop() == 0
    assert "stopped: 1000 rows written" in first.log.read_text()

    put_entries(ks, sessions=40, per_session=5, first_seq=26)
    second = sinks(db, name="second")
    expected, occurrences = live_entries(ks)
    assert len(expected) == 1200
    wait_sink_matches(db, expected, second)
    assert second.stop() == 0
    assert "stopped: 200 rows written" in second.log.read_text()
    assert repeats(db, occurrences) == 0
    assert count(db, "SELECT count(*) FROM applied") == 1200
    c = sqlite3.connect(db)
    stored = dict(c.execute("SELECT partition, next_offset FROM offsets WHERE topic = ?",
                            (topic,)).fetchall())
    c.close()
    assert sum(stored.values()) == 1200  # plain (not transactional) records: no markers

    # --from-beginning rebuilds: every row once more, the same rows
    third = sinks(db, "--from-beginning", "--until-end", name="third")
    assert third.proc.wait(timeout=60) == 0, third.tail()
    assert db_entries(db) == expected


def test_two_group_members_share_one_database(ks, env, sinks, tmp_path):
    """--group: the members split the partitions and seek them to the database's offsets; a
    partition that moves when the second member leaves is read on, not again."""
    topic = ks.topic(ENTRIES)
    db = tmp_path / "shared.db"
    with_audit_triggers(db, topic)
    put_entries(ks, sessions=60, per_session=10)
    a = sinks(db, "--group", "gw", name="a")
    b = sinks(db, "--group", "gw", name="b")
    expected, _ = live_entries(ks)
    wait_sink_matches(db, expected, a)
    poll_log = time.monotonic() + 30
    while "assigned partitions" not in b.log.read_text() and time.monotonic() < poll_log:
        time.sleep(0.2)
    assert "assigned partitions" in b.log.read_text(), b.tail()  # b had a share
    assert b.stop() == 0
    put_entries(ks, sessions=60, per_session=5, first_seq=11)
    expected, occurrences = live_entries(ks)
    wait_sink_matches(db, expected, a)
    assert a.stop() == 0
    assert repeats(db, occurrences) == 0
    assigned = [line for line in a.log.read_text().splitlines() if "assigned partitions" in line]
    assert "[0, 1, 2, 3, 4, 5, 6, 7]" in assigned[-1], assigned  # all of them once b left


def test_two_entries_with_one_send_id_are_two_rows(ks, env, sinks, tmp_path):
    """A send repeated after the worker's dedupe window is a new send at a new seq: the
    database holds every live entry (the old UNIQUE(session_key, send_id) skipped the second)."""
    sk = "agent:ops:telegram:direct:again"
    put(ks, [(sk, seq, json.dumps(dict(entry(sk, seq, text), send_id="the-send")).encode())
             for seq, text in ((1, "first"), (2, "in between"), (3, "sent again"))])
    db = tmp_path / "s.db"
    sink = sinks(db, "--until-end")
    assert sink.proc.wait(timeout=60) == 0, sink.tail()
    expected, _ = live_entries(ks)
    assert db_entries(db) == expected and len(expected) == 3
    assert count(db, "SELECT count(*) FROM entries WHERE send_id = 'the-send'") == 3
    assert count(db, "SELECT count(*) FROM skipped") == 0


def test_a_session_is_read_by_its_exact_keys(ks, env, sinks, tmp_path):
    """Session `K#<n>` beside `K`, in K's partition: its keys start with `K#`, yet `show K`
    (from the topic and from the sink) and `forget K` see only K's own entries."""
    k = "agent:ops:telegram:direct:exact"
    neighbour = next(f"{k}#{n}" for n in range(1, 1000)
                     if partition_for(f"{k}#{n}", 8) == partition_for(k, 8))
    put(ks, [(k, 1, json.dumps(entry(k, 1, "mine")).encode()),
             (neighbour, 1, json.dumps(entry(neighbour, 1, "another chat")).encode()),
             (neighbour, 2, json.dumps(entry(neighbour, 2, "another chat")).encode()),
             (k, 2, json.dumps(entry(k, 2, "mine too")).encode())])
    db = tmp_path / "s.db"
    sink = sinks(db, "--until-end")
    assert sink.proc.wait(timeout=60) == 0, sink.tail()
    for where in ([], ["--db", str(db)]):
        shown = cli("show", k, "--json", *where, env=env)
        assert shown.returncode == 0, shown.stderr.decode()
        assert [(e["session_key"], e["text"]) for e in map(json.loads, shown.stdout.splitlines())
                ] == [(k, "mine"), (k, "mine too")], where
        table = cli("show", k, *where, env=env).stdout.decode()
        assert "mine too" in table and "another chat" not in table, where
        other = cli("show", neighbour, "--json", *where, env=env).stdout.splitlines()
        assert [json.loads(line)["seq"] for line in other] == [1, 2], where
    done = cli("forget", k, "--reason", "test", env=env)
    assert done.returncode == 0 and b"(2 live entries)" in done.stdout, done.stderr.decode()


def test_errors_exit_2_with_one_line(ks, env, tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"not a database at all" * 100)
    foreign = tmp_path / "app.db"
    c = sqlite3.connect(foreign)
    c.executescript("CREATE TABLE entries (session_key TEXT, seq INTEGER, entry_json TEXT);"
                    "INSERT INTO entries VALUES ('agent:ops:main', 1, '{\"app\": 1}');")
    c.close()
    before = foreign.read_bytes()
    for args, reason in (
        (["sink", "sqlite", str(foreign), "--from-beginning"], "is not a sink database"),
        (["show", "agent:ops:main", "--db", str(foreign)], "is not a sink database"),
        (["sink", "sqlite", str(bad)], "file is not a database"),
        (["sink", "sqlite", str(tmp_path / "no" / "dir.db")], "unable to open"),
        (["sink", "sqlite", str(tmp_path / "x.db"), "--group", "g", "--until-end"],
         "does not go with --group"),
        (["show", "agent:ops:main", "--db", str(bad)], "not a sink database"),
    ):
        done = cli(*args, env=env, timeout=60)
        err = done.stderr.decode()
        assert done.returncode == 2, (args, err)
        assert reason in err and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert foreign.read_bytes() == before  # refused, never emptied
    other = dict(env, TRANSCRIPT_TOPIC_PREFIX="nosuchprefix.")
    done = cli("sink", "sqlite", str(tmp_path / "y.db"), env=other, timeout=60)
    assert done.returncode == 2 and "does not exist" in done.stderr.decode()


def test_the_rows_carry_the_workers_chain_and_show_verifies_a_session(ks, env, workers, sinks,
                                                                      tmp_path):
    """The worker's `chain` header (DESIGN 1.2, "Tamper evidence") beside every row, and
    `show --verify` clean from the database and from the topic; a format 2 database of the
    same entries migrated and read again gets the same chains. Needs the worker to write the
    header (workers/core/outputs.py)."""
    publish(ks, ks.topic(CONFIRMATIONS), generate(400, sessions_n=20, seed=5), 8)
    w = workers()
    wait_drained(env["KAFKA_BOOTSTRAP"], group_of(env), ks.topic(CONFIRMATIONS), 120, [w])
    db = tmp_path / "chained.db"
    sink = sinks(db, "--until-end")
    assert sink.proc.wait(timeout=60) == 0, sink.tail()
    assert count(db, "SELECT count(*) FROM entries") > 0
    assert count(db, "SELECT count(*) FROM entries WHERE chain IS NULL") == 0
    c = sqlite3.connect(db)
    sessions = [s for (s,) in c.execute("SELECT DISTINCT session_key FROM entries LIMIT 3")]
    c.close()
    for session in sessions:
        for where in (["--db", str(db)], []):
            done = cli("show", session, "--verify", *where, env=env)
            assert done.returncode == 0, (where, done.stdout.decode(), done.stderr.decode())
            assert b"chain: verified" in done.stdout and b"(0 written before" in done.stdout

    # the same database as the sink of 1.1 left it (format 2, no chain): migrated in place,
    # every partition read again, the rows unchanged and given their chain
    rows = db_entries(db)
    c = sqlite3.connect(db)
    chains = c.execute("SELECT session_key, seq, chain FROM entries ORDER BY 1, 2").fetchall()
    c.executescript("ALTER TABLE entries DROP COLUMN chain; DROP TABLE rechain; "
                    "DROP TABLE positions; PRAGMA user_version = 2;")
    c.close()
    again = sinks(db, "--until-end", name="migrating")
    assert again.proc.wait(timeout=60) == 0, again.tail()
    assert "migrated from sink format 2 to 3" in again.log.read_text()
    assert db_entries(db) == rows
    c = sqlite3.connect(db)
    assert c.execute("SELECT session_key, seq, chain FROM entries ORDER BY 1, 2").fetchall() \
        == chains
    c.close()
    assert count(db, "SELECT count(*) FROM rechain") == 0
    done = cli("show", sessions[0], "--verify", "--db", str(db), env=env)
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    w.stop()
