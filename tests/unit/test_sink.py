"""The sink's row changes and its database, without a broker (workers/commands/sink.py)."""

from __future__ import annotations

import json
import sqlite3
from collections import namedtuple

import pytest
from transcript_connector.entries_topic import Delete, Skip, Upsert, chain_header, classify

from workers.commands.sink import APPLICATION_ID, SCHEMA_VERSION, OffsetConflict, SinkDB, SinkError

TOPIC = "p.transcript.entries"
Rec = namedtuple("Rec", "offset key value headers", defaults=((),))  # as kafka-python
SK = "agent:ops:telegram:direct:42"


def entry(seq: int, send_id: str | None = None, session_key: str = SK, **extra) -> dict:
    e = {
        "schema": "transcript-entry/1", "session_key": session_key, "epoch": 0, "seq": seq,
        "entry_id": f"id-{seq}", "send_id": send_id or f"send-{seq}", "role": "assistant",
        "agent_id": "ops", "text": "secret text", "media": [], "source": "message_tool",
        "posted_by": {"kind": "agent", "id": "ops"},
        "delivered_at": "2026-01-01T00:00:00Z", "written_at": "2026-01-01T00:00:01Z",
        "platform_message_ids": ["1"],
    }
    e.update(extra)
    return e


def key(seq: int, session_key: str = SK) -> bytes:
    return f"{session_key}#{seq:010d}".encode()


def value(e: dict) -> bytes:
    return json.dumps(e).encode()


def test_an_entry_becomes_an_upsert_of_its_fields_and_its_bytes():
    v = value(entry(3))
    change = classify(key(3), v, [("chain", b"ab" * 32)])
    assert change == Upsert(SK, 0, 3, "id-3", "send-3", v.decode(), "ab" * 32)


def test_a_tombstone_deletes_its_key():
    assert classify(key(7), None, ()) == Delete(SK, 7)
    assert classify(b"agent:a:b#c:x#0000000012", None, None) == Delete("agent:a:b#c:x", 12)
    assert classify(b"agent:a:main#1#0000000001", None, ()) == Delete("agent:a:main#1", 1)


@pytest.mark.parametrize("k, v, why", [
    (key(1), b"not json", "invalid entry"),
    (key(1), b"[1, 2]", "invalid entry"),
    (key(1), value({k: v for k, v in entry(1).items() if k != "send_id"}), "send_id: missing"),
    (key(1), value(entry(1, schema="transcript-entry/9")), "schema"),
    (key(1), b'{"seq": NaN}', "invalid entry"),
    (key(2), value(entry(1)), "does not match"),
    (key(1, "agent:ops:main"), value(entry(1)), "does not match"),
    (None, value(entry(1)), "key: missing"),
    (b"\xff\xfe", value(entry(1)), "not UTF-8"),
    (b"no-seq", None, "key: not"),
    (SK.encode() + b"#12", value(entry(12)), "key: not"),
    (SK.encode() + b"#00000000012", value(entry(12)), "key: not"),  # 11 digits
    (SK.encode() + "#000000001\u0662".encode(), value(entry(12)), "key: not"),  # not ASCII
])
def test_an_invalid_record_is_skipped_with_a_reason_and_no_content(k, v, why):
    change = classify(k, v, [("chain", b"ab" * 32)])
    assert isinstance(change, Skip)
    assert why in change.reason
    assert "secret" not in change.reason


def db(tmp_path, **kw) -> SinkDB:
    return SinkDB(tmp_path / "sink.db", TOPIC, **kw)


def rows(d: SinkDB) -> list[tuple]:
    return d.db.execute("SELECT session_key, seq, send_id FROM entries ORDER BY seq").fetchall()


def test_a_batch_and_its_offsets_commit_together(tmp_path):
    d = db(tmp_path)
    assert d.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    done = d.apply({0: [Rec(5, key(1), value(entry(1))), Rec(6, key(2), value(entry(2)))],
                    3: [Rec(9, key(1, "agent:ops:x"), value(entry(1, session_key="agent:ops:x")))]},
                   {})
    assert (done.upserted, done.deleted, done.skipped) == (3, 0, 0)
    assert d.offsets() == {0: 7, 3: 10}
    d.apply({0: [Rec(7, key(1), None)]}, {0: 7})
    assert rows(d) == [("agent:ops:x", 1, "send-1"), (SK, 2, "send-2")]
    assert d.offsets() == {0: 8, 3: 10}


