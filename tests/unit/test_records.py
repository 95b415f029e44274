"""schemas/: the wire models, the edge parser's dead-letter reasons, the generated files."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import get_args

import pytest
import transcript_connector.records
from pydantic import ValidationError
from transcript_connector.records import Record

from schemas import (
    MAX_RECORD_BYTES,
    RECORDS,
    DeliveryConfirmation,
    Invalid,
    SessionErasure,
    SessionReset,
    parse_input,
    read_input,
)
from schemas.generate import JSON_DIR, main, render_all, stale_files, write_all
from tests.unit.wire import DELETE, confirmation, dumps, reset


def test_a_valid_confirmation_parses_with_its_nested_models() -> None:
    record = parse_input(dumps(confirmation()))
    assert isinstance(record, DeliveryConfirmation)
    assert record.route.peer_kind == "group"
    assert record.origin.job is not None and record.origin.job.mode == "background"
    assert record.receipt.platform_message_ids == ("4711",)


def test_a_valid_reset_parses() -> None:
    record = parse_input(dumps(reset()))
    assert isinstance(record, SessionReset)
    assert record.reason is None


def test_records_are_frozen_all_the_way_down() -> None:
    record = parse_input(dumps(confirmation(**{"payload.media": [{"kind": "image", "name": "a"}]})))
    assert isinstance(record, DeliveryConfirmation)
    with pytest.raises(ValidationError):
        record.send_id = "other"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        record.route.peer_id = "other"  # type: ignore[misc]
    assert isinstance(record.payload.media, tuple)


def test_unknown_fields_are_ignored_at_every_level() -> None:
    raw = confirmation(future_field=1, **{"route.future": "x", "origin.job.future": [1]})
    record = parse_input(dumps(raw))
    assert isinstance(record, DeliveryConfirmation)
    assert record == parse_input(dumps(confirmation()))


def test_offsets_are_kept_and_nanoseconds_truncated() -> None:
    record = parse_input(dumps(confirmation(confirmed_at="2025-03-01T14:00:00.123456789+02:00")))
    assert isinstance(record, DeliveryConfirmation)
    assert record.confirmed_at.utcoffset() == timedelta(hours=2)
    assert record.confirmed_at.microsecond == 123456


def test_native_items_keep_their_free_form_fields() -> None:
    native = [{"kind": "embed", "title": "Build #42", "fields": [{"a": 1}]}]
    record = parse_input(dumps(confirmation(payload={"native": native})))
    assert isinstance(record, DeliveryConfirmation)
    assert record.payload.native[0].model_dump() == native[0]


def test_send_id_of_512_characters_is_valid() -> None:
    assert isinstance(parse_input(dumps(confirmation(send_id="s" * 512))), DeliveryConfirmation)


def test_a_record_of_exactly_1_mib_is_not_oversize() -> None:
    base = dumps(confirmation(pad=""))
    padded = dumps(confirmation(pad="x" * (MAX_RECORD_BYTES - len(base))))
    assert len(padded) == MAX_RECORD_BYTES
    assert isinstance(parse_input(padded), DeliveryConfirmation)


ERASE = {"schema": "session-erase/1", "session_key": "agent:ops:main",
         "erased_at": "2025-03-01T00:00:00Z", "reason": "r"}


def _respelled(record: dict[str, object]) -> bytes:
    """`record` with its tag under the attribute's Python name, `schema_`, and no `schema`."""
    return dumps({"schema_" if k == "schema" else k: v for k, v in record.items()})


