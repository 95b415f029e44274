"""schemas/ against hostile input (issue 12, findings 1, 5, 7): Rule 1 "amended 1.1".

Timestamps outside 1970-01-01T00:00:00Z..2999-12-31T23:59:59Z (in UTC), a turn reply
without its turn, and NaN/Infinity anywhere are invalid records with a reason naming the
field; none of them may escape the edge as anything but a ValidationError or an Invalid.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import transcript_connector.parse
from pydantic import BaseModel, ValidationError, field_validator

from schemas import (
    MAX_TIMESTAMP,
    MIN_TIMESTAMP,
    NON_FINITE_REASON,
    DeliveryConfirmation,
    Diagnostic,
    Invalid,
    Origin,
    SessionReset,
    TranscriptEntry,
    describe_errors,
    parse_input,
)
from schemas.generate import render_all
from tests.unit.wire import confirmation, dumps, reset

RANGE = "1970-01-01T00:00:00Z..2999-12-31T23:59:59Z"
SECRET = "SECRET-TEXT"

# --- timestamps ---------------------------------------------------------------------------

OUT_OF_RANGE = [
    "0001-01-01T00:00:00Z",
    "0001-01-01T00:00:00+05:00",  # in UTC: year 0, which Python cannot even represent
    "9999-12-31T23:00:00-05:00",  # in UTC: year 10000 (OverflowError in astimezone)
    "9999-12-31T23:59:59Z",
    "1969-12-31T23:59:59.999999Z",
    "1970-01-01T00:30:00+01:00",  # 1969-12-31T23:30:00Z
    "2999-12-31T23:59:59.5Z",
    "3000-01-01T00:00:00Z",
    "2999-12-31T23:30:00-01:00",  # 3000-01-01T00:30:00Z
]
IN_RANGE = [
    "1970-01-01T00:00:00Z",
    "1969-12-31T23:00:00-01:00",  # == 1970-01-01T00:00:00Z
    "2999-12-31T23:59:59Z",
    "3000-01-01T00:59:59+01:00",  # == 2999-12-31T23:59:59Z
    "2999-12-31T23:59:59+23:59",
    "1970-01-01T00:00:00-23:59",
]
INPUT_TIMESTAMPS = ["confirmed_at", "receipt.sent_at", "reset_at"]


def _with_timestamp(field: str, value: object) -> bytes:
    if field == "reset_at":
        return dumps({**reset(), "reset_at": value})
    return dumps(confirmation(**{field: value}))


@pytest.mark.parametrize("field", INPUT_TIMESTAMPS)
@pytest.mark.parametrize("value", OUT_OF_RANGE)
def test_an_input_timestamp_out_of_range_is_invalid_naming_the_field(
    field: str, value: str
) -> None:
    result = parse_input(_with_timestamp(field, value))
    assert result == Invalid(f"{field}: timestamp outside {RANGE}")


@pytest.mark.parametrize("field", INPUT_TIMESTAMPS)
@pytest.mark.parametrize("value", IN_RANGE)
def test_an_input_timestamp_at_the_edge_of_the_range_is_valid_and_converts_to_utc(
    field: str, value: str
) -> None:
    record = parse_input(_with_timestamp(field, value))
    assert isinstance(record, DeliveryConfirmation | SessionReset), record
    if isinstance(record, SessionReset):
        at = record.reset_at
    else:
        at = record.confirmed_at if field == "confirmed_at" else record.receipt.sent_at
    assert at is not None
    assert at == datetime.fromisoformat(value)  # the value, and the offset, as given
    assert at.utcoffset() == datetime.fromisoformat(value).utcoffset()
    assert MIN_TIMESTAMP <= at.astimezone(UTC) <= MAX_TIMESTAMP  # never overflows


def test_the_bounds_are_exported() -> None:
    assert MIN_TIMESTAMP == datetime(1970, 1, 1, tzinfo=UTC)
    assert MAX_TIMESTAMP == datetime(2999, 12, 31, 23, 59, 59, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (1740830400, "confirmed_at: not an RFC 3339 timestamp"),  # a number is not a time
        (1e300, "confirmed_at: not an RFC 3339 timestamp"),
        ("2025-03-01T12:00:00", "confirmed_at: timestamp needs a UTC offset"),
        ("99999-01-01T00:00:00Z", "confirmed_at: not an RFC 3339 timestamp"),
    ],
)
def test_the_timestamp_stays_strict(value: object, reason: str) -> None:
    result = parse_input(dumps(confirmation(confirmed_at=value)))
    assert isinstance(result, Invalid)
    assert result.reason.startswith(reason), result.reason


def test_a_timestamp_reason_never_quotes_the_value() -> None:
    result = parse_input(dumps(confirmation(confirmed_at="9876-05-04T03:02:01-05:00")))
    assert isinstance(result, Invalid)
    assert "9876" not in result.reason


def _entry(**overrides: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "schema": "transcript-entry/1",
        "session_key": "agent:ops:main",
        "epoch": 0,
        "seq": 1,
        "entry_id": "e1",
        "send_id": "s1",
        "role": "assistant",
        "agent_id": "ops",
        "text": "hi",
        "media": [],
        "source": "automation_result",
        "posted_by": {"kind": "agent", "id": "ops"},
        "delivered_at": datetime(2025, 3, 1, 14, tzinfo=timezone(timedelta(hours=2))),
        "written_at": datetime(2025, 3, 1, 12, 0, 1, tzinfo=UTC),
        "platform_message_ids": ["1"],
    }
    return {**entry, **overrides}


def _diagnostic(**overrides: Any) -> dict[str, Any]:
    diagnostic: dict[str, Any] = {
        "schema": "diagnostic/1",
        "level": "warn",
        "code": "clock_skew",
        "session_key": "agent:ops:main",
        "send_id": "s1",
        "detail": "d",
        "at": datetime(2025, 3, 1, 12, tzinfo=UTC),
    }
    return {**diagnostic, **overrides}


def _json(record: dict[str, Any]) -> str:
    return json.dumps(record, default=datetime.isoformat)


MINUS_5 = timezone(timedelta(hours=-5))
PLUS_5 = timezone(timedelta(hours=5))
OUTPUT_TIMESTAMPS = [
    (TranscriptEntry, _entry, "delivered_at"),
    (TranscriptEntry, _entry, "written_at"),
    (Diagnostic, _diagnostic, "at"),
]


@pytest.mark.parametrize(("model", "build", "field"), OUTPUT_TIMESTAMPS)
@pytest.mark.parametrize(
    "value",
    [
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(1, 1, 1, tzinfo=PLUS_5),
        datetime(9999, 12, 31, 23, tzinfo=MINUS_5),  # astimezone(UTC) raises OverflowError
        datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC),
        datetime(3000, 1, 1, tzinfo=UTC),
    ],
    ids=str,
)
def test_an_output_timestamp_out_of_range_is_a_validation_error_naming_the_field(
    model: type[BaseModel], build: Any, field: str, value: datetime
) -> None:
    with pytest.raises(ValidationError) as caught:  # not OverflowError
        model.model_validate(build(**{field: value}))
    assert describe_errors(caught.value) == f"{field}: timestamp outside {RANGE}"
    with pytest.raises(ValidationError) as caught:
        model.model_validate_json(_json(build(**{field: value})))
    assert describe_errors(caught.value) == f"{field}: timestamp outside {RANGE}"


def test_valid_output_timestamps_serialise_as_given() -> None:
    entry = TranscriptEntry.model_validate_json(
        _json(_entry()).replace("2025-03-01T14:00:00+02:00", "3000-01-01T00:59:59+01:00")
    )
    text = entry.model_dump_json()
    assert '"delivered_at":"3000-01-01T00:59:59+01:00"' in text
    assert '"written_at":"2025-03-01T12:00:01Z"' in text
    diagnostic = Diagnostic.model_validate(_diagnostic(at=datetime(1970, 1, 1, tzinfo=UTC)))
    assert '"at":"1970-01-01T00:00:00Z"' in diagnostic.model_dump_json()


# --- a turn reply names its turn ------------------------------------------------------------

TURN_REASON = "origin.turn: field required when origin.kind is turn_reply"


@pytest.mark.parametrize(
    "origin",
    [
        {"kind": "turn_reply"},
        {"kind": "turn_reply", "turn": None},
        {"kind": "turn_reply", "job": {"id": "j", "mode": "background"}},
    ],
    ids=["absent", "null", "absent, with a job"],
)
def test_a_turn_reply_without_its_turn_is_invalid(origin: dict[str, Any]) -> None:
    raw = confirmation(origin=origin, **{"payload.text": SECRET})
    result = parse_input(dumps(raw))
    assert result == Invalid(TURN_REASON)


def test_a_turn_reply_with_its_turn_and_other_kinds_without_one_are_valid() -> None:
    turn = {"session_key": "agent:ops:main", "turn_id": "t1"}
    record = parse_input(dumps(confirmation(origin={"kind": "turn_reply", "turn": turn})))
    assert isinstance(record, DeliveryConfirmation)
    assert record.origin.turn is not None and record.origin.turn.turn_id == "t1"
    for kind in ("message_tool", "automation_result", "failure_alert", "subagent_announcement"):
        assert isinstance(
            parse_input(dumps(confirmation(origin={"kind": kind}))), DeliveryConfirmation
        )


def test_a_bad_turn_or_kind_is_reported_as_such() -> None:
    bad_turn = parse_input(dumps(confirmation(origin={"kind": "turn_reply", "turn": {}})))
    assert isinstance(bad_turn, Invalid)
    assert bad_turn.reason.startswith("origin.turn.session_key: field required")
    bad_kind = parse_input(dumps(confirmation(origin={"kind": "mirror"})))
    assert isinstance(bad_kind, Invalid)
    assert (
        bad_kind.reason.startswith("origin.kind: must be one of")
        and "origin.turn" not in bad_kind.reason
    )


def test_origin_built_in_python_needs_its_turn_too() -> None:
    with pytest.raises(ValidationError) as caught:
        Origin(kind="turn_reply")
    assert describe_errors(caught.value) == "turn: field required when origin.kind is turn_reply"


def _origin_schema() -> dict[str, Any]:
    doc = json.loads(render_all()["delivery-confirmation.schema.json"])
    return doc["$defs"]["Origin"]


def test_the_json_schema_requires_the_turn_of_a_turn_reply() -> None:
    origin = _origin_schema()
    assert origin["if"] == {"properties": {"kind": {"const": "turn_reply"}}, "required": ["kind"]}
    assert origin["then"] == {"properties": {"turn": {"type": "object"}}, "required": ["turn"]}
    assert origin["properties"]["turn"]["anyOf"][0] == {"$ref": "#/$defs/Turn"}


def _timestamp_schemas(node: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        if node.get("format") == "date-time":
            found.append(node)
        for value in node.values():
            found += _timestamp_schemas(value)
    elif isinstance(node, list):
        for value in node:
            found += _timestamp_schemas(value)
    return found


def test_every_json_schema_timestamp_states_the_range_and_its_year_pattern_is_never_stricter() -> (
    None
):
    counts = {
        name: len(_timestamp_schemas(json.loads(text))) for name, text in render_all().items()
    }
    assert counts == {
        "delivery-confirmation.schema.json": 2,  # confirmed_at, receipt.sent_at
        "session-reset.schema.json": 1,
        "session-erase.schema.json": 1,  # erased_at
        "session-erasure.schema.json": 1,  # erased_at
        "transcript-entry.schema.json": 2,
        "diagnostic.schema.json": 1,
        "input-position.schema.json": 1,  # at
    }
    for text in render_all().values():
        for node in _timestamp_schemas(json.loads(text)):
            assert RANGE in node["description"]
            pattern = re.compile(node["pattern"])
            for value in IN_RANGE:
                assert pattern.search(value), value  # a valid record passes a connector
            for value in ("0001-01-01T00:00:00Z", "9999-12-31T23:00:00-05:00"):
                assert not pattern.search(value), value


# --- NaN and Infinity are not JSON --------------------------------------------------------

_HOLE = "<token>"


def _spliced(record: dict[str, Any], token: bytes) -> bytes:
    """The record's JSON with the string value `_HOLE` replaced by a bare token."""
    raw = dumps(record)
    assert raw.count(b'"<token>"') == 1
    return raw.replace(b'"<token>"', token)


