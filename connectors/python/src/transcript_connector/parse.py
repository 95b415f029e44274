"""The edge: raw bytes in, a validated input record or a reason it is invalid out.

Rule 1 of DESIGN.md lives here: not JSON (NaN and Infinity included), schema violation
(a timestamp out of range, a turn reply without its turn included), oversize, unknown
`schema`, a member named twice in one object (1.2). The reason names the field and the
problem, never the value (it could be message text), because it travels in the dead-letter
record's `error` header.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from datetime import datetime
from operator import ne
from typing import Annotated, Any

import msgspec
import pydantic_core
from pydantic import Field, TypeAdapter, ValidationError
from pydantic_core import SchemaValidator

from transcript_connector.records import (
    CONFIRMATION,
    TIMESTAMP_RANGE,
    DeliveryConfirmation,
    InputRecord,
    SessionErase,
    SessionReset,
)
from transcript_connector.structs import INPUT_DECODER, INPUT_STRUCTS, NotFast, finish

MAX_RECORD_BYTES = 1 << 20  # 1 MiB; larger records are dead-lettered unread
JSON_DEPTH_LIMIT = 200  # pydantic-core's JSON parser reads no deeper (its recursion limit)
NON_FINITE_REASON = "not JSON: NaN/Infinity are not JSON"
_MAX_REASONS = 3  # a reason lists at most this many problems, then counts the rest
_MAX_TAG_CHARS = 64
# pydantic's JSON parser refuses an integer of more than 4300 digits (Python's int limit)
# anywhere in a record, msgspec reads it: see read_input
FAST_MAX_BYTES = 4300
DUPLICATE_REASON = "duplicate member: "
_MAX_PATH_CHARS = 200  # a duplicate's path is cut to this (member names are the sender's)
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True, slots=True)
class Invalid:
    """An input that cannot be processed, and why (human-readable, names the field)."""

    reason: str


def _input_validator() -> SchemaValidator:
    """One validator over the discriminated union: pydantic picks the model from `schema`
    without trying each in turn, and parses the bytes in one pass. Called directly: the
    TypeAdapter's validate_json adds a Python layer per record.

    pydantic looks a discriminator up by its Python name first, then by its alias
    ([["schema_"], ["schema"]]), whatever the models' config: the tag is read from `schema`
    alone, so `schema_` is an unknown field like any other (1.2).
    """
    union = TypeAdapter(
        Annotated[DeliveryConfirmation | SessionReset | SessionErase,
                  Field(discriminator="schema_")]
    ).core_schema
    if union["type"] != "tagged-union":
        raise TypeError(f"the input union is a {union['type']} schema, not a tagged union")
    return SchemaValidator({**union, "discriminator": "schema"})


_INPUT = _input_validator()


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
        if exc.errors(include_url=False, include_input=False)[0]["type"] == "json_invalid":
            return Invalid(describe_errors(exc))  # not JSON (or too deep): no member to name
        return Invalid(duplicate_member(raw) or describe_errors(exc))
    # a record that names a member twice is read two ways by two parsers: never guessed
    duplicate = duplicate_member(raw)
    return record if duplicate is None else Invalid(duplicate)


def read_input(raw: bytes) -> InputRecord | Invalid:
    """`parse_input`, in one msgspec pass for a record of the usual form (structs.py).

    The worker's parse. Returns a Struct of structs.py for what the fast decode accepts,
    else what `parse_input` returns (a pydantic record or an Invalid with its reason); both
    have the same attributes. A record with channel-native items is taken from the fast
    decode only when it is too short and too shallow to meet a limit of pydantic's JSON
    parser in their free-form content (an integer of more than 4300 digits, 200 levels).
    A record that names a member twice goes to `parse_input` too, for its reason.
    """
    if len(raw) > MAX_RECORD_BYTES:
        return parse_input(raw)
    try:
        record = INPUT_DECODER.decode(raw)
        native = record.schema_ == CONFIRMATION and record.payload.native
        if native and (
            len(raw) > FAST_MAX_BYTES or raw.count(b"{") + raw.count(b"[") >= JSON_DEPTH_LIMIT
        ):
            return parse_input(raw)
        # before finish: the timestamps are still the text they were given (see _once)
        once = not has_duplicate(raw) if native else _once(raw, record)
        finish(record, INPUT_STRUCTS[type(record)])
    except (msgspec.ValidationError, msgspec.DecodeError, NotFast, ValueError, OverflowError):
        return parse_input(raw)
    # a member named twice: parse_input names it, as it does for any record
    return record if once else parse_input(raw)  # type: ignore[no-any-return]


_ENCODE = msgspec.json.Encoder().encode


def _once(raw: bytes, record: Any) -> bool:
    """Whether a record the fast decode read (no channel-native items) names each member once.

    Outside its strings JSON has a colon only after a member's name, so `raw` has one colon per
    member plus those in its strings. The Struct, written again with its default-valued fields
    omitted (structs.py), has one per field the record gave a value other than the
    default, plus those of the strings it kept, which are among `raw`'s (the Structs refuse
    unknown fields). Equal counts leave no room for a member given twice: a second one adds a
    colon to `raw` that the Struct, holding the last value, does not have. A member given its
    default (`null`, `[]`) or a colon spelled `\\u003a` makes the counts differ, or unknowable:
    then the exact check decides. Native items are not kept whole: never counted here.
    """
    if raw.count(b":") != _ENCODE(record).count(b":") or (b"\\" in raw and b"\\u003" in raw):
        return not has_duplicate(raw)
    return True


class _Members(list[tuple[str, Any]]):
    """An object's members in order, as the JSON had them (for naming a member given twice)."""


