"""The session reader over a sink database (format 4: `positions` beside the rows), built here
as the sink writes it (the connector's suite cannot import the worker: the entries and offsets
DDL are copied from workers/commands/sink.py, the positions DDL is the contract's); the
metadata and last stable offsets still come from the local broker (test_reader_topic's
fixtures). And the databases it refuses, before it asks Kafka anything."""
# ruff: noqa: F811  (test_reader_topic's fixtures, imported, are redefined as parameters)

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from test_reader_topic import (  # noqa: F401  (fixtures: used as test parameters)
    WAIT_S,
    Fabric,
    Waits,
    admin,
    bootstrap,
    entry,
    fabric,
    pool,
    prefix,
    waits,
)
from transcript_connector import ReadError, StaleReadError
from transcript_connector.reader import (
    LATEST,
    At,
    BlockingSessionReader,
    ReaderOptions,
)
from transcript_connector.reader_async import SessionReader
from transcript_connector.sink_format import APPLICATION_ID, POSITIONS_DDL

ENTRIES_DDL = """CREATE TABLE entries (
    session_key TEXT NOT NULL,
    epoch       INTEGER NOT NULL,
    seq         INTEGER NOT NULL,
    entry_id    TEXT NOT NULL,
    send_id     TEXT NOT NULL,
    entry_json  TEXT NOT NULL,
    chain       TEXT,
    UNIQUE (session_key, seq)
)"""
OFFSETS_DDL = """CREATE TABLE offsets (
    topic       TEXT NOT NULL,
    partition   INTEGER NOT NULL,
    next_offset INTEGER NOT NULL,
    PRIMARY KEY (topic, partition)
)"""


class SinkFile:
    """A sink database of `format`, written as the sink writes: rows and the partition's
    position in one transaction."""

    def __init__(self, path: Path, topic: str, format_: int = 4) -> None:
        self.path, self.topic = path, topic
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode = WAL")
        for ddl in (ENTRIES_DDL, OFFSETS_DDL, *([POSITIONS_DDL] if format_ >= 4 else [])):
            self.db.execute(ddl)
        self.db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        self.db.execute(f"PRAGMA user_version = {format_}")

    def commit(self, rows: Iterable[tuple[str, int, bytes, str | None]] = (),
               position: tuple[int, int] | None = None, *, at: datetime | None = None) -> None:
        self.db.execute("BEGIN IMMEDIATE")
        for session_key, seq, value, chain in rows:
            self.db.execute("INSERT OR REPLACE INTO entries VALUES (?, 0, ?, ?, ?, ?, ?)",
                            (session_key, seq, f"e{seq}", f"s{seq}", value.decode(), chain))
        if position is not None:
            partition, input_offset = position
            stamp = (at or datetime.now(UTC)).isoformat(timespec="milliseconds")
            self.db.execute("INSERT OR REPLACE INTO positions VALUES (?, ?, ?, 0, ?, ?)",
                            (self.topic, partition, input_offset, stamp, 40 + input_offset))
        self.db.execute("COMMIT")

    def close(self) -> None:
        self.db.close()


@pytest.fixture
def sink(tmp_path: Path, fabric: Fabric) -> Iterator[SinkFile]:
    made = SinkFile(tmp_path / "sink.db", fabric.entries)
    yield made
    made.close()


def test_a_read_at_latest_reached_returns_the_rows_and_the_position(
        fabric: Fabric, sink: SinkFile) -> None:
    k = fabric.key_at(0)
    for _ in range(2):
        fabric.confirm(0)
    sink.commit([(k, 2, entry(k, 2, "two"), "b" * 64), (k, 1, entry(k, 1, "one"), None)],
                (0, 2))
    sink.commit([(f"{k}#1", 1, entry(f"{k}#1", 1), None)], (1, 0))  # a neighbour's row
    with BlockingSessionReader(fabric.options, database=sink.path) as reader:
        read = reader.read(k, at=LATEST, timeout_s=WAIT_S)
        assert reader.partitions() == {}  # the database holds it all
    assert [(e.seq, e.entry.text, e.chain, e.value) for e in read.entries] == [
        (1, "one", None, entry(k, 1, "one")), (2, "two", "b" * 64, entry(k, 2, "two"))]
    assert (read.partition, read.needed, read.position.input_offset,
            read.position.offset) == (0, 2, 2, 42)