def test_a_key_written_again_is_one_row(tmp_path):
    d = db(tmp_path)
    d.apply({0: [Rec(0, key(1), value(entry(1)))]}, {})
    d.apply({0: [Rec(1, key(1), value(entry(1, text="again")))]}, {0: 1})
    assert d.db.execute("SELECT count(*), max(entry_json) FROM entries").fetchone()[1] \
        .find("again") > 0
    assert d.counts() == (1, 0)


def test_invalid_records_are_skipped_counted_and_the_batch_goes_on(tmp_path, caplog):
    d = db(tmp_path)
    done = d.apply({1: [Rec(0, key(1), b"{secret text"), Rec(1, key(2), value(entry(2))),
                        Rec(2, key(3, "agent:ops:x"), value(entry(3)))]}, {})
    assert (done.upserted, done.skipped) == (1, 2)
    assert rows(d) == [(SK, 2, "send-2")]
    reasons = d.db.execute('SELECT "offset", reason FROM skipped ORDER BY 1').fetchall()
    assert reasons[0][0] == 0 and "invalid entry" in reasons[0][1]
    assert reasons[1] == (2, "key: does not match the entry's session_key and seq")
    assert d.counts() == (1, 2)
    assert d.offsets() == {1: 3}
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2
    assert all("secret" not in r.getMessage() for r in warnings)


def test_two_entries_with_one_send_id_are_two_rows(tmp_path):
    """A send repeated after the worker's dedupe window is a new send at a new seq (DESIGN
    1.2): the table holds every live entry, keyed by (session_key, seq)."""
    d = db(tmp_path)
    done = d.apply({1: [Rec(0, key(2), value(entry(2, send_id="s"))),
                        Rec(1, key(7), value(entry(7, send_id="s")))]}, {})
    assert (done.upserted, done.skipped) == (2, 0)
    assert rows(d) == [(SK, 2, "s"), (SK, 7, "s")]


def test_an_offset_moved_by_another_process_rolls_the_batch_back(tmp_path):
    a, b = db(tmp_path), db(tmp_path)
    a.apply({0: [Rec(0, key(1), value(entry(1)))]}, {})
    b.apply({0: [Rec(1, key(2), value(entry(2)))]}, {0: 1})  # b took the partition over
    with pytest.raises(OffsetConflict) as err:  # a still thinks the db holds 1
        a.apply({0: [Rec(1, key(2), value(entry(2, text="zombie"))),
                     Rec(2, key(3), value(entry(3)))]}, {0: 1})
    assert err.value.partitions == [0]
    assert [r[1] for r in rows(a)] == [1, 2]
    stored = a.db.execute("SELECT group_concat(entry_json) FROM entries").fetchone()[0]
    assert "zombie" not in stored
    assert a.offsets() == {0: 2}
    with pytest.raises(OffsetConflict):  # a first write where another process wrote first
        a.apply({0: [Rec(2, key(3), value(entry(3)))]}, {})


def test_reset_and_reopen(tmp_path):
    d = db(tmp_path, synchronous="full")
    assert d.db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    d.apply({0: [Rec(0, key(1), b"bad"), Rec(1, key(2), value(entry(2)))]}, {})
    d.close()
    d = db(tmp_path)
    assert d.db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert d.counts() == (1, 1) and d.offsets() == {0: 2}
    d.reset()
    assert d.counts() == (0, 0) and d.offsets() == {}


def test_a_database_of_another_topic_or_no_database_is_refused(tmp_path):
    d = db(tmp_path)
    d.apply({0: [Rec(0, key(1), value(entry(1)))]}, {})
    d.close()
    with pytest.raises(SinkError, match="holds entries of topic p.transcript.entries"):
        SinkDB(tmp_path / "sink.db", "q.transcript.entries")
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(SinkError, match="not a database"):
        SinkDB(junk, TOPIC)
    with pytest.raises(SinkError):
        SinkDB(tmp_path / "missing-dir" / "x.db", TOPIC)
    newer = tmp_path / "newer.db"
    c = sqlite3.connect(newer)
    c.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    c.execute("PRAGMA user_version = 7")
    c.close()
    with pytest.raises(SinkError, match="sink database version 7, this sink writes version 4"):
        SinkDB(newer, TOPIC)


