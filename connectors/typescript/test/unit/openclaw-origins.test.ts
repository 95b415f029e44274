// The README's mapping: an OpenClaw send result to a confirmation, for each of the five origins,
// with the gateway's idempotency key as the send_id (stable across retries: a retry is a
// duplicate, never a second entry). Mirrors connectors/python/tests/test_openclaw_origins.py.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  buildConfirmation,
  type DeliveryConfirmation,
  type Origin,
  type OriginKind,
  partitionFor,
  recordKey,
} from "@transcript-owner/connector";

/** What the gateway knows once a channel confirmed a send. */
interface SendResult {
  agentId: string;
  sessionKey: string; // the destination chat's key, as the gateway computed it
  channel: string;
  chatType: "direct" | "group" | "channel";
  to: string; // the peer id inbound messages carry
  messageIds: string[]; // one send may be several platform messages
  sentAt: string;
  text: string | null;
  threadId?: string;
}

function confirm(send: SendResult, sendId: string, origin: Origin): DeliveryConfirmation {
  return buildConfirmation({
    send_id: sendId,
    confirmed_at: send.sentAt,
    agent_id: send.agentId,
    session_key: send.sessionKey,
    route: { channel: send.channel, peer_kind: send.chatType, peer_id: send.to, thread_id: send.threadId ?? null },
    origin,
    payload: { text: send.text },
    receipt: { platform_message_ids: [...send.messageIds], sent_at: send.sentAt },
  });
}

const dm: SendResult = {
  agentId: "ops", sessionKey: "agent:ops:telegram:direct:4711", channel: "telegram", chatType: "direct",
  to: "4711", messageIds: ["881", "882"], sentAt: "2026-05-01T12:00:05Z", text: "Report: 3 open tickets",
};
const group: SendResult = {
  agentId: "ops", sessionKey: "agent:ops:slack:channel:c042", channel: "slack", chatType: "channel",
  to: "C042", messageIds: ["1714564805.000100"], sentAt: "2026-05-01T12:00:06+02:00", text: "Deploy finished",
};
const job = { id: "daily-report", name: "daily report", run_id: "run-7", mode: "background" } as const;

const origins: Record<OriginKind, [SendResult, string, Origin]> = {
  // the final reply of a turn, delivered to another chat than the turn's (same chat: skipped)
  turn_reply: [group, "channel-final:msg-311:dlv-9", { kind: "turn_reply", turn: { session_key: dm.sessionKey, turn_id: "msg-311" } }],
  message_tool: [group, "outbound-delivery:dlv-10:0", { kind: "message_tool" }],
  automation_result: [dm, "outbound-delivery:dlv-11:0", { kind: "automation_result", job }],
  failure_alert: [dm, "outbound-delivery:dlv-12:0", { kind: "failure_alert", job }],
  subagent_announcement: [dm, "subagent-result:child-run-5", {
    kind: "subagent_announcement", subagent: { run_id: "child-run-5", agent_id: "researcher", label: "research" },
  }],
};

for (const [kind, [send, sendId, origin]] of Object.entries(origins)) {
  test(`${kind} builds from a send result, its idempotency key as send_id`, () => {
    const record = confirm(send, sendId, origin);
    assert.equal(record.origin.kind, kind);
    assert.equal(record.send_id, sendId);
    assert.equal(recordKey(record), send.sessionKey.toLowerCase());
    assert.deepEqual(record.receipt.platform_message_ids, send.messageIds);
    // a retry of the same send is the same record: the worker's dedupe sees one send
    assert.equal(JSON.stringify(confirm(send, sendId, origin)), JSON.stringify(record));
  });
}

test("every payload of a delivery is its own send, in the chat's one partition", () => {
  const [first, second] = [0, 1].map((i) => confirm(dm, `outbound-delivery:dlv-13:${i}`, { kind: "message_tool" }));
  assert.notEqual(first!.send_id, second!.send_id);
  assert.equal(partitionFor(recordKey(first!), 8), partitionFor(recordKey(second!), 8));
});
