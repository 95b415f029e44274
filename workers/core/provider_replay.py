"""Provider replay: a session's history as the request messages of one provider family.

Owner entries land after the chat's last assistant reply, so a history can hold adjacent
assistant messages, start with one, or hold an entry between a tool call and its result.
Each provider family accepts a different shape; `render` builds a valid one for each, and
shows the model who posted a job's or sub-agent's message. Pure: no I/O, no clock.

Rules, in the order they apply:

1. Epochs. Only the latest epoch is rendered (a reset chat starts a fresh context). With
   `all_epochs`, every epoch is, and a user turn `RESET_NOTE` marks each reset. A line with
   no `epoch` has the previous line's; lines before the first one that has it, that one's.
2. Tool pairs, every family: a tool call is followed directly by its results. A line that
   falls between an assistant's tool call and the call's last result goes after that result;
   nothing else moves (results move up to their call; all other lines keep their order).
3. Attribution: a line posted by a job or sub-agent starts with `[posted by job "NAME" (id
   ID)]` (sub-agents: `[posted by subagent "LABEL" (id AGENT, run RUN)]`), then a newline and
   its text; posted by the agent itself: no prefix. Media are named after the text, one
   `[attached KIND "NAME"]` line each.
4. Family shape:
   - openai: chat completions `messages`, one per line, otherwise as it is (consecutive
     assistant messages are accepted). Tool calls in OpenAI shape, `role: tool` results.
   - anthropic: `messages` of content blocks; tool_use on the assistant, tool_result in a
     user message; consecutive same-role turns merged; a user turn `CONTINUES` first when
     the history would start with the assistant (Bedrock rejects that).
   - gemini: `contents` with roles user|model and parts; functionCall / functionResponse
     (`response: {"output": text}`); same-role turns merged; `CONTINUES` first when needed.
   - strict: `messages` of {role, content: string}, user and assistant strictly alternating
     from user. Tool calls become assistant text `[tool call ID: NAME ARGUMENTS]`, results
     user text `[tool result ID: NAME]` + newline + text; same-role runs are joined with a
     blank line; `CONTINUES` first when needed.
   Empty text makes no block or part (Anthropic and Gemini reject empty ones); a turn left
   with nothing is omitted. An empty history renders as an empty list, for every family.

The input must be consistent (`problems` returns nothing): tool results answer an earlier
call of the same epoch, once; every call has its result; epochs never decrease. Tool call
arguments must be JSON a provider can read back: no NaN, Infinity or number beyond a double
(1e400), at most MAX_JSON_DEPTH levels deep. The output is then always valid JSON. Every step
is linear in the number of lines (but for sorting the problems found).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar, get_args

from pydantic import ConfigDict, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from schemas import MediaRef, PostedBy, Record, TranscriptEntry
from workers.core.errors import OwnerError

Family = Literal["openai", "anthropic", "gemini", "strict"]
FAMILIES: tuple[Family, ...] = get_args(Family)
Role = Literal["user", "assistant", "tool"]

CONTINUES = "(conversation continues)"  # the user turn put first where history needs one
RESET_NOTE = "(the conversation was reset here)"  # between epochs, with all_epochs
STRICT_JOIN = "\n\n"  # between the texts of one merged strict turn
MAX_JSON_DEPTH = 100  # levels of nesting in a tool call's arguments
NOT_AN_OBJECT = "must be a JSON object or a string holding one"


# --- the input: one history line ----------------------------------------------------------


class ToolCall(Record):
    """A tool call an assistant made. `arguments` is the text of a JSON object.

    Given as an object or as its JSON text; either way it must be JSON a provider can read
    back (see `json_problem`). An unknown field is refused: `args` for `arguments` would
    otherwise render as a call without arguments.
    """

    model_config = ConfigDict(extra="forbid")

    id: Annotated[str, Field(min_length=1)]
    name: Annotated[str, Field(min_length=1)]
    arguments: str = "{}"

    @field_validator("arguments", mode="before")
    @classmethod
    def _json_object(cls, value: Any) -> Any:
        parsed, problem = _loads(value) if isinstance(value, str) else (value, None)
        if problem is None and not isinstance(parsed, dict):
            problem = NOT_AN_OBJECT
        problem = problem or json_problem(parsed)
        if problem:
            raise PydanticCustomError("history_line", problem)
        return value if isinstance(value, str) else json.dumps(parsed, ensure_ascii=False)


class _Constant(ValueError):
    """NaN, Infinity or -Infinity in a JSON text: Python reads them, JSON has none."""


def _reject_constant(name: str) -> Any:
    raise _Constant(name)


def _loads(text: str) -> tuple[Any, str | None]:
    """The value `text` holds, or why it holds none."""
    try:
        return json.loads(text, parse_constant=_reject_constant), None
    except _Constant as exc:
        return None, f"holds {exc}, which is not JSON"
    except RecursionError:
        return None, f"nested more than {MAX_JSON_DEPTH} levels deep"
    except ValueError:
        return None, NOT_AN_OBJECT


def json_problem(value: Any, max_depth: int = MAX_JSON_DEPTH) -> str | None:
    """Why `value` (parsed JSON) cannot be written as JSON again; None when it can.

    A NaN or an infinity (`1e400` parses as one) has no JSON spelling, and nesting deeper
    than `max_depth` is refused before any recursive code (json.dumps) sees it.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return "holds a number that is not finite (NaN, Infinity, or beyond a double: 1e400)"
        if isinstance(item, dict | list | tuple):
            if depth > max_depth:
                return f"nested more than {max_depth} levels deep"
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return None


