// Builder parity with the worker: prints, as JSON lines, records the builders accept (the worker
// must accept each) and inputs they refuse, serialised as a connector without the builders
// would send them (the worker must dead-letter each, for the same field).
// Run by tests/unit/test_typescript_suite.py, which feeds them to `transcript-owner replay`.
import {
  buildConfirmation,
  buildReset,
  type ConfirmationInput,
  DM_SCOPES,
  InvalidRecordError,
  type ResetInput,
} from "@transcript-owner/connector";

import { loadVectors } from "../helpers.js";

const base = (over: Partial<ConfirmationInput> = {}): ConfirmationInput => ({
  send_id: "s-1",
  confirmed_at: "2026-05-01T12:00:00+02:00",
  agent_id: "ops",
  session_key: "agent:ops:telegram:direct:u1",
  route: { channel: "telegram", peer_kind: "direct", peer_id: "u1" },
  origin: { kind: "message_tool" },
  payload: { text: "hello" },
  receipt: { platform_message_ids: ["m1"] },
  ...over,
});
const nested = (n: number): unknown => {
  let v: unknown = 0;
  for (let i = 0; i < n; i++) v = [v];
  return v;
};
const reset = (over: Partial<ResetInput> = {}): ResetInput => ({ session_key: "agent:ops:main", reset_at: "2026-05-01T12:00:00Z", ...over });

const valid: [string, () => object][] = [
  ["base", () => buildConfirmation(base())],
  ["dates", () => buildConfirmation(base({ confirmed_at: new Date(Date.UTC(2026, 4, 1)), receipt: { platform_message_ids: [], sent_at: new Date(0) } }))],
  ...DM_SCOPES.map((scope): [string, () => object] => [`dm-scope-${scope}`, () => {
    const { session_key: _, ...rest } = base();
    return buildConfirmation({ ...rest, dm_scope: scope, route: { channel: " Matrix ", peer_kind: "direct", peer_id: "!Room:m.org", account_id: "A", thread_id: "$T" } });
  }]),
  ["turn-reply", () => buildConfirmation(base({ origin: { kind: "turn_reply", turn: { session_key: "agent:ops:slack:channel:c1", turn_id: "t1" } } }))],
  ["in-chat-job", () => buildConfirmation(base({ origin: { kind: "automation_result", job: { id: "j", mode: "in_chat", session_key: " DM:U1 " } } }))],
  ["background-job-bad-key", () => buildConfirmation(base({ origin: { kind: "automation_result", job: { id: "j", mode: "background", session_key: "agent::x" } } }))],
  ["subagent", () => buildConfirmation(base({ origin: { kind: "subagent_announcement", subagent: { run_id: "r", agent_id: "researcher", label: null } } }))],
  ["media-native-deep", () => buildConfirmation(base({ payload: { text: null, media: [{ kind: "image", name: "a.png", url: "https://x/a?t=1", mime: "image/png" }], native: [{ kind: "x", v: nested(196) as never }] } }))],
  ["unicode-text", () => buildConfirmation(base({ payload: { text: "a\u2028b\u0000c 😀 \ufeff" }, send_id: "😀".repeat(512) }))],
  ["other-agent", () => buildConfirmation(base({ destination_agent_id: "sales", session_key: "agent:sales:main" }))],
  ["legacy-key", () => buildConfirmation(base({ session_key: "\x1f Agent:OPS:Telegram:DM:U1\x85" }))],
  ...loadVectors().timestamps.filter((t) => t.typescript === "valid").map((t): [string, () => object] => [`ts ${t.text}`, () => buildReset(reset({ reset_at: t.text }))]),
  ["reset-padded", () => buildReset(reset({ session_key: " AGENT : ops : telegram : dm : U1 ", reason: "/new" }))],
];

// [name, input as a connector would send it, builder, the worker's reason starts with]
type Bad = [string, Record<string, unknown>, (i: never) => unknown, string | null];
const c = (over: Record<string, unknown>) => ({ ...base(), ...over });
const drop = (k: string) => { const o: Record<string, unknown> = { ...base() }; delete o[k]; return o; };
const invalid: Bad[] = [
  ["no-confirmed-at", drop("confirmed_at"), buildConfirmation, null],
  ["no-send-id", drop("send_id"), buildConfirmation, null],
  ["upper-agent", c({ agent_id: "Ops" }), buildConfirmation, null],
  ["empty-send-id", c({ send_id: "" }), buildConfirmation, null],
  ["long-send-id", c({ send_id: "x".repeat(513) }), buildConfirmation, null],
  ["peer-kind-dm", c({ route: { channel: "t", peer_kind: "dm", peer_id: "1" } }), buildConfirmation, null],
  ["empty-channel", c({ route: { channel: "", peer_kind: "group", peer_id: "1" } }), buildConfirmation, null],
  ["turn-reply-without-turn", c({ origin: { kind: "turn_reply" } }), buildConfirmation, null],
  ["turn-key-names-no-agent", c({ origin: { kind: "turn_reply", turn: { session_key: "agent:-x:y", turn_id: "t" } } }), buildConfirmation, null],
  ["in-chat-job-key-names-no-agent", c({ origin: { kind: "automation_result", job: { id: "j", mode: "in_chat", session_key: "agent::y" } } }), buildConfirmation, null],
  ["key-names-no-agent", c({ session_key: "agent:Not An Id:main" }), buildConfirmation, null],
  ["key-bom-agent", c({ session_key: "agent:ops\ufeff:main" }), buildConfirmation, null],
  ["media-without-name", c({ payload: { media: [{ kind: "image" }] } }), buildConfirmation, null],
  ["bad-origin-kind", c({ origin: { kind: "reply" } }), buildConfirmation, null],
  ["bad-destination", c({ destination_agent_id: "Sales" }), buildConfirmation, null],
  ["subagent-bad-agent", c({ origin: { kind: "subagent_announcement", subagent: { run_id: "r", agent_id: "-" } } }), buildConfirmation, null],
  ["too-deep", c({ payload: { native: [{ kind: "x", v: nested(197) }] } }), buildConfirmation, "nested too deeply"],
  ["oversize", c({ payload: { text: "x".repeat(1 << 20) } }), buildConfirmation, "oversize"],
  ["lone-surrogate", c({ payload: { text: "\ud800" } }), buildConfirmation, "not JSON"],
  ["reset-bare-key", { ...reset(), session_key: "telegram:direct:u1" }, buildReset, null],
  ["reset-key-names-no-agent", { ...reset(), session_key: "agent: :x" }, buildReset, null],
  ["reset-no-offset", { ...reset(), reset_at: "2026-05-01T12:00:00" }, buildReset, null],
  ...loadVectors().timestamps.filter((t) => t.python !== "valid").map((t): Bad => [`ts ${t.text}`, { ...reset(), reset_at: t.text }, buildReset, null]),
];

for (const [name, make] of valid) {
  process.stdout.write(`${JSON.stringify({ name, valid: true, value: JSON.stringify(make()) })}\n`);
}
for (const [name, input, builder, reason] of invalid) {
  let field: string | null = null;
  try {
    builder(input as never);
  } catch (e) {
    if (!(e instanceof InvalidRecordError)) throw e;
    field = e.field;
  }
  if (field === null) throw new Error(`${name}: the builder accepted it`);
  const schema = builder === (buildReset as unknown) ? "session-reset/1" : "delivery-confirmation/1";
  const value = JSON.stringify({ schema, ...input });
  process.stdout.write(`${JSON.stringify({ name, valid: false, field, reason: reason ?? `${field}:`, value })}\n`);
}
