"""workers/core/state.py: the session head and the seen records, their bytes and keys.

The layout of a windowed store (issue 12, finding 2): one small head per session and one
record per remembered send_id, so no stored value grows with a session's history. Values
are read back strictly (a corrupt value is UnreadableState, never a guess), keys are
unambiguous whatever a session key or send_id holds, and format 1 (one value per session)
still decodes, for the migration.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workers.core import (
    EMPTY_HEAD,
    UNKNOWN_FINGERPRINT,
    Seen,
    SessionHead,
    UnreadableState,
    decode_v1,
    head_key,
    parse_seen_key,
    seen_key,
)
from workers.core.state import SEEN_KEYS_FROM, V1_KEYS_FROM, micros

T = datetime(2025, 3, 1, tzinfo=UTC)
T_US = 1_740_787_200_000_000  # T in microseconds since 1970
PLUS2 = timezone(timedelta(hours=2))
MAX_US = 32_503_680_000 * 1_000_000  # 3000-01-01T00:00:00Z: the first time out of range
# What a key may hold: quotes, commas, brackets, backslashes, NUL and other controls, unicode
# from every plane (JSON itself cannot carry lone surrogates, so no input can either).
AWKWARD = ['q"uote', "a,b", '","', '["s","x"]', "back\\slash", "nul\x00", "ctl\n\t\x01\x7f",
           "ü-é:1", "東京", "👍", "\u2028\u2029", "", " "]
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=30) | st.sampled_from(AWKWARD)


# --- the head -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "head",
    [
        SessionHead(),
        SessionHead(epoch=3, next_seq=42, clock=T, last_reset_at=T - timedelta(days=1)),
        SessionHead(clock=datetime(2025, 3, 1, 14, 0, 0, 123456, tzinfo=PLUS2)),
        SessionHead(epoch=10**30, next_seq=10**30),  # no bound but the format's
        SessionHead(clock=datetime(1970, 1, 1, tzinfo=UTC),
                    last_reset_at=datetime(2999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)),
    ],
    ids=["empty", "full", "offset", "huge counters", "range edges"],
)
def test_head_bytes_round_trip(head: SessionHead) -> None:
    data = head.to_bytes()
    back = SessionHead.from_bytes(data)
    assert back == head
    assert back.to_bytes() == data
    for at in (back.clock, back.last_reset_at):
        assert at is None or at.utcoffset() == timedelta(0)  # instants, stored in UTC


def test_head_bytes_are_compact_json_with_integer_microseconds() -> None:
    assert EMPTY_HEAD == SessionHead() and EMPTY_HEAD.to_bytes() == (
        b'{"v":2,"epoch":0,"next_seq":1,"clock":null,"last_reset_at":null}'
    )
    data = SessionHead(2, 9, T, T - timedelta(microseconds=1)).to_bytes()
    assert json.loads(data) == {
        "v": 2, "epoch": 2, "next_seq": 9, "clock": T_US, "last_reset_at": T_US - 1,
    }
    assert b" " not in data


@given(
    st.integers(0, 10**6),
    st.integers(1, 10**9),
    st.none() | st.integers(0, MAX_US - 1),
    st.none() | st.integers(0, MAX_US - 1),
)
def test_any_head_in_range_round_trips(epoch: int, seq: int, clock: int | None,
                                       reset: int | None) -> None:
    def at(us: int | None) -> datetime | None:
        return None if us is None else datetime(1970, 1, 1, tzinfo=UTC) + timedelta(
            microseconds=us)

    head = SessionHead(epoch, seq, at(clock), at(reset))
    assert SessionHead.from_bytes(head.to_bytes()) == head
    assert json.loads(head.to_bytes())["clock"] == clock


# --- a seen record ------------------------------------------------------------------------


@pytest.mark.parametrize("fp", ["0" * 32, "e31eae0405f4267627c160457cace4b9", UNKNOWN_FINGERPRINT,
                                *AWKWARD])
def test_seen_bytes_round_trip(fp: str) -> None:
    seen = Seen(datetime(2025, 3, 1, 14, 0, 0, 123456, tzinfo=PLUS2), fp)
    data = seen.to_bytes()
    assert Seen.from_bytes(data) == seen
    assert json.loads(data) == [micros(seen.first_seen), fp]


def test_seen_bytes_are_compact_and_small() -> None:
    data = Seen(T, "ab").to_bytes()
    assert data == b'[1740787200000000,"ab"]'
    # a real one: a 32-hex fingerprint, any time in range
    assert len(Seen(datetime(2999, 12, 31, tzinfo=UTC), "f" * 32).to_bytes()) < 60


def test_micros_is_exact_and_ignores_the_offset() -> None:
    assert micros(T) == T_US
    assert micros(T.astimezone(PLUS2)) == T_US
    assert micros(T + timedelta(microseconds=1)) == T_US + 1
    assert micros(datetime(1970, 1, 1, tzinfo=UTC)) == 0


# --- corrupt values are UnreadableState, never a guess ------------------------------------

HEAD = '{"v":2,"epoch":%s,"next_seq":%s,"clock":%s,"last_reset_at":%s}'
BAD_HEADS = {
    "not JSON": b"{",
    "not UTF-8": b"\xff\xfe",
    "empty": b"",
    "JSON null": b"null",
    "a list": b"[2,0,1]",
    "format 1": b'{"v":1,"epoch":0,"next_seq":1,"clock":null,"last_reset_at":null,"seen":[]}',
    "format 99": b'{"v":99}',
    "no fields": b'{"v":2}',
    "epoch a string": (HEAD % ('"0"', 1, "null", "null")).encode(),
    "epoch a bool": (HEAD % ("true", 1, "null", "null")).encode(),
    "epoch a float": (HEAD % ("1.0", 1, "null", "null")).encode(),
    "epoch NaN": (HEAD % ("NaN", 1, "null", "null")).encode(),
    "epoch negative": (HEAD % (-1, 1, "null", "null")).encode(),
    "next_seq 0": (HEAD % (0, 0, "null", "null")).encode(),
    "next_seq negative": (HEAD % (0, -5, "null", "null")).encode(),
    "next_seq of 5000 digits": (HEAD % (0, "9" * 5000, "null", "null")).encode(),
    "clock before 1970": (HEAD % (0, 1, -1, "null")).encode(),
    "clock at 3000": (HEAD % (0, 1, MAX_US, "null")).encode(),
    "clock of year 9999": (HEAD % (0, 1, 253402300799000000, "null")).encode(),
    "clock a string": (HEAD % (0, 1, '"2025-03-01T00:00:00Z"', "null")).encode(),
    "clock a float": (HEAD % (0, 1, "1.5", "null")).encode(),
    "clock Infinity": (HEAD % (0, 1, "Infinity", "null")).encode(),
    "last_reset_at huge": (HEAD % (0, 1, "null", 10**30)).encode(),
    "deep nesting": b'{"v":2,"epoch":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "deep nesting, unclosed": b"[" * 1_000_000,
}


@pytest.mark.parametrize("data", BAD_HEADS.values(), ids=BAD_HEADS.keys())
def test_a_corrupt_head_is_unreadable(data: bytes) -> None:
    with pytest.raises(UnreadableState):
        SessionHead.from_bytes(data)


def test_unreadable_state_is_a_value_error_that_never_quotes_the_value() -> None:
    assert issubclass(UnreadableState, ValueError)
    with pytest.raises(UnreadableState) as info:
        SessionHead.from_bytes((HEAD % ('"SECRET"', 1, "null", "null")).encode())
    assert "SECRET" not in str(info.value) and "epoch" in str(info.value)


BAD_SEENS = {
    "not JSON": b"[1,",
    "an object": b'{"first_seen":1,"fingerprint":"f"}',
    "empty list": b"[]",
    "one item": b"[1]",
    "three items": b'[1,"f","g"]',
    "fingerprint a number": b"[1,2]",
    "fingerprint null": b"[1,null]",
    "first_seen null": b'[null,"f"]',
    "first_seen a string": b'["1","f"]',
    "first_seen a bool": b'[true,"f"]',
    "first_seen a float": b'[1.5,"f"]',
    "first_seen NaN": b'[NaN,"f"]',
    "first_seen negative": b'[-1,"f"]',
    "first_seen at 3000": b'[%d,"f"]' % MAX_US,
    "deep nesting": b"[" * 100_000 + b"]" * 100_000,
}


@pytest.mark.parametrize("data", BAD_SEENS.values(), ids=BAD_SEENS.keys())
def test_a_corrupt_seen_record_is_unreadable(data: bytes) -> None:
    with pytest.raises(UnreadableState):
        Seen.from_bytes(data)


def test_the_edges_of_the_time_range_are_readable() -> None:
    assert Seen.from_bytes(b'[0,"f"]').first_seen == datetime(1970, 1, 1, tzinfo=UTC)
    last = Seen.from_bytes(b'[%d,"f"]' % (MAX_US - 1)).first_seen
    assert last == datetime(2999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


@given(st.binary(max_size=80))
def test_any_bytes_decode_or_are_unreadable(data: bytes) -> None:
    for decode in (SessionHead.from_bytes, Seen.from_bytes, decode_v1):
        try:
            decode(data)
        except UnreadableState:
            pass


# --- keys ---------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["agent:ops:main", *AWKWARD])
def test_keys_are_json_arrays_of_what_they_name(key: str) -> None:
    assert json.loads(head_key(key)) == ["h", key]
    assert json.loads(seen_key(key, key + "!")) == ["s", key, key + "!"]
    assert parse_seen_key(seen_key(key, key + "!")) == (key, key + "!")
    assert parse_seen_key(head_key(key)) is None


def test_key_bytes() -> None:
    assert head_key("agent:ops:main") == b'["h","agent:ops:main"]'
    assert seen_key('a"b', "c,\x00") == b'["s","a\\"b","c,\\u0000"]'
    assert seen_key("東", "👍") == '["s","東","👍"]'.encode()  # UTF-8, not \u escapes


@given(TEXT, TEXT, TEXT, TEXT)
def test_keys_are_unambiguous(s1: str, id1: str, s2: str, id2: str) -> None:
    """Two keys are equal only when they name the same thing; head keys sort before every
    seen key; both sort before format 1's bare session keys."""
    assert (seen_key(s1, id1) == seen_key(s2, id2)) == ((s1, id1) == (s2, id2))
    assert (head_key(s1) == head_key(s2)) == (s1 == s2)
    assert head_key(s1) != seen_key(s2, id2)
    assert parse_seen_key(seen_key(s1, id1)) == (s1, id1)
    assert head_key(s1) < SEEN_KEYS_FROM <= seen_key(s2, id2) < V1_KEYS_FROM
    assert seen_key(s1, id1).startswith(SEEN_KEYS_FROM)
    assert ("agent:" + s1).encode() >= V1_KEYS_FROM  # format 1's keys were canonical keys


