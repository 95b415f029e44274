"""Properties of provider replay over generated histories, for every family.

Histories mix user lines, replies, owner entries (posted by a job, a sub-agent or the agent),
tool episodes whose results are interleaved with other lines (nested episodes included), and
resets. Every text carries a unique marker `<tN>`, so a marker's position in the rendered
JSON is the text's position in the request.

- No text is lost or duplicated (with all epochs; by default exactly the latest epoch's).
- Nothing moves but what the tool-pair rule moves: with tool results left out, the order of
  everything is the input's; each line that sat between a call and its last result comes
  after that result.
- Every tool call is directly followed by its results (all families).
- strict alternates user/assistant from user; gemini and anthropic start with a user turn and
  never hold two same-role turns in a row; openai keeps one message per line.
- Whatever numbers tool arguments hold (NaN, infinities, huge, tiny), a tool call is refused
  or its request is strict JSON, for every family.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from schemas import PostedBy
from workers.core.provider_replay import (
    FAMILIES,
    RESET_NOTE,
    STRICT_JOIN,
    Family,
    HistoryLine,
    ToolCall,
    problems,
    render,
)

MARKER = re.compile(r"<t\d+>")
TEXT_TAIL = st.sampled_from(["", " plain", ' with "quotes"', " two\nlines", " ünïcode ✓", " {}"])
POSTERS = st.one_of(
    st.builds(
        PostedBy,
        kind=st.sampled_from(["job", "subagent", "agent"]),
        id=st.sampled_from(["job-1", "researcher", "ops"]),
        name=st.sampled_from([None, "daily report", 'say "hi"']),
        run_id=st.sampled_from([None, "run-7"]),
    ),
    st.none(),
)


class _Gen:
    """Fresh markers and call ids within one generated history."""

    def __init__(self) -> None:
        self.n = 0

    def text(self, draw: st.DrawFn) -> str:
        self.n += 1
        return f"<t{self.n}>{draw(TEXT_TAIL)}"

    def call_id(self) -> str:
        self.n += 1
        return f"call_{self.n}"


def _simple(draw: st.DrawFn, gen: _Gen) -> HistoryLine:
    kind = draw(st.sampled_from(["user", "reply", "entry", "entry"]))
    if kind == "user":
        return HistoryLine(role="user", text=gen.text(draw))
    if kind == "reply":
        return HistoryLine(role="assistant", text=gen.text(draw))
    media = draw(st.sampled_from([(), ({"kind": "image", "name": "chart.png"},)]))
    return HistoryLine.model_validate(
        {
            "role": "assistant",
            "text": gen.text(draw),
            "posted_by": draw(POSTERS),
            "media": media,
        }
    )


def _episode(draw: st.DrawFn, gen: _Gen, depth: int) -> list[HistoryLine]:
    """A call, then its results interleaved with other lines (and maybe another episode)."""
    ids = [gen.call_id() for _ in range(draw(st.integers(1, 3)))]
    calls = tuple(ToolCall(id=i, name="search", arguments={"q": gen.text(draw)}) for i in ids)
    text = gen.text(draw) if draw(st.booleans()) else ""
    head = HistoryLine(role="assistant", text=text, tool_calls=calls)
    results = [[HistoryLine(role="tool", text=gen.text(draw), tool_call_id=i)] for i in ids]
    draw(st.randoms()).shuffle(results)
    others = [[_simple(draw, gen)] for _ in range(draw(st.integers(0, 3)))]
    if depth < 2 and draw(st.integers(0, 3)) == 0:
        others.append(_episode(draw, gen, depth + 1))
    return [head, *_interleave(draw, results + others)]


def _interleave(draw: st.DrawFn, seqs: list[list[HistoryLine]]) -> list[HistoryLine]:
    """A random merge that keeps each sequence's own order."""
    seqs = [list(s) for s in seqs if s]
    out: list[HistoryLine] = []
    while seqs:
        i = draw(st.integers(0, len(seqs) - 1))
        out.append(seqs[i].pop(0))
        if not seqs[i]:
            del seqs[i]
    return out


@st.composite
def histories(draw: st.DrawFn) -> list[HistoryLine]:
    """A valid history, never empty: resets between blocks; each epoch's first line states it.

    (An empty history is refused: test_an_empty_request_is_refused_for_every_family.)
    """
    gen = _Gen()
    epoch = draw(st.integers(0, 2))
    stated = False
    out: list[HistoryLine] = []
    for _ in range(draw(st.integers(0, 10))):
        kind = draw(st.sampled_from(["simple", "simple", "simple", "episode", "reset"]))
        if kind == "reset":
            epoch += draw(st.integers(1, 2))
            stated = False
            continue
        block = [_simple(draw, gen)] if kind == "simple" else _episode(draw, gen, 0)
        for line in block:
            if not stated or draw(st.booleans()):
                line = line.model_copy(update={"epoch": epoch})
                stated = True
            out.append(line)
    return out or [HistoryLine(role="user", text=gen.text(draw), epoch=epoch)]


