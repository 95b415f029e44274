"""A JSON object that names a member twice is a dead letter naming it (DESIGN 1.2, issue 23).

Two parsers read such a record two ways (last wins in pydantic-core and msgspec, first wins
elsewhere), so neither guesses: `parse_input` and the worker's `read_input` both return
`Invalid("duplicate member: <path>")`, the path naming members only (never a value), bounded.
Checked on hand-made cases, at every depth, and as a property: any valid record with any one
member given twice, anywhere, in any spelling, is that dead letter in both parsers.
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec
import pytest
import transcript_connector.parse
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.gen_input import generate
from schemas import Invalid, parse_input, read_input
from tests.unit.test_properties import confirmations, resets
from tests.unit.test_read_input import assert_same
from tests.unit.wire import confirmation, dumps, reset

SECRET = "SECRET-TEXT"
ERASE = {"schema": "session-erase/1", "session_key": "agent:ops:main",
         "erased_at": "2025-03-01T00:00:00Z", "reason": "gdpr"}


def both(raw: bytes) -> object:
    """What both parsers read (they must agree: the same Invalid, or equal values)."""
    return assert_same(raw)


def _again(raw: bytes, member: bytes, extra: bytes) -> bytes:
    """`raw` with `extra` (`"name": value`) written right after the first `member`."""
    at = raw.index(member) + len(member)
    return raw[:at] + extra + b", " + raw[at:]


GOOD = dumps(confirmation())
NATIVE = dumps(confirmation(payload={"text": "a", "native": [
    {"kind": "poll", "q": {"options": [{"id": 1, "label": "x"}]}}]}))
CASES: list[tuple[str, bytes, str]] = [
    ("the tag twice, the last an erase (issue 23)",
     GOOD[:-1] + b', "schema": "session-erase/1"}', "schema"),
    ("the tag twice, the first an erase",
     b'{"schema": "session-erase/1", ' + GOOD[1:], "schema"),
    ("an erase's tag twice", dumps(ERASE)[:-1] + b', "schema": "session-erase/1"}', "schema"),
    ("a top-level member, last wins", GOOD[:-1] + b', "send_id": "other"}', "send_id"),
    ("a top-level member, the same value", GOOD[:-1] + b', "agent_id": "ops"}', "agent_id"),
    ("spelled with an escape", GOOD[:-1] + b', "send\\u005fid": "x"}', "send_id"),
    ("both spelled with escapes",
     GOOD.replace(b'"send_id"', b'"\\u0073end_id"')[:-1] + b', "sen\\u0064_id": "x"}',
     "send_id"),
    ("compact JSON", json.dumps(confirmation(), separators=(",", ":")).encode()[:-1]
     + b',"agent_id":"ops"}', "agent_id"),
    ("route", _again(GOOD, b'"peer_kind": "group", ', b'"peer_kind": "group"'), "route.peer_kind"),
    ("an optional member given twice as null",
     _again(GOOD, b'"peer_kind": "group", ', b'"thread_id": null, "thread_id": null'),
     "route.thread_id"),
    ("origin.kind", _again(GOOD, b'"kind": "automation_result", ', b'"kind": "failure_alert"'),
     "origin.kind"),
    ("origin.turn", dumps(confirmation(origin={"kind": "turn_reply", "turn": {
        "session_key": "agent:ops:main", "turn_id": "t"}})).replace(
        b'"turn_id": "t"', b'"turn_id": "t", "session_key": "agent:ops:telegram:group:-100123"'),
     "origin.turn.session_key"),
    ("origin.job",
     GOOD.replace(b'"mode": "background"', b'"mode": "background", "mode": "in_chat"'),
     "origin.job.mode"),
    ("the second media item", dumps(confirmation(payload={"text": "a", "media": [
        {"kind": "image", "name": "a.png"}, {"kind": "file", "name": "b.pdf"}]})).replace(
        b'"name": "b.pdf"', b'"name": "b.pdf", "name": "c.pdf"'), "payload.media[1].name"),
    ("a native item's free-form content, deep",
     NATIVE.replace(b'"label": "x"', b'"label": "x", "label": "y"'),
     "payload.native[0].q.options[0].label"),
    ("a native item's kind", NATIVE.replace(b'"kind": "poll"', b'"kind": "poll", "kind": "card"'),
     "payload.native[0].kind"),
    ("receipt", GOOD.replace(b'"sent_at"', b'"sent_at": null, "sent_at"'), "receipt.sent_at"),
    ("inside an unknown (ignored) field",
     dumps(confirmation(future={"a": [1, {"b": 2}]})).replace(b'"b": 2', b'"b": 2, "b": 2'),
     "future.a[1].b"),
    ("an unknown field twice", GOOD[:-1] + b', "x": 1, "x": 1}', "x"),
    ("schema_ twice", GOOD[:-1] + b', "schema_": 1, "schema_": 2}', "schema_"),
    ("a reset", dumps(reset())[:-1] + b', "reset_at": "2025-03-01T12:00:00Z"}', "reset_at"),
    ("whitespace around", b" \n" + GOOD[:-1] + b', "send_id" : "x" }' + b"\t\r\n", "send_id"),
    ("the first of several, in text order",
     GOOD.replace(b'"channel": "telegram"', b'"channel": "telegram", "channel": "x"')[:-1]
     + b', "send_id": "x"}', "route.channel"),
]


@pytest.mark.parametrize(("raw", "path"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_member_named_twice_is_a_dead_letter_naming_it_in_both_parsers(
    raw: bytes, path: str
) -> None:
    assert both(raw) == Invalid(f"duplicate member: {path}")


def test_an_escaped_colon_cannot_hide_a_member_named_twice_from_the_fast_count() -> None:
    """The fast path counts colons: `\\u003a` is one more in the decoded text than in the bytes,
    exactly the one a second `agent_id` adds; the count is not trusted then."""
    raw = dumps(confirmation(**{"payload.text": "a"})).replace(b'"text": "a"', b'"text": "\\u003a"')
    assert isinstance(read_input(raw), msgspec.Struct)  # read by the fast path when valid
    assert both(raw[:-1] + b', "agent_id": "ops"}') == Invalid("duplicate member: agent_id")


@pytest.mark.parametrize("raw", [
    GOOD.replace(b'"channel": "telegram"', b'"channel": "telegram", "thread_id": null'),
    GOOD.replace(b'"text": "Digest: 3 new tickets"', b'"text": "Digest: 3", "media": []'),
    dumps(confirmation(payload={"text": "a", "native": [{"kind": "poll", "q": {"a": 1}}]})),
    dumps(confirmation(**{"payload.text": "a: b \\u003a", "route.peer_id": "x:y"})),
    json.dumps(confirmation(), separators=(",", ":")).encode(),
    dumps(reset()),
    dumps(ERASE),
], ids=["explicit null", "explicit empty list", "native item", "colons in strings", "compact",
        "reset", "erase"])
def test_a_record_naming_each_member_once_still_takes_the_fast_path(raw: bytes) -> None:
    assert isinstance(read_input(raw), msgspec.Struct)
    assert not isinstance(both(raw), Invalid)


def test_the_usual_record_is_checked_by_counting_not_scanned_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The exact scan costs a second parse: the worker's hot path runs it only for records
    whose counts differ (a member given its default, an escaped colon) or native items."""
    lines = [raw for raw in generate(2000, seed=11, sessions=100)
             if b'"native"' not in raw and b": null" not in raw and b": []" not in raw]
    fast = [raw for raw in lines if isinstance(read_input(raw), msgspec.Struct)]
    assert len(fast) > 1000

    def forbidden(raw: bytes) -> bool:
        raise AssertionError("the exact duplicate scan ran on the hot path")

    monkeypatch.setattr(transcript_connector.parse, "has_duplicate", forbidden)
    assert all(isinstance(read_input(raw), msgspec.Struct) for raw in fast)


