"""The builders refuse what the worker would dead-letter, with the worker's reason and its
field; what they build is exactly the bytes the worker parses, keyed canonically."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from transcript_connector import (
    BuiltRecord,
    InvalidRecordError,
    build_confirmation,
    build_reset,
    record_key,
)
from transcript_connector.parse import parse_input
from transcript_connector.records import DeliveryConfirmation, SessionReset


def refused(**fields: Any) -> InvalidRecordError:
    with pytest.raises(InvalidRecordError) as caught:
        build_confirmation(**fields)
    return caught.value


def deep(n: int) -> object:
    v: object = 0
    for _ in range(n):
        v = [v]
    return v


# (what changes in the base record, the field the reason names, how the reason goes on)
CAUSES: list[tuple[str, dict[str, Any], str, str]] = [
    ("send_id empty", {"send_id": ""}, "send_id", "must not be empty"),
    ("send_id too long", {"send_id": "x" * 513}, "send_id", "longer than 512 characters"),
    ("agent_id upper case", {"agent_id": "Ops"}, "agent_id", "does not match"),
    ("no offset", {"confirmed_at": datetime(2026, 5, 1, 12)}, "confirmed_at",
     "timestamp needs a UTC offset"),
    ("not RFC 3339", {"confirmed_at": "1700000000"}, "confirmed_at", "not an RFC 3339"),
    ("before 1970", {"confirmed_at": "1969-12-31T23:59:59Z"}, "confirmed_at",
     "timestamp outside 1970-01-01T00:00:00Z..2999-12-31T23:59:59Z"),
    ("after 2999 in UTC",
     {"confirmed_at": datetime(2999, 12, 31, 20, tzinfo=timezone(-timedelta(hours=5)))},
     "confirmed_at", "timestamp outside"),
    ("peer_kind", {"route": {"channel": "telegram", "peer_kind": "dm", "peer_id": "u1"}},
     "route.peer_kind", "must be one of 'direct', 'group' or 'channel'"),
    ("route without peer", {"route": {"channel": "telegram", "peer_kind": "direct"}},
     "route.peer_id", "field required"),
    ("turn reply without its turn", {"origin": {"kind": "turn_reply"}}, "origin.turn",
     "field required when origin.kind is turn_reply"),
    ("turn key names no agent",
     {"origin": {"kind": "turn_reply", "turn": {"session_key": "agent::x", "turn_id": "t"}}},
     "origin.turn.session_key", "malformed agent key: '' is not an agent id"),
    ("in-chat job key names no agent",
     {"origin": {"kind": "automation_result",
                 "job": {"id": "j", "mode": "in_chat", "session_key": "agent:Bad!:main"}}},
     "origin.job.session_key", "malformed agent key: 'Bad!' is not an agent id"),
    ("unknown origin", {"origin": {"kind": "cron"}}, "origin.kind", "must be one of"),
    ("media without name", {"payload": {"media": [{"kind": "image"}]}},
     "payload.media[0].name", "field required"),
    ("native without kind", {"payload": {"native": [{"title": "x"}]}}, "payload.native[0].kind",
     "field required"),
    ("receipt ids", {"receipt": {"platform_message_ids": "m1"}}, "receipt.platform_message_ids",
     "input should be a valid"),
    ("sent_at", {"receipt": {"platform_message_ids": [], "sent_at": "yesterday"}},
     "receipt.sent_at", "not an RFC 3339"),
    ("key names no agent", {"session_key": "agent:o ps:main"}, "session_key",
     "malformed agent key: 'o ps' is not an agent id"),
    ("destination agent", {"destination_agent_id": "Sales"}, "destination_agent_id",
     "does not match"),
    ("NaN", {"payload": {"native": [{"kind": "poll", "score": float("nan")}]}}, "",
     "not JSON: NaN/Infinity are not JSON"),
    ("lone surrogate", {"payload": {"text": "a\ud800b"}}, "", "not JSON: "),
    ("too deep", {"payload": {"native": [{"kind": "x", "v": deep(200)}]}}, "",
     "nested too deeply (the limit is 200 levels)"),
    ("oversize", {"payload": {"text": "x" * (1 << 20)}}, "", "oversize: "),
]


@pytest.mark.parametrize(("change", "field", "problem"), [c[1:] for c in CAUSES],
                         ids=[c[0] for c in CAUSES])
def test_each_dead_letter_cause_is_refused_naming_the_field(base, change, field, problem) -> None:
    error = refused(**{**base, **change})
    assert error.field == field
    assert str(error).startswith(f"{field}: {problem}" if field else problem)
    assert str(error) == (f"{field}: {error.problem}" if field else error.problem)


def test_the_reason_is_the_worker_parsers_for_the_same_bytes(base) -> None:
    """The builder's message is parse_input's reason for the record as a connector without the
    builders would send it."""
    fields = {**base, "agent_id": "Ops", "send_id": ""}
    raw = json.dumps({"schema": "delivery-confirmation/1", **fields}).encode()
    assert str(refused(**fields)) == parse_input(raw).reason  # type: ignore[union-attr]


def test_a_key_is_session_key_or_dm_scope_never_both_or_neither(base) -> None:
    assert refused(**{**base, "dm_scope": "main"}).field == "session_key"
    no_key = {k: v for k, v in base.items() if k != "session_key"}
    assert str(refused(**no_key)).startswith("session_key: field required")
    error = refused(**no_key, dm_scope="per-sender")  # type: ignore[arg-type]
    assert error.field == "dm_scope"
    assert error.problem.startswith("unknown DM scope 'per-sender'; expected one of main, ")


def test_a_dm_scope_builds_the_key_from_the_route_as_inbound_does(base) -> None:
    no_key = {k: v for k, v in base.items() if k != "session_key"}
    route = {"channel": " Telegram ", "peer_kind": "direct", "peer_id": "U1", "account_id": "Bot"}
    built = build_confirmation(**{**no_key, "route": route}, dm_scope="per-account-channel-peer")
    assert built.key == built.record.session_key == "agent:ops:telegram:bot:direct:u1"
    # a bad route is the worker's reason, not the key builder's
    bad = refused(**{**no_key, "route": {"channel": "", "peer_kind": "direct", "peer_id": "u"}},
                  dm_scope="main")
    assert str(bad) == "route.channel: must not be empty"


def test_a_built_record_is_the_bytes_the_worker_parses(base) -> None:
    built = build_confirmation(**{**base, "session_key": " Agent:OPS:Telegram:DM:U1",
                                  "confirmed_at": datetime(2026, 5, 1, 10, tzinfo=UTC)})
    assert parse_input(built.value) == built.record
    assert isinstance(built.record, DeliveryConfirmation)
    # kept as given (the worker flags the spelling), keyed canonically
    assert built.record.session_key == " Agent:OPS:Telegram:DM:U1"
    assert built.key == record_key(built.record) == "agent:ops:telegram:direct:u1"
    assert json.loads(built.value)["confirmed_at"] == "2026-05-01T10:00:00+00:00"
    with pytest.raises(AttributeError):
        built.key = "agent:ops:main"  # type: ignore[misc]


def test_only_the_contracts_fields_travel(base) -> None:
    """A gateway's objects may carry more (a token, a client handle): the builder takes the
    contract's fields only; a channel-native item is kept whole."""
    built = build_confirmation(**{
        **base,
        "route": {**base["route"], "bot_token": "SECRET"},
        "origin": {"kind": "automation_result",
                   "job": {"id": "j", "mode": "background", "api_key": "SECRET"}},
        "payload": {"text": "t", "media": [{"kind": "image", "name": "a.png", "sig": "SECRET"}],
                    "native": [{"kind": "discord_embed", "title": "kept"}]},
        "receipt": {"platform_message_ids": ("m1", "m2"), "raw": "SECRET"},
    })
    assert b"SECRET" not in built.value
    value = json.loads(built.value)
    assert value["payload"]["native"] == [{"kind": "discord_embed", "title": "kept"}]
    assert value["receipt"]["platform_message_ids"] == ["m1", "m2"]