# --- oracles, independent of the implementation -------------------------------------------


def _epochs(lines: list[HistoryLine]) -> list[int]:
    out, current = [], 0
    for line in lines:
        current = line.epoch if line.epoch is not None else current
        out.append(current)
    return out


def _markers(line: HistoryLine) -> list[str]:
    found = MARKER.findall(line.text)
    for c in line.tool_calls:
        found += MARKER.findall(c.arguments)
    return found


def _output_markers(request: dict[str, Any]) -> list[str]:
    return MARKER.findall(json.dumps(request, ensure_ascii=False))


def _moved(lines: list[HistoryLine]) -> dict[str, str]:
    """Marker of each non-result line between a call and its last result -> that result's."""
    moved: dict[str, str] = {}
    for i, line in enumerate(lines):
        if not line.tool_calls:
            continue
        ids = {c.id for c in line.tool_calls}
        last = max(j for j, x in enumerate(lines) if x.tool_call_id in ids)
        for x in lines[i + 1 : last]:
            if x.role != "tool":  # results of other calls move up to theirs
                for m in _markers(x):
                    moved.setdefault(m, _markers(lines[last])[0])
    return moved


# --- the properties -----------------------------------------------------------------------


@given(histories(), st.sampled_from(FAMILIES))
def test_no_text_is_lost_or_duplicated(lines: list[HistoryLine], family: Family) -> None:
    assert problems(lines) == ()
    everything = [m for line in lines for m in _markers(line)]
    got = _output_markers(render(lines, family, all_epochs=True))
    assert sorted(got) == sorted(everything)
    texts = _texts(render(lines, family, all_epochs=True))
    for line in lines:
        if line.text:
            assert any(line.text in t for t in texts), line.text


@given(histories(), st.sampled_from(FAMILIES))
def test_by_default_exactly_the_latest_epoch(lines: list[HistoryLine], family: Family) -> None:
    epochs = _epochs(lines)
    latest = [
        m for line, e in zip(lines, epochs, strict=True) if e == epochs[-1] for m in _markers(line)
    ]
    request = render(lines, family)
    assert sorted(_output_markers(request)) == sorted(latest)
    assert RESET_NOTE not in json.dumps(request)
    with_all = json.dumps(render(lines, family, all_epochs=True), ensure_ascii=False)
    resets = sum(1 for a, b in zip(epochs, epochs[1:], strict=False) if a != b)
    assert with_all.count(RESET_NOTE) == resets


@given(histories(), st.sampled_from(FAMILIES))
def test_nothing_moves_but_what_the_tool_pair_rule_moves(
    lines: list[HistoryLine], family: Family
) -> None:
    got = _output_markers(render(lines, family, all_epochs=True))
    results = {m for line in lines if line.role == "tool" for m in _markers(line)}
    expected = [m for line in lines if line.role != "tool" for m in _markers(line)]
    assert [m for m in got if m not in results] == expected
    position = {m: i for i, m in enumerate(got)}
    for marker, after in _moved(lines).items():
        assert position[marker] > position[after]


@given(histories(), st.sampled_from(FAMILIES))
def test_every_tool_call_is_directly_followed_by_its_results(
    lines: list[HistoryLine], family: Family
) -> None:
    request = render(lines, family, all_epochs=True)
    calls = sum(len(line.tool_calls) for line in lines)
    assert _pairs_checked(family, request) == calls


@given(histories())
def test_strict_alternates_from_user(lines: list[HistoryLine]) -> None:
    messages = render(lines, "strict", all_epochs=True)["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"] * (len(messages) // 2) + (
        ["user"] if len(messages) % 2 else []
    )
    assert all(set(m) == {"role", "content"} and isinstance(m["content"], str) for m in messages)
    assert all(m["content"] for m in messages)


@given(histories(), st.sampled_from(["gemini", "anthropic"]))
def test_gemini_and_anthropic_start_with_user_and_merge_same_roles(
    lines: list[HistoryLine], family: Family
) -> None:
    # gemini: but a Content of function responses holds nothing else (Vertex AI refuses the
    # mix), so user text after a tool's results is a user Content of its own
    request = render(lines, family, all_epochs=True)
    turns = request["contents"] if family == "gemini" else request["messages"]
    kinds = [
        (t["role"], family == "gemini" and any("functionResponse" in p for p in t["parts"]))
        for t in turns
    ]
    assert kinds[0][0] == "user"
    assert all(a != b for a, b in zip(kinds, kinds[1:], strict=False))
    for t in turns:
        items = t["parts"] if family == "gemini" else t["content"]
        assert items
        assert all(item.get("text", "x") for item in items), "no empty text block or part"


