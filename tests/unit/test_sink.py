"""The sink's row changes and its database, without a broker (workers/commands/sink.py)."""

from __future__ import annotations

import json
import sqlite3
from collections import namedtuple

import pytest

from workers.commands.sink import (
    Delete,
    OffsetConflict,
    SinkDB,
    SinkError,
    Skip,
    Upsert,
    classify,
)

TOPIC = "p.transcript.entries"
Rec = namedtuple("Rec", "offset key value")
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
    change = classify(key(3), v)
    assert change == Upsert(SK, 0, 3, "id-3", "send-3", v.decode())


def test_a_tombstone_deletes_its_key():
    assert classify(key(7), None) == Delete(SK, 7)
    assert classify(b"agent:a:b#c:x#0000000012", None) == Delete("agent:a:b#c:x", 12)


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
])
def test_an_invalid_record_is_skipped_with_a_reason_and_no_content(k, v, why):
    change = classify(k, v)
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
                        Rec(2, key(3), value(entry(3, send_id="send-2")))]}, {})
    assert (done.upserted, done.skipped) == (1, 2)
    assert rows(d) == [(SK, 2, "send-2")]
    reasons = d.db.execute('SELECT "offset", reason FROM skipped ORDER BY 1').fetchall()
    assert reasons[0][0] == 0 and "invalid entry" in reasons[0][1]
    assert reasons[1] == (2, "send_id: the session already holds it at seq 2")
    assert d.counts() == (1, 2)
    assert d.offsets() == {1: 3}
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2
    assert all("secret" not in r.getMessage() for r in warnings)


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
    c.execute("PRAGMA user_version = 7")
    c.close()
    with pytest.raises(SinkError, match="version 7"):
        SinkDB(newer, TOPIC)


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