NON_FINITE = [
    (
        "native item field",
        _spliced(confirmation(**{"payload.native": [{"kind": "poll", "votes": _HOLE}]}), b"NaN"),
    ),
    (
        "deep in a native item",
        _spliced(
            confirmation(**{"payload.native": [{"kind": "k", "v": [1, {"x": _HOLE}]}]}), b"Infinity"
        ),
    ),
    (
        "-Infinity",
        _spliced(confirmation(**{"payload.native": [{"kind": "k", "v": _HOLE}]}), b"-Infinity"),
    ),
    ("unknown (ignored) field", _spliced(confirmation(future=_HOLE), b"NaN")),
    ("unknown nested field", _spliced(confirmation(**{"route.future": [_HOLE]}), b"Infinity")),
    ("a known field", _spliced(confirmation(confirmed_at=_HOLE), b"NaN")),
    ("in a reset", _spliced({**reset(), "x": [_HOLE]}, b"-Infinity")),
    ("no space", _spliced(confirmation(future=_HOLE), b"NaN").replace(b": NaN", b":NaN")),
    ("bare", b"NaN"),
]


@pytest.mark.parametrize("raw", [c[1] for c in NON_FINITE], ids=[c[0] for c in NON_FINITE])
def test_nan_and_infinity_anywhere_are_not_json(raw: bytes) -> None:
    assert parse_input(raw) == Invalid(NON_FINITE_REASON)
    assert NON_FINITE_REASON == "not JSON: NaN/Infinity are not JSON"


