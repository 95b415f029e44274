"""The edge: raw bytes in, a validated input record or a reason it is invalid out.

Rule 1 of DESIGN.md lives here: not JSON (NaN and Infinity included), schema violation
(a timestamp out of range, a turn reply without its turn included), oversize, unknown
`schema`. The reason names the field and the problem, never the value (it could be
message text), because it travels in the dead-letter record's `error` header.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

import msgspec
import pydantic_core
from pydantic import Field, TypeAdapter, ValidationError

from schemas.records import (
    CONFIRMATION,
    TIMESTAMP_RANGE,
    DeliveryConfirmation,
    InputRecord,
    SessionErase,
    SessionReset,
)
from schemas.structs import INPUT_DECODER, INPUT_STRUCTS, NotFast, finish

MAX_RECORD_BYTES = 1 << 20  # 1 MiB; larger records are dead-lettered unread
JSON_DEPTH_LIMIT = 200  # pydantic-core's JSON parser reads no deeper (its recursion limit)
NON_FINITE_REASON = "not JSON: NaN/Infinity are not JSON"
_MAX_REASONS = 3  # a reason lists at most this many problems, then counts the rest
_MAX_TAG_CHARS = 64
# pydantic's JSON parser refuses an integer of more than 4300 digits (Python's int limit)
# anywhere in a record, msgspec reads it: see read_input
FAST_MAX_BYTES = 4300


@dataclass(frozen=True, slots=True)
class Invalid:
    """An input that cannot be processed, and why (human-readable, names the field)."""

    reason: str


# One validator over the discriminated union: pydantic picks the model from `schema`
# without trying each in turn, and parses the bytes in one pass. Called directly: the
# TypeAdapter's validate_json adds a Python layer per record.
_INPUT = TypeAdapter(
    Annotated[DeliveryConfirmation | SessionReset | SessionErase, Field(discriminator="schema_")]
).validator


def parse_input(raw: bytes) -> InputRecord | Invalid:
    """Validate one input record (bytes as read from Kafka or a JSON-lines file)."""
    size = len(raw)
    if size > MAX_RECORD_BYTES:
        return Invalid(f"oversize: {size} bytes > 1 MiB")
    # pydantic-core's JSON parser takes NaN, Infinity and -Infinity as numbers, whatever the
    # config (allow_inf_nan only guards float fields; free-form fields are Any). Only a
    # record that spells either word, in a string or not, is parsed once more to tell a
    # token from text. One-byte scans (memchr) first: a word scan costs ~0.6 ns a byte.
    if (
        (b"N" in raw and b"NaN" in raw) or (b"I" in raw and b"Infinity" in raw)
    ) and _has_non_finite_number(raw):
        return Invalid(NON_FINITE_REASON)
    try:
        record: InputRecord = _INPUT.validate_json(raw)
    except ValidationError as exc:
        return Invalid(describe_errors(exc))
    return record


def read_input(raw: bytes) -> InputRecord | Invalid:
    """`parse_input`, in one msgspec pass for a record of the usual form (schemas/structs.py).

    The worker's parse. Returns a Struct of schemas.structs for what the fast decode accepts,
    else what `parse_input` returns (a pydantic record or an Invalid with its reason); both
    have the same attributes. A record with channel-native items is taken from the fast
    decode only when it is too short and too shallow to meet a limit of pydantic's JSON
    parser in their free-form content (an integer of more than 4300 digits, 200 levels).
    """
    if len(raw) > MAX_RECORD_BYTES:
        return parse_input(raw)
    try:
        record = INPUT_DECODER.decode(raw)
        finish(record, INPUT_STRUCTS[type(record)])
    except (msgspec.ValidationError, msgspec.DecodeError, NotFast, ValueError, OverflowError):
        return parse_input(raw)
    if record.schema_ == CONFIRMATION and record.payload.native and (
        len(raw) > FAST_MAX_BYTES or raw.count(b"{") + raw.count(b"[") >= JSON_DEPTH_LIMIT
    ):
        return parse_input(raw)
    return record  # type: ignore[no-any-return]


def _has_non_finite_number(raw: bytes) -> bool:
    """Whether `raw` is JSON but for NaN/Infinity tokens (words inside strings do not count)."""
    try:
        pydantic_core.from_json(raw, allow_inf_nan=False, cache_strings=False)
    except ValueError:
        pass
    else:
        return False
    try:
        pydantic_core.from_json(raw, cache_strings=False)
    except ValueError:
        return False  # not JSON for another reason: validation says which
    return True


def describe_errors(exc: ValidationError) -> str:
    """Turn pydantic's errors into one line: `field.path: problem; …`.

    Works for the input union (whose tag leads every location and is dropped) and for any
    single model (an output record, say).
    """
    errors = exc.errors(include_url=False, include_input=False)
    # A tagged union puts the tag first in every location; it is not a field.
    skip = 1 if exc.title.startswith("tagged-union[") else 0
    parts = [_describe(err, skip) for err in errors[:_MAX_REASONS]]
    extra = len(errors) - len(parts)
    return "; ".join(parts) + (f" (+{extra} more)" if extra > 0 else "")


def _describe(err: Any, skip: int) -> str:
    kind: str = err["type"]
    ctx: dict[str, Any] = err.get("ctx") or {}
    loc: tuple[str | int, ...] = err["loc"]
    if kind == "json_invalid":
        error = str(ctx.get("error", err["msg"]))
        if error.startswith("recursion limit exceeded"):  # valid JSON, but deeper than we read
            return f"nested too deeply (the limit is {JSON_DEPTH_LIMIT} levels){error[24:]}"
        return f"not JSON: {error}"
    if kind == "union_tag_invalid":
        return f"unknown schema {_short(ctx.get('tag'))}"
    if kind == "union_tag_not_found":
        return "schema: field required"
    if not loc and kind in ("dict_type", "model_type", "model_attributes_type"):
        return "not a JSON object"
    path = _path(loc[skip:])
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
    if kind in ("greater_than_equal", "less_than_equal") and _is_timestamp_bound(ctx):
        return f"timestamp outside {TIMESTAMP_RANGE}"
    if kind == "value_error" and "error" in ctx:
        # Our own validators' messages, without pydantic's "Value error, " in front.
        return str(ctx["error"])
    return msg[:1].lower() + msg[1:]


def _is_timestamp_bound(ctx: dict[str, Any]) -> bool:
    # pydantic-core gives a datetime bound as its RFC 3339 text; a number's bound is a number.
    return isinstance(ctx.get("ge", ctx.get("le")), str | datetime)


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


__all__ = [
    "MAX_RECORD_BYTES",
    "NON_FINITE_REASON",
    "Invalid",
    "describe_errors",
    "parse_input",
    "read_input",
]