# format 1, as the sink before 1.2 made it (user_version 1, no application_id)
FORMAT_1 = """
CREATE TABLE entries (
    session_key TEXT NOT NULL, epoch INTEGER NOT NULL, seq INTEGER NOT NULL,
    entry_id TEXT NOT NULL, send_id TEXT NOT NULL, entry_json TEXT NOT NULL,
    UNIQUE (session_key, seq), UNIQUE (session_key, send_id));
CREATE TABLE offsets (topic TEXT NOT NULL, partition INTEGER NOT NULL,
    next_offset INTEGER NOT NULL, PRIMARY KEY (topic, partition));
CREATE TABLE skipped (topic TEXT NOT NULL, partition INTEGER NOT NULL, "offset" INTEGER NOT NULL,
    reason TEXT NOT NULL, PRIMARY KEY (topic, partition, "offset"));
PRAGMA user_version = 1;
"""


def marks(path) -> tuple[int, int]:
    c = sqlite3.connect(path)
    try:
        return (c.execute("PRAGMA application_id").fetchone()[0],
                c.execute("PRAGMA user_version").fetchone()[0])
    finally:
        c.close()


def test_a_new_database_is_marked_as_the_sinks(tmp_path):
    db(tmp_path).close()
    assert marks(tmp_path / "sink.db") == (APPLICATION_ID, SCHEMA_VERSION)
    db(tmp_path).close()  # its own database opens again


def test_a_format_1_database_is_migrated_in_place_its_rows_kept(tmp_path):
    """The old UNIQUE(session_key, send_id) goes, rows and offsets stay, the gateway's own
    trigger on `entries` is made again, and the partition whose entry format 1 skipped for its
    send_id is read again from that record."""
    path = tmp_path / "sink.db"
    c = sqlite3.connect(path)
    c.executescript(FORMAT_1 + """
        CREATE TABLE audit (n INTEGER);
        CREATE TRIGGER count_rows AFTER INSERT ON entries BEGIN INSERT INTO audit VALUES (1); END;
    """)
    c.executemany("INSERT INTO entries VALUES (?, 0, ?, ?, ?, ?)",
                  [(SK, q, f"id-{q}", f"send-{q}", value(entry(q)).decode()) for q in (1, 2)])
    c.executemany("INSERT INTO offsets VALUES (?, ?, ?)", [(TOPIC, 0, 40), (TOPIC, 3, 9)])
    c.executemany("INSERT INTO skipped VALUES (?, ?, ?, ?)", [
        (TOPIC, 0, 31, "send_id: the session already holds it at seq 2"),
        (TOPIC, 0, 35, "send_id: the session already holds it at seq 1"),
        (TOPIC, 3, 4, "invalid entry: seq: missing")])
    c.execute("DELETE FROM audit")
    c.commit()
    c.close()

    d = SinkDB(path, TOPIC)
    assert marks(path) == (APPLICATION_ID, SCHEMA_VERSION)
    assert rows(d) == [(SK, 1, "send-1"), (SK, 2, "send-2")]
    assert columns(d, "entries")[-1] == "chain"
    assert chains(d) == [None, None]  # format 1 rows have none yet
    # format 3: every partition read again from its start, its records before where format 1
    # was (partition 0: its first send_id skip) only giving rows their chain
    assert d.offsets() == {0: 0, 3: 0}
    assert d.rechain() == {0: 31, 3: 9}
    assert d.db.execute('SELECT partition, "offset" FROM skipped').fetchall() == [(3, 4)]
    d.apply({0: [Rec(30, key(1), value(entry(1)), [("chain", b"01" * 32)]),
                 Rec(31, key(3), value(entry(3, send_id="send-2")))]}, {0: 0})
    assert rows(d)[-1] == (SK, 3, "send-2")  # the new constraint: (session_key, seq) only
    assert chains(d) == ["01" * 32, None, None]
    assert d.rechain() == {3: 9}
    assert d.db.execute("SELECT count(*) FROM audit").fetchone()[0] == 1  # the trigger is kept
    d.close()
    db(tmp_path).close()  # and opens as a format 3 database from now on


def columns(d: SinkDB, table: str) -> list[str]:
    return [row[1] for row in d.db.execute(f"PRAGMA table_info({table})")]


def chains(d: SinkDB) -> list[str | None]:
    return [c for (c,) in d.db.execute("SELECT chain FROM entries ORDER BY seq")]


CHAIN_1 = "0123456789abcdef" * 4