# (case, raw bytes, the reason parse_input must give)
DEAD_LETTERS: list[tuple[str, bytes, str]] = [
    ("not JSON", b"{nope", "not JSON: "),
    ("truncated JSON", dumps(confirmation())[:-5], "not JSON: "),
    ("invalid UTF-8", b'{"schema": "\xff\xfe"}', "not JSON: "),
    ("lone surrogate", b'{"schema":"delivery-confirmation/1","send_id":"\\ud800"}', "not JSON: "),
    ("empty line", b"", "not JSON: "),
    ("JSON array", b"[1, 2]", "not a JSON object"),
    ("JSON string", b'"delivery-confirmation/1"', "not a JSON object"),
    ("unknown schema", dumps(confirmation(schema="foo/9")), "unknown schema 'foo/9'"),
    ("schema missing", dumps(confirmation(schema=DELETE)), "schema: field required"),
    (
        "oversize",
        dumps(confirmation(pad="x" * MAX_RECORD_BYTES))[: MAX_RECORD_BYTES + 1],
        "oversize: 1048577 bytes > 1 MiB",
    ),
    (
        "naive timestamp",
        dumps(confirmation(confirmed_at="2025-03-01T12:00:00")),
        "confirmed_at: timestamp needs a UTC offset",
    ),
    (
        "timestamp as number",
        dumps(confirmation(confirmed_at=1740830400)),
        "confirmed_at: not an RFC 3339 timestamp",
    ),
    (
        "date without time",
        dumps(confirmation(confirmed_at="2025-03-01")),
        "confirmed_at: not an RFC 3339 timestamp",
    ),
    ("bad agent id", dumps(confirmation(agent_id="Ops")), "agent_id: does not match ^[a-z0-9]"),
    ("agent id too long", dumps(confirmation(agent_id="a" * 65)), "agent_id: does not match"),
    ("empty send_id", dumps(confirmation(send_id="")), "send_id: must not be empty"),
    (
        "send_id too long",
        dumps(confirmation(send_id="s" * 513)),
        "send_id: longer than 512 characters",
    ),
    ("send_id missing", dumps(confirmation(send_id=DELETE)), "send_id: field required"),
    ("receipt missing", dumps(confirmation(receipt=DELETE)), "receipt: field required"),
    (
        "peer kind not an enum value",
        dumps(confirmation(**{"route.peer_kind": "dm"})),
        "route.peer_kind: must be one of 'direct', 'group' or 'channel'",
    ),
    (
        "origin kind unknown",
        dumps(confirmation(**{"origin.kind": "mirror"})),
        "origin.kind: must be one of",
    ),
    (
        "job mode unknown",
        dumps(confirmation(**{"origin.job.mode": "isolated"})),
        "origin.job.mode: must be one of 'in_chat' or 'background'",
    ),
    (
        "media without a name",
        dumps(confirmation(**{"payload.media": [{"kind": "image", "url": "https://x/y"}]})),
        "payload.media[0].name: field required",
    ),
    (
        "bad destination agent id",
        dumps(confirmation(destination_agent_id="Other Agent")),
        "destination_agent_id: does not match",
    ),
    (
        "bad subagent agent id",
        dumps(confirmation(**{"origin.subagent": {"run_id": "r", "agent_id": "-x"}})),
        "origin.subagent.agent_id: does not match",
    ),
    (
        "naive sent_at",
        dumps(confirmation(**{"receipt.sent_at": "2025-03-01T12:00:00"})),
        "receipt.sent_at: timestamp needs a UTC offset",
    ),
    (
        "platform ids not a list",
        dumps(confirmation(**{"receipt.platform_message_ids": "4711"})),
        "receipt.platform_message_ids: ",
    ),
    ("reset without reset_at", dumps({**reset(), "reset_at": None}), "reset_at: "),
    (
        "naive reset_at",
        dumps(reset(reset_at="2025-03-01T12:00:00")),
        "reset_at: timestamp needs a UTC offset",
    ),
    (
        "several problems",
        dumps({"schema": "delivery-confirmation/1"}),
        "send_id: field required; confirmed_at: field required; agent_id: field required (+5 more)",
    ),
    (
        "a member named twice",
        dumps(confirmation())[:-1] + b', "send_id": "other"}',
        "duplicate member: send_id",
    ),
    (
        "the tag named twice, the last an erase",
        dumps(confirmation())[:-1] + b', "schema": "session-erase/1"}',
        "duplicate member: schema",
    ),
    (
        "a nested member named twice",
        dumps(confirmation()).replace(b'"peer_id"', b'"peer_id": "x", "peer_id"'),
        "duplicate member: route.peer_id",
    ),
    ("the tag spelled schema_", _respelled(confirmation()), "schema: field required"),
    ("a reset's tag spelled schema_", _respelled(reset()), "schema: field required"),
    ("an erase's tag spelled schema_", _respelled(ERASE), "schema: field required"),
]


@pytest.mark.parametrize(
    ("raw", "reason"), [c[1:] for c in DEAD_LETTERS], ids=[c[0] for c in DEAD_LETTERS]
)
def test_invalid_input_is_invalid_with_a_reason_naming_field_and_problem(
    raw: bytes, reason: str
) -> None:
    result = parse_input(raw)
    assert isinstance(result, Invalid)
    assert result.reason.startswith(reason), result.reason


@pytest.mark.parametrize("tag", ["session-erase/1", "session-reset/1", "delivery-confirmation/1"])
@pytest.mark.parametrize("first", [True, False], ids=["schema_ first", "schema_ last"])
def test_schema_beside_schema_is_an_unknown_field_the_record_is_read_by_schema_alone(
    tag: str, first: bool
) -> None:
    """Issue 23: `schema_` was a second spelling of the tag (pydantic reads a discriminator by
    its Python name before its alias, and the models validated by name)."""
    base = {**reset(), "erased_at": "2025-03-01T00:00:00Z"}
    record = {"schema_": tag, **base} if first else {**base, "schema_": tag}
    for parse in (parse_input, read_input):
        result = parse(dumps(record))
        assert not isinstance(result, Invalid), result
        assert result.schema_ == "session-reset/1"