class PostedByLine(PostedBy):
    """`posted_by` as a history line gives it: an unknown field is refused.

    A `label` where `name` belongs would otherwise vanish from the attribution. (A
    transcript entry's `posted_by` is a wire record: unknown fields ignored, as every reader
    of the topic does.)
    """

    model_config = ConfigDict(extra="forbid")


class HistoryLine(Record):
    """One message of a session's history, as `render` reads it (a JSON line).

    A transcript-entry/1 becomes one through `from_entry`. `tool_calls` only on the
    assistant, `tool_call_id` only (and always) on a tool result, `posted_by` only on the
    assistant.
    """

    role: Role
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = Field(default=None, validate_default=True)
    posted_by: PostedByLine | None = None
    epoch: Annotated[int, Field(ge=0)] | None = None
    media: tuple[MediaRef, ...] = ()

    @field_validator("tool_calls")
    @classmethod
    def _calls_on_assistant(cls, value: tuple[ToolCall, ...], info: ValidationInfo) -> Any:
        if value and info.data.get("role") not in (None, "assistant"):
            raise PydanticCustomError("history_line", "only an assistant line makes tool calls")
        return value

    @field_validator("tool_call_id")
    @classmethod
    def _id_on_tool(cls, value: str | None, info: ValidationInfo) -> Any:
        role = info.data.get("role")
        if role == "tool" and not value:
            raise PydanticCustomError("history_line", "required on a tool line")
        if role not in (None, "tool") and value is not None:
            raise PydanticCustomError("history_line", "only a tool line has one")
        return value

    @field_validator("posted_by", mode="before")
    @classmethod
    def _from_a_record(cls, value: Any) -> Any:
        """A PostedBy record (a transcript entry's) as its fields: it was checked as a record."""
        if isinstance(value, PostedBy) and not isinstance(value, PostedByLine):
            return value.model_dump(by_alias=True)
        return value

    @field_validator("posted_by")
    @classmethod
    def _posted_by_assistant(cls, value: PostedBy | None, info: ValidationInfo) -> Any:
        if value is not None and info.data.get("role") not in (None, "assistant"):
            raise PydanticCustomError("history_line", "only an assistant line is posted by someone")
        return value


def from_entry(entry: TranscriptEntry) -> HistoryLine:
    """A transcript entry as an assistant line: its text, poster, epoch and media names."""
    return HistoryLine(
        role="assistant",
        text=entry.text,
        posted_by=PostedByLine.model_validate(entry.posted_by.model_dump(by_alias=True)),
        epoch=entry.epoch,
        media=entry.media,
    )


# --- consistency across lines -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Problem:
    """Why a history cannot be rendered: the line's index (0-based), its field, the problem."""

    index: int
    field: str
    problem: str


class InvalidHistory(OwnerError, ValueError):
    """`render` was given a history with problems (see `problems`)."""

    def __init__(self, found: Sequence[Problem]) -> None:
        self.problems = tuple(found)
        first = found[0]
        super().__init__(f"line index {first.index}: {first.field}: {first.problem}")