@pytest.mark.parametrize(
    "key",
    [b"agent:ops:main", b'["h","x"]', b'["s","x"]', b'["s","x","y","z"]', b'["s","x",1]',
     b'["s",', b'["s","x","y"', b"__faust_offset", b'["s",["x"],"y"]'],
)
def test_parse_seen_key_rejects_other_keys(key: bytes) -> None:
    assert parse_seen_key(key) is None


# --- format 1, as the code before 0.2 wrote it --------------------------------------------

# Written by SessionState.to_bytes of format 1 (git show 746aef0:workers/core/state.py):
# keys in their order, compact, ensure_ascii=False, send_ids in first_seen order.
V1_EMPTY = b'{"v":1,"epoch":0,"next_seq":1,"clock":null,"last_reset_at":null,"seen":[]}'
V1_FULL = (
    b'{"v":1,"epoch":2,"next_seq":7,"clock":1740787500000000,"last_reset_at":1740700800000000,'
    b'"seen":[["outbound-delivery:d1:0",1740787200000000,"e31eae0405f4267627c160457cace4b9"],'
    b'["q\\"uote,\\u0000\xc3\xbc\xe6\x9d\xb1\xf0\x9f\x91\x8d",1740787500000000,'
    b'"00000000000000000000000000000000"]]}'
)