def _aliased_fields() -> list[tuple[type[Record], str, str]]:
    models = [m for m in vars(transcript_connector.records).values()
              if isinstance(m, type) and issubclass(m, Record) and m is not Record]
    return [(m, name, f.alias) for m in models for name, f in m.model_fields.items()
            if f.alias not in (None, name)]


def test_no_wire_model_reads_a_field_by_its_python_name() -> None:
    """Every field whose Python name differs from its JSON name (the tags) is read by the JSON
    name only, and written by it (the bytes of every record stay as they were)."""
    aliased = _aliased_fields()
    assert {(m.__name__, n, a) for m, n, a in aliased} == {
        (m.__name__, "schema_", "schema") for m in RECORDS.values()}
    for model, name, alias in aliased:
        tag = get_args(model.model_fields[name].annotation)[0]
        with pytest.raises(ValidationError) as caught:
            model.model_validate({name: tag})
        assert any(e["loc"] == (alias,) and e["type"] == "missing" for e in caught.value.errors())
    erasure = SessionErasure.model_validate({
        "schema": "session-erasure/1", "session_key": "agent:ops:main",
        "erased_at": "2025-03-01T00:00:00Z", "epoch": 1, "through_seq": 0})
    assert erasure.model_dump_json().startswith('{"schema":"session-erasure/1",')


def test_a_reason_never_quotes_the_message_text() -> None:
    raw = confirmation(agent_id="BAD", **{"payload.text": "SECRET-TEXT"})
    raw["route"]["peer_kind"] = "SECRET-TEXT"
    result = parse_input(dumps(raw))
    assert isinstance(result, Invalid)
    assert "SECRET-TEXT" not in result.reason


def test_a_huge_unknown_schema_tag_is_shortened_in_the_reason() -> None:
    result = parse_input(dumps(confirmation(schema="x" * 10_000)))
    assert isinstance(result, Invalid)
    assert result.reason.startswith("unknown schema 'xxx") and len(result.reason) < 100


# --- generated JSON Schema files ----------------------------------------------------------


def test_the_committed_json_schemas_are_up_to_date() -> None:
    stale = stale_files()
    assert not stale, f"regenerate with `python -m schemas.generate`: {stale}"


def test_there_is_one_schema_file_per_record() -> None:
    assert sorted(render_all()) == sorted(f"{name}.schema.json" for name in RECORDS)
    for text in render_all().values():
        assert text.endswith("}\n")
        doc = json.loads(text)
        assert doc["properties"]["schema"]["const"].endswith("/1")
    assert set(p.name for p in JSON_DIR.glob("*.schema.json")) == set(render_all())


def test_check_exits_1_when_a_file_is_stale_missing_or_extra(tmp_path: Path) -> None:
    write_all(tmp_path)
    assert main(["--check", "--dir", str(tmp_path)]) == 0
    victim = tmp_path / "diagnostic.schema.json"
    victim.write_text(victim.read_text("utf-8").replace("warn", "warning"), "utf-8")
    assert main(["--check", "--dir", str(tmp_path)]) == 1
    write_all(tmp_path)
    (tmp_path / "session-reset.schema.json").unlink()
    assert main(["--check", "--dir", str(tmp_path)]) == 1
    write_all(tmp_path)
    (tmp_path / "old-record.schema.json").write_text("{}\n", "utf-8")
    assert main(["--check", "--dir", str(tmp_path)]) == 1
    write_all(tmp_path)  # removes the extra file
    assert main(["--check", "--dir", str(tmp_path)]) == 0


def test_generation_is_stable() -> None:
    assert render_all() == render_all()


@pytest.mark.parametrize("text", [
    "1700000000",  # pydantic-core alone takes digits as a unix time
    "2026-05-01T12:00Z",  # no seconds
    "2026-05-01T12:00:00,5Z",  # a comma before the fraction
    "2026-05-01T12:00:00+0100",  # an offset without its colon
    "2026-05-01_12:00:00Z",
    "2026-05-01T12:00:00Z\n",
])
def test_a_timestamp_not_spelled_as_rfc_3339_is_invalid(text: str) -> None:
    for record, field in ((confirmation(confirmed_at=text), "confirmed_at"),
                          (reset(reset_at=text), "reset_at")):
        parsed = parse_input(dumps(record))
        assert isinstance(parsed, Invalid), text
        assert parsed.reason.startswith(f"{field}: not an RFC 3339 timestamp"), parsed.reason


@pytest.mark.parametrize("text", [
    "2026-05-01T12:00:00Z", "2026-05-01t12:00:00z", "2026-05-01 12:00:00Z",
    "2026-05-01T12:00:00.123456789-05:30", "2026-05-01T12:00:00+00:00",
])
def test_rfc_3339_spellings_are_valid(text: str) -> None:
    assert isinstance(parse_input(dumps(confirmation(confirmed_at=text))), DeliveryConfirmation)
