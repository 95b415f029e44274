"""Typed builders of the input records (DESIGN.md "Records"), validated by the worker's own
parser: what a builder returns the worker accepts, and what it refuses the worker would
dead-letter, with the same reason.

A builder writes the record's JSON bytes once and runs `parse.parse_input` (the worker's edge)
and the key checks of the worker's rules (`session_key_of`, a turn reply's turn key, an in-chat
job's key) on exactly those bytes. The result, a `BuiltRecord`, holds the bytes the publisher
sends, the parsed model and the canonical key: nothing is serialised twice, so what was
validated is what goes on the wire.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, NotRequired, TypedDict

from transcript_connector.errors import InvalidRecordError
from transcript_connector.parse import Invalid, parse_input
from transcript_connector.record_keys import ONLY_ON_CONTROL, origin_key_problem, session_key_of
from transcript_connector.records import (
    CONFIRMATION,
    RESET,
    DeliveryConfirmation,
    SessionReset,
)
from transcript_connector.session_keys import DmScope, session_key_for_route

# An RFC 3339 timestamp with offset, or an aware datetime (written with isoformat()).
TimestampInput = str | datetime


class RouteInput(TypedDict):
    channel: str
    peer_kind: Literal["direct", "group", "channel"]
    peer_id: str
    account_id: NotRequired[str | None]
    thread_id: NotRequired[str | None]


class TurnInput(TypedDict):
    session_key: str
    turn_id: str


class JobInput(TypedDict):
    id: str
    mode: Literal["in_chat", "background"]
    name: NotRequired[str | None]
    run_id: NotRequired[str | None]
    session_key: NotRequired[str | None]


class SubagentInput(TypedDict):
    run_id: str
    agent_id: str
    label: NotRequired[str | None]


class OriginInput(TypedDict):
    kind: Literal[
        "turn_reply", "message_tool", "automation_result", "failure_alert",
        "subagent_announcement",
    ]
    turn: NotRequired[TurnInput | None]  # required when kind is turn_reply
    job: NotRequired[JobInput | None]
    subagent: NotRequired[SubagentInput | None]


class MediaInput(TypedDict):
    kind: str
    name: str
    url: NotRequired[str | None]
    mime: NotRequired[str | None]


class PayloadInput(TypedDict, total=False):
    text: str | None
    media: Sequence[MediaInput]
    native: Sequence[Mapping[str, Any]]  # channel-native items, each with a `kind`, kept whole


class ReceiptInput(TypedDict):
    platform_message_ids: Sequence[str]
    sent_at: NotRequired[TimestampInput | None]


@dataclass(frozen=True, slots=True)
class BuiltRecord:
    """An input record the worker accepts: `value` (its exact JSON bytes, what is published),
    `record` (the model the worker parses from them), `key` (its canonical session key, the
    Kafka key). Made from bytes only through the worker's parser: `BuiltRecord(value)` raises
    InvalidRecordError for bytes the worker would dead-letter on delivery.confirmations."""

    value: bytes
    record: DeliveryConfirmation | SessionReset = field(init=False)
    key: str = field(init=False)

    def __post_init__(self) -> None:
        parsed = parse_input(self.value)
        if isinstance(parsed, Invalid):
            raise _invalid(parsed.reason)
        if not isinstance(parsed, DeliveryConfirmation | SessionReset):
            raise InvalidRecordError("", ONLY_ON_CONTROL)
        key = record_key(parsed)  # in the worker's order: the key, then the keys rules compare
        if parsed.schema_ == CONFIRMATION:
            _check_origin_keys(parsed)
        object.__setattr__(self, "record", parsed)
        object.__setattr__(self, "key", key)


def build_confirmation(
    *,
    send_id: str,
    confirmed_at: TimestampInput,
    agent_id: str,
    route: RouteInput,
    origin: OriginInput,
    payload: PayloadInput,
    receipt: ReceiptInput,
    session_key: str | None = None,
    dm_scope: DmScope | None = None,
    destination_agent_id: str | None = None,
) -> BuiltRecord:
    """A `delivery-confirmation/1` the worker accepts; InvalidRecordError names the field of
    anything it would dead-letter.

    Give `session_key` (a key you computed: kept as given, the worker canonicalises it) or
    `dm_scope` (the agent's DM scope: the key is built from `route` as inbound builds it).
    """
    if (session_key is None) == (dm_scope is None):
        raise InvalidRecordError("session_key", "give session_key or dm_scope, not both"
                                 if session_key is not None
                                 else "field required (or dm_scope, to build it from route)")
    fields: dict[str, Any] = {
        "schema": CONFIRMATION,
        "send_id": send_id,
        "confirmed_at": _timestamp(confirmed_at),
        "agent_id": agent_id,
        "session_key": session_key if session_key is not None else "",
        "route": _pick(route, ("channel", "account_id", "peer_kind", "peer_id", "thread_id")),
        "origin": _origin(origin),
        "payload": _payload(payload),
        "receipt": _receipt(receipt),
    }
    if destination_agent_id is not None:
        fields["destination_agent_id"] = destination_agent_id
    if dm_scope is not None:
        # the route as the worker reads it (its reasons for a bad one), then the key from it
        placeholder = _parsed(fields)
        assert isinstance(placeholder, DeliveryConfirmation)
        try:
            fields["session_key"] = session_key_for_route(agent_id, placeholder.route, dm_scope)
        except ValueError as exc:
            raise InvalidRecordError("dm_scope", str(exc)) from None
    return BuiltRecord(_encode(fields))


def build_reset(*, session_key: str, reset_at: TimestampInput,
                reason: str | None = None) -> BuiltRecord:
    """A `session-reset/1` the worker accepts. The key must be a full `agent:<agent_id>:…` key:
    a reset carries no agent id to complete a bare one."""
    fields: dict[str, Any] = {"schema": RESET, "session_key": session_key,
                              "reset_at": _timestamp(reset_at)}
    if reason is not None:
        fields["reason"] = reason
    return BuiltRecord(_encode(fields))


def record_key(record: DeliveryConfirmation | SessionReset) -> str:
    """The Kafka key the worker expects for `record`: its canonical session key (the worker's
    session_key_of). Raises InvalidRecordError with the worker's reason."""
    key = session_key_of(record)
    if isinstance(key, Invalid):
        raise _invalid(key.reason)
    return key


def _check_origin_keys(record: DeliveryConfirmation) -> None:
    """The keys the worker's rules compare must name an agent (origin_key_problem)."""
    problem = origin_key_problem(record)
    if problem is not None:
        raise _invalid(problem.reason)


def _invalid(reason: str) -> InvalidRecordError:
    """The worker's reason as an error whose `field` is the reason's leading path, if it has
    one (`origin.turn: …`); "" for reasons that name no field (`not JSON: …`, `oversize: …`)."""
    head, sep, problem = reason.partition(": ")
    top = head.split(".", 1)[0].split("[", 1)[0]
    if sep and top in _FIELDS:
        return InvalidRecordError(head, problem)
    return InvalidRecordError("", reason)


# every top-level JSON name of an input record: a reason's path starts with one of them
_FIELDS = frozenset(
    info.alias or name
    for model in (DeliveryConfirmation, SessionReset)
    for name, info in model.model_fields.items()
)


def _parsed(fields: dict[str, Any]) -> DeliveryConfirmation | SessionReset:
    parsed = parse_input(_encode(fields))
    if isinstance(parsed, Invalid):
        raise _invalid(parsed.reason)
    assert isinstance(parsed, DeliveryConfirmation | SessionReset)
    return parsed


def _encode(fields: dict[str, Any]) -> bytes:
    """JSON as the worker reads it, with nothing taken out first: NaN is written as NaN and a
    lone surrogate as its (invalid) UTF-8 bytes, so that the worker's parser refuses them with
    its own reason. A value JSON cannot hold at all (a set, an object) is refused here."""
    try:
        text = json.dumps(fields, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidRecordError("", f"not JSON: {exc}") from None
    except RecursionError:
        raise InvalidRecordError("", "nested too deeply") from None
    return text.encode("utf-8", "surrogatepass")


def _timestamp(value: object) -> object:
    """A datetime as RFC 3339 text (a naive one without an offset: the worker refuses it);
    anything else as given, for the worker's parser to judge."""
    return value.isoformat() if isinstance(value, datetime) else value


def _pick(value: object, names: Sequence[str]) -> object:
    """Only the contract's fields of a mapping (a gateway's object may carry more, such as
    tokens, that should not travel); anything else as given, for the parser to refuse."""
    if not isinstance(value, Mapping):
        return value
    return {n: value[n] for n in names if n in value}


def _origin(origin: object) -> object:
    picked = _pick(origin, ("kind", "turn", "job", "subagent"))
    if isinstance(picked, dict):
        for name, names in (("turn", ("session_key", "turn_id")),
                            ("job", ("id", "name", "run_id", "mode", "session_key")),
                            ("subagent", ("run_id", "agent_id", "label"))):
            if name in picked:
                picked[name] = _pick(picked[name], names)
    return picked


def _payload(payload: object) -> object:
    picked = _pick(payload, ("text", "media", "native"))
    if isinstance(picked, dict):
        if _is_list(picked.get("media")):
            picked["media"] = [_pick(m, ("kind", "name", "url", "mime")) for m in picked["media"]]
        if _is_list(picked.get("native")):
            picked["native"] = [dict(n) if isinstance(n, Mapping) else n
                                for n in picked["native"]]
    return picked


def _receipt(receipt: object) -> object:
    picked = _pick(receipt, ("platform_message_ids", "sent_at"))
    if isinstance(picked, dict):
        if _is_list(picked.get("platform_message_ids")):
            picked["platform_message_ids"] = list(picked["platform_message_ids"])
        if "sent_at" in picked:
            picked["sent_at"] = _timestamp(picked["sent_at"])
    return picked


def _is_list(value: object) -> bool:
    """A sequence JSON writes as an array (json.dumps takes lists and tuples only)."""
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


__all__ = [
    "BuiltRecord",
    "JobInput",
    "MediaInput",
    "OriginInput",
    "PayloadInput",
    "ReceiptInput",
    "RouteInput",
    "SubagentInput",
    "TimestampInput",
    "TurnInput",
    "build_confirmation",
    "build_reset",
    "record_key",
]