def test_the_chain_header_is_stored_beside_the_row(tmp_path):
    d = db(tmp_path)
    d.apply({0: [Rec(0, key(1), value(entry(1)), [("other", b"x"), ("chain", CHAIN_1.encode())]),
                 Rec(1, key(2), value(entry(2)), [("chain", b"not hex, still its text")])]}, {})
    assert chains(d) == [CHAIN_1, "not hex, still its text"]
    d.apply({0: [Rec(2, key(2), value(entry(2, text="again")))]}, {0: 2})  # a new value, no header
    assert chains(d) == [CHAIN_1, None]


@pytest.mark.parametrize("headers", [
    (), None, [("other", CHAIN_1.encode())], [("Chain", CHAIN_1.encode())],
    [("chain",)], [1, 2], 7,  # not what a client gives: still no raise
])
def test_a_record_without_a_chain_header_is_stored_with_chain_null(tmp_path, headers):
    change = classify(key(1), value(entry(1)), headers)
    assert isinstance(change, Upsert) and change.chain is None
    d = db(tmp_path)
    assert d.apply({0: [Rec(0, key(1), value(entry(1)), headers)]}, {}).upserted == 1
    assert chains(d) == [None]


@pytest.mark.parametrize("headers", [
    [("chain", CHAIN_1.encode()), ("chain", CHAIN_1.encode())],  # twice
    [("chain", CHAIN_1.encode()), (b"chain", b"")],
    [("chain", "0123456789abcdé".encode())],  # not ASCII
    [("chain", None)],  # a null header value
])
def test_a_chain_header_repeated_null_or_not_ascii_is_stored_as_an_empty_chain(tmp_path, headers):
    """One rule for odd headers (transcript_connector.chain.header_text), the audit's: such a
    record is never "written before the chain" (NULL, as it was stored before), but a chain
    that verification reports."""
    change = classify(key(1), value(entry(1)), headers)
    assert isinstance(change, Upsert) and change.chain == ""
    d = db(tmp_path)
    assert d.apply({0: [Rec(0, key(1), value(entry(1)), headers)]}, {}).upserted == 1
    assert chains(d) == [""]


def test_chain_header_reads_the_clients_forms():
    assert chain_header([("chain", CHAIN_1.encode())]) == CHAIN_1
    assert chain_header([(b"chain", bytearray(CHAIN_1.encode()))]) == CHAIN_1
    assert chain_header([("chain", b"")]) == ""  # ASCII: stored, and verification reports it
    assert chain_header([("chain", CHAIN_1)]) == CHAIN_1  # text: not what a client gives


# format 2, as the sink of 1.1 made it (the sink's marks, user_version 2, no chain)
FORMAT_2 = """
CREATE TABLE entries (
    session_key TEXT NOT NULL, epoch INTEGER NOT NULL, seq INTEGER NOT NULL,
    entry_id TEXT NOT NULL, send_id TEXT NOT NULL, entry_json TEXT NOT NULL,
    UNIQUE (session_key, seq));
CREATE INDEX entries_send_id ON entries (session_key, send_id);
CREATE TABLE offsets (topic TEXT NOT NULL, partition INTEGER NOT NULL,
    next_offset INTEGER NOT NULL, PRIMARY KEY (topic, partition));
CREATE TABLE skipped (topic TEXT NOT NULL, partition INTEGER NOT NULL, "offset" INTEGER NOT NULL,
    reason TEXT NOT NULL, PRIMARY KEY (topic, partition, "offset"));
PRAGMA application_id = {APPLICATION_ID};
PRAGMA user_version = 2;
""".replace("{APPLICATION_ID}", str(APPLICATION_ID))


def format_2(path, entries: list[dict], offsets: dict[int, int], topic: str = TOPIC) -> None:
    c = sqlite3.connect(path)
    c.executescript(FORMAT_2)
    c.executemany("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?)",
                  [(e["session_key"], e["epoch"], e["seq"], e["entry_id"], e["send_id"],
                    value(e).decode()) for e in entries])
    c.executemany("INSERT INTO offsets VALUES (?, ?, ?)",
                  [(topic, p, o) for p, o in offsets.items()])
    c.commit()
    c.close()


