"""`render --provider FAMILY FILE`: a session's history as a provider request, on stdout.

FILE (`-` = stdin) holds JSON lines, each a history line

    {"role": "user"|"assistant"|"tool", "text": "...",
     "tool_calls": [{"id", "name", "arguments"}]   (assistant; arguments: object or its JSON)
     "tool_call_id": "..."                         (tool)
     "posted_by": {"kind", "id", "name"?, "run_id"?} (assistant), "epoch": N,
     "media": [{"kind", "name"}]}

or a transcript-entry/1 from `transcript.entries` (an assistant line: its text, posted_by,
epoch and media names). Blank lines are skipped; line numbers still count them.

Prints one JSON object: `{"messages": [...]}` (openai, anthropic, strict) or
`{"contents": [...]}` (gemini); the rules are in workers/core/provider_replay.py. Exit 0;
exit 2 on invalid input, one `render: line N: FIELD: problem` line each on stderr (never the
message text), and exit 2 with one `render: nothing to render: …` line when the request would
hold no turn (every provider refuses an empty one). An unknown field inside `posted_by` or a
tool call is invalid (a `label` for `name` would be lost); unknown fields of the line itself,
and of a transcript entry (a wire record), are ignored. JSON has no NaN or Infinity: a line
holding one anywhere, even in a field `render` ignores, is invalid; so are tool arguments that
hold a number beyond a double (1e400) or nest too deeply. The output is strict JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import Discriminator, Tag, TypeAdapter, ValidationError

from schemas import TranscriptEntry, describe_errors
from workers.core.provider_replay import (
    FAMILIES,
    EmptyRequest,
    HistoryLine,
    from_entry,
    problems,
    render,
)

_MAX_ERRORS = 20  # error lines printed, then a count of the rest


_ENTRY = "transcript-entry/1"
_HISTORY_LINE = "(history line)"


def _kind(value: Any) -> str:
    """The tag: a line with a `schema` names its record; any other object is a history line."""
    if isinstance(value, dict) and "schema" in value:
        return str(value["schema"])
    return _HISTORY_LINE


# The tag comes first in every error location, which describe_errors drops; an unknown
# `schema` is reported as such.
_LINE: TypeAdapter[TranscriptEntry | HistoryLine] = TypeAdapter(
    Annotated[
        Annotated[TranscriptEntry, Tag(_ENTRY)] | Annotated[HistoryLine, Tag(_HISTORY_LINE)],
        Discriminator(_kind),
    ]
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="JSON lines of a session's history; - = stdin")
    parser.add_argument(
        "--provider", required=True, choices=FAMILIES, metavar="FAMILY", help=", ".join(FAMILIES)
    )
    parser.add_argument(
        "--all-epochs",
        action="store_true",
        help="render every epoch, marking each reset; default: only the latest epoch",
    )


def run(args: argparse.Namespace) -> int:
    try:
        with sys.stdin.buffer if args.file == "-" else open(args.file, "rb") as source:
            lines, errors = read_history(source)
    except OSError as exc:
        print(f"render: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return 2
    if errors:
        shown = errors[:_MAX_ERRORS]
        more = [f"(+{len(errors) - len(shown)} more)"] if len(errors) > len(shown) else []
        print("\n".join(f"render: {e}" for e in shown + more), file=sys.stderr)
        return 2
    try:
        request = render([line for _, line in lines], args.provider, all_epochs=args.all_epochs)
    except EmptyRequest as exc:
        print(f"render: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(json.dumps(request, ensure_ascii=False, allow_nan=False) + "\n")
    sys.stdout.flush()
    return 0


def read_history(
    source: Iterable[bytes],
) -> tuple[list[tuple[int, HistoryLine]], list[str]]:
    """(line number, history line) for every non-blank line, and every error, by line."""
    lines: list[tuple[int, HistoryLine]] = []
    errors: list[str] = []
    for number, raw in enumerate(source, 1):
        if not raw.strip():
            continue
        constant = non_json_constant(raw)
        if constant is not None:
            errors.append(f"line {number}: {constant}")
            continue
        try:
            record = _LINE.validate_json(raw)
        except ValidationError as exc:
            errors.append(f"line {number}: {_reason(exc)}")
            continue
        line = from_entry(record) if isinstance(record, TranscriptEntry) else record
        lines.append((number, line))
    if not errors:
        numbers = [number for number, _ in lines]
        found = problems([line for _, line in lines])
        errors += [f"line {numbers[p.index]}: {p.field}: {p.problem}" for p in found]
    return lines, errors


class _Constant:
    """Where json.loads met NaN, Infinity or -Infinity (pydantic would read them as floats)."""

    def __init__(self, name: str) -> None:
        self.name = name


def non_json_constant(raw: bytes) -> str | None:
    """`FIELD: NaN is not JSON` for the first NaN/Infinity/-Infinity in the line, else None.

    The path stops at a tool call's `arguments`: what lies below it is the tool's input.
    """
    if b"NaN" not in raw and b"Infinity" not in raw:
        return None  # the common case: no second parse
    try:
        value = json.loads(raw, parse_constant=_Constant)
    except (ValueError, RecursionError):
        return None  # not JSON, or too deep: pydantic names the problem
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if isinstance(item, _Constant):
            cut = path.index("arguments") + 1 if "arguments" in path else len(path)
            where = _path(path[:cut])
            return f"{where}: {item.name} is not JSON" if where else f"{item.name} is not JSON"
        if isinstance(item, dict):
            stack += [(v, (*path, k)) for k, v in reversed(item.items())]
        elif isinstance(item, list):
            stack += [(v, (*path, i)) for i, v in reversed(list(enumerate(item)))]
    return None


def _path(loc: tuple[str | int, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _reason(exc: ValidationError) -> str:
    first = exc.errors(include_url=False, include_input=False)[0]
    if len(first["loc"]) == 1 and first["type"] in ("model_type", "model_attributes_type"):
        return "not a JSON object"
    return describe_errors(exc)
