"""`show SESSION_KEY` and `forget`'s live-entry count select a session by its exact entry keys,
never by a key prefix; `show`'s table view prints no control character (workers/commands/show.py,
workers/commands/forget.py, parse_entry_key in workers/core/outputs.py); `show` reads the
session's home under the topic's own partition count, and `show --at` binds the read to a
position (exit 3 when stale). No broker: the topic is a list of records handed to the readers in
place of `workers.kafka_io.read`, its partition counts a pair in place of `show.topic_counts`,
and a bound read's result is handed in place of `show.read_bound` (the reader itself is tested
on the broker in connectors/python/tests/test_reader_*.py)."""

from __future__ import annotations

import json
import unicodedata
from collections import namedtuple

import pytest
from transcript_connector.chain import link, root
from transcript_connector.entries_topic import Position
from transcript_connector.errors import ReadError, StaleReadError
from transcript_connector.partitioning import partition_for
from transcript_connector.reader_plan import LATEST, At, ReadEntry, SessionRead, Unreadable
from transcript_connector.records import TranscriptEntry

from tests.unit.test_sink import FORMAT_1, Rec, entry, format_2, key, value
from workers.cli import build_parser, main
from workers.commands import forget, show
from workers.commands.sink import APPLICATION_ID, SinkDB
from workers.core.outputs import entry_key, parse_entry_key
from workers.settings import kafka_settings

K = "agent:a:main"
NEIGHBOUR = "agent:a:main#1"  # a session key may hold `#`: its keys start with `K#` too
Record = namedtuple("Record", "key value headers", defaults=((),))


@pytest.mark.parametrize("session_key, seq", [
    (K, 1), (NEIGHBOUR, 1), ("agent:a:x#0000000001", 12), ("a#b#c", 9_999_999_999)])
def test_an_entry_key_parses_back_to_its_session_and_seq(session_key, seq):
    assert parse_entry_key(entry_key(session_key, seq)) == (session_key, seq)


@pytest.mark.parametrize("raw", [
    None, b"", b"agent:a:main", b"agent:a:main#", b"#0000000001", b"agent:a:main#123",
    b"agent:a:main#00000000001", b"agent:a:main#000000000x", b"agent:a:main#000000000\n",
    "agent:a:main#000000000\u0661".encode(), b"\xff#0000000001"])
def test_anything_else_is_no_entry_key(raw):
    assert parse_entry_key(raw) is None


def topic(*records: tuple[str, int, bytes | None]) -> list[Record]:
    return [Record(entry_key(sk, seq), v) for sk, seq, v in records]


def entry_of(session_key: str, seq: int, text: str) -> bytes:
    return value(entry(seq, session_key=session_key, text=text))


PARTITION = topic(
    (K, 1, entry_of(K, 1, "mine")),
    (NEIGHBOUR, 1, entry_of(NEIGHBOUR, 1, "from another chat")),
    (K, 2, entry_of(K, 2, "erased")),
    (NEIGHBOUR, 2, entry_of(NEIGHBOUR, 2, "from another chat, again")),
    (K, 2, None),
    (K, 3, entry_of(K, 3, "mine too")),
    (K, 4, entry_of(NEIGHBOUR, 4, "a value that names another session")),
)


def fake_topic(monkeypatch, records: list[Record], counts: tuple[int, int] = (8, 8)) -> None:
    """`records` in place of the topic, for whichever partition a reader asks for; `counts` in
    place of the cluster's metadata (the input's and the entries' partition counts)."""
    monkeypatch.setattr("workers.kafka_io.read", lambda ks, t, *, partitions: iter(records))
    monkeypatch.setattr(show, "topic_counts", lambda ks: counts)


@pytest.fixture
def partition(monkeypatch) -> list[Record]:
    """PARTITION in place of the topic, for whichever partition a reader asks for."""
    fake_topic(monkeypatch, PARTITION)
    return PARTITION