def test_a_format_2_database_is_migrated_in_place_and_read_again_for_the_chain(tmp_path, caplog):
    """The column is added, rows and the database's own objects stay, every partition is read
    again from 0; a record before the offset the database held only gives the row holding
    exactly its value its chain (an older value, a tombstone, an invalid record, an entry
    the database no longer holds change nothing), and from that offset on records apply as
    always."""
    path = tmp_path / "sink.db"
    format_2(path, [entry(1), entry(2, text="latest")], {0: 40, 3: 9, 5: 0})
    c = sqlite3.connect(path)
    c.executescript("CREATE TABLE audit (n INTEGER); CREATE TRIGGER count_rows AFTER UPDATE ON "
                    "entries BEGIN INSERT INTO audit VALUES (1); END;")
    c.close()
    caplog.set_level("INFO", logger="transcript_owner.sink")

    d = SinkDB(path, TOPIC)
    assert marks(path) == (APPLICATION_ID, SCHEMA_VERSION)
    assert columns(d, "entries") == ["session_key", "epoch", "seq", "entry_id", "send_id",
                                     "entry_json", "chain"]
    assert rows(d) == [(SK, 1, "send-1"), (SK, 2, "send-2")] and chains(d) == [None, None]
    assert d.offsets() == {0: 0, 3: 0, 5: 0}
    assert d.rechain() == {0: 40, 3: 9}
    assert "migrated from sink format 2 to 3" in caplog.text
    assert "2 partitions are read again from their start" in caplog.text

    c1, c2, c3 = (f"{n:02x}" * 32 for n in (1, 2, 3))
    done = d.apply({0: [
        Rec(0, key(1), value(entry(1)), [("chain", c1.encode())]),
        Rec(1, key(2), value(entry(2, text="older")), [("chain", b"ff" * 32)]),  # superseded
        Rec(2, key(9), value(entry(9, text="erased")), [("chain", b"ee" * 32)]),  # erased since
        Rec(3, key(1), None),  # a tombstone the rows already reflect (re-written after it)
        Rec(4, key(7), b"{not json"),
        Rec(5, key(2), value(entry(2, text="latest")), [("chain", c2.encode())]),
    ]}, {0: 0})
    assert (done.upserted, done.deleted, done.skipped, done.rechained) == (0, 0, 0, 2)
    assert rows(d) == [(SK, 1, "send-1"), (SK, 2, "send-2")]
    assert chains(d) == [c1, c2]
    assert d.counts() == (2, 0)
    assert d.db.execute("SELECT count(*) FROM audit").fetchone()[0] == 2  # the trigger is kept
    assert d.rechain() == {0: 40, 3: 9} and d.offsets()[0] == 6

    done = d.apply({0: [Rec(39, key(1), value(entry(1)), [("chain", c1.encode())]),
                        Rec(40, key(3), value(entry(3)), [("chain", c3.encode())]),
                        Rec(41, key(1), None)]}, {0: 6})
    assert (done.upserted, done.deleted, done.rechained) == (1, 1, 1)
    assert rows(d) == [(SK, 2, "send-2"), (SK, 3, "send-3")] and chains(d) == [c2, c3]
    assert d.rechain() == {3: 9} and d.offsets()[0] == 42
    assert "[0]: read again up to offset 40" in caplog.text
    d.close()
    d = db(tmp_path)  # a format 3 database: opened as it is, nothing rewound again
    assert d.offsets() == {0: 42, 3: 0, 5: 0} and d.rechain() == {3: 9}
    d.reset()
    assert d.rechain() == {}


def test_a_partition_read_again_ends_where_only_gaps_are_left(tmp_path):
    """Its last records compacted away (or only transaction markers after them): the sink's
    position passes `until_offset` with no record, and end_rechain ends it, compare-and-set."""
    path = tmp_path / "sink.db"
    format_2(path, [entry(1)], {0: 40})
    d = SinkDB(path, TOPIC)
    d.apply({0: [Rec(10, key(1), value(entry(1)), [("chain", CHAIN_1.encode())])]}, {0: 0})
    d.end_rechain(0, expected=5)  # not what the database holds: another process moved it
    assert d.rechain() == {0: 40}
    d.end_rechain(0, expected=11)
    assert d.rechain() == {} and chains(d) == [CHAIN_1]
    d.end_rechain(0, expected=11)  # done already: nothing


