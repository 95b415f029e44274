"""The worker's one-pass parse (`read_input`, msgspec) against the authority (`parse_input`).

read_input may take any record to pydantic, but whatever it accepts itself must be what
pydantic accepts, with equal values; whatever it refuses gets pydantic's reason. Checked on
the hostile cases of the edge tests, the timestamp vectors shared with the TypeScript
connector, hazards of msgspec's JSON reader against pydantic's, a generated corpus, and
random mutations of a valid record. Also: the bytes the core writes once (entries,
fingerprints) are those pydantic would write.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import msgspec
import pydantic_core
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field, StringConstraints, field_validator
from transcript_connector.records import Record
from transcript_connector.structs import FAST_TIMESTAMP, _Builder

from bench.gen_input import generate
from schemas import Invalid, TranscriptEntry, parse_input, read_input
from tests.unit.test_edge_hostile import IN_RANGE, OUT_OF_RANGE
from tests.unit.test_records import DEAD_LETTERS
from tests.unit.wire import DELETE, confirmation, dumps, reset, run, set_path
from workers.core.fingerprint import _JSON as FINGERPRINT_JSON
from workers.core.outputs import ENTRIES, Source, encode

VECTORS = Path(__file__).parents[2] / "schemas" / "vectors" / "session_keys.json"
W = datetime.fromisoformat("2027-01-01T00:00:00+00:00")


def _plain(value: Any) -> Any:
    """A record of either kind as nested tuples of (type name, fields); datetimes with offsets."""
    if isinstance(value, BaseModel | msgspec.Struct):
        names = (type(value).model_fields if isinstance(value, BaseModel)
                 else value.__struct_fields__)
        fields = {n: _plain(getattr(value, n)) for n in names if n != "schema_"}
        if type(value).__name__ == "Native":
            fields = {"kind": fields["kind"]}  # the Struct keeps only `kind` (nothing reads more)
        return (type(value).__name__, value.schema_ if hasattr(value, "schema_") else None,
                fields)
    if isinstance(value, list | tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, datetime):
        return (value, value.utcoffset())
    return value


def assert_same(raw: bytes) -> object:
    slow, fast = parse_input(raw), read_input(raw)
    if isinstance(slow, Invalid) or isinstance(fast, Invalid):
        assert fast == slow, raw[:300]
    else:
        assert _plain(fast) == _plain(slow), raw[:300]
    return fast


# --- the hostile cases ----------------------------------------------------------------------

@pytest.mark.parametrize("raw", [c[1] for c in DEAD_LETTERS], ids=[c[0] for c in DEAD_LETTERS])
def test_every_dead_letter_of_the_edge_tests_gets_the_same_reason(raw: bytes) -> None:
    assert isinstance(assert_same(raw), Invalid)


def _hazards() -> dict[str, bytes]:
    good = dumps(confirmation())
    text = dumps(confirmation(payload={"text": "hello"}))
    with_native = confirmation(payload={"text": "a", "native": [{"kind": "poll", "q": 1}]})

    def native(content: bytes) -> bytes:
        return dumps(with_native).replace(b'"q": 1', b'"q": ' + content)

    return {
        "duplicate key, last wins": good[:-1] + b', "send_id": "other"}',
        "duplicate key, first given": b'{"send_id": "first", ' + good[1:],
        "duplicate tag": good[:-1] + b', "schema": "session-reset/1"}',
        "duplicate tag, first given": b'{"schema": "session-reset/1", ' + good[1:],
        "schema_ by its Python name": dumps(confirmation(schema=DELETE, schema_=
                                                         "delivery-confirmation/1")),
        "schema_ beside schema": dumps(confirmation(schema_="session-reset/1")),
        "schema_ escaped": good[:-1] + b', "schema\\u005f": "session-reset/1"}',
        "duplicate key, nested": good.replace(b'"peer_id"', b'"peer_id": "x", "peer_id"'),
        "duplicate key, given its default twice": good.replace(
            b'"peer_kind"', b'"thread_id": null, "thread_id": null, "peer_kind"'),
        "duplicate key, an escaped colon elsewhere": text.replace(b"hello", b"\\u003a")[:-1]
        + b', "agent_id": "ops"}',
        "duplicate key inside a native item": native(b'{"a": 1, "a": 1}'),
        "defaults given": dumps(confirmation(destination_agent_id=None, **{
            "route.thread_id": None, "payload.media": [], "receipt.sent_at": DELETE})),
        "unknown field": dumps(confirmation(extra={"a": [1, 2]})),
        "unknown nested field": dumps(confirmation(**{"route.zzz": True})),
        "deep unknown field": dumps(confirmation(x=json.loads("[" * 250 + "]" * 250))),
        "4301-digit integer, unknown field": good[:-1] + b', "x": 1' + b"0" * 4300 + b"}",
        "NaN, unknown field": good[:-1] + b', "x": NaN}',
        "native item, deep": native(b"[" * 250 + b"]" * 250),
        "native item, 199 deep": native(b"[" * 190 + b"]" * 190),
        "native item, 4301-digit integer": native(b"1" + b"0" * 4300),
        "native item, 4300-digit integer": native(b"1" + b"0" * 4299),
        "native item, NaN": native(b"NaN"),
        "native item, -Infinity": native(b"-Infinity"),
        "native item, 1e400": native(b"1e400"),
        "native item without kind": dumps(confirmation(payload={"native": [{"q": 1}]})),
        "NaN as a word in text": dumps(confirmation(payload={"text": "NaN Infinity _\" 5f\""})),
        "lone surrogate in text": text.replace(b"hello", b"\\udc00"),
        "surrogate pair in text": text.replace(b"hello", b"\\ud83d\\ude00"),
        "escaped key": good.replace(b'"send_id"', b'"send\\u005fid"'),
        "escaped tag": good.replace(b"delivery-confirmation", b"delivery\\u002dconfirmation"),
        "control character raw in a string": text.replace(b"hello", b"a\x01b"),
        "invalid UTF-8 in a string": text.replace(b"hello", b"\xff"),
        "byte order mark": b"\xef\xbb\xbf" + good,
        "trailing data": good + b" x",
        "surrounding whitespace": b" \t" + good + b"\n ",
        "trailing comma": good[:-1] + b",}",
        "leading zero": good[:-1] + b', "x": 01}',
        "comment": good[:-1] + b" /* x */}",
        "agent_id with a final newline": dumps(confirmation(agent_id="ops\n")),
        "send_id of 512 characters": dumps(confirmation(send_id="é" * 512)),
        "send_id of 513 characters": dumps(confirmation(send_id="é" * 513)),
        "empty send_id": dumps(confirmation(send_id="")),
        "number for text": dumps(confirmation(payload={"text": 5})),
        "bool for send_id": dumps(confirmation(send_id=True)),
        "null media": dumps(confirmation(payload={"text": "a", "media": None})),
        "object for media": dumps(confirmation(payload={"text": "a", "media": {}})),
        "turn reply without turn": dumps(confirmation(origin={"kind": "turn_reply"})),
        "turn reply, turn null": dumps(confirmation(origin={"kind": "turn_reply", "turn": None})),
        "null sent_at": dumps(confirmation(**{"receipt.sent_at": None})),
        "bad destination": dumps(confirmation(destination_agent_id="OPS")),
        "empty peer_id": dumps(confirmation(**{"route.peer_id": ""})),
        "reset": dumps(reset()),
        "reset, reason null": dumps({**reset(), "reason": None}),
        "erase, 1000-character reason": dumps({"schema": "session-erase/1",
                                               "session_key": "agent:ops:main",
                                               "erased_at": "2025-03-01T00:00:00Z",
                                               "reason": "x" * 1000}),
        "erase, 1001-character reason": dumps({"schema": "session-erase/1",
                                               "session_key": "agent:ops:main",
                                               "erased_at": "2025-03-01T00:00:00Z",
                                               "reason": "x" * 1001}),
    }


HAZARDS = _hazards()


@pytest.mark.parametrize("raw", HAZARDS.values(), ids=HAZARDS.keys())
def test_msgspec_and_pydantic_disagree_nowhere(raw: bytes) -> None:
    assert_same(raw)


def _timestamps() -> list[str]:
    shared = [v["text"] for v in json.loads(VECTORS.read_text())["timestamps"]]
    return [*shared, *OUT_OF_RANGE, *IN_RANGE, "2025-03-01T23:59:60Z", "2025-03-01T24:00:00Z",
            "2025-02-29T00:00:00Z", "2025-03-01T00:00:12.1234567Z", "2025-03-01T00:00:12.9999999Z",
            "2025-03-01T00:00:00+24:00", "2025-03-01T00:00:12-00:00", "2025-03-01T00:00:1٣Z"]


@pytest.mark.parametrize("text", _timestamps())
def test_every_timestamp_vector_reads_alike_in_every_timestamp_field(text: str) -> None:
    assert_same(dumps(confirmation(confirmed_at=text)))
    assert_same(dumps(confirmation(**{"receipt.sent_at": text})))
    assert_same(dumps(reset(reset_at=text)))


def test_the_fast_timestamp_form_is_a_narrowing_of_the_contracts() -> None:
    assert FAST_TIMESTAMP.endswith(r"\Z")  # a final newline is not let through
    # what the fast form reads is spelled as RFC 3339 (and read by pydantic as the same instant)
    fast = read_input(dumps(confirmation(confirmed_at="2025-03-01 00:00:12.5+05:30")))
    assert isinstance(fast, msgspec.Struct)
    assert fast.confirmed_at.isoformat() == "2025-03-01T00:00:12.500000+05:30"  # type: ignore[attr-defined]


# --- a corpus and mutations -----------------------------------------------------------------

def test_a_generated_corpus_reads_alike_and_mostly_in_one_pass() -> None:
    lines = list(generate(4000, seed=7, sessions=300))
    results = [assert_same(raw) for raw in lines]
    fast = sum(isinstance(r, msgspec.Struct) for r in results)
    invalid = sum(isinstance(r, Invalid) for r in results)
    assert invalid > 0  # the corpus has its invalid records ...
    assert fast >= 0.95 * (len(lines) - invalid)  # ... and the valid ones take the fast path


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=20) | st.sampled_from(["2025-03-01T00:00:00Z", "ops", "turn_reply", ""]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=3),
    max_leaves=8,
)
PATHS = ["send_id", "confirmed_at", "agent_id", "session_key", "route", "route.channel",
         "route.peer_kind", "route.thread_id", "destination_agent_id", "origin", "origin.kind",
         "origin.turn", "origin.job", "origin.job.mode", "origin.subagent", "payload",
         "payload.text", "payload.media", "payload.native", "receipt",
         "receipt.platform_message_ids", "receipt.sent_at", "schema", "extra"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(PATHS), JSON_VALUES | st.just(DELETE)), max_size=3))
def test_random_mutations_of_a_valid_record_read_alike(edits: list[tuple[str, Any]]) -> None:
    record = confirmation(origin={"kind": "turn_reply",
                                  "turn": {"session_key": "agent:ops:main", "turn_id": "t"}},
                          payload={"text": "x", "media": [{"kind": "image", "name": "a.png"}],
                                   "native": [{"kind": "card"}]})
    for path, value in edits:
        try:
            set_path(record, path, value)
        except (AttributeError, TypeError):
            continue  # a parent replaced by a non-object: nothing to set
    assert_same(json.dumps(record).encode())


# --- the generator refuses what it cannot mirror --------------------------------------------

class _WithInt(Record):
    count: int


class _WithAlias(Record):
    name: str = Field(alias="Name")


class _WithValidator(Record):
    name: str

    @field_validator("name")
    @classmethod
    def _upper(cls, value: str) -> str:
        return value.upper()


class _WithStrip(Record):
    name: Annotated[str, StringConstraints(strip_whitespace=True)]


@pytest.mark.parametrize("model", [_WithInt, _WithAlias, _WithValidator, _WithStrip])
def test_a_field_the_structs_cannot_mirror_stops_the_generator(model: type[Record]) -> None:
    with pytest.raises(TypeError):
        _Builder().struct(model)


# --- the bytes written once -----------------------------------------------------------------

def _outcomes(n: int) -> list[Any]:
    return run(list(generate(n, seed=3, sessions=200)), written_at=W)


def test_an_entry_is_written_as_the_bytes_pydantic_writes_for_it() -> None:
    written = [o for o in _outcomes(3000) if o.kind == "written"]
    assert len(written) > 1000
    for outcome in written:
        model = TranscriptEntry.model_validate_json(outcome.entry_json)
        assert model.__pydantic_serializer__.to_json(model) == outcome.entry_json
        assert (model.session_key, model.seq) == (outcome.session_key, outcome.seq)
        [record] = [r for r in encode(outcome, Source("in", 0, 0, None, b""), 8)
                    if r.topic == ENTRIES]
        assert record.value is outcome.entry_json  # not serialised again
        assert record.key == f"{model.session_key}#{model.seq:010d}".encode()


def test_the_fingerprint_json_is_pydantics_for_every_code_point() -> None:
    points = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    for at in range(0, len(points), 4096):
        chunk = points[at : at + 4096]
        assert FINGERPRINT_JSON(chunk) == pydantic_core.to_json(chunk)
        joined = "".join(chunk)
        assert FINGERPRINT_JSON(joined) == pydantic_core.to_json(joined)
    content = ("ops", "agent:ops:main", None, "", [("image", "a.png")], "turn_reply",
               ("agent:ops:main", "t-1"), None, ("run", "helper", None))
    assert FINGERPRINT_JSON(content) == pydantic_core.to_json(content)
