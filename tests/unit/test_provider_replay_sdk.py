"""Rendered requests against the providers' own SDK types and their servers' rules.

Generated histories (Hypothesis) hold what the servers refuse when rendered naively: a tool
call id reused after a reset, ids and names outside the providers' patterns (and ids spelled
like another id's mapping), whitespace-only and whitespace-ending texts, user text written
while a tool ran, owner entries between a call and its results. Each family's output, with
and without `--all-epochs`, must be

- a value of the official SDK's request type: openai's `ChatCompletionMessageParam`,
  anthropic's `MessageParam` (both TypedDicts, checked strictly: no unknown key, every
  required key, every value of its declared type), google-genai's `Content` (a pydantic
  model closed to extra fields) and a `contents` list its `t_contents` accepts; strict's
  messages are both an OpenAI and an Anthropic message;
- within the servers' rules (`_rules`): the patterns and lengths of ids and names, ids
  unique in a request, each call answered right after it, no empty or whitespace-only text,
  no final assistant text ending in whitespace, Gemini's function-response turns holding
  only responses, as many as the calls before them, and never an empty request.
"""

from __future__ import annotations

import functools
import re
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, Literal, NotRequired, Required, Union, get_args, get_origin

import anthropic.types
import openai.types.chat
import pydantic
import pytest
import typing_extensions
from google.genai import _transformers as genai_transformers
from google.genai import types as genai
from hypothesis import given
from hypothesis import strategies as st

from schemas import PostedBy
from workers.core.provider_replay import (
    FAMILIES,
    EmptyRequest,
    Family,
    HistoryLine,
    ToolCall,
    mapped,
    problems,
    render,
    tool_name,
)

# --- a strict check of a JSON value against an SDK's TypedDict request types --------------


def type_errors(value: Any, tp: Any, path: str = "$") -> list[str]:
    """Why `value` is not a `tp` (empty: it is). Unknown keys are errors; so is a type the
    check does not know (it never passes what it cannot read)."""
    origin = get_origin(tp)
    if origin is Annotated or origin in (Required, NotRequired):
        return type_errors(value, get_args(tp)[0], path)
    if origin in (Union, types.UnionType):
        tried = [type_errors(value, alternative, path) for alternative in get_args(tp)]
        return [] if any(not e for e in tried) else min(tried, key=len)
    if origin is Literal:
        return [] if value in get_args(tp) else [f"{path}: {value!r} not one of {get_args(tp)}"]
    if origin in (list, Iterable, Sequence) or tp in (list, Iterable):
        if not isinstance(value, list):
            return [f"{path}: not a list"]
        (item,) = get_args(tp) or (object,)
        return [e for i, v in enumerate(value) for e in type_errors(v, item, f"{path}[{i}]")]
    if origin in (dict, Mapping) or tp is dict:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            return [f"{path}: not an object"]
        _, item = get_args(tp) or (str, object)
        return [e for k, v in value.items() for e in type_errors(v, item, f"{path}.{k}")]
    if tp is object or tp is Any:
        return []
    if tp is type(None):
        return [] if value is None else [f"{path}: not null"]
    if tp in (str, int, float, bool):
        ok = isinstance(value, tp) and (tp is bool or not isinstance(value, bool))
        return [] if ok else [f"{path}: not a {tp.__name__}"]
    if typing_extensions.is_typeddict(tp):
        return _typeddict_errors(value, tp, path)
    if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
        return [f"{path}: a response model ({tp.__name__}), not a request param"]
    raise TypeError(f"type_errors does not know {tp!r} (at {path})")


@functools.cache
def _fields(tp: type) -> tuple[dict[str, Any], frozenset[str]]:
    hints = typing.get_type_hints(tp, include_extras=True)
    required = frozenset(
        k
        for k, hint in hints.items()
        if get_origin(hint) is Required or (tp.__total__ and get_origin(hint) is not NotRequired)
    )
    return hints, required


