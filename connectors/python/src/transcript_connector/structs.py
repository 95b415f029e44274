"""The input records as msgspec Structs, made from the pydantic models of records.py.

The worker's one parse per record (`parse.read_input`): msgspec decodes the bytes
straight into these in C, about 3× faster than pydantic's validation of the same models. The
shape is not written twice: each Struct is generated from its model's fields, and a field
type this module cannot mirror exactly stops the import (a test imports it).

What msgspec cannot say is checked after the decode, and whatever the fast decode does not
accept goes to pydantic, which stays the authority on what is valid and on every reason.
So the fast path only ever accepts a *subset* of what pydantic accepts, with equal values:
- a timestamp is decoded as text of a narrower RFC 3339 form (an offset; upper-case T or a space;
  at most 6 fraction digits, so none is dropped) and turned into a datetime by
  `datetime.fromisoformat`, then its range is checked (msgspec's own datetimes round a 7th
  digit where pydantic truncates it, and take `+0100`);
- `$` at the end of a pattern becomes `\\Z` (Python's `$` also matches before a final newline);
- a model's own validators are mirrored by the checks in `_CHECKS`, one per validator;
- an unknown field is refused (pydantic ignores it), except in a model open to extra fields;
- a member named twice is found by counting (parse._once): a Struct is written without
  its default-valued fields (`omit_defaults`) for that, and nothing else writes one.
A Struct has the model's attribute names (`schema_` is a class attribute: the tag), so the core
reads either kind of record alike. `Native` keeps only `kind`: nothing reads the rest.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
import msgspec
from pydantic import AwareDatetime, BaseModel
from pydantic.fields import FieldInfo

from transcript_connector.records import (
    MAX_TIMESTAMP,
    MIN_TIMESTAMP,
    DeliveryConfirmation,
    Origin,
    Record,
    SessionErase,
    SessionReset,
    _rfc3339,
)

# The narrower RFC 3339 form the fast path reads (see the module docstring).
FAST_TIMESTAMP = (r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?"
                  r"(Z|[+-][0-9]{2}:[0-9]{2})\Z")
_FAST_TIMESTAMP = Annotated[str, msgspec.Meta(pattern=FAST_TIMESTAMP)]


class NotFast(ValueError):
    """The fast decode's result fails a check pydantic makes: ask pydantic."""


def _turn_reply_names_its_turn(origin: Any) -> None:
    if origin.turn is None and origin.kind == "turn_reply":
        raise NotFast("origin.turn")


# model -> (validator names mirrored, the check); a model with another validator is refused
_CHECKS: dict[type[BaseModel], tuple[frozenset[str], Callable[[Any], None]]] = {
    Origin: (frozenset({"_turn_reply_names_its_turn"}), _turn_reply_names_its_turn),
}


def instant(text: str) -> datetime:
    """A timestamp of the fast form as pydantic reads it; NotFast if out of range."""
    at = datetime.fromisoformat(text)
    if not MIN_TIMESTAMP <= at <= MAX_TIMESTAMP:
        raise NotFast("timestamp range")
    return at


class _Plan:
    """What to do to a decoded Struct of one model: timestamps to convert, checks, children."""

    __slots__ = ("check", "children", "timestamps")

    def __init__(self) -> None:
        self.timestamps: tuple[str, ...] = ()
        self.children: tuple[tuple[str, _Plan], ...] = ()
        self.check: Callable[[Any], None] | None = None

    def empty(self) -> bool:
        return not (self.timestamps or self.children or self.check)


_force = msgspec.structs.force_setattr


def finish(obj: Any, plan: _Plan) -> None:
    """Apply `plan` to a decoded Struct in place (frozen Structs: force_setattr)."""
    for name in plan.timestamps:
        text = getattr(obj, name)
        if text is not None:
            _force(obj, name, instant(text))
    for name, child in plan.children:
        value = getattr(obj, name)
        if value is not None:
            finish(value, child)
    if plan.check is not None:
        plan.check(obj)