def test_not_json_is_said_before_a_duplicate_and_a_duplicate_before_schema_problems() -> None:
    truncated = GOOD[:-1] + b', "send_id": "x"'
    result = both(truncated)
    assert isinstance(result, Invalid) and result.reason.startswith("not JSON: ")
    surrogate = GOOD[:-1] + b', "send_id": "\\ud800"}'
    result = both(surrogate)
    assert isinstance(result, Invalid) and result.reason.startswith("not JSON: ")
    invalid = dumps(confirmation(agent_id="BAD", confirmed_at="nope"))[:-1] + b', "agent_id": "x"}'
    assert both(invalid) == Invalid("duplicate member: agent_id")


def test_the_reason_names_members_only_and_is_bounded() -> None:
    text = dumps(confirmation(**{"payload.text": SECRET}))
    assert both(text[:-1] + b', "payload": {"text": "' + SECRET.encode() + b'"}}') == Invalid(
        "duplicate member: payload")
    long_name = "k" * 10_000
    raw = dumps(confirmation(payload={"text": "a", "native": [{"kind": "x", long_name: 1}]}))
    member = b'"' + long_name.encode() + b'": 1'
    result = both(raw.replace(member, member + b", " + member))
    assert isinstance(result, Invalid) and result.reason.startswith("duplicate member: payload.")
    assert len(result.reason) < 300
    odd = dumps(confirmation(payload={"text": "a", "native": [{"kind": "x", "a.b\n": 1}]}))
    assert both(odd.replace(b'"a.b\\n": 1', b'"a.b\\n": 1, "a.b\\n": 1')) == Invalid(
        "duplicate member: payload.native[0]['a.b\\n']")
    deep = confirmation(payload={"text": "a", "native": [{"kind": "x", "n": {}}]})
    node = deep["payload"]["native"][0]["n"]
    for _ in range(150):
        node["n"] = {}
        node = node["n"]
    raw = dumps(deep).replace(b"{}", b'{"z": 1, "z": 1}')
    result = both(raw)
    assert isinstance(result, Invalid)
    assert result.reason.startswith("duplicate member: payload.native[0].n.n.")
    assert result.reason.endswith(".n.z") and len(result.reason) < 300