def _typeddict_errors(value: Any, tp: type, path: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{path}: not an object ({tp.__name__})"]
    hints, required = _fields(tp)
    errors = [f"{path}.{k}: unknown key of {tp.__name__}" for k in value if k not in hints]
    errors += [f"{path}.{k}: required by {tp.__name__}" for k in required if k not in value]
    for k, v in value.items():
        if k in hints:
            errors += type_errors(v, hints[k], f"{path}.{k}")
    return errors


OPENAI_MESSAGE = openai.types.chat.ChatCompletionMessageParam
ANTHROPIC_MESSAGE = anthropic.types.MessageParam


def sdk_errors(family: str, request: dict[str, Any]) -> list[str]:
    """Why the SDK's request types do not take `request`'s messages or contents."""
    if family == "gemini":
        contents = request["contents"]
        errors = []
        for i, c in enumerate(contents):
            try:
                model = genai.Content.model_validate(c)
            except pydantic.ValidationError as exc:
                errors.append(f"contents[{i}]: {exc}")
                continue
            back = model.model_dump(by_alias=True, exclude_none=True, mode="json")
            if back != c:
                errors.append(f"contents[{i}]: google-genai reads it as {back}")
        try:
            genai_transformers.t_contents(contents)
        except ValueError as exc:
            errors.append(f"contents: google-genai refuses to send them: {exc}")
        return errors
    kinds = {"openai": [OPENAI_MESSAGE], "anthropic": [ANTHROPIC_MESSAGE]}
    errors = []
    for tp in kinds.get(family, [OPENAI_MESSAGE, ANTHROPIC_MESSAGE]):  # strict: both
        for i, m in enumerate(request["messages"]):
            errors += type_errors(m, tp, f"messages[{i}]")
    return errors


# --- the servers' rules --------------------------------------------------------------------

SAFE_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")  # openai and anthropic tool names
ANTHROPIC_ID = re.compile(r"[a-zA-Z0-9_-]+")
GEMINI_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_.:-]{0,127}")


def _check(errors: list[str], ok: bool, why: str) -> None:
    if not ok:
        errors.append(why)


def _visible(text: Any) -> bool:
    return isinstance(text, str) and bool(text.strip())


