"""Properties of the fold over realistic wire input (valid and invalid) over a few sessions.

Determinism, restartability (prefix, state through bytes, rest == whole), idempotence
under redelivery, exactly one outcome per input, contiguous seq per session, and entries
that never change once emitted — what the worker's recovery and `audit` rely on.

INPUTS mixes in hostile lines (issue 12): timestamps out of range, NaN and Infinity inside
native items, turn replies without their turn, keys of another agent, confirmations and
resets dated far ahead of the worker's clock, retries with re-signed media URLs.
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from schemas import Route
from tests.unit.wire import T0, WRITTEN_AT, run
from workers.core import (
    OUTCOME_KINDS,
    MemoryState,
    Outcome,
    Seen,
    SessionHead,
    session_key_for_route,
)

AGENTS = ("ops", "sales")
ROUTES = (
    Route(channel="telegram", peer_kind="group", peer_id="-100123", thread_id="42"),
    Route(channel="slack", account_id="T0WORK", peer_kind="direct", peer_id="U07AB"),
    Route(channel="matrix", peer_kind="group", peer_id="!RoomAbC:matrix.org"),
)
CHATS = [(a, r, session_key_for_route(a, r, "per-channel-peer")) for a in AGENTS for r in ROUTES]
TEXT_MARK = "TXT"  # every generated text contains it; no diagnostic may
START = datetime.fromisoformat(T0)


def _time(minutes: int, plus2: bool) -> str:
    t = START + timedelta(minutes=minutes)  # all within 3 days: inside the dedupe window
    if plus2:
        return (t + timedelta(hours=2)).isoformat().replace("+00:00", "+02:00")
    return t.isoformat().replace("+00:00", "Z")


def _spell(key: str, how: int) -> str:
    """The key as a sender might spell it (all repairable)."""
    if how == 1:
        return key.split(":", 2)[2]
    if how == 2 and "matrix" not in key:
        return key.upper()
    if how == 3:
        return f"  {key} "
    return key


@st.composite
def confirmations(draw: st.DrawFn) -> dict[str, Any]:
    agent, chat_route, key = draw(st.sampled_from(CHATS))
    others = [k for a, _, k in CHATS if a == agent]
    kind = draw(
        st.sampled_from(
            [
                "turn_reply",
                "message_tool",
                "automation_result",
                "failure_alert",
                "subagent_announcement",
            ]
        )
    )
    origin: dict[str, Any] = {"kind": kind}
    if kind == "turn_reply" or (kind == "message_tool" and draw(st.booleans())):
        turn_key = draw(st.sampled_from([key, key, *others]))  # often this very chat
        origin["turn"] = {"session_key": _spell(turn_key, draw(st.integers(0, 3))), "turn_id": "t"}
    if kind in ("automation_result", "failure_alert"):
        origin["job"] = {
            "id": draw(st.sampled_from(["j1", "j2"])),
            "mode": draw(st.sampled_from(["in_chat", "background"])),
            "session_key": draw(st.sampled_from([None, *others])),
        }
    if kind == "subagent_announcement":
        origin["subagent"] = {
            "run_id": "r1",
            "agent_id": "scout",
            "label": draw(st.sampled_from([None, "x"])),
        }
    payload: dict[str, Any] = {}
    text = draw(st.sampled_from([None, "", " ", *(f"{TEXT_MARK} {w}" for w in ("a", " b\n", "c"))]))
    if text is not None:
        payload["text"] = text
    if draw(st.integers(0, 3)) == 0:
        payload["media"] = [
            {"kind": "image", "name": "a.png", "url": "https://cdn.example/a?token=T"}
        ]
    if draw(st.integers(0, 3)) == 0:
        payload["native"] = [{"kind": "embed", "title": "t"}]
    record: dict[str, Any] = {
        "schema": "delivery-confirmation/1",
        "send_id": draw(st.sampled_from([f"s{i}" for i in range(8)])),  # repeats: dups, conflicts
        "confirmed_at": _time(draw(st.integers(0, 3 * 24 * 60)), draw(st.booleans())),
        "agent_id": agent,
        "session_key": _spell(key, draw(st.integers(0, 3))),
        "route": chat_route.model_dump(exclude_none=True),
        "origin": origin,
        "payload": payload,
        "receipt": {"platform_message_ids": [str(draw(st.integers(1, 9)))]},
    }
    if draw(st.integers(0, 7)) == 0:
        record["destination_agent_id"] = draw(st.sampled_from(AGENTS))
    return record


@st.composite
def resets(draw: st.DrawFn) -> dict[str, Any]:
    _, _, key = draw(st.sampled_from(CHATS))
    return {
        "schema": "session-reset/1",
        "session_key": _spell(key, draw(st.sampled_from([0, 2, 3]))),
        "reset_at": _time(draw(st.integers(0, 3 * 24 * 60)), False),
    }


@st.composite
def invalid_lines(draw: st.DrawFn) -> bytes:
    good = draw(confirmations())
    how = draw(st.integers(0, 5))
    if how == 0:
        return draw(st.binary(max_size=20))
    if how == 1:
        good["confirmed_at"] = good["confirmed_at"][:19]  # naive
    elif how == 2:
        good["agent_id"] = "Bad Agent"
    elif how == 3:
        good["schema"] = "delivery-confirmation/9"
    elif how == 4:
        del good["payload"]
    else:
        good["session_key"] = "agent::broken"
    return json.dumps(good).encode()


# Times no connector should send, but some do: out of the contract's range (invalid), and
# in range but far ahead of the worker's clock (WRITTEN_AT in replay and these tests).
OUT_OF_RANGE = ["0001-01-01T00:00:00Z", "9999-12-31T23:00:00-05:00", "1969-12-31T23:59:59Z",
                "3000-01-01T00:00:00Z"]
# (Not "just inside the allowance": that moves the session clock a month past the other
# records, and a redelivery after it is rightly a new send; test_decide has that edge.)
AHEAD = ["2099-01-01T00:00:00Z", "2999-12-31T23:59:59Z", "3000-01-01T00:59:59+01:00",
         (WRITTEN_AT + timedelta(minutes=5, seconds=1)).isoformat()]  # just outside


@st.composite
def hostile_lines(draw: st.DrawFn) -> bytes:
    """A record of issue 12's findings (pure ones), as bytes."""
    record = draw(confirmations())
    how = draw(st.integers(0, 8))
    if how == 0:  # a timestamp out of range: dead letter naming it
        field = draw(st.sampled_from(["confirmed_at", "receipt.sent_at"]))
        parent, _, name = field.rpartition(".")
        (record[parent] if parent else record)[name] = draw(st.sampled_from(OUT_OF_RANGE))
    elif how == 1:  # NaN/Infinity inside a native item: not JSON
        value = draw(st.sampled_from([float("nan"), float("inf"), float("-inf")]))
        record["payload"]["native"] = [{"kind": "embed", "score": value}]
        return json.dumps(record).encode()
    elif how == 2:  # a turn reply without its turn: invalid
        record["origin"] = {"kind": "turn_reply"}
    elif how == 3:  # the key of a chat of another agent
        agent = record["agent_id"]
        record["session_key"] = draw(st.sampled_from([k for a, _, k in CHATS if a != agent]))
        if draw(st.booleans()):
            record["destination_agent_id"] = agent  # says "mine": rule 4 still applies
    elif how == 4:  # dated ahead of the worker's clock
        record["confirmed_at"] = draw(st.sampled_from(AHEAD))
    elif how == 5:  # a reset dated ahead
        _, _, key = draw(st.sampled_from(CHATS))
        reset = {"schema": "session-reset/1", "session_key": key,
                 "reset_at": draw(st.sampled_from(AHEAD))}
        return json.dumps(reset).encode()
    else:  # a send_id sent again with a re-signed URL, another mime, maybe a key respelled
        media: dict[str, Any] = {"kind": "image", "name": "a.png",
                                 "url": f"https://cdn.example/a?sig={draw(st.integers(0, 9))}"}
        if draw(st.booleans()):
            media["mime"] = draw(st.sampled_from(["image/png", "image/x-png"]))
        record["payload"] = {"text": f"{TEXT_MARK} m", "media": [media]}
        record["origin"] = {"kind": "message_tool"}
        record["send_id"] = "s-media"
    return json.dumps(record, ensure_ascii=False).encode()


