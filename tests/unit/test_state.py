"""SessionState bytes for the state store, and the persistent SeenMap behind `seen`."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.core import Seen, SeenMap, SessionState

T = datetime(2025, 3, 1, tzinfo=UTC)
PLUS2 = timezone(timedelta(hours=2))


def seen(minutes: int, fp: str = "f") -> Seen:
    return Seen(T + timedelta(minutes=minutes), fp)


@pytest.mark.parametrize(
    "state",
    [
        SessionState(),
        SessionState(epoch=3, next_seq=42, clock=T, last_reset_at=T - timedelta(days=1)),
        SessionState(
            clock=datetime(2025, 3, 1, 14, 0, 0, 123456, tzinfo=PLUS2),
            seen={"a": seen(0, "0" * 32), "ü-é:1": seen(5), "c": seen(5, "x")},
        ),
    ],
)
def test_state_bytes_round_trip(state: SessionState) -> None:
    data = state.to_bytes()
    back = SessionState.from_bytes(data)
    assert back == state
    assert back.to_bytes() == data
    assert isinstance(back.seen, SeenMap)


def test_state_bytes_are_compact_json() -> None:
    data = SessionState(seen={"s": seen(0, "ab")}, clock=T).to_bytes()
    assert data.startswith(b'{"v":1,') and b" " not in data
    assert b'["s",1740787200000000,"ab"]' in data


def test_unknown_state_format_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown SessionState format"):
        SessionState.from_bytes(b'{"v":99}')


def test_a_plain_mapping_becomes_a_seen_map() -> None:
    state = SessionState(seen={"a": seen(1)})
    assert isinstance(state.seen, SeenMap) and dict(state.seen) == {"a": seen(1)}
    assert hash(state) == hash(SessionState(seen={"a": seen(1)}))


def test_seen_map_is_ordered_by_first_seen_and_immutable() -> None:
    m = SeenMap([("late", seen(9)), ("early", seen(1)), ("mid", seen(5))])
    assert list(m) == ["early", "mid", "late"]
    assert len(m) == 3 and "mid" in m and m["mid"] == seen(5) and m.get("x") is None
    with pytest.raises(TypeError):
        m["x"] = seen(0)  # type: ignore[index]
    with pytest.raises(ValueError, match="already seen"):
        m.with_entry("mid", seen(10))
    with pytest.raises(ValueError, match="duplicate send_id"):
        SeenMap([("a", seen(1)), ("a", seen(2))])


def test_pruning_and_adding_leave_older_maps_untouched() -> None:
    m0 = SeenMap()
    m1 = m0.with_entry("a", seen(1))
    m2 = m1.with_entry("b", seen(2))
    m3 = m2.pruned(T + timedelta(minutes=2))
    m4 = m3.with_entry("a", seen(3))  # "a" again after it was forgotten
    m5 = m2.with_entry("c", seen(4))  # a branch from an older map
    assert dict(m0) == {}
    assert dict(m1) == {"a": seen(1)}
    assert dict(m2) == {"a": seen(1), "b": seen(2)}
    assert dict(m3) == {"b": seen(2)}
    assert dict(m4) == {"b": seen(2), "a": seen(3)}
    assert dict(m5) == {"a": seen(1), "b": seen(2), "c": seen(4)}
    assert m2.pruned(T) is m2


def test_out_of_order_first_seen_still_prunes_exactly() -> None:
    m = SeenMap([("a", seen(5))]).with_entry("b", seen(1))  # older than what is there
    assert list(m) == ["b", "a"]
    assert dict(m.pruned(T + timedelta(minutes=2))) == {"a": seen(5)}


# Model-based: any sequence of adds and prunes, each from any earlier version, behaves
# like copying a dict, and no version ever changes afterwards.
_ops = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=10_000),  # which earlier version to start from
        st.one_of(
            st.tuples(st.just("add"), st.sampled_from("abcdefghij"), st.integers(0, 60)),
            st.tuples(st.just("prune"), st.just(""), st.integers(0, 60)),
        ),
    ),
    max_size=60,
)


@settings(max_examples=200)
@given(_ops)
def test_seen_map_behaves_like_copied_dicts(ops: list[tuple[int, tuple[str, str, int]]]) -> None:
    versions: list[tuple[SeenMap, dict[str, Seen]]] = [(SeenMap(), {})]
    for pick, (op, key, minute) in ops:
        m, model = versions[pick % len(versions)]
        if op == "add":
            if key in model:
                continue
            value = seen(minute, key)
            versions.append((m.with_entry(key, value), {**model, key: value}))
        else:
            cutoff = T + timedelta(minutes=minute)
            kept = {k: v for k, v in model.items() if v.first_seen >= cutoff}
            versions.append((m.pruned(cutoff), kept))
    for m, model in versions:
        assert dict(m) == model and len(m) == len(model)
        assert [k for k, _ in m.items_in_order()] == list(m)


def test_a_long_running_session_compacts_its_store() -> None:
    m = SeenMap()
    for i in range(5000):
        m = m.with_entry(f"s{i}", seen(i)).pruned(T + timedelta(minutes=i - 100))
    assert len(m) == 101
    assert len(m._store.keys) < 1000  # dead entries were dropped, not kept forever
    assert list(m)[0] == "s4899" and m["s4999"] == seen(4999)


# --- to_bytes writes memoized entry bytes: always the plain JSON encoding -----------------


def plain_bytes(state: SessionState) -> bytes:
    """to_bytes as the format defines it: json.dumps of the whole document."""

    def us(at: datetime | None) -> int | None:
        return None if at is None else (at - EPOCH) // timedelta(microseconds=1)

    doc = {
        "v": 1,
        "epoch": state.epoch,
        "next_seq": state.next_seq,
        "clock": us(state.clock),
        "last_reset_at": us(state.last_reset_at),
        "seen": [[k, us(s.first_seen), s.fingerprint] for k, s in state.seen_map.items_in_order()],
    }
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
KEYS = ["a", "b", 'q"uote', "back\\slash", "ctl\n\t\x01\x7f", "ü-é:1", "東京", "👍", "\u2028", ""]


def test_state_bytes_escape_like_json() -> None:
    state = SessionState(
        epoch=2,
        next_seq=9,
        clock=datetime(2025, 3, 1, 14, 0, 0, 123456, tzinfo=PLUS2),
        last_reset_at=datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),  # negative micros
        seen={k: seen(i, f"fp-{k}") for i, k in enumerate(KEYS)},
    )
    assert state.to_bytes() == plain_bytes(state)
    assert SessionState.from_bytes(state.to_bytes()) == state


# Any sequence of adds (in or out of order, or runs long enough to compact the store),
# prunes and round trips through bytes, each from any earlier version, with to_bytes called
# at any point in between (bytes are encoded lazily, then more entries are appended), writes
# the plain JSON encoding.
_state_ops = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=10_000),  # which earlier version to start from
        st.sampled_from(["add", "run", "prune", "bytes", "reload"]),
        st.sampled_from(KEYS),
        st.integers(-5, 400),  # minute
        st.integers(1, 300),  # length of a run
    ),
    max_size=60,
)


@settings(max_examples=300)
@given(_state_ops)
def test_state_bytes_equal_the_plain_encoding(ops: list[tuple[int, str, str, int, int]]) -> None:
    versions = [SessionState()]
    for pick, op, key, minute, length in ops:
        state = versions[pick % len(versions)]
        m = state.seen_map
        if op == "add" and key not in m:
            m = m.with_entry(key, seen(minute, key))
        elif op == "run":  # one new send a minute, remembered for 30 minutes
            for i in range(length):
                m = m.with_entry(f"{len(versions)}:{i}", seen(minute + i, "f"))
                m = m.pruned(T + timedelta(minutes=minute + i - 30))
        elif op == "prune":
            m = m.pruned(T + timedelta(minutes=minute))
        elif op == "bytes":
            assert state.to_bytes() == plain_bytes(state)
        elif op == "reload":
            m = SessionState.from_bytes(state.to_bytes()).seen_map
        versions.append(SessionState(len(versions), pick, T, T if op == "run" else None, m))
    for state in versions:
        assert state.to_bytes() == plain_bytes(state)
        assert SessionState.from_bytes(state.to_bytes()) == state


def test_compaction_keeps_the_encoded_entries_exact() -> None:
    m, states = SeenMap(), []
    for i in range(3000):
        m = m.with_entry(f"s{i}", seen(i, f"{i:032x}")).pruned(T + timedelta(minutes=i - 300))
        state = SessionState(next_seq=i + 2, clock=T + timedelta(minutes=i), seen=m)
        if i % 7 == 0:
            assert state.to_bytes() == plain_bytes(state)
        states.append(state)
    assert len(m._store.keys) < 1000  # compacted, more than once
    for state in states[::97]:  # older maps kept their own (older, larger) stores
        assert state.to_bytes() == plain_bytes(state)


def test_state_bytes_load_out_of_order_and_name_a_repeated_send_id() -> None:
    data = b'{"v":1,"epoch":0,"next_seq":1,"clock":null,"last_reset_at":null,"seen":[%s]}'
    late, early, tie = b'["late",300,"f"]', b'["early",100,"f"]', b'["tie",100,"g"]'
    state = SessionState.from_bytes(data % b",".join([late, early, tie]))
    assert list(state.seen) == ["early", "tie", "late"]  # stable: ties keep their order
    assert state.to_bytes() == plain_bytes(state) == data % b",".join([early, tie, late])
    with pytest.raises(ValueError, match="duplicate send_id 'b'"):
        SeenMap([("a", seen(3)), ("b", seen(1)), ("b", seen(2)), ("a", seen(4))])
