"""workers/core/layout.py: the moves `repartition` records, read back strictly, and what they
mean for a reader (families, epochs) and for the move (which state keys and entries go where)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transcript_connector.partitioning import partition_for

from workers.core.layout import (
    Homes,
    Layout,
    Move,
    check_move,
    decode_layout,
    encode_move,
    encode_moved,
    entry_home,
    family,
    move_key,
    moved_key,
    segments,
    split_state,
    state_session,
    state_session_parsed,
)
from workers.core.outputs import entry_key
from workers.core.state import CUTOVER_KEY, head_key, seen_key, ticket_key


def move(old: int, new: int, done: bool = True, at: int = 10) -> Move:
    return Move(old, new, tuple(at + p for p in range(old)), tuple(p for p in range(old)),
                "2026-12-04T00:00:00+00:00", "2026-12-04T00:01:00+00:00" if done else None)


def records(*moves: Move, marks: tuple[tuple[int, int, int, int], ...] = ()) -> list:
    out = [(move_key(m.old, m.new), encode_move(m)) for m in moves]
    out += [(moved_key(o, n, p), encode_moved(o, n, p, end, 3, 4)) for o, n, p, end in marks]
    return out


@pytest.mark.parametrize(("old", "new", "why"), [
    (8, 16, None), (8, 64, None), (1, 3, None),
    (8, 8, "can only add"), (16, 8, "can only add"), (8, 12, "not a multiple of 8"),
    (8, 0, "expected 1 to"), (8, 10_008, "expected 1 to"),
])
def test_a_move_goes_to_a_larger_multiple(old, new, why):
    found = check_move(old, new)
    assert (found is None) if why is None else (why in found)


def test_the_layout_reads_back_what_was_written_with_its_markers():
    layout = decode_layout(records(move(8, 16), move(16, 32, done=False),
                                   marks=((16, 32, 3, 77), (16, 32, 0, 5))))
    assert isinstance(layout, Layout)
    assert [(m.old, m.new) for m in layout.moves] == [(8, 16), (16, 32)]
    assert layout.pending is not None and layout.pending.new == 32
    assert layout.pending.moved == {0, 3} and layout.pending.entries_ends == {0: 5, 3: 77}
    assert layout.counts(8) == [8, 16, 32]
    assert Layout().counts(8) == [8] and Layout().pending is None


def test_a_move_written_twice_keeps_the_last_record_of_its_key():
    layout = decode_layout(records(move(8, 16, done=False), move(8, 16, done=True)))
    assert isinstance(layout, Layout) and layout.pending is None


@pytest.mark.parametrize(("recs", "why"), [
    ([(b"move/8-16", None)], "tombstone"),
    ([(None, b"{}")], "without a key"),
    ([(b"move/8-16", b"not json")], "not JSON"),
    ([(b"move/8-16", b'{"schema":"other"}')], "not a partition-move/1"),
    ([(b"move/8-16", encode_move(move(8, 32)))], "not the key's counts"),
    ([(b"move/8-12", encode_move(move(8, 12)))], "not the key's counts"),
    ([(b"move/8-16", json.dumps({**json.loads(encode_move(move(8, 16))),
                                  "input_offsets": [1, 2]}).encode())], "expected 8 offsets"),
    ([(b"move/8-16", json.dumps({**json.loads(encode_move(move(8, 16))),
                                  "input_offsets": [-1] * 8}).encode())], "expected 8 offsets"),
    ([(b"move/8-16", json.dumps({**json.loads(encode_move(move(8, 16))),
                                  "control_offsets": [True] * 8}).encode())], "expected 8"),
    ([(b"move/8-16", json.dumps({**json.loads(encode_move(move(8, 16))),
                                  "begun_at": 5}).encode())], "expected text"),
    (records(move(8, 16, done=False), move(16, 32)), "does not follow"),
    (records(move(8, 16), move(32, 64)), "does not follow"),
    ([(b"move/8-16/3", b'{"schema":"partition-moved/1","from":8,"to":16,"partition":4,'
                       b'"entries_end":1}')], "not a partition-moved/1 record of its key"),
    ([(b"move/8-16/3", b'[' * 100_000)], "not JSON"),
    ([(b"move/8-16", b'[' * 100_000)], "not JSON"),
])
def test_a_layout_record_of_another_shape_is_named_not_guessed(recs, why):
    found = decode_layout(recs)
    assert isinstance(found, str) and why in found, found


def test_families_and_epochs_after_two_moves():
    layout = decode_layout(records(move(8, 16, at=100), move(16, 32, at=200)))
    assert isinstance(layout, Layout)
    assert family(layout, 3) == [3, 11, 19, 27]
    assert family(Layout(), 3) == [3]
    # an old partition: three epochs; one born at 16: two; one born at 32: one
    assert segments(layout, 3, 500, 32) == [(8, 0, 103), (16, 103, 203), (32, 203, 500)]
    assert segments(layout, 11, 500, 32) == [(16, 0, 211), (32, 211, 500)]
    assert segments(layout, 27, 40, 32) == [(32, 0, 40)]
    assert segments(layout, 3, 4, 32, control=True) == [(8, 0, 3), (32, 3, 4)]
    assert segments(Layout(), 3, 9, 8) == [(8, 0, 9)]
    assert segments(Layout(), 3, 0, 8) == []


def test_every_session_of_a_family_is_at_home_in_it():
    layout = decode_layout(records(move(8, 16), move(16, 32)))
    assert isinstance(layout, Layout)
    for i in range(2000):
        key = f"agent:main:telegram:direct:{i}"
        assert partition_for(key, 32) in family(layout, partition_for(key, 8))


def test_the_state_keys_of_a_session_move_together_and_the_cut_over_stays():
    sessions = [f"agent:main:slack:channel:c{i}" for i in range(64)]
    latest = {CUTOVER_KEY: b"12"}
    for s in sessions:
        if partition_for(s, 4) != 1:
            continue
        latest[head_key(s)] = b"h"
        latest[seen_key(s, "send-1")] = b"s"
        latest[ticket_key(s, 7)] = b"t"
        latest[s.encode()] = b"v1"  # format 1: the session key itself
    moving = split_state(latest, 1, 8)
    assert set(moving) == {5}  # 1 + 4: the only other home in its family
    moved = {k for keys in moving.values() for k in keys}
    assert CUTOVER_KEY not in moved
    for key in moved:
        assert partition_for(state_session(key), 8) == 5
    staying = set(latest) - moved - {CUTOVER_KEY}
    assert staying and all(partition_for(state_session(k), 8) == 1 for k in staying)


@pytest.mark.parametrize(("key", "session"), [
    (head_key("a#b"), "a#b"), (seen_key("k", "id"), "k"), (ticket_key("k", 3), "k"),
    (CUTOVER_KEY, None), (b'["x","k"]', None), (b"[not json", "[not json"),
    (b"\xff\xfe", None), (b"agent:main:x", "agent:main:x"),
    (head_key('a"b\\c\n'), 'a"b\\c\n'), (head_key("ü:\u2028"), "ü:\u2028"),
    (b'["h","k"', '["h","k"'), (b'["h","k"] ', "k"), (b'["e","k",-1]', "k"),
    (b'["h","\xed\xa0\x80"]', "\ud800"), (b'["s","k",1.5]', "k"),
])
def test_state_session(key, session):
    assert state_session(key) == session


def test_an_entry_goes_to_its_session_and_a_malformed_one_stays():
    key = entry_key("agent:main:discord:channel:9", 4)
    assert entry_home(key, 2, 16) == partition_for("agent:main:discord:channel:9", 16)
    assert entry_home(b"garbage", 2, 16) == 2
    assert entry_home(None, 2, 16) == 2


_TEXT = st.text(st.characters(codec="utf-8") | st.sampled_from('"\\\n\x00#:'), max_size=12)
_PIECES = st.sampled_from([b'["h",', b'["s",', b'["e",', b'"', b",", b"]", b"[", b"\\", b" ",
                           b"0", b"-1", b"07", b"\xed\xa0\x80", b"\xff", b'"k"', b"h"])


@settings(max_examples=2000, deadline=None)
@given(st.one_of(
    st.builds(head_key, _TEXT),
    st.builds(seen_key, _TEXT, _TEXT),
    st.builds(ticket_key, _TEXT, st.integers(0, 2**70)),
    st.lists(_PIECES, max_size=8).map(b"".join),
    st.binary(max_size=24),
))
def test_the_plain_key_shortcut_gives_what_json_gives(key: bytes) -> None:
    assert state_session(key) == state_session_parsed(key)


def test_homes_are_the_partitioners_and_split_state_shares_them() -> None:
    homes = Homes(16)
    sessions = [f"agent:main:slack:channel:c{i}" for i in range(3000)]
    assert [homes(s) for s in sessions] == [partition_for(s, 16) for s in sessions]
    latest = {head_key(s): b"h" for s in sessions if partition_for(s, 8) == 3}
    assert split_state(latest, 3, 16, homes) == split_state(latest, 3, 16)
    for s in sessions[:50]:
        key = entry_key(s, 1)
        assert entry_home(key, 3, 16, homes) == entry_home(key, 3, 16) == partition_for(s, 16)
    assert split_state(latest, 3, 32, homes) == split_state(latest, 3, 32)  # not its count