_CONFIRMATION = confirmations().map(lambda r: json.dumps(r, ensure_ascii=False).encode())
LINE = st.one_of(
    _CONFIRMATION,
    _CONFIRMATION,
    _CONFIRMATION,
    _CONFIRMATION,
    resets().map(lambda r: json.dumps(r).encode()),
    invalid_lines(),
    hostile_lines(),
)


def _with_redeliveries(lines: list[bytes]) -> st.SearchStrategy[list[bytes]]:
    """Kafka redelivers: some lines come again later, byte for byte."""
    if not lines:
        return st.just(lines)
    return st.lists(st.sampled_from(lines), max_size=6).map(lambda again: lines + again)


INPUTS = st.lists(LINE, max_size=40).flatmap(_with_redeliveries)


def entries(outcomes: list[Outcome]) -> list[str]:
    return [o.entry.model_dump_json() for o in outcomes if o.entry is not None]


@given(INPUTS)
def test_same_input_same_outputs(lines: list[bytes]) -> None:
    assert run(lines) == run(lines)


@given(INPUTS)
def test_every_input_has_exactly_one_outcome(lines: list[bytes]) -> None:
    outcomes = run(lines)
    assert len(outcomes) == len(lines)
    for o in outcomes:
        assert o.kind in OUTCOME_KINDS
        assert (o.entry is not None) == (o.kind == "written")
        assert (o.error is not None) == (o.kind == "dead_letter")
        assert o.session_key is not None or o.kind == "dead_letter"