def problems(lines: Sequence[HistoryLine]) -> tuple[Problem, ...]:
    """What makes `lines` unrenderable, in line order (empty: it renders)."""
    found: list[Problem] = []
    epochs = resolve_epochs(lines)
    open_calls: dict[str, tuple[int, str]] = {}  # call id -> (line index, field), this epoch
    answered: set[str] = set()
    for index, (line, epoch) in enumerate(zip(lines, epochs, strict=True)):
        if index and epoch < epochs[index - 1]:
            found.append(Problem(index, "epoch", f"goes back from {epochs[index - 1]} to {epoch}"))
        if index and epoch != epochs[index - 1]:
            found += _unanswered(open_calls)
            open_calls, answered = {}, set()
        for k, call in enumerate(line.tool_calls):
            where = f"tool_calls[{k}].id"
            if call.id in open_calls or call.id in answered:
                found.append(Problem(index, where, f"tool call id {call.id!r} used twice"))
            else:
                open_calls[call.id] = (index, where)
        if line.role == "tool" and line.tool_call_id is not None:
            call_id = line.tool_call_id
            if call_id in open_calls:
                del open_calls[call_id]
                answered.add(call_id)
            elif call_id in answered:
                found.append(Problem(index, "tool_call_id", f"call {call_id!r} has a result"))
            else:
                found.append(
                    Problem(index, "tool_call_id", f"no earlier tool call {call_id!r} this epoch")
                )
    found += _unanswered(open_calls)
    return tuple(sorted(found, key=lambda p: p.index))


def _unanswered(open_calls: dict[str, tuple[int, str]]) -> list[Problem]:
    return [
        Problem(index, where, f"no tool result for call {call_id!r} follows in its epoch")
        for call_id, (index, where) in open_calls.items()
    ]


def resolve_epochs(lines: Sequence[HistoryLine]) -> tuple[int, ...]:
    """Each line's epoch: its own, else the previous line's, else the first one given (or 0)."""
    current = next((line.epoch for line in lines if line.epoch is not None), 0)
    out: list[int] = []
    for line in lines:
        if line.epoch is not None:
            current = line.epoch
        out.append(current)
    return tuple(out)


# --- rules 1-3: which lines, in which order, with which text ------------------------------


def select_epochs(lines: Sequence[HistoryLine], *, all_epochs: bool) -> tuple[HistoryLine, ...]:
    """The latest epoch's lines; or all lines, with a RESET_NOTE user line at each reset."""
    epochs = resolve_epochs(lines)
    if not lines:
        return ()
    if not all_epochs:
        return tuple(line for line, e in zip(lines, epochs, strict=True) if e == epochs[-1])
    out: list[HistoryLine] = []
    for index, line in enumerate(lines):
        if index and epochs[index] != epochs[index - 1]:
            out.append(HistoryLine(role="user", text=RESET_NOTE))
        out.append(line)
    return tuple(out)


def pair_tool_results(lines: Sequence[HistoryLine]) -> tuple[HistoryLine, ...]:
    """Every tool call directly followed by its results; all other lines keep their order.

    A line between a call and its last result thereby lands after that result. A result
    answers the latest earlier call with its id (ids may repeat across epochs). One pass to
    find each call's results, one to place them: linear in the number of lines.
    """
    caller: dict[str, int] = {}  # call id -> index of the latest line that made that call
    results: dict[int, list[HistoryLine]] = {}  # index of a calling line -> its results
    moved: set[int] = set()  # indexes of results placed after their call
    for index, line in enumerate(lines):
        for call in line.tool_calls:
            caller[call.id] = index
        if line.role == "tool" and line.tool_call_id in caller:
            results.setdefault(caller[line.tool_call_id], []).append(line)
            moved.add(index)
    out: list[HistoryLine] = []
    for index, line in enumerate(lines):
        if index not in moved:
            out.append(line)
            out += results.get(index, ())
    return tuple(out)


def attribution(posted_by: PostedBy | None) -> str | None:
    """The tag that tells the model which job or sub-agent posted a line (None: the agent)."""
    if posted_by is None or posted_by.kind == "agent":
        return None
    named = f"{_quoted(posted_by.name)} " if posted_by.name else ""
    run = f", run {posted_by.run_id}" if posted_by.kind == "subagent" and posted_by.run_id else ""
    return f"[posted by {posted_by.kind} {named}(id {posted_by.id}{run})]"


def shown_text(line: HistoryLine) -> str:
    """The line's text as the model sees it: attribution, text, media names."""
    parts = [attribution(line.posted_by), line.text]
    parts += [f"[attached {m.kind} {_quoted(m.name)}]" for m in line.media]
    return "\n".join(p for p in parts if p)


def _quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


# --- rule 4: the family's shape -----------------------------------------------------------

Message = dict[str, Any]
T = TypeVar("T")