def test_the_words_nan_and_infinity_in_strings_are_text() -> None:
    native = [{"kind": "embed", "NaN": "Infinity", "title": "-Infinity NaN"}]
    raw = confirmation(
        payload={"text": "NaN, Infinity and -Infinity are not JSON", "native": native},
        send_id="NaN",
        **{"route.peer_id": "Infinity"},
    )
    record = parse_input(dumps(raw))
    assert isinstance(record, DeliveryConfirmation), record
    assert record.payload.text == "NaN, Infinity and -Infinity are not JSON"
    assert record.payload.native[0].model_dump() == native[0]


@pytest.mark.parametrize(
    "raw",
    [
        b'{"schema": "session-reset/1", "x": NaN',  # NaN, and not JSON anyway
        b'{"schema": "session-reset/1", "x": "NaN"',
        b'{"schema": "session-reset/1", "x": nan}',
        b'{"schema": "session-reset/1", "x": +Infinity}',
    ],
)
def test_other_broken_json_around_the_words_is_still_not_json(raw: bytes) -> None:
    result = parse_input(raw)
    assert isinstance(result, Invalid)
    assert result.reason.startswith("not JSON: "), result.reason


def test_a_record_without_the_words_is_never_parsed_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(raw: bytes) -> bool:
        raise AssertionError("the precise check ran on the hot path")

    monkeypatch.setattr(transcript_connector.parse, "_has_non_finite_number", forbidden)
    assert isinstance(parse_input(dumps(confirmation())), DeliveryConfirmation)
    assert isinstance(parse_input(dumps(reset())), SessionReset)


