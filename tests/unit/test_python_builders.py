"""The Python connector's builders against the worker: what they build the worker accepts, and
what they refuse it dead-letters with the very reason the builder gives (through `replay`, the
worker's own step). The keys' rules are one function on both sides
(transcript_connector/record_keys.py); this checks the whole path, parser to rule."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from transcript_connector import BuiltRecord, InvalidRecordError, build_confirmation, build_reset

from tests.conftest import cli
from workers.core.control import ONLY_ON_CONTROL  # the worker's name for it

BASE: dict[str, Any] = {
    "send_id": "s-1", "confirmed_at": "2026-05-01T12:00:00+02:00", "agent_id": "ops",
    "session_key": "agent:ops:telegram:direct:u1",
    "route": {"channel": "telegram", "peer_kind": "direct", "peer_id": "u1"},
    "origin": {"kind": "message_tool"}, "payload": {"text": "hello"},
    "receipt": {"platform_message_ids": ["m1"]},
}
RESET = {"session_key": "agent:ops:main", "reset_at": "2026-05-01T12:00:00Z"}

# (name, schema, fields as a connector without the builders would send them)
REFUSED: list[tuple[str, str, dict[str, Any]]] = [
    ("reset-bare-key", "session-reset/1", {**RESET, "session_key": "main"}),
    ("reset-no-agent", "session-reset/1", {**RESET, "session_key": "agent:Bad!:main"}),
    ("key-no-agent", "delivery-confirmation/1", {**BASE, "session_key": "agent:o ps:x"}),
    ("turn-key", "delivery-confirmation/1", {**BASE, "origin": {
        "kind": "turn_reply", "turn": {"session_key": "agent::x", "turn_id": "t"}}}),
    ("in-chat-job-key", "delivery-confirmation/1", {**BASE, "origin": {
        "kind": "automation_result",
        "job": {"id": "j", "mode": "in_chat", "session_key": "agent:X!:main"}}}),
    ("no-turn", "delivery-confirmation/1", {**BASE, "origin": {"kind": "turn_reply"}}),
    ("range", "delivery-confirmation/1", {**BASE, "confirmed_at": "3000-01-01T00:00:00Z"}),
]


def _refusal(schema: str, fields: dict[str, Any]) -> InvalidRecordError:
    with pytest.raises(InvalidRecordError) as caught:
        (build_reset if schema == "session-reset/1" else build_confirmation)(**fields)
    return caught.value


def test_an_erase_is_refused_as_the_worker_refuses_it_on_the_input_topic() -> None:
    """(`replay` reads an erase as forwarded from transcript.control; the worker's input-topic
    reason is workers/core/control.py's.)"""
    erase = {"schema": "session-erase/1", "session_key": "agent:ops:main",
             "erased_at": "2026-05-01T12:00:00Z", "reason": "gdpr"}
    with pytest.raises(InvalidRecordError) as caught:
        BuiltRecord(json.dumps(erase).encode())
    assert (caught.value.field, str(caught.value)) == ("", ONLY_ON_CONTROL)


def test_refusals_are_the_workers_dead_letters_word_for_word() -> None:
    refusals = [str(_refusal(schema, fields)) for _, schema, fields in REFUSED]
    built = [build_confirmation(**BASE), build_reset(**RESET), build_confirmation(**{
        **BASE, "send_id": "s-2",
        "origin": {"kind": "automation_result",  # compared by no rule: accepted
                   "job": {"id": "j", "mode": "background", "session_key": "agent::x"}}})]
    raw = [json.dumps({"schema": schema, **fields}) for _, schema, fields in REFUSED]
    done = cli("replay", "-", env=dict(os.environ),  # replay needs no broker
               input="".join(line + "\n" for line in raw + [b.value.decode() for b in built])
               .encode())
    assert done.returncode == 0, done.stderr.decode()
    outcomes = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(o["outcome"], o.get("error")) for o in outcomes[: len(REFUSED)]] == [
        ("dead_letter", reason) for reason in refusals]
    assert [o["outcome"] for o in outcomes[len(REFUSED):]] == ["written", "reset", "written"]


def test_the_publisher_reads_the_workers_variables_with_their_meaning() -> None:
    """The connector cannot import workers, so it names the variables again: held equal here."""
    from typing import get_args

    from transcript_connector import publisher

    from workers import settings

    worker = {**settings.ENV, **settings.WORKER_ENV}
    assert {var: worker.get(var) for var in publisher.ENV} == publisher.ENV  # same name, same field
    assert get_args(publisher.SecurityProtocol) == get_args(settings.SecurityProtocol)
    assert get_args(publisher.SaslMechanism) == get_args(settings.SaslMechanism)
    assert publisher.DEFAULT_PARTITIONS == settings.WorkerSettings().partitions
