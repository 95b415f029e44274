"""The edge: raw bytes in, a validated input record or a reason it is invalid out.

Rule 1 of DESIGN.md lives here: not JSON, schema violation, oversize, unknown `schema`.
The reason names the field and the problem, never the value (it could be message text),
because it travels in the dead-letter record's `error` header.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field, TypeAdapter, ValidationError

from schemas.records import DeliveryConfirmation, InputRecord, SessionReset

MAX_RECORD_BYTES = 1 << 20  # 1 MiB; larger records are dead-lettered unread
_MAX_REASONS = 3  # a reason lists at most this many problems, then counts the rest
_MAX_TAG_CHARS = 64


@dataclass(frozen=True, slots=True)
class Invalid:
    """An input that cannot be processed, and why (human-readable, names the field)."""

    reason: str


# One validator over the discriminated union: pydantic picks the model from `schema`
# without trying each in turn, and parses the bytes in one pass. Called directly: the
# TypeAdapter's validate_json adds a Python layer per record.
_INPUT = TypeAdapter(
    Annotated[DeliveryConfirmation | SessionReset, Field(discriminator="schema_")]
).validator


def parse_input(raw: bytes) -> InputRecord | Invalid:
    """Validate one input record (bytes as read from Kafka or a JSON-lines file)."""
    size = len(raw)
    if size > MAX_RECORD_BYTES:
        return Invalid(f"oversize: {size} bytes > 1 MiB")
    try:
        record: InputRecord = _INPUT.validate_json(raw)
    except ValidationError as exc:
        return Invalid(describe_errors(exc))
    return record


def describe_errors(exc: ValidationError) -> str:
    """Turn pydantic's errors into one line: `field.path: problem; …`."""
    errors = exc.errors(include_url=False, include_input=False)
    parts = [_describe(err) for err in errors[:_MAX_REASONS]]
    extra = len(errors) - len(parts)
    return "; ".join(parts) + (f" (+{extra} more)" if extra > 0 else "")


def _describe(err: Any) -> str:
    kind: str = err["type"]
    ctx: dict[str, Any] = err.get("ctx") or {}
    loc: tuple[str | int, ...] = err["loc"]
    if kind == "json_invalid":
        return f"not JSON: {ctx.get('error', err['msg'])}"
    if kind == "union_tag_invalid":
        return f"unknown schema {_short(ctx.get('tag'))}"
    if kind == "union_tag_not_found":
        return "schema: field required"
    if not loc and kind in ("dict_type", "model_type", "model_attributes_type"):
        return "not a JSON object"
    # The discriminated union puts the tag first in every location; it is not a field.
    path = _path(loc[1:])
    problem = _problem(kind, ctx, err["msg"])
    return f"{path}: {problem}" if path else problem


def _problem(kind: str, ctx: dict[str, Any], msg: str) -> str:
    if kind == "missing":
        return "field required"
    if kind == "timezone_aware":
        return "timestamp needs a UTC offset"
    if kind in ("datetime_type", "datetime_parsing", "datetime_from_date_parsing"):
        detail = ctx.get("error")
        return "not an RFC 3339 timestamp" + (f" ({detail})" if detail else "")
    if kind == "string_pattern_mismatch":
        return f"does not match {ctx.get('pattern')}"
    if kind == "string_too_short":
        return "must not be empty" if ctx.get("min_length") == 1 else msg.lower()
    if kind == "string_too_long":
        return f"longer than {ctx.get('max_length')} characters"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}"
    return msg[:1].lower() + msg[1:]


def _path(loc: tuple[str | int, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_TAG_CHARS else text[: _MAX_TAG_CHARS - 1] + "…'"


__all__ = ["MAX_RECORD_BYTES", "Invalid", "describe_errors", "parse_input"]
