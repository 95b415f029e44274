"""The content fingerprint: what a retry of a send_id is compared by (DESIGN rule 3).

"Content" is what an entry would hold: who sent it where (agent, canonical key, destination
agent), the text, the media as (kind, name), the canonical origin. A re-signed media URL, an
added mime type, channel-native items, a new receipt, another confirmed_at or another spelling
of a key is the same content (issue 12, finding 6: on 746aef0 each was a false conflict).

Every seen record stores a fingerprint, so its value must never change: pinned values (of
format 2; format 1's are not carried over by the migration), and a reference implementation
(the plain form of the definition) it must agree with.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from schemas import DeliveryConfirmation
from tests.unit.test_properties import CHATS, confirmations
from tests.unit.wire import WRITTEN_AT, confirmation, kinds, parsed, run_records, with_
from workers.core import (
    EMPTY_HEAD,
    Seen,
    canonical_session_key,
    decide,
    fingerprint,
    session_key_of,
)
from workers.core.fingerprint import FINGERPRINT_HEX_CHARS, origin_key

BASE = confirmation()
TURN = {"kind": "turn_reply", "turn": {"session_key": "agent:ops:main", "turn_id": "t1"}}
SUBAGENT = {"run_id": "r1", "agent_id": "scout", "label": None}
IN_CHAT_JOB = {"id": "j", "mode": "in_chat", "session_key": "agent:ops:main", "name": None}
MEDIA = {"kind": "image", "name": "a.png", "url": "https://x/y?t=1", "mime": "image/png"}
NATIVE = {"title": "t", "kind": "embed", "fields": {"b": 1, "a": [2, {"d": None, "c": "é"}]}}
CASES: dict[str, tuple[dict[str, Any], str]] = {
    "job": (BASE, "3851f7165182ed5856c613808a24a544"),
    "turn": (with_(BASE, origin=TURN), "516b63549db000286395cd4268c2cc2f"),
    "subagent": (
        with_(BASE, origin={"kind": "subagent_announcement", "subagent": SUBAGENT}),
        "9a8a6e7df5a796b735f215a80aa6e6ba",
    ),
    "in_chat_job": (with_(BASE, **{"origin.job": IN_CHAT_JOB}), "1e590edca849d9045667c9e2b3dde209"),
    "media": (
        with_(BASE, payload={"text": "", "media": [MEDIA]}),
        "2dc79cf950690fb3c91e6d56b809f918",
    ),
    "native": (with_(BASE, payload={"native": [NATIVE]}), "225c83c56a817d6012eee69fabaa4f46"),
    "dest_other": (
        with_(BASE, destination_agent_id="sales"),
        "ed36024d0373df24a31a16abc93f8949",
    ),
    "unicode": (
        with_(BASE, **{"payload.text": 'größe 東京 👍 "q" \\ \n\t\u0001'}),
        "218059f498d6fd6b1130553a39ade306",
    ),
    # origin keys that name no agent (compared by no rule), spelled as they fold: the values
    # stored before issue 23, when such a key was kept as given
    "turn key naming no agent": (
        with_(BASE, origin={"kind": "message_tool", "turn": {
            "session_key": "agent:bad!:telegram:group:-100123", "turn_id": "t1"}}),
        "4098441a48ce53b2561b2d1160fd5bc0",
    ),
    "job key naming no agent": (
        with_(BASE, **{"origin.job.session_key": "agent:x y:main"}),
        "5ea741da6b0d64a232413aee1383dfe1",
    ),
}
# Other forms of a pinned case: the same content, so the same fingerprint.
SAME_AS: dict[str, tuple[str, dict[str, Any]]] = {
    "dest_self": ("job", with_(BASE, destination_agent_id="ops")),
    "new receipt and time": (
        "job",
        with_(BASE, receipt={"platform_message_ids": ["1"]}, confirmed_at="2025-03-02T00:00:00Z"),
    ),
    "key spelled bare, upper-case": ("job", with_(BASE, session_key="TELEGRAM:GROUP:-100123")),
    "another route": ("job", with_(BASE, **{"route.thread_id": "7", "route.account_id": "a"})),
    "turn key spelled bare": (
        "turn", with_(BASE, origin=TURN, **{"origin.turn.session_key": "main"}),
    ),
    "turn key upper-case": (
        "turn", with_(BASE, origin=TURN, **{"origin.turn.session_key": " AGENT:OPS:MAIN "}),
    ),
    "job key spelled bare": (
        "in_chat_job", with_(BASE, **{"origin.job": {**IN_CHAT_JOB, "session_key": "Main"}}),
    ),
    "media re-signed, no mime": (
        "media",
        with_(BASE, payload={"text": "", "media": [{"kind": "image", "name": "a.png",
                                                    "url": "https://x/y?t=2"}]}),
    ),
    "media without url": (
        "media", with_(BASE, payload={"text": "", "media": [{"kind": "image", "name": "a.png"}]}),
    ),
    "media and native": (
        "media", with_(BASE, payload={"media": [MEDIA], "native": [NATIVE]}),
    ),
    "native is not content": ("native", with_(BASE, payload={})),
    "native is not content, either way": ("native", with_(BASE, payload={"text": "",
                                                                         "native": []})),
    # issue 23, item 7: a key that names no agent is spelled many ways too
    "turn key naming no agent, upper-case and padded": (
        "turn key naming no agent",
        with_(BASE, origin={"kind": "message_tool", "turn": {
            "session_key": " AGENT:Bad!:Telegram:GROUP:-100123\t", "turn_id": "t1"}}),
    ),
    "job key naming no agent, upper-case": (
        "job key naming no agent", with_(BASE, **{"origin.job.session_key": "Agent: X Y :MAIN"}),
    ),
    "job key naming no agent, main implied": (
        "job key naming no agent", with_(BASE, **{"origin.job.session_key": "agent:X Y"}),
    ),
}


def stored(wire: dict[str, Any]) -> str:
    """The fingerprint the decision remembers for `wire` (what a seen record stores)."""
    record = parsed(wire)
    assert isinstance(record, DeliveryConfirmation)
    key = session_key_of(record)
    assert isinstance(key, str)
    decision = decide(EMPTY_HEAD, None, record, key, now=WRITTEN_AT, written_at=WRITTEN_AT)
    assert decision.seen is not None, decision.outcome
    return decision.seen.fingerprint


def reference(record: DeliveryConfirmation, session_key: str) -> str:
    """The fingerprint as DESIGN rule 3 and the module doc define it, written the plain way."""

    def canonical(raw: str) -> str:
        try:
            return canonical_session_key(raw, record.agent_id)
        except ValueError:  # a key no rule compares, naming no agent: folded all the same
            _, segment, *rest = raw.split(":", 2)
            tail = canonical_session_key(":".join(["agent", "x", *rest]), "x")
            return f"agent:{segment.strip().lower()}:{tail[len('agent:x:'):]}"

    dest = None if record.destination_agent_id == record.agent_id else record.destination_agent_id
    o, p = record.origin, record.payload
    content = [
        record.agent_id,
        session_key,
        dest,
        p.text or "",
        [[m.kind, m.name] for m in p.media],
        o.kind,
        None if o.turn is None else [canonical(o.turn.session_key), o.turn.turn_id],
        None if o.job is None else [
            o.job.id, o.job.name, o.job.run_id, o.job.mode,
            None if o.job.session_key is None else canonical(o.job.session_key),
        ],
        None if o.subagent is None else [o.subagent.run_id, o.subagent.agent_id, o.subagent.label],
    ]
    data = json.dumps(content, separators=(",", ":"), ensure_ascii=False).encode()
    return hashlib.sha256(data).hexdigest()[:32]


def ref(wire: dict[str, Any]) -> str:
    record = parsed(wire)
    assert isinstance(record, DeliveryConfirmation)
    key = session_key_of(record)
    assert isinstance(key, str)
    return reference(record, key)


@pytest.mark.parametrize("name", CASES)
def test_pinned_fingerprints(name: str) -> None:
    wire, expected = CASES[name]
    assert stored(wire) == ref(wire) == expected
    assert len(expected) == FINGERPRINT_HEX_CHARS


def test_pinned_fingerprints_are_all_different() -> None:
    assert len({fp for _, fp in CASES.values()}) == len(CASES)


@pytest.mark.parametrize("name", SAME_AS)
def test_the_same_content_written_another_way(name: str) -> None:
    case, wire = SAME_AS[name]
    assert stored(wire) == CASES[case][1]


def test_the_fingerprint_needs_the_canonical_origin_keys() -> None:
    """fingerprint() takes the canonical turn and job keys from its caller (decide)."""
    record = parsed(with_(BASE, origin=TURN))
    assert isinstance(record, DeliveryConfirmation)
    key = "agent:ops:telegram:group:-100123"
    assert fingerprint(record, key, "agent:ops:main") == CASES["turn"][1]
    assert fingerprint(record, key, "agent:ops:other") != CASES["turn"][1]


@given(confirmations())
def test_fingerprint_matches_the_reference(wire: dict[str, Any]) -> None:
    assert stored(wire) == ref(wire)


@pytest.mark.parametrize(("origin", "first", "again"), [
    ({"kind": "message_tool", "turn": {"turn_id": "t"}}, "agent:Bad!:Main", " agent:bad!:main "),
    ({"kind": "automation_result", "turn": {"turn_id": "t"}}, "agent:x y:slack:DM:U1",
     "AGENT:X Y:slack:direct:u1"),
    ({"kind": "automation_result", "job": {"id": "j", "mode": "background"}},
     "agent:-x:telegram:group:-1:thread:5", "agent:-X:telegram:group:-1:topic:5"),
], ids=["message_tool turn", "automation_result turn", "background job"])
def test_an_origin_key_naming_no_agent_in_two_spellings_is_a_duplicate_not_a_conflict(
    origin: dict[str, Any], first: str, again: str
) -> None:
    """Issue 23, item 7: such a key was kept as given, so a retry spelling it another way was
    a false `conflicting_duplicate`. Another key (another chat) is still another content."""
    where = "turn" if "turn" in origin else "job"
    wire = with_(BASE, origin=copy.deepcopy(origin), **{f"origin.{where}.session_key": first})
    retry = with_(wire, **{f"origin.{where}.session_key": again})
    other = with_(wire, **{f"origin.{where}.session_key": again.replace("-1", "-2")
                           .replace("main", "other").replace("u1", "u2")})
    outcomes = run_records([wire, retry, other])
    assert kinds(outcomes) == ["written", "duplicate", "conflict"]
    assert stored(retry) == stored(wire) != stored(other)


def test_an_origin_key_keeps_its_canonical_form_and_folds_one_that_names_no_agent() -> None:
    assert origin_key("TELEGRAM:group:-1", "ops") == "agent:ops:telegram:group:-1"
    assert origin_key(" agent:Bad!:Slack:DM:U1 ", "ops") == "agent:bad!:slack:direct:u1"
    assert origin_key("agent:bad!", "ops") == origin_key("agent:BAD!:main", "ops")
    assert origin_key("agent::x", "ops") == "agent::x"
    assert origin_key("agent:bad!:matrix:group:!Room:x.org", "ops").endswith("!Room:x.org")


# --- retries: what a connector may change without changing the content -------------------


def _respell(key: str, agent: str, how: int) -> str:
    """`key` (a canonical key of `agent`) as a sender might spell it."""
    if how == 0:
        return key.split(":", 2)[2]  # bare
    if how == 1 and "matrix" not in key:  # a Matrix room id keeps its case
        return key.upper()
    if how == 2:
        return f"  {key}\t"
    if how == 3 and ":direct:" in key:
        return key.replace(":direct:", ":dm:")  # the legacy segment
    if how == 4:
        return "main" if key == f"agent:{agent}:main" else key
    return key


def _canonical_of(raw: str, agent: str) -> str:
    return canonical_session_key(raw, agent)


@st.composite
def retries(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """A confirmation and a retry of it: same content, anything else may differ."""
    original = draw(confirmations())
    retry = copy.deepcopy(original)
    agent = retry["agent_id"]
    for node, field in ((retry, "session_key"), (retry["origin"].get("turn"), "session_key"),
                        (retry["origin"].get("job"), "session_key")):
        if node is not None and node.get(field) is not None and draw(st.booleans()):
            canonical = _canonical_of(node[field], agent)
            node[field] = _respell(canonical, agent, draw(st.integers(0, 5)))
    for m in retry["payload"].get("media", []):
        if draw(st.booleans()):
            m["url"] = f"https://cdn.example/a?token={draw(st.integers(0, 99))}"
        if draw(st.booleans()):
            m["mime"] = draw(st.sampled_from(["image/png", "application/octet-stream"]))
    if draw(st.booleans()):
        retry["payload"]["native"] = draw(
            st.sampled_from([[], [{"kind": "card", "n": 1}], [{"kind": "embed", "title": "u"}]])
        )
    if draw(st.booleans()):
        retry["receipt"] = {"platform_message_ids": [str(draw(st.integers(10, 99)))],
                            "sent_at": "2025-03-05T00:00:00Z"}
    if draw(st.booleans()):
        retry["confirmed_at"] = "2025-03-04T10:00:00+05:00"
    if draw(st.booleans()):
        retry["route"] = {**retry["route"], "thread_id": "other"}
    if retry.get("destination_agent_id") in (None, agent) and draw(st.booleans()):
        retry["destination_agent_id"] = draw(st.sampled_from([None, agent]))
    return original, retry


@given(retries())
def test_a_retry_has_the_fingerprint_of_its_original(pair: tuple[dict, dict]) -> None:
    original, retry = pair
    assert stored(retry) == stored(original)
    # and so the decision calls it a duplicate, never a conflict
    record = parsed(retry)
    key = session_key_of(record)
    assert isinstance(key, str)
    prior = Seen(WRITTEN_AT, stored(original))
    decision = decide(EMPTY_HEAD, prior, record, key, now=WRITTEN_AT, written_at=WRITTEN_AT)
    assert decision.outcome.kind == "duplicate"


def _other_content(wire: dict[str, Any], how: int) -> dict[str, Any] | None:
    out = copy.deepcopy(wire)
    origin, payload = out["origin"], out["payload"]
    if how == 0:
        payload["text"] = (payload.get("text") or "") + "!"
    elif how == 1:
        payload["media"] = [*payload.get("media", []), {"kind": "file", "name": "b.pdf"}]
    elif how == 2 and payload.get("media"):
        payload["media"] = [{**payload["media"][0], "name": "other.png"}]
    elif how == 3 and payload.get("media"):
        payload["media"] = [{**payload["media"][0], "kind": "video"}]
    elif how == 4 and origin.get("turn"):
        origin["turn"]["turn_id"] = "t-other"
    elif how == 5 and origin.get("turn"):
        others = [k for a, _, k in CHATS if a == out["agent_id"]]
        now = _canonical_of(origin["turn"]["session_key"], out["agent_id"])
        origin["turn"]["session_key"] = next(k for k in others if k != now)
    elif how == 6 and origin.get("job"):
        origin["job"]["run_id"] = "run-other"
    elif how == 7 and origin.get("job"):
        origin["job"]["mode"] = "background" if origin["job"]["mode"] == "in_chat" else "in_chat"
    elif how == 8 and origin.get("subagent"):
        origin["subagent"]["label"] = "other"
    elif how == 9 and origin["kind"] in ("automation_result", "failure_alert"):
        origin["kind"] = "failure_alert" if origin["kind"] == "automation_result" \
            else "automation_result"
    elif how == 10:
        other = next(a for a in ("ops", "sales", "scout") if a != out["agent_id"])
        if out.get("destination_agent_id") == other:
            return None
        out["destination_agent_id"] = other
    else:
        return None
    return out


@given(confirmations(), st.integers(0, 10))
def test_other_content_has_another_fingerprint(wire: dict[str, Any], how: int) -> None:
    changed = _other_content(wire, how)
    if changed is not None:
        assert stored(changed) != stored(wire)


# --- every field of the record is either content or deliberately not ---------------------

CONTENT = {
    "DeliveryConfirmation": {"agent_id", "session_key", "destination_agent_id", "origin",
                             "payload"},
    "Origin": {"kind", "turn", "job", "subagent"},
    "Turn": {"session_key", "turn_id"},
    "Job": {"id", "name", "run_id", "mode", "session_key"},
    "Subagent": {"run_id", "agent_id", "label"},
    "Payload": {"text", "media"},
    "Media": {"kind", "name"},
}
NOT_CONTENT = {
    "DeliveryConfirmation": {"schema_", "send_id", "confirmed_at", "route", "receipt"},
    "Payload": {"native"},
    "Media": {"url", "mime"},
}


def _models(model: type[BaseModel]) -> list[type[BaseModel]]:
    out = [model]
    for field in model.model_fields.values():
        for arg in (field.annotation, *getattr(field.annotation, "__args__", ())):
            for inner in (arg, *getattr(arg, "__args__", ())):
                if isinstance(inner, type) and issubclass(inner, BaseModel) and inner not in out:
                    out += _models(inner)
    return out


def test_every_field_of_a_confirmation_is_classified() -> None:
    """A field added to the contract must be put on one side (and the pins reconsidered)."""
    for model in _models(DeliveryConfirmation):
        name = model.__name__
        if name not in CONTENT and name not in NOT_CONTENT:
            continue  # a model that is not content at all (Route, Receipt, Native)
        fields = set(model.model_fields)
        assert fields == CONTENT.get(name, set()) | NOT_CONTENT.get(name, set()), name
    assert {m.__name__ for m in _models(DeliveryConfirmation)} == {
        *CONTENT, "Route", "Receipt", "Native",
    }