def render(
    lines: Sequence[HistoryLine], family: Family, *, all_epochs: bool = False
) -> dict[str, list[Message]]:
    """The request fragment for `family`: {"messages": […]} or, for gemini, {"contents": […]}.

    Raises InvalidHistory when `problems(lines)` finds any.
    """
    found = problems(lines)
    if found:
        raise InvalidHistory(found)
    arranged = pair_tool_results(select_epochs(lines, all_epochs=all_epochs))
    if family == "openai":
        return {"messages": [_openai(line) for line in arranged]}
    if family == "anthropic":
        return {"messages": _anthropic(arranged)}
    if family == "gemini":
        return {"contents": _gemini(arranged)}
    if family == "strict":
        return {"messages": _strict(arranged)}
    raise ValueError(f"unknown provider family {family!r}; one of {', '.join(FAMILIES)}")


def _openai(line: HistoryLine) -> Message:
    text = shown_text(line)
    if line.role == "tool":
        return {"role": "tool", "tool_call_id": line.tool_call_id, "content": text}
    if not line.tool_calls:
        return {"role": line.role, "content": text}
    calls = [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in line.tool_calls
    ]
    return {"role": "assistant", "content": text or None, "tool_calls": calls}


def _anthropic(lines: Iterable[HistoryLine]) -> list[Message]:
    turns: list[tuple[str, list[Message]]] = []
    for line in lines:
        text = shown_text(line)
        blocks: list[Message] = [{"type": "text", "text": text}] if text else []
        if line.role == "tool":
            result: Message = {"type": "tool_result", "tool_use_id": line.tool_call_id}
            blocks = [result | ({"content": text} if text else {})]
        blocks += [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": json.loads(c.arguments)}
            for c in line.tool_calls
        ]
        turns.append(("assistant" if line.role == "assistant" else "user", blocks))
    merged = _merge(turns, first_user=[{"type": "text", "text": CONTINUES}])
    return [{"role": role, "content": blocks} for role, blocks in merged]


def _gemini(lines: Sequence[HistoryLine]) -> list[Message]:
    names: dict[str, str] = {}  # call id -> name, of the latest call (it precedes its results)
    turns: list[tuple[str, list[Message]]] = []
    for line in lines:
        names.update((c.id, c.name) for c in line.tool_calls)
        text = shown_text(line)
        parts: list[Message] = [{"text": text}] if text else []
        if line.role == "tool":
            call_id = line.tool_call_id or ""
            response = {"id": call_id, "name": names[call_id], "response": {"output": text}}
            parts = [{"functionResponse": response}]
        parts += [
            {"functionCall": {"id": c.id, "name": c.name, "args": json.loads(c.arguments)}}
            for c in line.tool_calls
        ]
        turns.append(("model" if line.role == "assistant" else "user", parts))
    merged = _merge(turns, first_user=[{"text": CONTINUES}])
    return [{"role": role, "parts": parts} for role, parts in merged]


def _strict(lines: Sequence[HistoryLine]) -> list[Message]:
    names: dict[str, str] = {}  # call id -> name, of the latest call (it precedes its results)
    turns: list[tuple[str, list[str]]] = []
    for line in lines:
        names.update((c.id, c.name) for c in line.tool_calls)
        text = shown_text(line)
        if line.role == "tool":
            call_id = line.tool_call_id or ""
            head = f"[tool result {call_id}: {names[call_id]}]"
            turns.append(("user", [f"{head}\n{text}" if text else head]))
            continue
        pieces = [text] if text else []
        pieces += [f"[tool call {c.id}: {c.name} {c.arguments}]" for c in line.tool_calls]
        turns.append((line.role, ["\n".join(pieces)] if pieces else []))
    merged = _merge(turns, first_user=[CONTINUES])
    return [{"role": role, "content": STRICT_JOIN.join(texts)} for role, texts in merged]


def _merge(
    turns: Iterable[tuple[str, list[T]]], *, first_user: list[T]
) -> list[tuple[str, list[T]]]:
    """Drop empty turns, merge same-role neighbours, start with a user turn."""
    out: list[tuple[str, list[T]]] = []
    for role, items in turns:
        if not items:
            continue
        if out and out[-1][0] == role:
            out[-1][1].extend(items)
        else:
            out.append((role, list(items)))
    if out and out[0][0] != "user":
        out.insert(0, ("user", list(first_user)))
    return out


__all__ = [
    "CONTINUES",
    "FAMILIES",
    "MAX_JSON_DEPTH",
    "RESET_NOTE",
    "STRICT_JOIN",
    "Family",
    "HistoryLine",
    "InvalidHistory",
    "PostedByLine",
    "Problem",
    "ToolCall",
    "attribution",
    "from_entry",
    "json_problem",
    "pair_tool_results",
    "problems",
    "render",
    "resolve_epochs",
    "select_epochs",
    "shown_text",
]