def test_a_database_behind_latest_is_a_stale_read_naming_its_age(
        fabric: Fabric, sink: SinkFile) -> None:
    k = fabric.key_at(1)
    for _ in range(3):
        fabric.confirm(1)
    sink.commit([(k, 1, entry(k, 1), None)], (1, 1),
                at=datetime.now(UTC) - timedelta(seconds=90))
    with BlockingSessionReader(fabric.options, database=sink.path) as reader, \
            pytest.raises(StaleReadError) as caught:
        reader.read(k, at=LATEST, timeout_s=0.2)
    error = caught.value
    assert (error.partition, error.reached, error.needed) == (1, 1, 3)
    assert error.age_s is not None and error.age_s >= 90
    assert "the worker's last position there is 9" in str(error)


def test_a_waiting_read_returns_once_the_sink_commits_the_position(
        fabric: Fabric, sink: SinkFile, waits: Waits, pool: ThreadPoolExecutor) -> None:
    k = fabric.key_at(0)
    delivery = fabric.confirm(0)
    sink.commit([], (0, delivery.offset))  # not yet past it
    with BlockingSessionReader(fabric.options, database=sink.path) as reader:
        pending = pool.submit(reader.read, k, at=delivery, timeout_s=WAIT_S)
        waits.await_(0)
        assert not pending.done()
        sink.commit([(k, 1, entry(k, 1, "just confirmed"), None)], (0, delivery.offset + 1))
        read = pending.result(WAIT_S)
        assert [e.entry.text for e in read.entries] == ["just confirmed"]
        assert read.needed == delivery.offset + 1
        assert [e.seq for e in reader.read(k, at=At(0, delivery.offset), timeout_s=0).entries
                ] == [1]


def test_a_row_changed_by_hand_is_unreadable_not_an_entry(
        fabric: Fabric, sink: SinkFile) -> None:
    k = fabric.key_at(0)
    sink.commit([(k, 1, entry(k, 1), None), (k, 2, b'{"changed": true}', "c" * 64),
                 (k, 3, entry("agent:a:other", 3), None)], (0, 0))
    sink.db.execute("INSERT INTO entries VALUES (?, 0, 'x', 'e', 's', '{}', NULL)", (k,))
    with BlockingSessionReader(fabric.options, database=sink.path) as reader:
        read = reader.read(k, at=LATEST, timeout_s=WAIT_S)
    assert [e.seq for e in read.entries] == [1]
    assert [(u.seq, u.value, u.chain) for u in read.unreadable] == [
        (2, b'{"changed": true}', "c" * 64), (3, entry("agent:a:other", 3), None)]


def test_the_database_is_only_read(fabric: Fabric, sink: SinkFile) -> None:
    k = fabric.key_at(0)
    sink.commit([(k, 1, entry(k, 1), None)], (0, 0))
    sink.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = sink.path.read_bytes()

    async def run() -> list[int]:
        async with SessionReader(fabric.options, database=sink.path) as reader:
            return [e.seq for e in (await reader.read(k, timeout_s=WAIT_S)).entries]

    assert asyncio.run(run()) == [1]
    assert sink.path.read_bytes() == before


def _database(path: Path, application_id: int, user_version: int, *tables: str) -> Path:
    db = sqlite3.connect(path)
    for ddl in tables:
        db.execute(ddl)
    db.execute(f"PRAGMA application_id = {application_id}")
    db.execute(f"PRAGMA user_version = {user_version}")
    db.close()
    return path


def test_a_database_without_positions_is_refused_before_kafka_is_asked(tmp_path: Path) -> None:
    nowhere = ReaderOptions(bootstrap="127.0.0.1:1")  # never reached: the file decides first
    cases = {
        tmp_path / "missing.db": f"no sink database at {tmp_path / 'missing.db'}",
        _database(tmp_path / "foreign.db", 0, 0, "CREATE TABLE t (x)"):
            "is not a sink database (transcript-owner sink sqlite makes one)",
        _database(tmp_path / "one.db", 0, 1, ENTRIES_DDL, OFFSETS_DDL):
            "sink database format 1 has no positions: run a sink of this version on it first",
        _database(tmp_path / "three.db", APPLICATION_ID, 3, ENTRIES_DDL, OFFSETS_DDL):
            "sink database format 3 has no positions: run a sink of this version on it first",
        _database(tmp_path / "five.db", APPLICATION_ID, 5, ENTRIES_DDL, OFFSETS_DDL):
            "sink database format 5 is newer than this reader's (formats 4 to 4): upgrade "
            "transcript-connector",
    }
    (tmp_path / "text.db").write_text("not a database at all, but long enough " * 40)
    cases[tmp_path / "text.db"] = "is not a sink database (file is not a database)"
    for path, reason in cases.items():
        with pytest.raises(ReadError) as caught, \
                BlockingSessionReader(nowhere, database=path):
            pass
        assert reason in str(caught.value), str(caught.value)