def test_a_value_json_cannot_hold_is_refused(base) -> None:
    error = refused(**{**base, "payload": {"native": [{"kind": "x", "tags": {"a"}}]}})
    assert (error.field, error.problem.startswith("not JSON: ")) == ("", True)


def test_resets_need_a_full_key_and_the_worker_timestamp() -> None:
    built = build_reset(session_key=" AGENT : ops : telegram : dm : U1 ",
                        reset_at=datetime(2026, 5, 1, tzinfo=UTC), reason="/new")
    assert isinstance(built.record, SessionReset)
    assert built.key == "agent:ops:telegram:direct:u1"
    for key in ("main", "ops:main"):
        with pytest.raises(InvalidRecordError) as caught:
            build_reset(session_key=key, reset_at="2026-05-01T00:00:00Z")
        assert str(caught.value) == "session_key: a reset needs a full agent:<agent_id>:… key"
    with pytest.raises(InvalidRecordError) as caught:
        build_reset(session_key="agent:ops:main", reset_at="2026-05-01")
    assert caught.value.field == "reset_at"


def test_bytes_from_elsewhere_pass_the_same_checks() -> None:
    """BuiltRecord(bytes): a record a gateway serialised itself; an erase is refused (only the
    operator's transcript.control takes it)."""
    reset = (b'{"schema":"session-reset/1","session_key":"agent:ops:main",'
             b'"reset_at":"2026-05-01T00:00:00Z"}')
    assert BuiltRecord(reset).key == "agent:ops:main"
    erase = reset.replace(b"session-reset/1", b"session-erase/1").replace(b"reset_at", b"erased_at")
    with pytest.raises(InvalidRecordError, match="accepted only on transcript.control"):
        BuiltRecord(erase)
    with pytest.raises(InvalidRecordError) as caught:
        BuiltRecord(b"{not json")
    assert caught.value.field == "" and str(caught.value).startswith("not JSON: ")
    with pytest.raises(InvalidRecordError, match="duplicate member: session_key"):
        BuiltRecord(reset[:-1] + b',"session_key":"agent:ops:x"}')