@given(INPUTS, st.data())
def test_prefix_then_rest_through_state_bytes_equals_the_whole(
    lines: list[bytes], data: st.DataObject
) -> None:
    cut = data.draw(st.integers(0, len(lines)))
    state = MemoryState()
    first = run(lines[:cut], state)
    restored = MemoryState(
        {k: SessionHead.from_bytes(v.to_bytes()) for k, v in state.heads.items()},
        {k: Seen.from_bytes(v.to_bytes()) for k, v in state.seens.items()},
    )
    assert restored == state
    rest = run(lines[cut:], restored)
    whole_state = MemoryState()
    assert first + rest == run(lines, whole_state)
    assert restored == whole_state


@given(INPUTS, st.data())
def test_redelivering_any_inputs_changes_no_entry(lines: list[bytes], data: st.DataObject) -> None:
    copies = (
        data.draw(st.lists(st.integers(0, max(len(lines) - 1, 0)), max_size=10)) if lines else []
    )
    with_copies = list(lines)
    for i in copies:  # a copy goes anywhere after its original, as redelivery does
        at = data.draw(st.integers(with_copies.index(lines[i]) + 1, len(with_copies)))
        with_copies.insert(at, lines[i])
    assert entries(run(with_copies)) == entries(run(lines))


@given(INPUTS)
def test_seq_is_contiguous_per_session_from_1_and_epochs_never_go_back(lines: list[bytes]) -> None:
    by_session: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for o in run(lines):
        if o.entry is not None:
            assert o.entry.session_key == o.session_key
            by_session[o.entry.session_key].append((o.entry.seq, o.entry.epoch))
    for written in by_session.values():
        assert [seq for seq, _ in written] == list(range(1, len(written) + 1))
        epochs = [epoch for _, epoch in written]
        assert epochs == sorted(epochs)


@given(INPUTS, st.data())
def test_an_emitted_entry_never_changes(lines: list[bytes], data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(lines)))
    whole = run(lines)
    assert run(lines[:cut]) == whole[:cut]
    keyed = {(o.entry.session_key, o.entry.seq): o.entry for o in whole if o.entry is not None}
    assert len(keyed) == len(entries(whole))  # one entry per (session, seq): nothing rewritten


@given(INPUTS)
def test_no_url_reaches_an_entry_and_no_text_reaches_a_diagnostic(lines: list[bytes]) -> None:
    for o in run(lines):
        if o.entry is not None:
            assert "https://" not in o.entry.model_dump_json()
        for d in o.diagnostics:
            assert TEXT_MARK not in d.detail and "https://" not in d.detail
