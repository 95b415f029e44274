"""SessionState bytes for the state store, and the persistent SeenMap behind `seen`."""

from __future__ import annotations

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
