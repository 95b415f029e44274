"""`transcript-owner sink sqlite PATH`: materialise `transcript.entries` into SQLite, exactly once.

A gateway reads its sessions from its own SQLite store, not by scanning the compacted topic per
request. The sink consumes the entries topic read_committed (what a transcript reader sees:
never an aborted batch of the worker) and keeps table `entries` equal to the topic's latest
value per key:

    entries(session_key, epoch, seq, entry_id, send_id, entry_json, chain)
        UNIQUE(session_key, seq), INDEX(session_key, send_id)
    offsets(topic, partition, next_offset)       the next offset to consume, per partition
    skipped(topic, partition, offset, reason)    records that were not materialised, and why
    rechain(topic, partition, until_offset)      partitions read again after a migration to
                                                 format 3, until that offset (see below)

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
  change meanwhile; why that is correct and what it costs: its docstring).
Any other database (another application's `entries`, a layout the sink did not make, a newer
format, one holding another topic's offsets) is refused before anything is written,
`--from-beginning` included.

Exactly once, through kill -9: each poll batch is one SQLite transaction holding the batch's
rows *and* each partition's next offset. At start every partition is sought to the offset
stored in the database, never to a consumer group's committed offset, so a crash before the
commit re-reads the batch (nothing lost) and a crash after it reads on from the batch's end
(nothing repeated). Writes are upserts keyed by (session_key, seq), so even a batch applied
twice (it cannot be) would leave the same rows.

A tombstone (value None) deletes the row of its key (`<session_key>#<seq>`). A record that is
not a valid `transcript-entry/1` (not JSON, a missing or wrong field, a key that does not name
the entry's session and seq) is skipped: one row in `skipped` (the reason names the field and
the problem, never message text), counted in the periodic report and logged at WARNING without
content; the sink goes on.

Partitions: by default an instance assigns itself every partition of the topic (no consumer
group: the offsets live in the database), so each database is a complete copy and gateways
scale by each running its own sink and database. With `--group NAME` the instances join the
consumer group `<prefix>NAME` and split the partitions; they must then share one database file
(on one host: SQLite's locking does not hold on network file systems). The group only assigns
partitions: each assigned partition is sought to the database's offset, and the group's
committed offsets (written after each SQLite commit, for lag monitoring) are never read. Every
offset write is a compare-and-set against the offset this process last saw, so a process whose
partition moved to another (a stalled member) cannot write a batch over the new owner's: its
transaction rolls back and it re-seeks.

SIGTERM (or Ctrl-C): the batch in hand is finished and committed, then the sink exits 0.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transcript_connector.entries_topic import Delete, Upsert, classify

from workers.core.errors import OwnerError

log = logging.getLogger("transcript_owner.sink")

APPLICATION_ID = 0x54524E53  # PRAGMA application_id of a sink database ("TRNS")
SCHEMA_VERSION = 3  # its PRAGMA user_version; 1: an earlier sink's, without application_id;
# 2: before entries.chain (1.2)
POLL_TIMEOUT_MS = 500
MAX_BATCH = 5000  # records per poll, so per SQLite transaction
REPORT_EVERY_S = 10.0
PARTITIONS_CHECK_EVERY_S = 60.0  # manual assignment: partitions added to the topic are picked up
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
)
# the columns of the sink's tables in each format (1 and 2 share them; 3 adds entries.chain
# and table rechain); a database may hold tables of its own beside them
_TABLES_1 = {
    "entries": ("session_key", "epoch", "seq", "entry_id", "send_id", "entry_json"),
    "offsets": ("topic", "partition", "next_offset"),
    "skipped": ("topic", "partition", "offset", "reason"),
}
TABLES = {  # SCHEMA_VERSION's
    **_TABLES_1,
    "entries": (*_TABLES_1["entries"], "chain"),
    "rechain": ("topic", "partition", "until_offset"),
}
FORMAT_TABLES = {1: _TABLES_1, 2: _TABLES_1, 3: TABLES}
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
        log.info("%s: migrated from sink format %d to %d (rows kept, column chain added); %d "
                 "partitions are read again from their start so that the rows get their chain "
                 "(rows unchanged meanwhile)", self.path, found, SCHEMA_VERSION, rewound)

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
                        self._rechain_one(r, done)
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
                 "migrated to format %d: its rows have their chain", self.topic, partition,
                 until, SCHEMA_VERSION)

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

    def _apply_one(self, partition: int, r: Any, done: Applied) -> None:
        change = classify(r.key, r.value, r.headers)
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

    def _rechain_one(self, r: Any, done: Applied) -> None:
        """A record the rows already reflect, read again for its chain (`_migrate_to_3`)."""
        change = classify(r.key, r.value, r.headers)
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


# --- the command -----------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", choices=["sqlite"], help="the store (only sqlite)")
    parser.add_argument("path", metavar="PATH", help="the SQLite database (created if missing)")
    parser.add_argument(
        "--group", metavar="NAME",
        help="join consumer group <prefix>NAME and share the partitions with its other "
             "members, which must use the same database file; default: this instance "
             "assigns itself every partition (no group)")
    parser.add_argument(
        "--from-beginning", action="store_true",
        help="rebuild: delete every row and stored offset, then read every partition from "
             "its start")
    parser.add_argument(
        "--until-end", action="store_true",
        help="exit 0 once every partition is consumed up to its end offset at start (a "
             "one-shot catch-up; not with --group)")
    parser.add_argument(
        "--synchronous", choices=["normal", "full"], default="normal",
        help="SQLite synchronous mode (WAL either way; default normal: a power loss can roll "
             "back the last batches, rows and offsets together, and they are consumed again)")


class _Stop:
    def __init__(self) -> None:
        self.requested = False

    def __call__(self, signum, frame) -> None:  # noqa: ANN001
        self.requested = True


def run(args: argparse.Namespace) -> int:
    from workers.settings import kafka_settings, worker_settings

    ks, ws = kafka_settings(), worker_settings()
    level = getattr(logging, ws.log_level.upper())
    logging.basicConfig(level=level,
                        format="[%(asctime)s] [%(process)d] [%(levelname)s] %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(max(level, logging.WARNING))  # its connection chatter
    topic = ks.topic(_entries())
    stop = _Stop()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        if args.until_end and args.group:
            raise SinkError("--until-end reads every partition: it does not go with --group")
        db = SinkDB(args.path, topic, synchronous=args.synchronous)  # refuses another's db
    except SinkError as exc:
        print(f"sink: {exc}", file=sys.stderr)
        return 2
    try:
        if args.from_beginning:
            db.reset()
            log.info("--from-beginning: every row and stored offset of %s deleted", args.path)
        return Sink(ks, db, topic, group=args.group, stop=stop, until_end=args.until_end).run()
    except SinkError as exc:
        print(f"sink: {exc}", file=sys.stderr)
        return 2
    finally:
        db.close()


def _entries() -> str:
    from workers.core.outputs import ENTRIES

    return ENTRIES


class Sink:
    """The consume loop: poll a batch, apply it in one transaction, repeat until stopped."""

    def __init__(self, ks, db: SinkDB, topic: str, *, group: str | None, stop: _Stop,  # noqa: ANN001
                 until_end: bool = False) -> None:
        self.ks, self.db, self.topic, self.stop = ks, db, topic, stop
        self.until_end: dict | None = {} if until_end else None  # TopicPartition -> end offset
        self.group = f"{ks.topic_prefix}{group}" if group else None
        self.expected: dict[int, int | None] = {}  # partition -> offset the db holds, as seen
        self.totals = Applied()
        self.conflicts = 0
        self._t0 = time.monotonic()
        self.lock = threading.Lock()  # --group: the rebalance listener runs on another thread
        self.pending: set[int] = set()
        self.rechain: dict[int, int] = {}  # partition -> until_offset (SinkDB.rechain), sought

    def run(self) -> int:
        from kafka import ConsumerRebalanceListener

        from workers.kafka_io import consumer

        options: dict[str, Any] = dict(max_poll_records=MAX_BATCH)
        if self.group:
            options.update(group_id=self.group)
        self.consumer = c = consumer(self.ks, **options)
        try:
            parts = c.partitions_for_topic(self.topic)
            if not parts:
                raise SinkError(f"topic {self.topic} does not exist (run `topics apply`)")
            if self.group:
                sink = self

                class Listener(ConsumerRebalanceListener):
                    """Runs on kafka-python's I/O thread, where neither the database (bound to
                    the main thread) nor a blocking consumer call may be used: it pauses what
                    it was given, and the main loop seeks it to the database's offsets."""

                    def on_partitions_revoked(self, revoked) -> None:  # noqa: ANN001
                        with sink.lock:
                            for tp in revoked:
                                sink.expected.pop(tp.partition, None)
                                sink.pending.discard(tp.partition)

                    def on_partitions_assigned(self, assigned) -> None:  # noqa: ANN001
                        c.pause(*assigned)
                        with sink.lock:
                            sink.pending.update(tp.partition for tp in assigned)

                c.subscribe(topics=[self.topic], listener=Listener())
                log.info("consuming %s into %s as a member of group %s", self.topic,
                         self.db.path, self.group)
            else:
                self._assign(sorted(parts))
                log.info("consuming all %d partitions of %s into %s", len(parts), self.topic,
                         self.db.path)
            self._loop()
        finally:
            # kafka-python 3.0 can log a traceback from its I/O thread while closing (a socket
            # already gone); the sink's work is committed by then
            logging.getLogger("kafka").setLevel(logging.CRITICAL)
            c.close()
        self._report(final=True)
        return 0

    def _assign(self, parts: list[int]) -> None:
        from kafka import TopicPartition

        self.consumer.assign([TopicPartition(self.topic, p) for p in parts])
        self._seek(parts)

    def _caught_up(self) -> bool:
        """--until-end: every partition's position has reached its end offset at start."""
        c = self.consumer
        if not self.until_end:
            self.until_end = c.end_offsets(list(c.assignment()))
        return all(c.position(tp) >= end for tp, end in self.until_end.items())

    def _seek(self, parts: list[int]) -> None:
        """Each partition to the offset the database holds (its start when it holds none)."""
        from kafka import TopicPartition

        c = self.consumer
        tps = [TopicPartition(self.topic, p) for p in parts]
        stored, rechain = self.db.offsets(parts), self.db.rechain()
        starts, ends = c.beginning_offsets(tps), c.end_offsets(tps)
        for tp in tps:
            offset = stored.get(tp.partition)
            self.expected[tp.partition] = offset
            if offset is None:
                c.seek(tp, starts[tp])
                continue
            if tp.partition in rechain:
                self.rechain[tp.partition] = rechain[tp.partition]
            consumed = max(offset, rechain.get(tp.partition, 0))  # before a migration's rewind
            if consumed > ends[tp]:
                raise SinkError(
                    f"{self.db.path} has consumed {self.topic}[{tp.partition}] up to offset "
                    f"{consumed}, beyond its end {ends[tp]}: the topic was recreated; rebuild "
                    "with --from-beginning")
            if offset < starts[tp] and offset == 0:  # rewound by a migration: nothing lost
                offset = starts[tp]
            elif offset < starts[tp]:
                log.warning("%s[%d]: stored offset %d is before the log start %d (records "
                            "deleted); reading on from the log start", self.topic,
                            tp.partition, offset, starts[tp])
                offset = starts[tp]
            c.seek(tp, offset)

    def _loop(self) -> None:
        c = self.consumer
        last_report = last_check = time.monotonic()
        while not self.stop.requested:
            if self.until_end is not None and self._caught_up():
                log.info("caught up with the end offsets at start (--until-end)")
                break
            polled = c.poll(timeout_ms=POLL_TIMEOUT_MS, max_records=MAX_BATCH)
            if self.pending:  # --group: partitions just assigned, paused until sought
                with self.lock:
                    parts, self.pending = sorted(self.pending), set()
                polled = {tp: r for tp, r in polled.items() if tp.partition not in parts}
                self._seek(parts)
                from kafka import TopicPartition

                c.resume(*(TopicPartition(self.topic, p) for p in parts))
                log.info("assigned partitions %s, sought to the offsets in %s", parts,
                         self.db.path)
            if polled:
                batch = {tp.partition: recs for tp, recs in polled.items()}
                try:
                    done = self.db.apply(batch, self.expected)
                except OffsetConflict as exc:
                    self.conflicts += 1
                    log.warning("%s: partitions %s were written by another process; this "
                                "batch was rolled back, re-reading from the stored offsets",
                                self.db.path, exc.partitions)
                    self._seek(exc.partitions)
                    continue
                self.expected.update(done.offsets)
                self.totals.upserted += done.upserted
                self.totals.deleted += done.deleted
                self.totals.skipped += done.skipped
                self.totals.rechained += done.rechained
                if self.group:
                    self._commit_to_group(done.offsets)
            if self.rechain:
                self._check_rechain()
            now = time.monotonic()
            if now - last_report >= REPORT_EVERY_S:
                self._report()
                last_report = now
            if not self.group and now - last_check >= PARTITIONS_CHECK_EVERY_S:
                last_check = now
                parts = c.partitions_for_topic(self.topic) or set()
                if parts - set(self.expected):
                    log.info("%s has %d partitions now; assigning them all", self.topic,
                             len(parts))
                    self._assign(sorted(parts))

    def _check_rechain(self) -> None:
        """Partitions read again after the migration to format 3 (SinkDB.rechain) whose
        position has passed their `until_offset`: done, also when no record at or after it
        came (SinkDB.apply ends the others)."""
        from kafka import TopicPartition

        assigned = self.consumer.assignment()
        for partition, until in list(self.rechain.items()):
            tp = TopicPartition(self.topic, partition)
            with self.lock:
                expected = self.expected.get(partition)
                if partition in self.pending or tp not in assigned:
                    self.rechain.pop(partition)  # sought again (and reloaded) when assigned
                    continue
            try:
                position = self.consumer.position(tp)
            except Exception as exc:  # noqa: BLE001  (revoked meanwhile: checked again when sought)
                log.debug("position of %s unknown: %s", tp, type(exc).__name__)
                continue
            if position is not None and position >= until:
                self.db.end_rechain(partition, expected)
                self.rechain.pop(partition)

    def _commit_to_group(self, offsets: dict[int, int]) -> None:
        """For lag monitoring only: positions come from the database."""
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata

        try:
            self.consumer.commit_async({
                TopicPartition(self.topic, p): OffsetAndMetadata(o, "", -1)
                for p, o in offsets.items()})
        except Exception as exc:  # noqa: BLE001  (a rebalance in progress: next batch commits)
            log.debug("group commit skipped: %s", type(exc).__name__)

    def _report(self, final: bool = False) -> None:
        t = self.totals
        elapsed = max(time.monotonic() - self._t0, 1e-9)
        rechained = f", {t.rechained} rows given their chain (read again)" if t.rechained else ""
        log.info("%s%d rows written, %d deleted, %d records skipped (invalid; see table "
                 "skipped)%s, %d offset conflicts; %.0f records/s", "stopped: " if final else "",
                 t.upserted, t.deleted, t.skipped, rechained, self.conflicts,
                 (t.upserted + t.deleted + t.skipped) / elapsed)