def test_a_database_of_another_topic_is_refused_before_it_is_migrated(tmp_path):
    path = tmp_path / "sink.db"
    format_2(path, [entry(1)], {0: 40}, topic="q.transcript.entries")
    before = path.read_bytes()
    with pytest.raises(SinkError, match="holds entries of topic q.transcript.entries"):
        SinkDB(path, TOPIC)
    c = sqlite3.connect(path)
    assert c.execute("PRAGMA user_version").fetchone()[0] == 2
    assert c.execute("SELECT next_offset FROM offsets").fetchall() == [(40,)]
    c.close()
    assert len(path.read_bytes()) == len(before)  # WAL mode aside, not written


@pytest.mark.parametrize("script", [
    FORMAT_2.replace("PRAGMA user_version = 2", "PRAGMA user_version = 3"),  # 3 without chain
    FORMAT_2.replace("entry_json TEXT NOT NULL,", "entry_json TEXT NOT NULL, chain TEXT,"),
])
def test_a_sink_mark_on_tables_of_another_format_is_refused(tmp_path, script):
    path = tmp_path / "odd.db"
    c = sqlite3.connect(path)
    c.executescript(script)
    c.close()
    before = path.read_bytes()
    with pytest.raises(SinkError, match="is not a sink database"):
        SinkDB(path, TOPIC)
    assert path.read_bytes() == before


def another_apps(path, ddl: str, user_version: int = 0) -> bytes:
    c = sqlite3.connect(path)
    c.executescript(ddl)
    c.execute(f"PRAGMA user_version = {user_version}")
    c.commit()
    c.close()
    return path.read_bytes()


@pytest.mark.parametrize("ddl, user_version", [
    # another application's table of the same name, with rows
    ("CREATE TABLE entries (session_key TEXT, seq INTEGER, body TEXT);"
     "INSERT INTO entries VALUES ('agent:ops:main', 1, 'precious');", 0),
    # the sink's tables, but not made by the sink (no mark, no format 1 version)
    (FORMAT_1.replace("PRAGMA user_version = 1;", "") +
     "INSERT INTO offsets VALUES ('p.transcript.entries', 0, 5);", 0),
    # format 1's version on tables format 1 never had
    ("CREATE TABLE entries (id INTEGER); INSERT INTO entries VALUES (1);", 1),
    ("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('keep me');", 0),
])
def test_a_database_the_sink_did_not_make_is_refused_and_left_unchanged(tmp_path, ddl,
                                                                        user_version):
    path = tmp_path / "other.db"
    before = another_apps(path, ddl, user_version)
    with pytest.raises(SinkError, match="is not a sink database"):
        SinkDB(path, TOPIC)
    assert path.read_bytes() == before
    assert not (tmp_path / "other.db-wal").exists()


def test_show_refuses_a_database_the_sink_did_not_make(tmp_path, capsys):
    from workers.cli import main

    path = tmp_path / "other.db"
    another_apps(path, "CREATE TABLE entries (session_key TEXT, seq INTEGER, entry_json TEXT);"
                       "INSERT INTO entries VALUES ('agent:ops:main', 1, '{}');")
    assert main(["show", "agent:ops:main", "--db", str(path)]) == 2
    assert "is not a sink database" in capsys.readouterr().err


def test_show_reads_a_session_from_the_database(tmp_path, capsys):
    from workers.cli import main

    d = db(tmp_path)
    d.apply({0: [Rec(0, key(2), value(entry(2, text="second"))),
                 Rec(1, key(1), value(entry(1, text="first"))),
                 Rec(2, key(1, "agent:ops:other"),
                     value(entry(1, session_key="agent:ops:other")))]}, {})
    d.close()
    path = str(tmp_path / "sink.db")
    assert main(["show", SK, "--db", path, "--json"]) == 0
    shown = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(e["seq"], e["text"]) for e in shown] == [(1, "first"), (2, "second")]
    assert main(["show", SK, "--db", path]) == 0
    table = capsys.readouterr().out.splitlines()
    assert "first" in table[2] and "second" in table[3]
    assert main(["show", "agent:ops:nobody", "--db", path]) == 0
    assert "no entries for agent:ops:nobody" in capsys.readouterr().out
    assert main(["show", SK, "--db", str(tmp_path / "nope.db")]) == 2
    assert "no sink database" in capsys.readouterr().err


# --- positions (DESIGN 1.3) ------------------------------------------------------------------


def position(p: int, input_offset: int, control_offset: int = 0,
             at: str = "2026-12-04T10:00:00.250Z", **extra) -> bytes:
    return json.dumps({"schema": "input-position/1", "partition": p, "input_offset": input_offset,
                       "control_offset": control_offset, "at": at, **extra}).encode()