@given(histories())
def test_openai_keeps_one_message_per_line(lines: list[HistoryLine]) -> None:
    messages = render(lines, "openai")["messages"]
    epochs = _epochs(lines)
    assert len(messages) == sum(1 for e in epochs if epochs and e == epochs[-1])


_ARGUMENT_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()  # NaN and ±infinity included
    | st.sampled_from([1e308, -5e-324, 0.1])
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)


@given(st.dictionaries(st.text(max_size=3), _ARGUMENT_VALUES, max_size=4), st.booleans())
def test_any_accepted_tool_call_renders_as_strict_json(
    arguments: dict[str, Any], as_text: bool
) -> None:
    given_as = json.dumps(arguments) if as_text else arguments  # json.dumps spells NaN "NaN"
    try:
        made = ToolCall(id="c1", name="search", arguments=given_as)
    except ValidationError as exc:
        assert exc.errors()[0]["loc"] == ("arguments",)
        return
    lines = [
        HistoryLine(role="assistant", text="", tool_calls=(made,)),
        HistoryLine(role="tool", text="done", tool_call_id="c1"),
    ]
    for family in FAMILIES:
        json.dumps(render(lines, family), allow_nan=False)  # raises on NaN or Infinity
    (tool_use,) = render(lines, "anthropic")["messages"][1]["content"]
    assert tool_use["input"] == json.loads(made.arguments)


def test_finite_arguments_are_accepted_and_non_finite_refused() -> None:
    assert ToolCall(id="c", name="n", arguments={"x": [1e308, -5e-324]}).arguments
    for bad in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(ValidationError, match="not finite"):
            ToolCall(id="c", name="n", arguments={"x": [bad]})


# --- structure checks per family ----------------------------------------------------------


def _texts(request: dict[str, Any]) -> list[str]:
    """Every string value in the request."""
    out: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, str):
            out.append(node)
        elif isinstance(node, dict):
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(request)
    return out


def _pairs_checked(family: str, request: dict[str, Any]) -> int:
    """Assert the tool-pair rule in the family's own shape; return the calls checked."""
    checked = 0
    if family == "openai":
        messages = request["messages"]
        for i, m in enumerate(messages):
            ids = [c["id"] for c in m.get("tool_calls", ())]
            following = messages[i + 1 : i + 1 + len(ids)]
            assert all(f["role"] == "tool" for f in following)
            assert sorted(f["tool_call_id"] for f in following) == sorted(ids)
            checked += len(ids)
        return checked
    if family == "strict":
        messages = request["messages"]
        for i, m in enumerate(messages):
            ids = re.findall(r"^\[tool call (call_\d+): ", m["content"], re.M)
            if not ids:
                continue
            last_line = m["content"].rsplit("\n", 1)[-1]
            assert last_line.startswith(f"[tool call {ids[-1]}: "), "nothing after the calls"
            chunks = messages[i + 1]["content"].split(STRICT_JOIN)
            heads = [re.match(r"\[tool result (call_\d+): ", c) for c in chunks[: len(ids)]]
            assert sorted(h.group(1) for h in heads if h) == sorted(ids)
            checked += len(ids)
        return checked
    gemini = family == "gemini"
    turns = request["contents"] if gemini else request["messages"]
    call_key, result_key = "functionCall", "functionResponse"  # gemini's part keys
    for i, t in enumerate(turns):
        items = t["parts"] if gemini else t["content"]
        is_call = [call_key in x if gemini else x["type"] == "tool_use" for x in items]
        if not any(is_call):
            continue
        first = is_call.index(True)
        assert all(is_call[first:]), "the calls end their turn"
        if gemini:
            ids = [p[call_key]["id"] for p in items[first:]]
            names = {p[call_key]["id"]: p[call_key]["name"] for p in items[first:]}
            nxt = turns[i + 1]["parts"][: len(ids)]
            assert all(result_key in p for p in nxt)
            assert sorted(p[result_key]["id"] for p in nxt) == sorted(ids)
            assert all(p[result_key]["name"] == names[p[result_key]["id"]] for p in nxt)
        else:
            ids = [b["id"] for b in items[first:]]
            nxt = turns[i + 1]["content"][: len(ids)]
            assert all(b["type"] == "tool_result" for b in nxt), "results come first"
            assert sorted(b["tool_use_id"] for b in nxt) == sorted(ids)
        assert turns[i + 1]["role"] == "user"
        checked += len(ids)
    return checked
