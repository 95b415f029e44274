"""The layout of a sink database (`transcript-owner sink sqlite PATH`), as far as a reader needs
it: the sink writes it (workers/commands/sink.py), gateways read it (transcript_connector.reader)
without the worker's package.

    entries(session_key, epoch, seq, entry_id, send_id, entry_json, chain)
        UNIQUE(session_key, seq): exactly the topic's live entries
    offsets(topic, partition, next_offset)
    positions(topic, partition, input_offset, control_offset, at, entries_offset)   format 4
        each partition's furthest position record (DESIGN 1.3), written in the same SQLite
        transaction as the rows before it: a reader that sees a position sees every row it
        covers

A database is the sink's when `PRAGMA application_id` is APPLICATION_ID; `PRAGMA user_version`
is its format. Format 4 (1.3) added `positions`; a reader of positions needs at least that.
"""

from __future__ import annotations

APPLICATION_ID = 0x54524E53  # "TRNS"
SCHEMA_VERSION = 4  # PRAGMA user_version of the newest format
POSITIONS_SINCE = 4  # the first format with table `positions`

POSITIONS_DDL = """CREATE TABLE positions (
    topic          TEXT NOT NULL,
    partition      INTEGER NOT NULL,
    input_offset   INTEGER NOT NULL,
    control_offset INTEGER NOT NULL,
    at             TEXT NOT NULL,
    entries_offset INTEGER NOT NULL,
    PRIMARY KEY (topic, partition)
)"""
POSITIONS_COLUMNS = ("topic", "partition", "input_offset", "control_offset", "at",
                     "entries_offset")

# a partition's position, and a session's rows: read in one read transaction (one snapshot)
SELECT_POSITION = ("SELECT input_offset, control_offset, at, entries_offset FROM positions "
                   "WHERE topic = ? AND partition = ?")
SELECT_SESSION = "SELECT seq, entry_json, chain FROM entries WHERE session_key = ? ORDER BY seq"

__all__ = [
    "APPLICATION_ID",
    "POSITIONS_COLUMNS",
    "POSITIONS_DDL",
    "POSITIONS_SINCE",
    "SCHEMA_VERSION",
    "SELECT_POSITION",
    "SELECT_SESSION",
]
