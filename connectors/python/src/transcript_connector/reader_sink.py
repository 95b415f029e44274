"""The database source of a session reader: a sink database (`transcript-owner sink sqlite
PATH`, sink_format.py), opened read-only. The sink writes each entries partition's position in
the same SQLite transaction as the rows it covers, so one read transaction that sees a position
sees every row below it: the position, then (when it covers the bound) the session's rows.
While a read waits, `PRAGMA data_version` (a local read) says whether the sink committed since
the last look; it is asked every `db_poll_ms`.

Refused (ReadError): a missing file, a file the sink did not make, a format without positions
(before POSITIONS_SINCE: a sink of this version migrates it), a newer format than this reader's.
"""

from __future__ import annotations

import sqlite3
import time
from collections import OrderedDict
from datetime import UTC, datetime
from pathlib import Path

from transcript_connector.entries_topic import Position, Upsert, classify, entry_key
from transcript_connector.errors import ReadError
from transcript_connector.reader_options import ReaderOptions
from transcript_connector.reader_plan import ReadEntry, Unreadable, reached
from transcript_connector.records import TranscriptEntry
from transcript_connector.sink_format import (
    APPLICATION_ID,
    POSITIONS_SINCE,
    SCHEMA_VERSION,
    SELECT_POSITION,
    SELECT_SESSION,
)

Snapshot = tuple[tuple[ReadEntry, ...], tuple[Unreadable, ...]]


def open_sink_database(path: str | Path) -> tuple[sqlite3.Connection, int]:
    """`path` opened read-only, and its format; ReadError when it is no sink database a
    reader of positions can read."""
    p = Path(path)
    if not p.is_file():
        raise ReadError(f"no sink database at {path}")
    try:
        db = sqlite3.connect(f"{p.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None,
                             check_same_thread=False)  # one thread at a time: the reader's
    except sqlite3.Error as exc:
        raise ReadError(f"cannot open {path}: {type(exc).__name__}: {exc}") from None
    try:
        app = db.execute("PRAGMA application_id").fetchone()[0]
        found = db.execute("PRAGMA user_version").fetchone()[0]
        if app == 0 and found == 1 and db.execute(  # the first sink's, without application_id
                "SELECT count(*) FROM sqlite_master WHERE name = 'entries'").fetchone()[0]:
            app = APPLICATION_ID
    except sqlite3.DatabaseError as exc:
        db.close()
        raise ReadError(f"{path} is not a sink database ({exc})") from None
    problem = None
    if app != APPLICATION_ID:
        problem = f"{path} is not a sink database (transcript-owner sink sqlite makes one)"
    elif found < POSITIONS_SINCE:
        problem = (f"{path}: sink database format {found} has no positions: run a sink of this "
                   "version on it first")
    elif found > SCHEMA_VERSION:
        problem = (f"{path}: sink database format {found} is newer than this reader's "
                   f"(formats {POSITIONS_SINCE} to {SCHEMA_VERSION}): upgrade "
                   "transcript-connector")
    if problem is not None:
        db.close()
        raise ReadError(problem)
    db.text_factory = bytes  # entry_json exactly as stored (the chain covers those bytes)
    return db, found


class DatabaseSource:
    """Positions and sessions from a sink database (see the module's docstring)."""

    def __init__(self, options: ReaderOptions, path: str | Path) -> None:
        self.options = options
        self.path = str(path)
        self.topic = options.entries_topic
        self._db, self.format = open_sink_database(path)
        self._version: int | None = None  # PRAGMA data_version at the last look
        # parsed rows, kept while their bytes are unchanged: a read parses only what changed
        self._parsed: OrderedDict[str, dict[int, ReadEntry | Unreadable]] = OrderedDict()

    def begin(self, partition: int, session_key: str | None) -> None:
        """Nothing to prepare: the sink reads every partition."""

    def end(self, partition: int, session_key: str | None) -> None:
        """Nothing to release."""

    def look(self, partition: int, session_key: str | None,
             needed: int) -> tuple[Position, Snapshot | None]:
        """The partition's position the sink stored; with `session_key`, once it covers
        `needed`, the session's rows from the same read transaction."""
        try:
            self._version = self._db.execute("PRAGMA data_version").fetchone()[0]
            self._db.execute("BEGIN")
            try:
                row = self._db.execute(SELECT_POSITION, (self.topic, partition)).fetchone()
                position = _position(partition, row)
                rows = None
                if session_key is not None and reached(position, needed):
                    rows = self._db.execute(SELECT_SESSION, (session_key,)).fetchall()
            finally:
                self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise ReadError(f"cannot read {self.path}: {type(exc).__name__}: {exc}") from None
        if rows is None or session_key is None:
            return position, None
        return position, self._snapshot(session_key, rows)

    def wait(self, seconds: float) -> None:
        """Returns when the sink committed since the last look, or after `seconds`."""
        deadline = time.monotonic() + seconds
        pause = self.options.db_poll_ms / 1000
        while True:
            try:
                version = self._db.execute("PRAGMA data_version").fetchone()[0]
            except sqlite3.Error as exc:
                raise ReadError(f"cannot read {self.path}: {type(exc).__name__}: "
                                f"{exc}") from None
            left = deadline - time.monotonic()
            if version != self._version or left <= 0:
                return
            time.sleep(min(pause, left))

    def held(self) -> dict[int, tuple[int, int, Position]]:
        return {}

    def close(self) -> None:
        self._db.close()

    def _snapshot(self, session_key: str, rows: list[tuple[object, ...]]) -> Snapshot:
        """The rows as entries (each parsed once while unchanged); a row that is no entry of
        its session and seq (changed by hand: the sink writes none) is Unreadable."""
        before = self._parsed.pop(session_key, {})
        now: dict[int, ReadEntry | Unreadable] = {}
        for seq, value, chain in rows:
            if type(seq) is not int or not isinstance(value, bytes):
                continue  # not a row the sink wrote (a seq that is not a whole number)
            text = chain.decode("ascii", "replace") if isinstance(chain, bytes) else None
            old = before.get(seq)
            if old is not None and old.value == value and old.chain == text:
                now[seq] = old
                continue
            change = classify(entry_key(session_key, seq), value)
            if isinstance(change, Upsert):
                now[seq] = ReadEntry(seq, TranscriptEntry.model_validate_json(value), value, text)
            else:
                why = getattr(change, "reason", "not an entry of its key")
                now[seq] = Unreadable(seq, value, text, why)
        self._parsed[session_key] = now
        while len(self._parsed) > self.options.sessions_per_partition:
            self._parsed.popitem(last=False)
        ordered = [now[s] for s in sorted(now)]
        return (tuple(e for e in ordered if isinstance(e, ReadEntry)),
                tuple(e for e in ordered if isinstance(e, Unreadable)))


def _position(partition: int, row: tuple[object, ...] | None) -> Position:
    """A `positions` row as a Position (none: Position(partition), which claims nothing)."""
    if row is None:
        return Position(partition)
    input_offset, control_offset, at, entries_offset = row
    stamp = at.decode() if isinstance(at, bytes) else str(at)
    try:
        when: datetime | None = datetime.fromisoformat(stamp).astimezone(UTC)
    except ValueError:
        when = None
    return Position(partition, int(input_offset), int(control_offset),  # type: ignore[call-overload]
                    when, int(entries_offset))  # type: ignore[call-overload]


__all__ = ["DatabaseSource", "open_sink_database"]