def test_decode_v1_of_an_empty_session() -> None:
    assert decode_v1(V1_EMPTY) == (EMPTY_HEAD, [])


def test_decode_v1_keeps_head_and_send_ids_but_not_fingerprints() -> None:
    head, seen = decode_v1(V1_FULL)
    assert head == SessionHead(2, 7, T + timedelta(minutes=5), T - timedelta(days=1))
    assert seen == [
        ("outbound-delivery:d1:0", Seen(T, UNKNOWN_FINGERPRINT)),
        ('q"uote,\x00ü東👍', Seen(T + timedelta(minutes=5), UNKNOWN_FINGERPRINT)),
    ]
    # what the migration writes reads back the same
    assert SessionHead.from_bytes(head.to_bytes()) == head
    assert [Seen.from_bytes(s.to_bytes()) for _, s in seen] == [s for _, s in seen]


@given(st.lists(st.tuples(TEXT, st.integers(0, MAX_US - 1)), max_size=20, unique_by=lambda x: x[0]),
       st.integers(0, 100), st.integers(1, 10**6), st.none() | st.integers(0, MAX_US - 1))
def test_decode_v1_of_any_value_the_old_code_wrote(
    items: list[tuple[str, int]], epoch: int, seq: int, clock: int | None
) -> None:
    items.sort(key=lambda item: item[1])
    doc = {"v": 1, "epoch": epoch, "next_seq": seq, "clock": clock, "last_reset_at": None,
           "seen": [[send_id, us, "f" * 32] for send_id, us in items]}
    data = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
    head, seen = decode_v1(data)
    assert (head.epoch, head.next_seq, head.last_reset_at) == (epoch, seq, None)
    assert (None if head.clock is None else micros(head.clock)) == clock
    assert [(send_id, micros(s.first_seen), s.fingerprint) for send_id, s in seen] == [
        (send_id, us, UNKNOWN_FINGERPRINT) for send_id, us in items
    ]


