"""A sink database (`transcript-owner sink sqlite PATH`, workers/commands/sink.py): its tables,
its formats and their migrations, and the one transaction a batch is written in:

    entries(session_key, epoch, seq, entry_id, send_id, entry_json, chain)
        UNIQUE(session_key, seq), INDEX(session_key, send_id)
    offsets(topic, partition, next_offset)       the next offset to consume, per partition
    skipped(topic, partition, offset, reason)    records that were not materialised, and why
    rechain(topic, partition, until_offset)      partitions read again after a migration to
                                                 format 3, until that offset (see below)
    positions(topic, partition, input_offset, control_offset, at, entries_offset)
                                                 each partition's furthest position record
                                                 (DESIGN 1.3), with the rows of its batch

A row is an entry's identity, (session_key, seq): the table holds exactly the live entries, also
two with one send_id (a send repeated after the worker's dedupe window is a new send, DESIGN 1.2).
`entry_json` is the record's value, exactly (UTF-8): `entry_json.encode()` gives back the bytes
the chain covers. `chain` is the text of the record's `chain` header (DESIGN 1.2, "Tamper
evidence"), exactly as the record carries it, or NULL when it has none (written before the
chain), has two, or one that is not ASCII. The header never decides whether an entry is stored:
a missing or odd chain is for verification to report (`transcript-owner show SESSION_KEY --db
PATH --verify` checks a session from the database alone), not for the sink to hide.

The sink writes only to a database it made: one marked `PRAGMA application_id` APPLICATION_ID
and `user_version` SCHEMA_VERSION, or an empty one (which it marks). Older formats are migrated
in place, in the transaction that opens the database, and recognised by their marks and their
tables' columns (FORMAT_TABLES):
- format 1, an earlier sink's (no application_id, user_version 1), held UNIQUE(session_key,
  send_id), which dropped such an entry; `_migrate_from_1` rebuilds `entries` without it, then
  migrates on as from format 2;
- format 2 (before 1.2) has no `chain`; `_migrate_to_3` adds the column and reads every
  partition again from its start, only to give the rows kept their chain (the rows do not
  change meanwhile; why that is correct and what it costs: its docstring);
- format 3 (before 1.3) has no `positions`; `_migrate_to_4` adds it, empty, and reads nothing
  again: the workers' next position records (one per partition at least every 30 s) fill it.
Any other database (another application's `entries`, a layout the sink did not make, a newer
format, one holding another topic's offsets) is refused before anything is written,
`--from-beginning` included.

A tombstone (value None) deletes the row of its key (`<session_key>#<seq>`). A record that is
not a valid `transcript-entry/1` (not JSON, a missing or wrong field, a key that does not name
the entry's session and seq) is skipped: one row in `skipped` (the reason names the field and
the problem, never message text), counted in the periodic report and logged at WARNING without
content; the sink goes on. A position record (`position/<p>`, DESIGN 1.3) is no row: it moves
partition p's row of `positions` forward, in the same transaction as the rows before it, so a
reader that sees a position there sees every row it covers (a position that is not valid, or
names another partition, is skipped as above: it claims nothing)."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transcript_connector.entries_topic import Delete, Positioned, Upsert, classify
from transcript_connector.sink_format import (
    APPLICATION_ID,
    POSITIONS_COLUMNS,
    POSITIONS_DDL,
    SCHEMA_VERSION,
)

from workers.core.errors import OwnerError

log = logging.getLogger("transcript_owner.sink")

# PRAGMA application_id ("TRNS") and user_version (the format) of a sink database: 1, an earlier
# sink's, without application_id; 2, before entries.chain (1.2); 3, before positions (1.3)
BUSY_TIMEOUT_MS = 30_000  # another process holding the write lock (a group sharing the file)
MAX_REASON = 300

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
SEND_ID_INDEX = "CREATE INDEX entries_send_id ON entries (session_key, send_id)"  # lookups
RECHAIN_DDL = """CREATE TABLE rechain (
    topic        TEXT NOT NULL,
    partition    INTEGER NOT NULL,
    until_offset INTEGER NOT NULL,
    PRIMARY KEY (topic, partition)
)"""
DDL = (
    ENTRIES_DDL,
    SEND_ID_INDEX,
    """CREATE TABLE offsets (
    topic       TEXT NOT NULL,
    partition   INTEGER NOT NULL,
    next_offset INTEGER NOT NULL,
    PRIMARY KEY (topic, partition)
)""",
    """CREATE TABLE skipped (
    topic       TEXT NOT NULL,
    partition   INTEGER NOT NULL,
    "offset"    INTEGER NOT NULL,
    reason      TEXT NOT NULL,
    PRIMARY KEY (topic, partition, "offset")
)""",
    RECHAIN_DDL,
    POSITIONS_DDL,
)
# the columns of the sink's tables in each format (1 and 2 share them; 3 adds entries.chain
# and table rechain); a database may hold tables of its own beside them
_TABLES_1 = {
    "entries": ("session_key", "epoch", "seq", "entry_id", "send_id", "entry_json"),
    "offsets": ("topic", "partition", "next_offset"),
    "skipped": ("topic", "partition", "offset", "reason"),
}
_TABLES_3 = {
    **_TABLES_1,
    "entries": (*_TABLES_1["entries"], "chain"),
    "rechain": ("topic", "partition", "until_offset"),
}
TABLES = {**_TABLES_3, "positions": POSITIONS_COLUMNS}  # SCHEMA_VERSION's
FORMAT_TABLES = {1: _TABLES_1, 2: _TABLES_1, 3: _TABLES_3, 4: TABLES}
SEND_ID_SKIP = "send_id: the session already holds it"  # format 1's reason for such a skip

UPSERT = (
    "INSERT INTO entries (session_key, epoch, seq, entry_id, send_id, entry_json, chain) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (session_key, seq) DO UPDATE SET "
    "epoch = excluded.epoch, entry_id = excluded.entry_id, send_id = excluded.send_id, "
    "entry_json = excluded.entry_json, chain = excluded.chain"
)
DELETE = "DELETE FROM entries WHERE session_key = ? AND seq = ?"
SKIP = 'INSERT OR REPLACE INTO skipped (topic, partition, "offset", reason) VALUES (?, ?, ?, ?)'
# a record read again after the migration to format 3 (before the partition's `until_offset`):
# it gives the row holding exactly its value its chain, and changes nothing else
RECHAIN = ("UPDATE entries SET chain = ? WHERE session_key = ? AND seq = ? AND entry_json = ?")
# a partition's furthest position (DESIGN 1.3): offsets never move back; `at` and where it was
# read are the last record's
POSITION = ("INSERT INTO positions (topic, partition, input_offset, control_offset, at, "
            "entries_offset) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (topic, partition) DO UPDATE "
            "SET input_offset = max(input_offset, excluded.input_offset), "
            "control_offset = max(control_offset, excluded.control_offset), "
            "at = excluded.at, entries_offset = excluded.entries_offset")


class SinkError(OwnerError):
    """A reason the sink cannot run (exit 2, one line)."""


# --- what one record does to the table (pure) ----------------------------------------------


# Upsert, Delete, Positioned, Skip and classify: transcript_connector.entries_topic (one rule for
# every reader of the topic, the gateways' included)


# --- the database ----------------------------------------------------------------------------


def sink_format(db: sqlite3.Connection) -> int | None:
    """Which sink format a database holds, read without writing: 0 empty, 1 an earlier sink's
    (no application_id), 2 and SCHEMA_VERSION the sink's own (each with its tables, as
    FORMAT_TABLES lists them), or a newer version; None when the sink did not make it.
    Raises sqlite3.DatabaseError (not a database at all)."""
    app = db.execute("PRAGMA application_id").fetchone()[0]
    version = db.execute("PRAGMA user_version").fetchone()[0]

    def tables(format_: int) -> bool:
        return all(tuple(row[1] for row in db.execute(f"PRAGMA table_info({name})")) == columns
                   for name, columns in FORMAT_TABLES[format_].items())

    if app == 0 and version == 0:
        return 0 if db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0 else None
    if app == 0 and version == 1:
        return 1 if tables(1) else None
    if app == APPLICATION_ID:
        if version > SCHEMA_VERSION:
            return version
        return version if version in FORMAT_TABLES and version > 1 and tables(version) else None
    return None


def _describe(db: sqlite3.Connection) -> str:
    """What a refused database holds (its marks and tables: no content)."""
    app = db.execute("PRAGMA application_id").fetchone()[0]
    version = db.execute("PRAGMA user_version").fetchone()[0]
    names = [n for (n,) in db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name LIMIT 6")]
    return (f"application_id {app}, user_version {version}, tables "
            f"{', '.join(names[:5]) + (', …' if len(names) > 5 else '') or 'none'}")


class OffsetConflict(OwnerError):
    """Another process moved a partition's stored offset: this batch must not be applied."""

    def __init__(self, partitions: list[int]) -> None:
        super().__init__(f"partitions {partitions}")
        self.partitions = partitions


