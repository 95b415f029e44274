"""`show SESSION_KEY` and `forget`'s live-entry count select a session by its exact entry keys,
never by a key prefix; `show`'s table view prints no control character (workers/commands/show.py,
workers/commands/forget.py, parse_entry_key in workers/core/outputs.py). No broker: the topic
is a list of records handed to the readers in place of `workers.kafka_io.read`."""

from __future__ import annotations

import json
import unicodedata
from collections import namedtuple

import pytest

from tests.unit.test_sink import Rec, entry, key, value
from workers.cli import main
from workers.commands import forget, show
from workers.commands.sink import SinkDB
from workers.core.outputs import entry_key, parse_entry_key
from workers.settings import kafka_settings

K = "agent:a:main"
NEIGHBOUR = "agent:a:main#1"  # a session key may hold `#`: its keys start with `K#` too
Record = namedtuple("Record", "key value")


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


@pytest.fixture
def partition(monkeypatch) -> list[Record]:
    """PARTITION in place of the topic, for whichever partition a reader asks for."""
    monkeypatch.setattr("workers.kafka_io.read", lambda ks, t, *, partitions: iter(PARTITION))
    return PARTITION


def test_show_reads_only_the_sessions_own_keys_from_the_topic(partition, capsys):
    """On the old code (key prefix `agent:a:main#`) the neighbour's entries were shown too."""
    shown, _, skipped = show.from_topic(K)
    assert [(json.loads(t)["seq"], json.loads(t)["text"]) for t in shown] == [
        (1, "mine"), (3, "mine too")]
    assert skipped == 1  # seq 4's value is not an entry of its key
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