_EXACT = threading.local()
_WHITESPACE = " \t\n\r"


def has_duplicate(raw: bytes) -> bool:
    """Whether `raw`, JSON, has an object naming a member twice (False if it is not JSON).

    Python's JSON scanner hands each object's members, in order, to a hook: here a list's
    `append` (C: no Python runs during the scan); each object's member list is then compared
    with the dict made of it, also in C. One scanner per thread (the list is its state).
    """
    try:
        found, scan = _EXACT.members, _EXACT.scan
    except AttributeError:
        found: list[list[tuple[str, Any]]] = []
        scan = json.JSONDecoder(object_pairs_hook=found.append, parse_int=str,
                                parse_float=str).scan_once
        _EXACT.members, _EXACT.scan = found, scan
    found.clear()
    try:
        text = raw.decode()
        scan(text, len(text) - len(text.lstrip(_WHITESPACE)))
    except (ValueError, StopIteration, RecursionError):
        return False  # not JSON: the parser that reads it says why
    return any(map(ne, map(len, found), map(len, map(dict, found))))


def duplicate_member(raw: bytes) -> str | None:
    """The reason for `raw` if an object of it names a member twice, else None.

    Names the first member given again, in the order of the text, by its path
    (`duplicate member: origin.kind`, `… payload.native[0].title`): names only, never a
    value, and bounded (names are the sender's).
    """
    if not has_duplicate(raw):
        return None
    text = raw.decode()
    members = json.JSONDecoder(object_pairs_hook=_Members, parse_int=str, parse_float=str)
    path = _first_duplicate(members.raw_decode(text, len(text) - len(text.lstrip(_WHITESPACE)))[0])
    assert path is not None, "has_duplicate found one"
    shown = _member_path(path)
    if len(shown) > _MAX_PATH_CHARS:
        half = _MAX_PATH_CHARS // 2
        shown = f"{shown[:half]}…{shown[-half:]}"
    return DUPLICATE_REASON + shown


def _first_duplicate(value: Any) -> list[str | int] | None:
    if isinstance(value, _Members):
        names: set[str] = set()
        for name, item in value:
            if name in names:
                return [name]
            names.add(name)
            inner = _first_duplicate(item)
            if inner is not None:
                return [name, *inner]
    elif isinstance(value, list):
        for i, item in enumerate(value):
            inner = _first_duplicate(item)
            if inner is not None:
                return [i, *inner]
    return None


def _member_path(parts: list[str | int]) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_NAME.fullmatch(part):
            out += f".{part}" if out else part
        else:
            out += f"[{_short(part)}]"  # quoted: a name with dots, spaces or control characters
    return out


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
    if kind == "extra_forbidden":  # a model closed to extra fields (render's posted_by)
        return "unknown field"
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
    "DUPLICATE_REASON",
    "MAX_RECORD_BYTES",
    "NON_FINITE_REASON",
    "Invalid",
    "describe_errors",
    "duplicate_member",
    "has_duplicate",
    "parse_input",
    "read_input",
]