def rule_errors(family: str, request: dict[str, Any]) -> list[str]:
    """Why the family's server would refuse `request` (empty: it would not, by these rules)."""
    errors: list[str] = []
    turns = request["contents" if family == "gemini" else "messages"]
    _check(errors, bool(turns), "an empty request")
    if family == "openai":
        ids = [c["id"] for m in turns for c in m.get("tool_calls", ())]
        _check(errors, len(ids) == len(set(ids)), f"tool call ids repeat: {ids}")
        for i, m in enumerate(turns):
            calls = m.get("tool_calls", ())
            for c in calls:
                _check(errors, len(c["id"]) <= 40, f"id over 40 characters: {c['id']!r}")
                name = c["function"]["name"]
                _check(errors, bool(SAFE_NAME.fullmatch(name)), f"name {name!r}")
            answers = turns[i + 1 : i + 1 + len(calls)]
            _check(
                errors,
                sorted(a.get("tool_call_id", "") for a in answers) == sorted(c["id"] for c in calls)
                and all(a["role"] == "tool" for a in answers),
                f"messages[{i}]: calls not answered right after",
            )
            if m["role"] == "tool":
                before = [x for x in turns[:i] if x["role"] != "tool"][-1:]
                called = [c["id"] for x in before for c in x.get("tool_calls", ())]
                _check(errors, m["tool_call_id"] in called, f"messages[{i}]: answers no call")
        return errors
    if family == "strict":
        roles = [m["role"] for m in turns]
        _check(
            errors,
            roles == ["user", "assistant"] * (len(roles) // 2) + ["user"] * (len(roles) % 2),
            f"roles do not alternate from user: {roles}",
        )
        _check(errors, all(_visible(m["content"]) for m in turns), "empty or blank content")
        if turns and turns[-1]["role"] == "assistant":
            _check(
                errors,
                turns[-1]["content"] == turns[-1]["content"].rstrip(),
                "final assistant content ends in whitespace",
            )
        return errors
    gemini = family == "gemini"
    items_of = (lambda t: t["parts"]) if gemini else (lambda t: t["content"])
    _check(errors, not turns or turns[0]["role"] == "user", "does not start with user")
    _check(errors, all(items_of(t) for t in turns), "a turn without parts or blocks")
    call_ids: list[str] = []
    for i, t in enumerate(turns):
        items = items_of(t)
        if gemini:
            calls = [p["functionCall"] for p in items if "functionCall" in p]
            responses = [p["functionResponse"] for p in items if "functionResponse" in p]
            texts = [p["text"] for p in items if "text" in p]
            _check(
                errors,
                not responses or len(responses) == len(items),
                f"contents[{i}]: function responses mixed with other parts",
            )
            for c in calls:
                _check(errors, bool(GEMINI_NAME.fullmatch(c["name"])), f"name {c['name']!r}")
        else:
            calls = [b for b in items if b["type"] == "tool_use"]
            responses = [b for b in items if b["type"] == "tool_result"]
            texts = [b["text"] for b in items if b["type"] == "text"]
            for c in calls:
                _check(errors, bool(ANTHROPIC_ID.fullmatch(c["id"])), f"tool_use id {c['id']!r}")
                _check(errors, bool(SAFE_NAME.fullmatch(c["name"])), f"name {c['name']!r}")
            for r in responses:
                _check(errors, "content" not in r or _visible(r["content"]), "blank tool result")
            _check(
                errors,
                items[: len(responses)] == responses,
                f"messages[{i}]: tool results do not come first",
            )
        _check(errors, all(_visible(x) for x in texts), f"turn {i}: an empty or blank text")
        call_ids += [c["id"] for c in calls]
        if calls:
            nxt = items_of(turns[i + 1]) if i + 1 < len(turns) else []
            if gemini:
                got = [p["functionResponse"] for p in nxt if "functionResponse" in p]
                pairs = sorted((r["id"], r["name"]) for r in got)
                want = sorted((c["id"], c["name"]) for c in calls)
            else:
                pairs = sorted(b["tool_use_id"] for b in nxt if b["type"] == "tool_result")
                want = sorted(c["id"] for c in calls)
            _check(errors, pairs == want, f"turn {i}: its calls are not answered right after")
    _check(errors, len(call_ids) == len(set(call_ids)), f"tool call ids repeat: {call_ids}")
    if not gemini and turns and turns[-1]["role"] == "assistant":
        last = turns[-1]["content"][-1]
        _check(
            errors,
            last["type"] != "text" or last["text"] == last["text"].rstrip(),
            "final assistant content cannot end with trailing whitespace",
        )
    return errors


# --- histories that hold what the servers refuse ------------------------------------------

# ids unique in an epoch, reused across them: odd characters, too long, and one spelled like
# the mapping of another (epoch 0's "toolu.01:x")
ID_POOL = ["c1", "c2", "toolu.01:x", "call/ü", "x" * 45, mapped("toolu.01:x", "0:toolu.01:x")]
# names outside the patterns, and one spelled like another's mapping
NAME_POOL = [
    "search",
    "mcp.search",
    "ns:tool",
    "n" * 70,
    "9lives",
    tool_name("mcp.search", "openai"),
]
TEXTS = st.sampled_from(["hi", "two\nlines", " ", "\n\t", "", "ends in space ", "ünï ✓\n"])
POSTERS = st.sampled_from(
    [
        None,
        PostedBy(kind="job", id="job-1", name="daily report"),
        PostedBy(kind="subagent", id="researcher", name="research", run_id="run-7"),
        PostedBy(kind="agent", id="ops"),
    ]
)


def _simple(draw: st.DrawFn) -> HistoryLine:
    role = draw(st.sampled_from(["user", "assistant", "assistant"]))
    poster = draw(POSTERS) if role == "assistant" else None
    return HistoryLine(role=role, text=draw(TEXTS), posted_by=poster)


def _episode(draw: st.DrawFn, free_ids: list[str]) -> list[HistoryLine]:
    """A call of 1-3 tools, its results shuffled among user lines and owner entries."""
    n = draw(st.integers(1, min(3, len(free_ids))))
    ids = [free_ids.pop(draw(st.integers(0, len(free_ids) - 1))) for _ in range(n)]
    calls = tuple(
        ToolCall(id=i, name=draw(st.sampled_from(NAME_POOL)), arguments={"q": i}) for i in ids
    )
    head = HistoryLine(role="assistant", text=draw(TEXTS), tool_calls=calls)
    rest = [HistoryLine(role="tool", text=draw(TEXTS), tool_call_id=i) for i in ids]
    rest += [_simple(draw) for _ in range(draw(st.integers(0, 2)))]
    draw(st.randoms()).shuffle(rest)
    return [head, *rest]


@st.composite
def histories(draw: st.DrawFn) -> list[HistoryLine]:
    """A consistent history with resets, its epoch stated on each epoch's first line."""
    out: list[HistoryLine] = []
    epoch, stated, free_ids = 0, False, list(ID_POOL)
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["simple", "simple", "episode", "episode", "reset"]))
        if kind == "reset":
            epoch, stated, free_ids = epoch + 1, False, list(ID_POOL)
            continue
        block = _episode(draw, free_ids) if kind == "episode" and free_ids else [_simple(draw)]
        for line in block:
            if not stated:
                line, stated = line.model_copy(update={"epoch": epoch}), True
            out.append(line)
    return out