def test_show_reads_only_the_sessions_own_keys_from_the_topic(partition, capsys):
    """On the old code (key prefix `agent:a:main#`) the neighbour's entries were shown too."""
    shown, _, invalid = show.from_topic(K)
    assert [(json.loads(s.value)["seq"], json.loads(s.text)["text"]) for s in shown] == [
        (1, "mine"), (3, "mine too")]
    assert [s.seq for s in invalid] == [4]  # seq 4's value is not an entry of its key
    assert main(["show", K]) == 0
    out = capsys.readouterr()
    assert "another chat" not in out.out and "mine too" in out.out
    assert "1 live records of the session are not valid entries" in out.err
    assert main(["show", NEIGHBOUR, "--json"]) == 0
    assert [json.loads(t)["text"] for t in capsys.readouterr().out.splitlines()] == [
        "from another chat", "from another chat, again"]


def test_forget_counts_only_the_sessions_own_live_entries(partition):
    """On the old code the neighbour's two entries were counted: 5, not 3."""
    ks = kafka_settings({})
    assert forget.live_entries(ks, K, 0) == 3  # seq 1, 3 and 4 (seq 2 erased)
    assert forget.live_entries(ks, NEIGHBOUR, 0) == 2
    assert forget.live_entries(ks, "agent:a", 0) == 0


HOSTILE = "\x1b[2J\x1b]0;pwned\x07 done\rfake\x08\x9b31m \u202egnp.exe\u2066x\u2069\ntwo\tcols"


def test_the_table_view_prints_no_control_character(tmp_path, capsys):
    path = tmp_path / "sink.db"
    d = SinkDB(path, "p.transcript.entries")
    e = entry(1, session_key=K, text=HOSTILE, source="message_tool",
              posted_by={"kind": "job", "id": "j1", "name": "eve\x1b[8m\u202e"})
    d.apply({0: [Rec(0, key(1, K), value(e))]}, {})
    d.close()
    assert main(["show", K, "--db", str(path)]) == 0
    out = capsys.readouterr().out
    assert not [c for c in out if c != "\n" and unicodedata.category(c) in ("Cc", "Cf")]
    assert len(out.splitlines()) == 3  # header, rule, one row: the text's newline is escaped
    row = out.splitlines()[2]
    assert "\\x1b[2J\\x1b]0;pwned\\x07 done\\rfake\\x08\\x9b31m \\u202egnp.exe" in row
    assert "\\u2066x\\u2069\\ntwo\\tcols" in row and "eve\\x1b[8m\\u202e" in row
    assert main(["show", K, "--db", str(path), "--json"]) == 0  # the JSON view stays exact
    assert json.loads(capsys.readouterr().out)["text"] == HOSTILE


def test_visible_keeps_ordinary_text():
    text = "héllo — 你好 \U0001f469\u200d\U0001f467 a\\x1b"  # a ZWJ sequence stays whole
    assert show.visible(text) == text
    assert show.visible("\x00\x7f\x85\u2028\u061c\u200f") == "\\x00\\x7f\\x85\\u2028\\u061c\\u200f"


# --- show --verify: the hash chain (DESIGN 1.2, "Tamper evidence") ---------------------------

SK = "agent:ops:telegram:direct:7"


def chained(session_key: str, seqs, *, epoch: int = 0, start: bytes | None = None,
            **fields) -> list[tuple[int, bytes, list]]:
    """Honest entries of a session as the worker writes them: (seq, value, headers), each with
    the `chain` header computed by root/link (from `start`, else from the epoch's root)."""
    previous = start if start is not None else root(session_key, epoch)
    out = []
    for seq in seqs:
        v = value(entry(seq, session_key=session_key, epoch=epoch, text=f"message {seq}",
                        **fields))
        previous = link(previous, v)
        out.append((seq, v, [("chain", previous.hex().encode())]))
    return out


