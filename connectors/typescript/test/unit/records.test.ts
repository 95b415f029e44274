// The builders: what the worker accepts is built, what it would dead-letter throws naming the field.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import {
  buildConfirmation,
  buildReset,
  type ConfirmationInput,
  InvalidRecordError,
  MAX_RECORD_BYTES,
  recordKey,
  validateRecord,
} from "@transcript-owner/connector";

function input(over: Partial<ConfirmationInput> = {}): ConfirmationInput {
  return {
    send_id: "s-1",
    confirmed_at: "2026-05-01T12:00:00+02:00",
    agent_id: "ops",
    session_key: "agent:ops:telegram:direct:u1",
    route: { channel: "telegram", peer_kind: "direct", peer_id: "u1" },
    origin: { kind: "message_tool" },
    payload: { text: "hello" },
    receipt: { platform_message_ids: ["m1"] },
    ...over,
  };
}

function throwsField(call: () => unknown, field: string, problem?: RegExp): void {
  assert.throws(call, (e: unknown) => {
    assert.ok(e instanceof InvalidRecordError, `not an InvalidRecordError: ${String(e)}`);
    assert.equal(e.field, field, e.message);
    if (problem) assert.match(e.problem, problem);
    return true;
  });
}

describe("buildConfirmation", () => {
  test("a valid input gives the wire record, frozen, with the schema tag", () => {
    const r = buildConfirmation(input());
    assert.equal(r.schema, "delivery-confirmation/1");
    assert.equal(r.session_key, "agent:ops:telegram:direct:u1");
    assert.ok(Object.isFrozen(r) && Object.isFrozen(r.payload) && Object.isFrozen(r.route));
    assert.deepEqual(JSON.parse(JSON.stringify(r)), { ...input(), schema: "delivery-confirmation/1" });
  });

  test("the sender's key is kept as given; the Kafka key is its canonical form", () => {
    const r = buildConfirmation(input({ session_key: " Agent:OPS:Telegram:DM:U1" }));
    assert.equal(r.session_key, " Agent:OPS:Telegram:DM:U1");
    assert.equal(recordKey(r), "agent:ops:telegram:direct:u1");
  });

  test("dm_scope builds the key from the route, as inbound producers do", () => {
    const { session_key: _, ...rest } = input();
    const r = buildConfirmation({ ...rest, route: { channel: "Telegram", peer_kind: "direct", peer_id: "U1", account_id: "Bot1" }, dm_scope: "per-account-channel-peer" });
    assert.equal(r.session_key, "agent:ops:telegram:bot1:direct:u1");
    assert.ok(!("dm_scope" in r));
    throwsField(() => buildConfirmation({ ...rest, dm_scope: "per-sender" as never }), "dm_scope", /unknown DM scope 'per-sender'/);
  });

  test("session_key or dm_scope, exactly one", () => {
    const { session_key: _, ...rest } = input();
    throwsField(() => buildConfirmation(rest as ConfirmationInput), "session_key", /field required/);
    throwsField(() => buildConfirmation({ ...input(), dm_scope: "main" }), "session_key", /not both/);
  });

  test("a Date becomes an ISO timestamp; the range is the worker's", () => {
    const r = buildConfirmation(input({ confirmed_at: new Date(Date.UTC(2026, 4, 1, 12)) }));
    assert.equal(r.confirmed_at, "2026-05-01T12:00:00.000Z");
    throwsField(() => buildConfirmation(input({ confirmed_at: new Date(-1) })), "confirmed_at", /outside 1970/);
    throwsField(() => buildConfirmation(input({ confirmed_at: new Date(NaN) })), "confirmed_at", /invalid Date/);
    throwsField(() => buildConfirmation(input({ confirmed_at: "2999-12-31T23:59:59.5Z" })), "confirmed_at", /outside/);
    throwsField(() => buildConfirmation(input({ confirmed_at: "2026-05-01T12:00:00" })), "confirmed_at", /UTC offset/);
    throwsField(() => buildConfirmation(input({ receipt: { platform_message_ids: [], sent_at: "yesterday" } })), "receipt.sent_at", /RFC 3339/);
  });

  test("missing and mistyped fields are named as the worker names them", () => {
    const { confirmed_at: _, ...noTime } = input();
    throwsField(() => buildConfirmation(noTime as ConfirmationInput), "confirmed_at", /field required/);
    throwsField(() => buildConfirmation(input({ agent_id: "Ops" })), "agent_id", /does not match/);
    throwsField(() => buildConfirmation(input({ send_id: "" })), "send_id", /must not be empty/);
    throwsField(() => buildConfirmation(input({ send_id: "x".repeat(513) })), "send_id", /longer than 512/);
    throwsField(() => buildConfirmation(input({ route: { channel: "t", peer_kind: "dm" as never, peer_id: "1" } })), "route.peer_kind", /one of/);
    throwsField(() => buildConfirmation(input({ route: { channel: "t", peer_kind: "direct", peer_id: "1", account_id: 7 as never } })), "route.account_id", /string or null/);
    throwsField(() => buildConfirmation(input({ payload: { media: [{ kind: "image" } as never] } })), "payload.media[0].name", /field required/);
    throwsField(() => buildConfirmation(input({ destination_agent_id: "Sales" })), "destination_agent_id", /does not match/);
  });

  test("a turn reply needs its turn, and a turn key that names an agent", () => {
    throwsField(() => buildConfirmation(input({ origin: { kind: "turn_reply" } as never })), "origin.turn", /when origin.kind is turn_reply/);
    throwsField(
      () => buildConfirmation(input({ origin: { kind: "turn_reply", turn: { session_key: "agent::x", turn_id: "t" } } })),
      "origin.turn.session_key", /malformed agent key: '' is not an agent id/,
    );
    // another kind may carry a broken turn key: no rule compares it
    buildConfirmation(input({ origin: { kind: "message_tool", turn: { session_key: "agent::x", turn_id: "t" } } }));
  });

  test("an in-chat job's key must name an agent; a background job's need not", () => {
    const job = { id: "j", mode: "in_chat" as const, session_key: "agent:Not An Id:x" };
    throwsField(() => buildConfirmation(input({ origin: { kind: "automation_result", job } })), "origin.job.session_key", /malformed agent key/);
    buildConfirmation(input({ origin: { kind: "automation_result", job: { ...job, mode: "background" } } }));
  });

  test("a key that names no agent is refused with the Python message", () => {
    throwsField(() => buildConfirmation(input({ session_key: "agent:-x:main" })), "session_key", /^malformed agent key: '-x' is not an agent id$/);
  });

  test("what JSON cannot carry is refused, not silently changed", () => {
    throwsField(() => buildConfirmation(input({ payload: { text: "a\ud800b" } })), "payload.text", /lone surrogate/);
    throwsField(() => buildConfirmation(input({ payload: { native: [{ kind: "poll", score: NaN }] } })), "payload.native[0].score", /NaN/);
    throwsField(() => buildConfirmation(input({ payload: { native: [{ kind: "poll", n: 10n as never }] } })), "payload.native[0].n", /bigint/);
    throwsField(() => buildConfirmation(input({ payload: { native: [{ kind: "poll", at: new Date() as never }] } })), "payload.native[0].at", /plain object/);
    const cyclic: Record<string, unknown> = { kind: "x" };
    cyclic.self = cyclic;
    assert.throws(() => buildConfirmation(input({ payload: { native: [cyclic as never] } })), /^InvalidRecordError: payload\.native\[0\]\.self.*: holds a cycle$/);
  });

  test("nesting: 200 levels pass (the worker's parser limit), 201 do not", () => {
    const nested = (n: number): unknown => { let v: unknown = 0; for (let i = 0; i < n; i++) v = [v]; return v; };
    // record 1, payload 2, native 3, item 4, then n arrays
    buildConfirmation(input({ payload: { native: [{ kind: "x", v: nested(196) as never }] } }));
    assert.throws(() => buildConfirmation(input({ payload: { native: [{ kind: "x", v: nested(197) as never }] } })), /nested too deeply/);
  });

  test("oversize records are refused", () => {
    buildConfirmation(input({ payload: { text: "x".repeat(MAX_RECORD_BYTES - 1000) } }));
    throwsField(() => buildConfirmation(input({ payload: { text: "é".repeat(MAX_RECORD_BYTES / 2) } })), "", /oversize: \d+ bytes > 1 MiB/);
  });

  test("fields outside the contract are dropped; native items are kept whole", () => {
    const r = buildConfirmation({
      ...input(), extra: 1,
      payload: { text: "t", media: [{ kind: "image", name: "a.png", url: "https://x/a?token=1", size: 3 } as never], native: [{ kind: "embed", title: "T", nested: { a: [1] } }] },
    } as ConfirmationInput);
    assert.ok(!("extra" in r));
    assert.deepEqual(r.payload.media, [{ kind: "image", name: "a.png", url: "https://x/a?token=1" }]);
    assert.deepEqual(r.payload.native, [{ kind: "embed", title: "T", nested: { a: [1] } }]);
  });

  test("validateRecord re-checks a record changed after it was built", () => {
    const r = { ...buildConfirmation(input()), send_id: "" };
    throwsField(() => validateRecord(r), "send_id");
  });

  test("the tag is `schema` alone: `schema_` is no spelling of it, as in the worker (issue 23)", () => {
    const { schema: _, ...untagged } = buildConfirmation(input());
    throwsField(() => validateRecord({ ...untagged, schema_: "delivery-confirmation/1" } as never), "schema", /field required/);
    const reset = { session_key: "agent:ops:main", reset_at: "2026-05-01T12:00:00Z", schema_: "session-reset/1" };
    throwsField(() => validateRecord(reset as never), "schema", /field required/);
    // beside `schema` it is an unknown field, ignored: the record is what `schema` says
    const both = validateRecord({ ...buildConfirmation(input()), schema_: "session-erase/1" } as never);
    assert.equal((both as { schema: string }).schema, "delivery-confirmation/1");
    const built = buildConfirmation({ ...input(), schema: "session-erase/1", schema_: "session-erase/1" } as never);
    assert.equal(built.schema, "delivery-confirmation/1");
    assert.ok(!("schema_" in built));
  });
});

describe("buildReset", () => {
  test("a full key", () => {
    const r = buildReset({ session_key: " AGENT:ops:Telegram:DM:U1", reset_at: "2026-05-01T12:00:00Z", reason: "/new" });
    assert.equal(r.schema, "session-reset/1");
    assert.equal(recordKey(r), "agent:ops:telegram:direct:u1");
  });
  test("a bare key names no agent: refused as the worker refuses it", () => {
    throwsField(() => buildReset({ session_key: "telegram:direct:u1", reset_at: "2026-05-01T12:00:00Z" }), "session_key", /a reset needs a full agent:<agent_id>:… key/);
    throwsField(() => buildReset({ session_key: "agent::x", reset_at: "2026-05-01T12:00:00Z" }), "session_key", /malformed agent key/);
    throwsField(() => buildReset({ session_key: "agent:ops:main", reset_at: "1969-01-01T00:00:00Z" }), "reset_at", /outside/);
  });
});
