"""The README's mapping: an OpenClaw send result to a confirmation, for each of the five origins,
with the gateway's idempotency key as the send_id (stable across retries: a retry is a
duplicate, never a second entry)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, get_args

import pytest
from transcript_connector import BuiltRecord, build_confirmation, partition_for
from transcript_connector.builders import OriginInput
from transcript_connector.records import OriginKind


@dataclass(frozen=True)
class SendResult:
    """What the gateway knows once a channel confirmed a send (field-notes.md, "Receipts")."""

    agent_id: str
    session_key: str  # the destination chat's key, as the gateway computed it
    channel: str
    chat_type: str  # direct | group | channel
    to: str  # the peer id inbound messages carry
    message_ids: tuple[str, ...]  # one send may be several platform messages
    sent_at: str
    text: str | None
    thread_id: str | None = None


def confirm(send: SendResult, send_id: str, origin: OriginInput) -> BuiltRecord:
    """The README's mapping, in one place: the idempotency key is the send_id."""
    return build_confirmation(
        send_id=send_id,
        confirmed_at=send.sent_at,
        agent_id=send.agent_id,
        session_key=send.session_key,
        route={"channel": send.channel, "peer_kind": send.chat_type,  # type: ignore[typeddict-item]
               "peer_id": send.to, "thread_id": send.thread_id},
        origin=origin,
        payload={"text": send.text},
        receipt={"platform_message_ids": list(send.message_ids), "sent_at": send.sent_at},
    )


DM = SendResult("ops", "agent:ops:telegram:direct:4711", "telegram", "direct", "4711",
                ("881", "882"), "2026-05-01T12:00:05Z", "Report: 3 open tickets")
GROUP = SendResult("ops", "agent:ops:slack:channel:c042", "slack", "channel", "C042",
                   ("1714564805.000100",), "2026-05-01T12:00:06+02:00", "Deploy finished")
JOB = {"id": "daily-report", "name": "daily report", "run_id": "run-7", "mode": "background"}

# origin kind -> (send result, the gateway's idempotency key, origin)
ORIGINS: dict[str, tuple[SendResult, str, Any]] = {
    # the final reply of a turn, delivered to another chat than the turn's (same chat: skipped)
    "turn_reply": (GROUP, "channel-final:msg-311:dlv-9",
                   {"kind": "turn_reply",
                    "turn": {"session_key": DM.session_key, "turn_id": "msg-311"}}),
    "message_tool": (GROUP, "outbound-delivery:dlv-10:0", {"kind": "message_tool"}),
    "automation_result": (DM, "outbound-delivery:dlv-11:0",
                          {"kind": "automation_result", "job": JOB}),
    "failure_alert": (DM, "outbound-delivery:dlv-12:0", {"kind": "failure_alert", "job": JOB}),
    "subagent_announcement": (DM, "subagent-result:child-run-5",
                              {"kind": "subagent_announcement",
                               "subagent": {"run_id": "child-run-5", "agent_id": "researcher",
                                            "label": "research"}}),
}


@pytest.mark.parametrize("kind", sorted(ORIGINS))
def test_each_origin_builds_from_a_send_result(kind: str) -> None:
    send, send_id, origin = ORIGINS[kind]
    built = confirm(send, send_id, origin)
    record = built.record
    assert (record.origin.kind, record.send_id) == (kind, send_id)
    assert built.key == send.session_key.lower()
    assert list(record.receipt.platform_message_ids) == list(send.message_ids)
    # a retry of the same send is the same record: the worker's dedupe sees one send
    assert confirm(send, send_id, origin).value == built.value


def test_every_payload_of_a_delivery_is_its_own_send() -> None:
    """outbound-delivery:<deliveryId>:<payloadIndex>: a delivery of two payloads is two
    confirmations, in the chat's one partition."""
    origin: OriginInput = {"kind": "message_tool"}
    first, second = (confirm(DM, f"outbound-delivery:dlv-13:{i}", origin) for i in (0, 1))
    assert first.record.send_id != second.record.send_id
    assert partition_for(first.key, 8) == partition_for(second.key, 8)


def test_the_mapping_covers_every_origin_kind() -> None:
    assert set(ORIGINS) == set(get_args(OriginKind))