class _Builder:
    def __init__(self) -> None:
        self.structs: dict[type[BaseModel], tuple[type[msgspec.Struct], _Plan]] = {}

    def struct(self, model: type[Record], tag: str | None = None) -> tuple[type, _Plan]:
        if model in self.structs:
            return self.structs[model]
        if model.model_config.get("extra") == "forbid":
            raise TypeError(f"{model.__name__}: extra='forbid' is not mirrored")
        plan = _Plan()
        fields: list[tuple[str, Any, Any]] = []
        timestamps: list[str] = []
        children: list[tuple[str, _Plan]] = []
        for name, info in model.model_fields.items():
            if name == "schema_":
                continue  # the tag
            if info.alias not in (None, name):
                raise TypeError(f"{model.__name__}.{name}: an alias the Struct cannot mirror")
            kind, ts, child = self.field_type(info.annotation, list(info.metadata),
                                              f"{model.__name__}.{name}")
            if ts:
                timestamps.append(name)
            if child is not None and not child.empty():
                children.append((name, child))
            default = msgspec.NODEFAULT if info.is_required() else info.default
            fields.append((name, kind, default))
        plan.timestamps, plan.children = tuple(timestamps), tuple(children)
        validators = set(model.__pydantic_decorators__.field_validators) | set(
            model.__pydantic_decorators__.model_validators)
        if validators:
            mirrored, check = _CHECKS.get(model, (frozenset(), None))
            if validators != mirrored:
                raise TypeError(f"{model.__name__}: validators {sorted(validators)} not mirrored")
            plan.check = check
        options: dict[str, Any] = {"tag_field": "schema", "tag": tag} if tag else {}
        # an unknown field is refused (pydantic ignores it): read_input then asks pydantic. So
        # whatever could meet a limit of pydantic's JSON parser and not msgspec's (depth, an
        # integer of 4300+ digits) or a field named by its Python name (`schema_`) can only
        # be in the free-form content of a model that allows extra fields (Native)
        open_model = model.model_config.get("extra") == "allow"
        struct = msgspec.defstruct(model.__name__, fields, kw_only=True, frozen=True,
                                   gc=False, forbid_unknown_fields=not open_model,
                                   omit_defaults=True,
                                   namespace={"schema_": tag}, **options)
        self.structs[model] = (struct, plan)
        return struct, plan

    def field_type(self, annotation: Any, metadata: list[Any], where: str
                   ) -> tuple[Any, bool, _Plan | None]:
        """(msgspec type, is a timestamp, the plan of a nested Struct) of one field type."""
        origin = get_origin(annotation)
        if origin is Annotated:
            inner, *extra = get_args(annotation)
            return self.field_type(inner, [*extra, *metadata], where)
        if origin in (Union, types.UnionType):
            args = [a for a in get_args(annotation) if a is not type(None)]
            if len(args) != 1 or len(get_args(annotation)) != 2:
                raise TypeError(f"{where}: only `X | None` unions are mirrored")
            kind, ts, child = self.field_type(args[0], metadata, where)
            return kind | None, ts, child
        if annotation is AwareDatetime:
            _known(metadata, where, timestamp=True)
            return _FAST_TIMESTAMP, True, None
        if isinstance(annotation, type) and issubclass(annotation, Record):
            _known(metadata, where)
            struct, plan = self.struct(annotation)
            return struct, False, plan
        if origin is tuple:
            item, dots = get_args(annotation)
            if dots is not Ellipsis:
                raise TypeError(f"{where}: only tuple[X, ...] is mirrored")
            kind, ts, child = self.field_type(item, [], where)
            if ts or (child is not None and not child.empty()):
                raise TypeError(f"{where}: a tuple of items that need checks is not mirrored")
            _known(metadata, where)
            return tuple[kind, ...], False, None
        if origin is Literal:
            _known(metadata, where)
            return annotation, False, None
        if annotation is str:
            return _constrained(str, metadata, where), False, None
        raise TypeError(f"{where}: type {annotation!r} is not mirrored")


def _known(metadata: list[Any], where: str, timestamp: bool = False) -> None:
    for item in metadata:
        if timestamp and isinstance(item, annotated_types.Ge | annotated_types.Le):
            continue  # the range: instant() checks it
        if timestamp and isinstance(item, FieldInfo):  # Timestamp inside `| None`
            _known(list(item.metadata), where, timestamp)
            continue
        if timestamp and getattr(item, "func", None) is _rfc3339:
            continue  # the spelling: the narrower FAST_TIMESTAMP implies it
        raise TypeError(f"{where}: constraint {item!r} is not mirrored")


def _constrained(kind: type, metadata: list[Any], where: str) -> Any:
    meta: dict[str, Any] = {}
    for item in metadata:
        names = {k: v for k, v in vars(item).items() if v is not None}
        for key, value in names.items():
            if key == "pattern":
                meta["pattern"] = value[:-1] + r"\Z" if value.endswith("$") else value
            elif key in ("min_length", "max_length"):
                meta[key] = value
            else:
                raise TypeError(f"{where}: constraint {key}={value!r} is not mirrored")
    return Annotated[kind, msgspec.Meta(**meta)] if meta else kind


_BUILD = _Builder()
INPUT_STRUCTS: dict[type, _Plan] = {}
for _model in (DeliveryConfirmation, SessionReset, SessionErase):
    _tag = typing.get_args(_model.model_fields["schema_"].annotation)[0]
    _struct, _plan = _BUILD.struct(_model, _tag)
    INPUT_STRUCTS[_struct] = _plan
STRUCT_OF: dict[type[BaseModel], type] = {m: s for m, (s, _) in _BUILD.structs.items()}

INPUT_DECODER = msgspec.json.Decoder(Union[tuple(INPUT_STRUCTS)])  # noqa: UP007  (a runtime union)

__all__ = ["FAST_TIMESTAMP", "INPUT_DECODER", "INPUT_STRUCTS", "STRUCT_OF", "NotFast", "finish",
           "instant"]