# --- the property -------------------------------------------------------------------------

FREE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8) | st.sampled_from(["a:b", "::", "agent:ops:main", "NaN"]),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


def _objects(value: Any, path: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """The path of every JSON object in `value` that has a member (to give one twice)."""
    out: list[tuple[str | int, ...]] = []
    if isinstance(value, dict):
        if value:
            out.append(path)
        for k, v in value.items():
            out += _objects(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _objects(v, (*path, i))
    return out


class _Writer:
    """JSON text of a record with one member of one object written twice, in a drawn style."""

    def __init__(self, draw: st.DrawFn, target: tuple[str | int, ...], record: Any) -> None:
        node = record
        for part in target:
            node = node[part]
        self.target = target
        self.key = draw(st.sampled_from(sorted(node)))
        self.again = draw(st.sampled_from(["same", "other"]))
        self.other = draw(FREE)
        self.before = draw(st.booleans())  # the second one written before the original
        self.escape_key = draw(st.sampled_from([None, 0, 1]))  # which of the two to escape
        self.escape_colons = draw(st.booleans())
        self.item, self.pair = draw(st.sampled_from([(", ", ": "), (",", ":"), (" ,\n", " : ")]))

    def text(self, value: Any, path: tuple[str | int, ...] = ()) -> str:
        if isinstance(value, dict):
            members = [(k, v, False) for k, v in value.items()]
            if path == self.target:
                at = next(i for i, (k, _, _) in enumerate(members) if k == self.key)
                again = value[self.key] if self.again == "same" else self.other
                members.insert(at if self.before else at + 1, (self.key, again, True))
            parts = []
            for k, v, second in members:
                name = json.dumps(k, ensure_ascii=False)
                if (k == self.key and path == self.target and self.escape_key == int(second)
                        and k[:1].isascii() and k[:1].isalnum()):
                    name = f'"\\u{ord(k[0]):04x}' + name[2:]  # `send_id` as `\u0073end_id`
                parts.append(name + self.pair + self.text(v, (*path, k)))
            return "{" + self.item.join(parts) + "}"
        if isinstance(value, list):
            return "[" + self.item.join(self.text(v, (*path, i)) for i, v in enumerate(value)) + "]"
        token = json.dumps(value, ensure_ascii=False)
        if isinstance(value, str) and self.escape_colons:
            token = token.replace(":", "\\u003a")
        return token


def _shown(path: tuple[str | int, ...]) -> str:
    """A path as the reason words it: plain names dotted, others quoted (repr, 64 at most)."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z0-9_-]{1,64}", part):
            out += f".{part}" if out else part
        else:
            text = repr(part)
            out += "[" + (text if len(text) <= 64 else text[:63] + "\u2026'") + "]"
    return out


@st.composite
def records_with_a_member_twice(draw: st.DrawFn) -> tuple[bytes, str]:
    record = draw(st.one_of(confirmations(), resets(), st.just(dict(ERASE))))
    if record["schema"] == "delivery-confirmation/1" and draw(st.booleans()):
        free = draw(st.dictionaries(st.text(max_size=6).filter(lambda k: k != "kind"), FREE,
                                    min_size=1, max_size=3))
        record["payload"]["native"] = [{"kind": "poll", **free}]
    if draw(st.integers(0, 4)) == 0:
        record["future"] = draw(FREE)  # an unknown field: ignored, but still JSON to read
    if record["schema"] != ERASE["schema"]:  # (an erase: valid JSON, whatever the core says)
        assert not isinstance(parse_input(dumps(record)), Invalid)
    target = draw(st.sampled_from(_objects(record)))
    writer = _Writer(draw, target, record)
    return writer.text(record).encode(), _shown((*target, writer.key))


@settings(max_examples=500, deadline=None)
@given(records_with_a_member_twice())
def test_any_valid_record_with_any_member_given_twice_is_that_dead_letter_in_both(
    case: tuple[bytes, str],
) -> None:
    raw, path = case
    assert parse_input(raw) == Invalid(f"duplicate member: {path}"), raw[:400]
    assert read_input(raw) == Invalid(f"duplicate member: {path}"), raw[:400]