def stored_positions(d: SinkDB) -> list[tuple]:
    return d.db.execute("SELECT partition, input_offset, control_offset, at, entries_offset "
                        "FROM positions ORDER BY partition").fetchall()


def test_a_position_record_moves_its_partitions_position_with_its_batch_never_a_row(tmp_path):
    d = db(tmp_path)
    done = d.apply({3: [Rec(0, key(1), value(entry(1))),
                        Rec(1, b"position/3", position(3, 12, 2))]}, {})
    assert (done.upserted, done.skipped, done.positions) == (1, 0, 1)
    assert rows(d) == [(SK, 1, "send-1")] and d.counts() == (1, 0)
    assert stored_positions(d) == [(3, 12, 2, "2026-12-04T10:00:00.250Z", 1)]
    assert d.positions() == {3: (12, 2, "2026-12-04T10:00:00.250Z")}
    # a later record further on; one behind in either offset never moves it back
    d.apply({3: [Rec(2, b"position/3", position(3, 20, 2, "2026-12-04T10:00:01Z")),
                 Rec(3, b"position/3", position(3, 15, 5, "2026-12-04T10:00:02+00:00"))]}, {3: 2})
    assert stored_positions(d) == [(3, 20, 5, "2026-12-04T10:00:02.000Z", 3)]


@pytest.mark.parametrize(("rec_key", "rec_value", "reason"), [
    (b"position/3", position(4, 12), "position: key names partition 3, value 4"),
    (b"position/4", position(4, 12), "position: key names partition 4, value 4, read from "
                                     "partition 3"),
    (b"position/3", position(3, "12"), "invalid position: input_offset: int_type"),
    (b"position/3", position(3, -1), "invalid position: input_offset: greater_than_equal"),
    (b"position/3", None, "position: a tombstone"),
    (b"position/03", position(3, 12), "key: not <session_key>#<seq, 10 digits> nor position/"),
])
def test_a_position_that_claims_another_partition_or_is_invalid_is_skipped(tmp_path, rec_key,
                                                                           rec_value, reason):
    d = db(tmp_path)
    done = d.apply({3: [Rec(7, rec_key, rec_value)]}, {})
    assert (done.positions, done.skipped) == (0, 1)
    assert stored_positions(d) == [] and d.offsets() == {3: 8}
    (got,) = d.db.execute("SELECT reason FROM skipped").fetchall()
    assert got[0].startswith(reason), got


def test_a_batch_rolled_back_leaves_its_position_behind_with_its_rows(tmp_path):
    """The rows and the position commit together: a batch that conflicts (another process moved
    the partition) writes neither."""
    d = db(tmp_path)
    d.apply({3: [Rec(0, b"position/3", position(3, 5))]}, {})
    with pytest.raises(OffsetConflict):
        d.apply({3: [Rec(1, key(1), value(entry(1))), Rec(2, b"position/3", position(3, 9))]},
                {3: 0})  # it holds 1 now
    assert rows(d) == [] and stored_positions(d)[0][1] == 5


def test_a_format_3_database_gets_an_empty_positions_table_and_keeps_its_rows(tmp_path, caplog):
    path = tmp_path / "sink.db"
    format_2(path, [entry(1), entry(2)], {0: 2})
    c = sqlite3.connect(path)  # format 3: as format 2 with entries.chain and table rechain
    c.executescript("ALTER TABLE entries ADD COLUMN chain TEXT; CREATE TABLE rechain (topic TEXT "
                    "NOT NULL, partition INTEGER NOT NULL, until_offset INTEGER NOT NULL, "
                    "PRIMARY KEY (topic, partition));")
    c.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    c.execute("PRAGMA user_version = 3")
    c.commit()
    c.close()
    caplog.set_level("INFO", logger="transcript_owner.sink")
    d = SinkDB(path, TOPIC)
    assert marks(path) == (APPLICATION_ID, 4)
    assert rows(d) == [(SK, 1, "send-1"), (SK, 2, "send-2")] and d.offsets() == {0: 2}
    assert d.rechain() == {} and stored_positions(d) == []
    assert "migrated from sink format 3 to 4" in caplog.text
    d.apply({0: [Rec(2, b"position/0", position(0, 40))]}, {0: 2})
    assert d.positions()[0][0] == 40
    d.reset()
    assert stored_positions(d) == []