# --- the properties -----------------------------------------------------------------------


def _nothing_to_send(lines: list[HistoryLine], family: Family, all_epochs: bool) -> bool:
    """Whether the request would hold no turn: every text blank (openai: no line at all)."""
    epochs, current = [], lines[0].epoch if lines else 0
    for line in lines:
        current = line.epoch if line.epoch is not None else current
        epochs.append(current)
    if all_epochs and len(set(epochs)) > 1:
        return False  # a reset note at least
    chosen = [x for x, e in zip(lines, epochs, strict=True) if all_epochs or e == epochs[-1]]
    if family == "openai":
        return not chosen
    tagged = {"job", "subagent"}  # their lines start with an attribution
    return not any(
        x.tool_calls
        or x.role == "tool"
        or x.text.strip()
        or (x.posted_by and x.posted_by.kind in tagged)
        for x in chosen
    )


@pytest.mark.parametrize("all_epochs", [False, True], ids=["latest", "all-epochs"])
@pytest.mark.parametrize("family", FAMILIES)
@given(lines=histories())
def test_rendered_requests_pass_the_sdk_types_and_the_server_rules(
    family: Family, all_epochs: bool, lines: list[HistoryLine]
) -> None:
    assert problems(lines) == ()
    if _nothing_to_send(lines, family, all_epochs):
        with pytest.raises(EmptyRequest):
            render(lines, family, all_epochs=all_epochs)
        return
    request = render(lines, family, all_epochs=all_epochs)
    assert sdk_errors(family, request) == []
    assert rule_errors(family, request) == []
    assert render(lines, family, all_epochs=all_epochs) == request  # deterministic


def test_the_checks_refuse_what_the_servers_refuse() -> None:
    # the checks are not vacuous: each refuses a request the issue saw refused
    reused = {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "u"}]},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "c", "name": "n", "input": {}}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c"}]},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "c", "name": "n", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "c"},
                    {"type": "text", "text": " "},
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "end "}]},
        ]
    }
    found = rule_errors("anthropic", reused)
    assert any("repeat" in e for e in found)
    assert any("blank text" in e for e in found)
    assert any("trailing whitespace" in e for e in found)
    mixed = {
        "contents": [
            {"role": "user", "parts": [{"text": "u"}]},
            {"role": "model", "parts": [{"functionCall": {"id": "c", "name": "n", "args": {}}}]},
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"id": "c", "name": "n", "response": {"output": ""}}},
                    {"text": "while it ran"},
                ],
            },
        ]
    }
    assert any("mixed" in e for e in rule_errors("gemini", mixed))
    assert any("refuses to send" in e for e in sdk_errors("gemini", {"contents": []}))
    long_id = {
        "messages": [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "x" * 41,
                        "type": "function",
                        "function": {"name": "a.b", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "x" * 41, "content": ""},
        ]
    }
    assert len(rule_errors("openai", long_id)) == 2
    # the SDK types: an unknown key, a missing one, a wrong type
    assert type_errors({"role": "user", "content": "x", "name": 1}, OPENAI_MESSAGE)
    assert type_errors({"role": "user", "content": [{"type": "text"}]}, ANTHROPIC_MESSAGE)
    assert type_errors({"role": "user", "content": "x", "label": "l"}, ANTHROPIC_MESSAGE)
    assert sdk_errors("gemini", {"contents": [{"role": "user", "parts": [{"txt": "x"}]}]})