def sink_db(tmp_path, records) -> str:
    """A sink database holding `records` ((seq, value, headers) of session SK)."""
    path = tmp_path / "sink.db"
    d = SinkDB(path, "p.transcript.entries")
    d.apply({0: [Rec(i, key(seq, SK), v, h) for i, (seq, v, h) in enumerate(records)]}, {})
    d.close()
    return str(path)


def change(path: str, sql: str, *args) -> None:
    import sqlite3

    c = sqlite3.connect(path)
    c.execute(sql, args)
    c.commit()
    c.close()


def test_verify_an_honest_session_from_the_database(tmp_path, capsys):
    path = sink_db(tmp_path, chained(SK, range(1, 4)))
    assert main(["show", SK, "--db", path, "--verify"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 + 3 + 1 and "message 3" in out[4]  # the transcript, then the chain
    assert out[-1] == "chain: verified 3 entries (0 written before the chain)"
    # a session with no entry verified nothing: never "verified", exit 2 (issue 42, item 2)
    assert main(["show", "agent:ops:nobody", "--db", path, "--verify"]) == 2
    assert capsys.readouterr().out.splitlines()[-1] == (
        "chain: nothing verified: no entry of the session was read (an unknown or erased "
        "session, or the wrong deployment)")


def test_verify_names_the_seq_of_a_row_changed_in_the_database(tmp_path, capsys):
    path = sink_db(tmp_path, chained(SK, range(1, 5)))
    change(path, "UPDATE entries SET entry_json = replace(entry_json, 'message 2', 'message 3') "
                 "WHERE seq = 2")  # one byte
    assert main(["show", SK, "--db", path, "--verify"]) == 1
    out = capsys.readouterr().out
    findings = [line for line in out.splitlines() if line.startswith("chain:")]
    assert findings == ["chain: seq 2: does not chain from seq 1: this entry was changed, or one "
                        "before it removed, inserted or moved"]
    assert "verified" not in out


def test_verify_finds_a_middle_row_deleted_from_the_database(tmp_path, capsys):
    path = sink_db(tmp_path, chained(SK, range(1, 5)))
    change(path, "DELETE FROM entries WHERE seq = 2")
    assert main(["show", SK, "--db", path, "--verify"]) == 1
    findings = [line for line in capsys.readouterr().out.splitlines()
                if line.startswith("chain:")]
    assert len(findings) == 1 and findings[0].startswith("chain: seq 3: does not chain from "
                                                         "seq 1")
    assert "seq 2..2 missing" in findings[0]


def test_verify_survives_a_row_that_is_no_entry_any_more(tmp_path, capsys):
    """Bytes changed into something that is not JSON, not UTF-8, not text: shown as such, the
    seq named, no traceback."""
    path = sink_db(tmp_path, chained(SK, range(1, 4)))
    change(path, "UPDATE entries SET entry_json = '[' || substr(entry_json, 2) WHERE seq = 1")
    change(path, "UPDATE entries SET entry_json = X'7bff' WHERE seq = 2")
    change(path, "UPDATE entries SET chain = 42 WHERE seq = 3")
    assert main(["show", SK, "--db", path, "--verify"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert "[not a transcript entry]" in out[2] and "[not a transcript entry]" in out[3]
    assert [line.split(":")[1] for line in out if line.startswith("chain:")] == [
        " seq 1", " seq 2", " seq 3"]


def test_verify_counts_rows_written_before_the_chain(tmp_path, capsys):
    """A session written before 1.2 (no headers), then chained from its root by the worker."""
    old = [(seq, value(entry(seq, session_key=SK)), []) for seq in (1, 2)]
    path = sink_db(tmp_path, old)
    assert main(["show", SK, "--db", path, "--verify"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "chain: verified 0 entries (2 written before the chain)")
    (tmp_path / "later").mkdir()
    path = sink_db(tmp_path / "later", old + chained(SK, (3, 4)))
    assert main(["show", SK, "--db", path, "--verify"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "chain: verified 2 entries (2 written before the chain)")


def test_verify_finds_a_header_that_was_dropped_after_chained_entries(tmp_path, capsys):
    records = chained(SK, range(1, 4))
    records[1] = (records[1][0], records[1][1], [])
    path = sink_db(tmp_path, records)
    assert main(["show", SK, "--db", path, "--verify"]) == 1
    assert "chain: seq 2: no chain header after chained entries" in capsys.readouterr().out


AFTER = "2026-12-03T10:00:00Z"  # after the chain began (CHAIN_SINCE): a worker chained it


@pytest.mark.parametrize("odd", [
    lambda h: h + h,  # twice
    lambda h: [("chain", None)],  # a null value
    lambda h: [("chain", h[0][1][:63] + "é".encode())],  # not ASCII
])
def test_verify_finds_every_header_doubled_or_odd_from_the_database_and_the_topic(
        tmp_path, monkeypatch, capsys, odd):
    """Every header doubled (or null, or not ASCII) was stored as none: "verified 0 entries
    (3 written before the chain)", exit 0, while `audit` reported the same records. One rule
    now (transcript_connector.chain.header_text): each is a finding, from both sources."""
    records = [(seq, v, odd(h)) for seq, v, h in chained(SK, range(1, 4))]
    path = sink_db(tmp_path, records)
    assert main(["show", SK, "--db", path, "--verify"]) == 1
    db_lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("chain:")]
    assert db_lines == [f"chain: seq {s}: the chain header is empty, repeated, null or not ASCII"
                        for s in (1, 2, 3)]
    fake_topic(monkeypatch, [Record(key(seq, SK), v, h) for seq, v, h in records])
    assert main(["show", SK, "--verify"]) == 1
    assert [x for x in capsys.readouterr().out.splitlines() if x.startswith("chain:")] == db_lines


def test_verify_finds_every_header_stripped_from_entries_written_after_the_chain_began(
        tmp_path, monkeypatch, capsys):
    """A writer of the topic strips every header: the session read as written before the chain
    ("verified 0 entries (3 written before the chain)", exit 0). An entry written at or after
    CHAIN_SINCE (by its written_at) should be chained: each is a finding, exit 1."""
    records = [(seq, v, []) for seq, v, _ in chained(SK, range(1, 4), written_at=AFTER)]
    path = sink_db(tmp_path, records)
    assert main(["show", SK, "--db", path, "--verify"]) == 1
    out = capsys.readouterr().out
    assert "verified" not in out
    found = [x for x in out.splitlines() if x.startswith("chain:")]
    assert found == [f"chain: seq {s}: no chain header, and written_at is not before "
                     "2026-12-02T00:00:00Z, when the chain began: the header was stripped (or a "
                     "worker before 1.2 wrote the entry)" for s in (1, 2, 3)]
    fake_topic(monkeypatch, [Record(key(seq, SK), v, h) for seq, v, h in records])
    assert main(["show", SK, "--verify"]) == 1
    assert [x for x in capsys.readouterr().out.splitlines() if x.startswith("chain:")] == found


def test_verify_with_json_keeps_stdout_json_lines(tmp_path, capsys):
    path = sink_db(tmp_path, chained(SK, range(1, 4)))
    assert main(["show", SK, "--db", path, "--verify", "--json"]) == 0
    out, err = capsys.readouterr()
    assert [json.loads(line)["seq"] for line in out.splitlines()] == [1, 2, 3]
    assert err == "chain: verified 3 entries (0 written before the chain)\n"
    change(path, "UPDATE entries SET entry_json = replace(entry_json, 'message 3', 'message 4') "
                 "WHERE seq = 3")
    assert main(["show", SK, "--db", path, "--verify", "--json"]) == 1
    out, err = capsys.readouterr()
    assert [json.loads(line)["seq"] for line in out.splitlines()] == [1, 2, 3]
    assert err.startswith("chain: seq 3: ") and len(err.splitlines()) == 1


def test_verify_reads_databases_of_formats_1_and_2_as_written_before_the_chain(tmp_path,
                                                                               capsys):
    import sqlite3

    two = tmp_path / "two.db"
    format_2(two, [entry(q, session_key=SK) for q in (1, 2)], {0: 2})
    one = tmp_path / "one.db"
    c = sqlite3.connect(one)
    c.executescript(FORMAT_1)
    c.executemany("INSERT INTO entries VALUES (?, 0, ?, ?, ?, ?)",
                  [(SK, q, f"id-{q}", f"send-{q}", value(entry(q, session_key=SK)).decode())
                   for q in (1, 2, 3)])
    c.commit()
    c.close()
    before = one.read_bytes(), two.read_bytes()
    assert main(["show", SK, "--db", str(two), "--verify"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "chain: verified 0 entries (2 written before the chain)")
    assert main(["show", SK, "--db", str(one), "--verify"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "chain: verified 0 entries (3 written before the chain)")
    assert (one.read_bytes(), two.read_bytes()) == before  # read-only: not migrated


def test_verify_cannot_run_on_a_database_still_read_again_after_its_migration(tmp_path,
                                                                              capsys):
    path = tmp_path / "two.db"
    format_2(path, [entry(1, session_key=SK)], {0: 9})
    SinkDB(path, "p.transcript.entries").close()  # migrated: partition 0 read again up to 9
    assert main(["show", SK, "--db", str(path)]) == 0  # the rows are right meanwhile
    capsys.readouterr()
    assert main(["show", SK, "--db", str(path), "--verify"]) == 2
    out, err = capsys.readouterr()
    assert "still reading 1 partitions again" in err and "Traceback" not in err


def test_verify_cannot_run_without_a_sink_database(tmp_path, capsys):
    import sqlite3

    from workers.commands.sink import SCHEMA_VERSION

    newer = tmp_path / "newer.db"
    c = sqlite3.connect(newer)
    c.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    c.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    c.close()
    foreign = tmp_path / "foreign.db"
    c = sqlite3.connect(foreign)
    c.execute("CREATE TABLE entries (seq INTEGER, entry_json TEXT, chain TEXT)")
    c.close()
    for path, reason in ((newer, f"sink database version {SCHEMA_VERSION + 1}, this version "
                                 f"reads versions up to {SCHEMA_VERSION}"),
                         (foreign, "is not a sink database"),
                         (tmp_path / "missing.db", "no sink database at")):
        assert main(["show", SK, "--db", str(path), "--verify"]) == 2
        out, err = capsys.readouterr()
        assert reason in err and len(err.splitlines()) == 1 and out == "", err


def test_verify_from_the_topic_checks_compactions_view_with_its_headers(monkeypatch, capsys):
    """Each key's latest value with its header; a live value the sink would skip is verified
    too, and a tombstoned entry is a gap."""
    honest = chained(SK, range(1, 5))
    records = [Record(key(seq, SK), v, h) for seq, v, h in honest]
    fake_topic(monkeypatch, records)
    assert main(["show", SK, "--verify"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "chain: verified 4 entries (0 written before the chain)")

    records.append(Record(key(2, SK), b'{"not": "an entry"}', honest[1][2]))  # rewritten
    records.append(Record(key(4, SK), None))  # the last one erased: only `audit` can tell
    assert main(["show", SK, "--verify", "--json"]) == 1
    out, err = capsys.readouterr()
    assert [json.loads(line)["seq"] for line in out.splitlines()] == [1, 3]
    assert "1 live records of the session are not valid entries" in err
    assert [line for line in err.splitlines() if line.startswith("chain:")] == [
        "chain: seq 2: the value names another session or seq than its key"]


# --- show --at: a read bound to a position (DESIGN 1.3) --------------------------------------

def session_read(records, unreadable=(), partition: int = 3) -> SessionRead:
    """What the reader returns for `records` ((seq, value, headers), as `chained` makes)."""
    entries = tuple(ReadEntry(seq, TranscriptEntry.model_validate_json(v), v,
                              h[0][1].decode() if h else None) for seq, v, h in records)
    return SessionRead(SK, partition, Position(partition, 10, 0, None, 99), 10, entries,
                       tuple(unreadable))


class FakeReader:
    """`show.read_bound` answering `outcome` (a SessionRead, or an error it raises); the calls
    it got."""

    def __init__(self, outcome) -> None:
        self.outcome, self.calls = outcome, []

    def __call__(self, ks, session_key, at, timeout_s, database):
        self.calls.append((session_key, at, timeout_s, database))
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


@pytest.mark.parametrize(("argv", "at", "timeout"), [
    ([], None, None), (["--at", "latest"], LATEST, None), (["--at", "3:1200"], At(3, 1200), None),
    (["--at", "0:0", "--timeout", "2.5"], At(0, 0), 2.5)])
def test_at_and_timeout_are_parsed(argv, at, timeout):
    args = build_parser("show").parse_args(["show", SK, *argv])
    assert (args.at, args.timeout) == (at, timeout)


@pytest.mark.parametrize(("argv", "named"), [
    (["--at", "3"], "argument --at: '3': expected latest or PARTITION:OFFSET"),
    (["--at", "LATEST"], "argument --at: 'LATEST': expected latest"),
    (["--at=-1:5"], "argument --at: '-1:5': expected"),
    (["--at", "1:2:3"], "argument --at: '1:2:3': expected"),
    (["--at", "2147483648:0"], "argument --at: '2147483648:0': partition or offset out of range"),
    (["--at", "latest", "--timeout", "0"], "argument --timeout: '0': expected seconds"),
    (["--at", "latest", "--timeout", "nan"], "argument --timeout: 'nan': expected seconds"),
    (["--at", "latest", "--timeout", "soon"], "argument --timeout: 'soon': expected seconds"),
])
def test_a_malformed_bound_exits_2_naming_it(monkeypatch, capsys, argv, named):
    reader = FakeReader(AssertionError("never read"))
    monkeypatch.setattr(show, "read_bound", reader)
    with pytest.raises(SystemExit) as exited:
        main(["show", SK, *argv])
    out, err = capsys.readouterr()
    assert exited.value.code == 2 and named in err and out == "" and not reader.calls


def test_timeout_without_at_exits_2(capsys):
    assert main(["show", SK, "--timeout", "3"]) == 2
    assert capsys.readouterr() == ("", "show: --timeout applies to a read bound by --at\n")


def test_a_stale_read_exits_3_with_the_reason_and_prints_no_transcript(monkeypatch, capsys):
    error = StaleReadError(3, 100, 120, 2.5)
    reader = FakeReader(error)
    monkeypatch.setattr(show, "read_bound", reader)
    for argv in (["--at", "latest"], ["--at", "3:119", "--timeout", "1", "--verify", "--json"]):
        assert main(["show", SK, *argv]) == 3
        assert capsys.readouterr() == ("", f"{error}\n")
    assert reader.calls == [(SK, LATEST, None, None), (SK, At(3, 119), 1.0, None)]
    assert str(error) == ("stale read: partition 3 reached input offset 100, needed 120; the "
                          "worker's last position there is 2.5s old")


def test_a_read_that_cannot_read_exits_2_with_one_line(monkeypatch, capsys):
    monkeypatch.setattr(show, "read_bound", FakeReader(ReadError(
        "p.db: sink database format 3 has no positions: run a sink of this version on it first")))
    assert main(["show", SK, "--at", "latest", "--db", "p.db"]) == 2
    assert capsys.readouterr() == ("", "show: p.db: sink database format 3 has no positions: "
                                       "run a sink of this version on it first\n")


def test_a_bound_read_prints_and_verifies_what_it_returned(monkeypatch, capsys):
    honest = chained(SK, range(1, 4))
    monkeypatch.setattr(show, "read_bound", FakeReader(session_read(honest)))
    assert main(["show", SK, "--at", "latest", "--verify"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 + 3 + 1 and "message 3" in out[4]
    assert out[-1] == "chain: verified 3 entries (0 written before the chain)"
    assert main(["show", SK, "--at", "latest", "--json"]) == 0
    assert [json.loads(line)["seq"] for line in capsys.readouterr().out.splitlines()] == [1, 2, 3]

    # a live value that is no entry of its key: not shown, but verified (a finding)
    changed = Unreadable(2, b'{"not": "an entry"}', honest[1][2][0][1].decode(), "value: x")
    read = session_read([honest[0], honest[2]], [changed])
    monkeypatch.setattr(show, "read_bound", FakeReader(read))
    assert main(["show", SK, "--at", "3:9", "--verify", "--json"]) == 1
    out, err = capsys.readouterr()
    assert [json.loads(line)["seq"] for line in out.splitlines()] == [1, 3]
    assert "1 live records of the session are not valid entries" in err
    assert [line for line in err.splitlines() if line.startswith("chain:")] == [
        "chain: seq 2: the value names another session or seq than its key"]


def test_a_bound_read_of_a_database_shows_every_row_as_without_at(monkeypatch, capsys):
    honest = chained(SK, range(1, 3))
    changed = Unreadable(3, b"[1]", None, "value: x")
    reader = FakeReader(session_read(honest, [changed]))
    monkeypatch.setattr(show, "read_bound", reader)
    assert main(["show", SK, "--at", "latest", "--db", "x.db"]) == 0
    rows = capsys.readouterr().out.splitlines()[2:]
    assert len(rows) == 3 and "[not a transcript entry]" in rows[2]
    assert reader.calls == [(SK, LATEST, None, "x.db")]


def test_the_topic_is_read_at_home_under_its_own_partition_count(monkeypatch, capsys):
    """Issue 42: with TRANSCRIPT_PARTITIONS stale (8, the default) against a topic of 16, show
    read partition_for(key, 8), printed nothing and exited 0."""
    key = next(k for k in (f"agent:a:s{i}" for i in range(200))
               if partition_for(k, 16) != partition_for(k, 8))
    asked = []
    records = [Record(entry_key(key, 1), entry_of(key, 1, "here"))]

    def read(ks, topic, *, partitions):
        asked.append(list(partitions))
        return iter(records if asked[-1] == [partition_for(key, 16)] else [])

    monkeypatch.setenv("TRANSCRIPT_PARTITIONS", "8")
    monkeypatch.setattr("workers.kafka_io.read", read)
    monkeypatch.setattr(show, "topic_counts", lambda ks: (16, 16))
    assert main(["show", key, "--json"]) == 0
    assert asked == [[partition_for(key, 16)]]
    assert json.loads(capsys.readouterr().out)["text"] == "here"


def test_while_a_repartition_is_in_progress_show_says_so_and_exits_2(monkeypatch, capsys):
    fake_topic(monkeypatch, PARTITION, counts=(8, 16))
    for argv in ([], ["--verify"], ["--json"]):
        assert main(["show", K, *argv]) == 2
        assert capsys.readouterr() == ("", (
            "show: cannot tell the session's partition: a repartition is in progress: "
            "delivery.confirmations has 8 partitions, transcript.entries 16; show it once the "
            "move is over\n"))


def test_the_readers_options_are_the_workers_kafka_settings():
    ks = kafka_settings({"KAFKA_BOOTSTRAP": "127.0.0.1:9093", "TRANSCRIPT_TOPIC_PREFIX": "p.",
                         "KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
                         "KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
                         "KAFKA_SASL_USERNAME": "op", "KAFKA_SASL_PASSWORD": "pw"})
    o = show.reader_options(ks)
    assert (o.bootstrap, o.input_topic, o.entries_topic) == (
        "127.0.0.1:9093", "p.delivery.confirmations", "p.transcript.entries")
    assert o.kafka_kwargs()["sasl_plain_password"] == "pw"
    assert o.who() == "KAFKA_SASL_USERNAME='op' (SASL SCRAM-SHA-256 over SASL_PLAINTEXT)"