# --- describe_errors ----------------------------------------------------------------------


class _Checked(BaseModel):
    name: str

    @field_validator("name")
    @classmethod
    def _no_x(cls, name: str) -> str:
        if "x" in name:
            raise ValueError("must not contain the letter x")
        return name


def test_value_errors_are_rendered_without_pydantics_prefix() -> None:
    with pytest.raises(ValidationError) as caught:
        _Checked(name="xyz")
    assert describe_errors(caught.value) == "name: must not contain the letter x"


def test_errors_of_a_single_model_keep_their_whole_path() -> None:
    with pytest.raises(ValidationError) as caught:
        Diagnostic.model_validate(_diagnostic(level="fatal", session_key=None))
    reason = describe_errors(caught.value)
    assert reason.startswith("level: must be one of 'info', 'warn' or 'error'; session_key: ")
    with pytest.raises(ValidationError) as caught:
        TranscriptEntry.model_validate(_entry(posted_by={"kind": "robot", "id": "x"}))
    assert describe_errors(caught.value).startswith("posted_by.kind: must be one of")


def test_no_hostile_reason_quotes_the_record() -> None:
    cases = [
        confirmation(origin={"kind": "turn_reply"}, **{"payload.text": SECRET}),
        confirmation(confirmed_at="0001-01-01T00:00:00Z", **{"payload.text": SECRET}),
    ]
    raws = [dumps(c) for c in cases]
    native = [{"kind": "k", "v": _HOLE}]
    raws.append(
        _spliced(confirmation(**{"payload.text": SECRET, "payload.native": native}), b"NaN")
    )
    for raw in raws:
        result = parse_input(raw)
        assert isinstance(result, Invalid)
        assert SECRET not in result.reason


def test_json_nested_past_the_parsers_limit_says_so() -> None:
    """Valid JSON the parser will not read that deep: the reason says why, not "not JSON"."""
    record = confirmation()
    record["payload"]["native"] = [{"kind": "embed", "n": json.loads("[" * 300 + "]" * 300)}]
    result = parse_input(dumps(record))
    assert isinstance(result, Invalid)
    assert result.reason.startswith("nested too deeply (the limit is 200 levels)")