V1 = '{"v":1,"epoch":0,"next_seq":1,"clock":null,"last_reset_at":null,"seen":%s}'
BAD_V1 = {
    "a head of format 2": EMPTY_HEAD.to_bytes(),
    "not JSON": b'{"v":1,',
    "no seen": b'{"v":1,"epoch":0,"next_seq":1,"clock":null,"last_reset_at":null}',
    "seen an object": (V1 % '{"a":[1,"f"]}').encode(),
    "seen item short": (V1 % '[["a",1]]').encode(),
    "seen item a string": (V1 % '["a"]').encode(),
    "send_id a number": (V1 % '[[1,1,"f"]]').encode(),
    "first_seen null": (V1 % '[["a",null,"f"]]').encode(),
    "first_seen negative": (V1 % '[["a",-1,"f"]]').encode(),
    "first_seen of year 9999": (V1 % '[["a",253402300799000000,"f"]]').encode(),
    "epoch negative": b'{"v":1,"epoch":-1,"next_seq":1,"clock":null,"last_reset_at":null,'
                      b'"seen":[]}',
    "clock a string": b'{"v":1,"epoch":0,"next_seq":1,"clock":"x","last_reset_at":null,'
                      b'"seen":[]}',
    "deep nesting": (V1 % ("[" * 100_000 + "]" * 100_000)).encode(),
}


@pytest.mark.parametrize("data", BAD_V1.values(), ids=BAD_V1.keys())
def test_a_corrupt_format_1_value_is_unreadable(data: bytes) -> None:
    with pytest.raises(UnreadableState):
        decode_v1(data)
