"""Provider replay: a session's history as the request messages of one provider family.

Owner entries land after the chat's last assistant reply, so a history can hold adjacent
assistant messages, start with one, or hold an entry between a tool call and its result.
Each provider family accepts a different shape; `render` builds a valid one for each, and
shows the model who posted a job's or sub-agent's message. Pure: no I/O, no clock.

Rules (the renaming of 4 happens before the pairing of 2; neither changes the other):

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
4. Tool ids and names, as each family's server accepts them (`wire_tools`). A call id is
   unique per epoch only; in one request it is unique: where one recurs (all epochs), the
   latest epoch keeps it and earlier ones' are mapped. Ids the family refuses are mapped
   too (anthropic: ^[a-zA-Z0-9_-]+$; openai: at most 40 characters), and so are names
   (openai, anthropic: ^[a-zA-Z0-9_-]{1,64}$; gemini: ^[a-zA-Z_][a-zA-Z0-9_.:-]{0,127}$).
   A mapped id or name: characters outside the pattern become `_`, cut to fit, then `_` and
   8 hex digits of a SHA-256 (`mapped`); deterministic, never equal to another id or name of
   the request, and a result gets its call's id.
5. Family shape:
   - openai: chat completions `messages`, one per line, otherwise as it is (consecutive
     assistant messages are accepted). Tool calls in OpenAI shape, `role: tool` results.
   - anthropic: `messages` of content blocks; tool_use on the assistant, tool_result in a
     user message; consecutive same-role turns merged; a user turn `CONTINUES` first when
     the history would start with the assistant (Bedrock rejects that). The final assistant
     text loses its trailing whitespace (Anthropic refuses it).
   - gemini: `contents` with roles user|model and parts; functionCall / functionResponse
     (`response: {"output": text}`); same-role turns merged, but a Content holding function
     responses holds nothing else (Vertex AI refuses the mix): user text after them is a
     user Content of its own; `CONTINUES` first when needed.
   - strict: `messages` of {role, content: string}, user and assistant strictly alternating
     from user. Tool calls become assistant text `[tool call ID: NAME ARGUMENTS]`, results
     user text `[tool result ID: NAME]` + newline + text; same-role runs are joined with a
     blank line; `CONTINUES` first when needed; the final assistant text right-trimmed.
   Empty or whitespace-only text makes no block, part or strict text (Anthropic refuses
   them); a turn left with nothing is omitted. A request that would hold no turn (an empty
   history, say) is refused with EmptyRequest: every provider refuses an empty one.

The input must be consistent (`problems` returns nothing): tool results answer an earlier
call of the same epoch, once; every call has its result; epochs never decrease. Tool call
arguments must be JSON a provider can read back: no NaN, Infinity or number beyond a double
(1e400), at most MAX_JSON_DEPTH levels deep. The output is then always valid JSON. Every step
is linear in the number of lines (but for sorting the problems found).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
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
    return tuple(line for line, _ in _selected(lines, all_epochs=all_epochs))


def _selected(lines: Sequence[HistoryLine], *, all_epochs: bool) -> list[tuple[HistoryLine, int]]:
    """select_epochs, each line with its epoch (a RESET_NOTE has the epoch it starts)."""
    epochs = resolve_epochs(lines)
    if not lines:
        return []
    if not all_epochs:
        return [(line, e) for line, e in zip(lines, epochs, strict=True) if e == epochs[-1]]
    out: list[tuple[HistoryLine, int]] = []
    for index, (line, epoch) in enumerate(zip(lines, epochs, strict=True)):
        if index and epoch != epochs[index - 1]:
            out.append((HistoryLine(role="user", text=RESET_NOTE), epoch))
        out.append((line, epoch))
    return out


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


# --- rule 4: tool ids and names as the family's servers accept them -----------------------

# What each family's server accepts (None: anything). Anthropic: tool_use ids
# ^[a-zA-Z0-9_-]+$, tool names ^[a-zA-Z0-9_-]{1,64}$ (its API once said {1,128}; 64 fits both).
# OpenAI: tool call ids at most 40 characters, function names ^[a-zA-Z0-9_-]{1,64}$. Gemini:
# function names start with a letter or _, then letters, digits, _ . : -, at most 128.
_ID_OK: dict[Family, re.Pattern[str] | None] = {
    "openai": re.compile(r".{1,40}", re.DOTALL),
    "anthropic": re.compile(r"[a-zA-Z0-9_-]+"),
    "gemini": None,
    "strict": None,
}
_SAFE = "a-zA-Z0-9_-"  # the characters a mapped id or (openai, anthropic) name keeps
_NAME_OK: dict[Family, re.Pattern[str] | None] = {
    "openai": re.compile(rf"[{_SAFE}]{{1,64}}"),
    "anthropic": re.compile(rf"[{_SAFE}]{{1,64}}"),
    "gemini": re.compile(r"[a-zA-Z_][a-zA-Z0-9_.:-]{0,127}"),
    "strict": None,
}
# how a name the family refuses is mapped (see `mapped`)
_NAME_FIT: dict[Family, dict[str, Any]] = {
    "openai": {"keeps": _SAFE, "room": 64},
    "anthropic": {"keeps": _SAFE, "room": 64},
    "gemini": {"keeps": "a-zA-Z0-9_.:-", "room": 128, "letter_first": True},
}
ID_ROOM = 40  # a mapped id's length at most: OpenAI's limit, and Anthropic's pattern
HASH_DIGITS = 8


def mapped(
    text: str, seed: str, *, keeps: str = _SAFE, room: int = ID_ROOM, letter_first: bool = False
) -> str:
    """`text` as a family accepts it: outside `keeps` becomes `_`, cut, `_` and 8 hex digits.

    At most `room` characters. The digits are the first 8 of the SHA-256 of `seed` (UTF-8):
    a distinct seed gives distinct digits (and `_unused` makes sure), so two different ids or
    names do not map to one. With `letter_first` (gemini names) a `_` goes first unless the
    text starts with a letter or `_`.
    """
    body = re.sub(f"[^{keeps}]", "_", text)
    if letter_first and not re.match("[a-zA-Z_]", body):
        body = "_" + body
    digest = hashlib.sha256(seed.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{body[: room - HASH_DIGITS - 1]}_{digest[:HASH_DIGITS]}"


def _unused(text: str, seed: str, taken: set[str], **fit: Any) -> str:
    """mapped(text, seed), reseeded `1:seed`, `2:seed`… until no other id or name has it."""
    attempt, candidate = 0, mapped(text, seed, **fit)
    while candidate in taken:
        attempt += 1
        candidate = mapped(text, f"{attempt}:{seed}", **fit)
    taken.add(candidate)
    return candidate


def tool_name(name: str, family: Family) -> str:
    """The name `family` is sent for tool `name`: itself when it fits, else mapped.

    A caller maps its tool definitions with this too (the request's names must match them).
    Seeded with the name alone, so the same name maps alike in every request; should a
    mapped name equal another name of the same request, render reseeds it (see `_unused`).
    """
    ok = _NAME_OK[family]
    if ok is None or ok.fullmatch(name):
        return name
    return mapped(name, name, **_NAME_FIT[family])


def wire_tools(
    selected: Sequence[tuple[HistoryLine, int]], family: Family
) -> list[tuple[HistoryLine, int]]:
    """The lines with tool call ids unique in the request and ids and names as `family` takes.

    A call id is unique per epoch only, so with all epochs one can recur. Where it recurs,
    the latest epoch keeps it (its ids match the default render) and earlier epochs' get a
    mapped id; so does an id the family refuses. Mapped ids are seeded `EPOCH:ID`, never
    equal an id kept or mapped before, and a result gets its call's: pairs stay pairs.
    """
    id_ok, name_ok = _ID_OK[family], _NAME_OK[family]
    latest: dict[str, int] = {}  # call id -> the latest epoch that uses it
    names: dict[str, str] = {}  # tool name -> as sent
    for line, epoch in selected:
        for call in line.tool_calls:
            latest[call.id] = epoch
            names[call.name] = call.name
    valid = {i for i in latest if id_ok is None or id_ok.fullmatch(i)}
    taken = set(valid)  # ids in the request: the valid ones given, then each one mapped
    name_taken = {n for n in names if name_ok is None or name_ok.fullmatch(n)}
    for name in names:
        if name not in name_taken:
            names[name] = _unused(name, name, name_taken, **_NAME_FIT[family])
    ids: dict[tuple[int, str], str] = {}  # (epoch, call id) -> as sent
    out: list[tuple[HistoryLine, int]] = []
    for line, epoch in selected:
        update: dict[str, Any] = {}
        if line.tool_calls:
            calls = []
            for call in line.tool_calls:
                kept = call.id in valid and latest[call.id] == epoch
                sent = call.id if kept else _unused(call.id, f"{epoch}:{call.id}", taken)
                ids[(epoch, call.id)] = sent
                if sent != call.id or names[call.name] != call.name:
                    call = call.model_copy(update={"id": sent, "name": names[call.name]})
                    update["tool_calls"] = ()
                calls.append(call)
            if "tool_calls" in update:
                update["tool_calls"] = tuple(calls)
        if line.role == "tool" and line.tool_call_id is not None:
            sent = ids[(epoch, line.tool_call_id)]
            if sent != line.tool_call_id:
                update["tool_call_id"] = sent
        out.append((line.model_copy(update=update) if update else line, epoch))
    return out


# --- rule 5: the family's shape -----------------------------------------------------------

Message = dict[str, Any]
T = TypeVar("T")


class EmptyRequest(OwnerError, ValueError):
    """Nothing to render: every provider refuses a request without any turn."""

    def __init__(self, family: Family) -> None:
        self.family = family
        super().__init__(
            "nothing to render: the history has no turn with text, a tool call or media"
            f" ({family}: a request needs one; send the new turn alone)"
        )


def render(
    lines: Sequence[HistoryLine], family: Family, *, all_epochs: bool = False
) -> dict[str, list[Message]]:
    """The request fragment for `family`: {"messages": […]} or, for gemini, {"contents": […]}.

    Raises InvalidHistory when `problems(lines)` finds any, EmptyRequest when the fragment
    would hold no turn.
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown provider family {family!r}; one of {', '.join(FAMILIES)}")
    found = problems(lines)
    if found:
        raise InvalidHistory(found)
    selected = wire_tools(_selected(lines, all_epochs=all_epochs), family)
    arranged = pair_tool_results([line for line, _ in selected])
    if family == "openai":
        request = {"messages": [_openai(line) for line in arranged]}
    elif family == "anthropic":
        request = {"messages": _anthropic(arranged)}
    elif family == "gemini":
        request = {"contents": _gemini(arranged)}
    else:
        request = {"messages": _strict(arranged)}
    if not next(iter(request.values())):
        raise EmptyRequest(family)
    return request


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


def _visible(text: str) -> bool:
    """Whether a text makes a block or part: Anthropic refuses empty and whitespace-only ones."""
    return bool(text) and not text.isspace()


def _anthropic(lines: Iterable[HistoryLine]) -> list[Message]:
    turns: list[tuple[str, list[Message]]] = []
    for line in lines:
        text = shown_text(line)
        blocks: list[Message] = [{"type": "text", "text": text}] if _visible(text) else []
        if line.role == "tool":
            result: Message = {"type": "tool_result", "tool_use_id": line.tool_call_id}
            blocks = [result | ({"content": text} if _visible(text) else {})]
        blocks += [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": json.loads(c.arguments)}
            for c in line.tool_calls
        ]
        turns.append(("assistant" if line.role == "assistant" else "user", blocks))
    merged = _merge(turns, first_user=[{"type": "text", "text": CONTINUES}])
    if merged and merged[-1][0] == "assistant" and merged[-1][1][-1]["type"] == "text":
        last = merged[-1][1][-1]  # "final assistant content cannot end with trailing whitespace"
        merged[-1][1][-1] = last | {"text": last["text"].rstrip()}
    return [{"role": role, "content": blocks} for role, blocks in merged]


def _responses(parts: list[Message]) -> bool:
    return any("functionResponse" in p for p in parts)


def _gemini(lines: Sequence[HistoryLine]) -> list[Message]:
    names: dict[str, str] = {}  # call id -> name, of the latest call (it precedes its results)
    turns: list[tuple[str, list[Message]]] = []
    for line in lines:
        names.update((c.id, c.name) for c in line.tool_calls)
        text = shown_text(line)
        parts: list[Message] = [{"text": text}] if _visible(text) else []
        if line.role == "tool":
            call_id = line.tool_call_id or ""
            response = {"id": call_id, "name": names[call_id], "response": {"output": text}}
            parts = [{"functionResponse": response}]
        parts += [
            {"functionCall": {"id": c.id, "name": c.name, "args": json.loads(c.arguments)}}
            for c in line.tool_calls
        ]
        turns.append(("model" if line.role == "assistant" else "user", parts))
    # Vertex AI refuses a Content that mixes functionResponse with other parts: user text
    # that followed a tool's results gets a user Content of its own after them
    merged = _merge(turns, first_user=[{"text": CONTINUES}], kind=_responses)
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
            turns.append(("user", [f"{head}\n{text}" if _visible(text) else head]))
            continue
        pieces = [text] if _visible(text) else []
        pieces += [f"[tool call {c.id}: {c.name} {c.arguments}]" for c in line.tool_calls]
        turns.append((line.role, ["\n".join(pieces)] if pieces else []))
    merged = _merge(turns, first_user=[CONTINUES])
    out = [{"role": role, "content": STRICT_JOIN.join(texts)} for role, texts in merged]
    if out and out[-1]["role"] == "assistant":
        out[-1]["content"] = out[-1]["content"].rstrip()  # as Anthropic's rule for the last
    return out


def _merge(
    turns: Iterable[tuple[str, list[T]]],
    *,
    first_user: list[T],
    kind: Callable[[list[T]], bool] = lambda items: False,
) -> list[tuple[str, list[T]]]:
    """Drop empty turns, merge same-role neighbours of one `kind`, start with a user turn."""
    out: list[tuple[str, list[T]]] = []
    for role, items in turns:
        if not items:
            continue
        if out and out[-1][0] == role and kind(out[-1][1]) == kind(items):
            out[-1][1].extend(items)
        else:
            out.append((role, list(items)))
    if out and out[0][0] != "user":
        out.insert(0, ("user", list(first_user)))
    return out


__all__ = [
    "CONTINUES",
    "FAMILIES",
    "HASH_DIGITS",
    "ID_ROOM",
    "MAX_JSON_DEPTH",
    "RESET_NOTE",
    "STRICT_JOIN",
    "EmptyRequest",
    "Family",
    "HistoryLine",
    "InvalidHistory",
    "PostedByLine",
    "Problem",
    "ToolCall",
    "attribution",
    "from_entry",
    "json_problem",
    "mapped",
    "pair_tool_results",
    "problems",
    "render",
    "resolve_epochs",
    "select_epochs",
    "shown_text",
    "tool_name",
    "wire_tools",
]