@dataclass
class Applied:
    upserted: int = 0
    deleted: int = 0
    skipped: int = 0
    rechained: int = 0  # rows given their chain by a record read again (_migrate_to_3)
    positions: int = 0  # position records applied (DESIGN 1.3)
    offsets: dict[int, int] = field(default_factory=dict)  # partition -> next offset stored


class SinkDB:
    """A sink database: WAL, synchronous NORMAL or FULL, one writer transaction per batch."""

    def __init__(self, path: str | Path, topic: str, *, synchronous: str = "normal") -> None:
        self.path, self.topic = str(path), topic
        try:
            self.db = sqlite3.connect(self.path, isolation_level=None,
                                      timeout=BUSY_TIMEOUT_MS / 1000)
        except sqlite3.DatabaseError as exc:
            raise SinkError(f"{self.path}: {exc}") from None
        try:
            self._open(synchronous)
        except sqlite3.DatabaseError as exc:
            self.db.close()
            raise SinkError(f"{self.path}: {exc}") from None
        except SinkError:
            self.db.close()
            raise

    def _open(self, synchronous: str) -> None:
        """Recognise the database, then make, migrate or keep it; SinkError when it is not the
        sink's, and then nothing was written to it."""
        self.db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        self._check(sink_format(self.db))  # before anything is written, WAL mode included
        mode = self.db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if mode.lower() != "wal":
            raise SinkError(f"{self.path}: cannot use WAL mode (journal_mode {mode})")
        self.db.execute(f"PRAGMA synchronous = {synchronous.upper()}")
        with self._transaction():  # again under the write lock: another sink may be here
            found = self._check(sink_format(self.db))
            if found:  # before anything is written: the database is another topic's
                others = [t for (t,) in self.db.execute("SELECT DISTINCT topic FROM offsets")
                          if t != self.topic]
                if others:
                    raise SinkError(f"{self.path} holds entries of topic {others[0]}, not "
                                    f"{self.topic} (another TRANSCRIPT_TOPIC_PREFIX?)")
            if found == 0:
                for statement in DDL:
                    self.db.execute(statement)
            if found == 1:
                self._migrate_from_1()
            if found in (1, 2):
                self._migrate_to_3(found)
            if found in (1, 2, 3):
                self._migrate_to_4(found)
            self.db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            self.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _check(self, found: int | None) -> int:
        """The format, when the sink may write to it; else SinkError."""
        if found is None:
            raise SinkError(f"{self.path} is not a sink database ({_describe(self.db)}): the "
                            "sink writes only to a database it made; give another PATH")
        if found > SCHEMA_VERSION:
            raise SinkError(f"{self.path}: sink database version {found}, this sink writes "
                            f"version {SCHEMA_VERSION}")
        return found

    def _migrate_from_1(self) -> None:
        """Format 1 -> 2 in place, inside the caller's transaction: `entries` is rebuilt
        without UNIQUE(session_key, send_id) (SQLite cannot drop a constraint: a new table,
        every row copied, the old one dropped, the new one renamed; the database's own indexes
        and triggers on it made again), its rows and offsets kept. The new table has the
        current layout (format 3's `chain` column, NULL in every row copied). The entries
        format 1 skipped for their send_id are read again: each partition's offset goes back
        to the first such skip (records re-applied are upserts and deletes by key, so
        re-reading a suffix of the log leaves its latest values) and those skips are
        forgotten."""
        own = [sql for (sql,) in self.db.execute(
            "SELECT sql FROM sqlite_master WHERE tbl_name = 'entries' "
            "AND type IN ('index', 'trigger') AND sql IS NOT NULL")]
        columns = ", ".join(_TABLES_1["entries"])
        self.db.execute(ENTRIES_DDL.replace("CREATE TABLE entries", "CREATE TABLE entries_v2"))
        self.db.execute(f"INSERT INTO entries_v2 ({columns}) SELECT {columns} FROM entries")
        self.db.execute("DROP TABLE entries")
        self.db.execute("ALTER TABLE entries_v2 RENAME TO entries")
        self.db.execute(SEND_ID_INDEX)
        for sql in own:
            self.db.execute(sql)
        first_skip = ('SELECT min(s."offset") FROM skipped s WHERE s.topic = offsets.topic '
                      "AND s.partition = offsets.partition AND instr(s.reason, ?) = 1")
        rewound = self.db.execute(
            f"UPDATE offsets SET next_offset = min(next_offset, ({first_skip})) "
            f"WHERE ({first_skip}) IS NOT NULL", (SEND_ID_SKIP, SEND_ID_SKIP)).rowcount
        self.db.execute("DELETE FROM skipped WHERE instr(reason, ?) = 1", (SEND_ID_SKIP,))
        log.info("%s: migrated from sink format 1 (rows kept); %d partitions read again from "
                 "their first entry skipped for its send_id", self.path, rewound)

    def _migrate_to_3(self, found: int) -> None:
        """Format 2 (or 1, just rebuilt by `_migrate_from_1`) -> 3 in place, inside the
        caller's transaction: `entries` gets the nullable column `chain` (format 1's rebuild
        has it already) and table `rechain` is made. The rows kept have no chain yet, so every
        partition is read again from its start: its stored offset goes to 0 and the offset it
        held (N) is kept in `rechain` as the partition's `until_offset`.

        Why this is correct: the rows are the latest value of each key in offsets [0, N) of
        their partition (the sink's invariant). A record read again before N (compaction's
        view of [0, N) now) only gives the row that holds exactly its value its chain
        (RECHAIN); it inserts, deletes and skips nothing, since the rows already hold the
        effect of every record there. Compaction keeps each key's latest record, so every
        row whose latest record still lies in [0, N) meets it again and gets its chain; a key
        written again at N or later gets its row and chain when that record is applied, as
        every record from N on is (upserts and deletes by key, as always). Re-reading with
        plain upserts instead would also end with the latest values, but on the way the rows
        would go back through older states of the log: an entry erased by `forget` whose
        records compaction has not yet removed would be a row again until the re-read reached
        its tombstone. Exactly once holds as before: a partition's offset, its `rechain` row
        (deleted once the partition reaches N) and the rows a batch changes commit together.

        What it costs: every partition is read once more from its start, as with
        `--from-beginning` (the bench's 37,524 rows/s), while the rows stay readable and
        unchanged; until a partition reaches N its rows not yet read again have no chain, so
        `show --db --verify` refuses to verify (exit 2) while `rechain` holds a row. A row
        whose record the log no longer holds at all (records deleted below the log start)
        keeps chain NULL: verification counts it as written before the chain, or reports it
        after chained entries."""
        if found == 2:
            self.db.execute("ALTER TABLE entries ADD COLUMN chain TEXT")
        self.db.execute(RECHAIN_DDL)
        self.db.execute("INSERT INTO rechain (topic, partition, until_offset) "
                        "SELECT topic, partition, next_offset FROM offsets WHERE next_offset > 0")
        rewound = self.db.execute("UPDATE offsets SET next_offset = 0 WHERE next_offset > 0"
                                  ).rowcount
        log.info("%s: migrated from sink format %d to 3 (rows kept, column chain added); %d "
                 "partitions are read again from their start so that the rows get their chain "
                 "(rows unchanged meanwhile)", self.path, found, rewound)

    def _migrate_to_4(self, found: int) -> None:
        """Format 3 (or older, just migrated to it) -> 4 in place, inside the caller's
        transaction: table `positions` is made, empty. Nothing is read again: every worker
        writes a position in each owned partition at least every 30 s (its heartbeat), so
        each partition has one within that after the sink reads on; until then a read bound
        to a position says it is stale, never that the rows are complete."""
        self.db.execute(POSITIONS_DDL)
        log.info("%s: migrated from sink format %d to %d (rows kept, table positions added); "
                 "each partition's position comes with the worker's next position record",
                 self.path, found, SCHEMA_VERSION)

    def close(self) -> None:
        self.db.close()

    def offsets(self, partitions: Iterable[int] | None = None) -> dict[int, int]:
        rows = self.db.execute(
            "SELECT partition, next_offset FROM offsets WHERE topic = ?", (self.topic,))
        found = dict(rows.fetchall())
        return found if partitions is None else {p: found[p] for p in partitions if p in found}

    def counts(self) -> tuple[int, int]:
        rows = self.db.execute("SELECT count(*) FROM entries").fetchone()[0]
        skipped = self.db.execute("SELECT count(*) FROM skipped WHERE topic = ?",
                                  (self.topic,)).fetchone()[0]
        return rows, skipped

    def rechain(self) -> dict[int, int]:
        """Partition -> the offset up to which it is read again after the migration to
        format 3 (`_migrate_to_3`); empty once every partition has reached it."""
        return dict(self.db.execute("SELECT partition, until_offset FROM rechain WHERE topic = ?",
                                    (self.topic,)).fetchall())

    def reset(self) -> None:
        """`--from-beginning`: forget every row and offset in one transaction."""
        with self._transaction():
            self.db.execute("DELETE FROM entries")
            self.db.execute("DELETE FROM offsets")
            self.db.execute("DELETE FROM skipped")
            self.db.execute("DELETE FROM rechain")
            self.db.execute("DELETE FROM positions")

    def apply(self, batch: dict[int, list[Any]], expected: dict[int, int | None]) -> Applied:
        """One transaction: every record of `batch` (partition -> records in offset order) and
        each partition's next offset, stored only where the database still holds `expected`
        (what this process last read or wrote; None: nothing yet). Raises OffsetConflict, having
        rolled everything back, when another process moved one of them."""
        done = Applied()
        with self._transaction():
            conflicts = []
            for partition, records in batch.items():
                if not records:
                    continue
                new = records[-1].offset + 1
                if not self._store_offset(partition, expected.get(partition), new):
                    conflicts.append(partition)
                done.offsets[partition] = new
            if conflicts:
                raise OffsetConflict(conflicts)
            rechain = self.rechain()
            for partition, records in batch.items():
                until = rechain.get(partition, 0)
                for r in records:
                    if r.offset < until:
                        self._rechain_one(partition, r, done)
                    else:
                        self._apply_one(partition, r, done)
                if until and partition in done.offsets and done.offsets[partition] >= until:
                    self._rechained(partition, until)
        return done

    def end_rechain(self, partition: int, expected: int | None) -> None:
        """The consumer's position in `partition` has passed its `until_offset` with no record
        left before it (they were compacted away, or only transaction markers remained): it is
        read again. Only where the database still holds `expected` for it (compare-and-set, as
        a batch's offsets)."""
        with self._transaction():
            until = self.rechain().get(partition)
            if until is not None and expected is not None and self.db.execute(
                    "SELECT 1 FROM offsets WHERE topic = ? AND partition = ? AND next_offset = ?",
                    (self.topic, partition, expected)).fetchone():
                self._rechained(partition, until)

    def _rechained(self, partition: int, until: int) -> None:
        self.db.execute("DELETE FROM rechain WHERE topic = ? AND partition = ?",
                        (self.topic, partition))
        log.info("%s[%d]: read again up to offset %d, where it was when the database was "
                 "migrated to format 3: its rows have their chain", self.topic, partition,
                 until)

    def _store_offset(self, partition: int, expected: int | None, new: int) -> bool:
        if expected is None:
            cur = self.db.execute(
                "INSERT OR IGNORE INTO offsets (topic, partition, next_offset) VALUES (?, ?, ?)",
                (self.topic, partition, new))
        else:
            cur = self.db.execute(
                "UPDATE offsets SET next_offset = ? WHERE topic = ? AND partition = ? "
                "AND next_offset = ?", (new, self.topic, partition, expected))
        return cur.rowcount == 1

    def positions(self) -> dict[int, tuple[int, int, str]]:
        """Partition -> its furthest position (input offset, control offset, `at`)."""
        return {p: (i, c, at) for p, i, c, at in self.db.execute(
            "SELECT partition, input_offset, control_offset, at FROM positions WHERE topic = ?",
            (self.topic,))}

    def _apply_one(self, partition: int, r: Any, done: Applied) -> None:
        change = classify(r.key, r.value, r.headers, partition, r.offset)
        if isinstance(change, Positioned):
            pos = change.position
            at = pos.at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
            self.db.execute(POSITION, (self.topic, partition, pos.input_offset,
                                       pos.control_offset, at, r.offset))
            done.positions += 1
            return
        if isinstance(change, Upsert):
            self.db.execute(UPSERT, change)
            done.upserted += 1
            return
        if isinstance(change, Delete):
            self.db.execute(DELETE, change)
            done.deleted += 1
            return
        self.db.execute(SKIP, (self.topic, partition, r.offset, change.reason))
        done.skipped += 1
        log.warning("skipped the record at %s[%d]@%d: %s", self.topic, partition, r.offset,
                    change.reason)
        log.debug("skipped record key=%r value=%r", r.key, (r.value or b"")[:200])

    def _rechain_one(self, partition: int, r: Any, done: Applied) -> None:
        """A record the rows already reflect, read again for its chain (`_migrate_to_3`). A
        position read again is applied (never moving back): it covers rows already there."""
        change = classify(r.key, r.value, r.headers, partition, r.offset)
        if isinstance(change, Positioned):
            self._apply_one(partition, r, done)
            return
        if isinstance(change, Upsert) and change.chain is not None:
            done.rechained += self.db.execute(
                RECHAIN, (change.chain, change.session_key, change.seq, change.entry_json)
            ).rowcount

    class _Txn:
        def __init__(self, db: sqlite3.Connection) -> None:
            self.db = db

        def __enter__(self) -> None:
            self.db.execute("BEGIN IMMEDIATE")  # the write lock first: the offset check holds

        def __exit__(self, exc_type, exc, tb) -> bool:
            self.db.execute("ROLLBACK" if exc_type else "COMMIT")
            return False

    def _transaction(self) -> SinkDB._Txn:
        return SinkDB._Txn(self.db)
