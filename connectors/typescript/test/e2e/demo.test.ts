// End to end on the real broker, beside a running worker (tests/integration/test_typescript_connector.py
// starts both): the demo scenario (workers/scenario.py) built with the builders and published
// through ConfirmationPublisher, plain and in transactions (one aborted); then the entries and
// diagnostics read back read_committed equal what `transcript-owner replay` decides for the very
// bytes published, and the reader example prints the DM session's transcript.
//
// Environment: KAFKA_BOOTSTRAP, TRANSCRIPT_TOPIC_PREFIX (this test's topics), E2E_SCENARIO (the
// scenario as JSON), E2E_OUT (a directory for what was published), PYTHON and E2E_REPO (to run
// replay).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { Kafka, logLevel } from "kafkajs";

import {
  buildConfirmation,
  buildReset,
  canonicalSessionKey,
  type ConfirmationInput,
  ConfirmationPublisher,
  type Delivery,
  type InputRecord,
  InvalidRecordError,
  partitionFor,
  parsePositionKey,
  publisherOptionsFromEnv,
  recordKey,
  type ResetInput,
} from "@transcript-owner/connector";

interface Step { note: string; expect: string; key: string; value: string }
type Json = Record<string, unknown>;

function need(name: string): string {
  const v = process.env[name];
  assert.ok(v, `${name} is not set (run via tests/integration/test_typescript_connector.py)`);
  return v;
}

function build(value: string): InputRecord {
  const { schema, ...fields } = JSON.parse(value) as Json;
  return schema === "session-reset/1" ? buildReset(fields as unknown as ResetInput) : buildConfirmation(fields as unknown as ConfirmationInput);
}

/** Entries and diagnostics as a read_committed consumer sees them, until `enough` holds. */
async function readBack(kafka: Kafka, prefix: string, enough: (e: Json[], d: Json[]) => boolean): Promise<[Json[], Json[]]> {
  const groupId = `e2e-${randomUUID()}`;
  const consumer = kafka.consumer({ groupId, readUncommitted: false });
  const entries: Json[] = [];
  const diags: Json[] = [];
  await consumer.connect();
  await consumer.subscribe({ topics: [`${prefix}transcript.entries`, `${prefix}transcript.diagnostics`], fromBeginning: true });
  let resolve!: () => void;
  const done = new Promise<void>((r) => (resolve = r));
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ topic, message }) => {
      if (parsePositionKey(message.key) !== null) return; // the worker's position records (1.3): no entries
      const v = JSON.parse(message.value!.toString()) as Json;
      (topic.endsWith("transcript.entries") ? entries : diags).push(v);
      if (enough(entries, diags)) resolve();
    },
  });
  const timer = setTimeout(resolve, 120_000);
  await done;
  await new Promise((r) => setTimeout(r, 1500)); // anything extra arrives now, and fails the test
  clearTimeout(timer);
  await consumer.disconnect();
  const admin = kafka.admin();
  await admin.connect();
  await admin.deleteGroups([groupId]).catch(() => undefined);
  await admin.disconnect();
  return [entries, diags];
}

const stable = (v: unknown): string =>
  JSON.stringify(v, (_k, x: unknown) => (x && typeof x === "object" && !Array.isArray(x) ? Object.fromEntries(Object.entries(x).sort()) : x));
const withoutWrittenAt = (entries: Json[]): Json[] => entries.map(({ written_at: _, ...e }) => e);
const bySessionSeq = (a: Json, b: Json): number =>
  String(a.session_key).localeCompare(String(b.session_key)) || Number(a.seq) - Number(b.seq);

test("the demo scenario through ConfirmationPublisher, read back as the worker wrote it", { timeout: 240_000 }, async () => {
  const steps = JSON.parse(readFileSync(need("E2E_SCENARIO"), "utf8")) as Step[];
  const out = need("E2E_OUT");
  const options = publisherOptionsFromEnv();
  const prefix = options.topicPrefix ?? "";
  assert.ok(prefix, "TRANSCRIPT_TOPIC_PREFIX must name this test's topics");

  // The builders take every valid step and refuse the two the worker would dead-letter.
  const records: InputRecord[] = [];
  for (const s of steps) {
    if (s.expect !== "dead_letter") {
      records.push(build(s.value));
      continue;
    }
    let parsed: Json;
    try {
      parsed = JSON.parse(s.value) as Json;
    } catch {
      continue; // not JSON: nothing a typed connector can even hold
    }
    assert.throws(() => build(JSON.stringify(parsed)), (e: unknown) => e instanceof InvalidRecordError && e.field === "confirmed_at");
  }
  assert.equal(records.length, steps.length - 2);

  const plain = ConfirmationPublisher.fromEnv(process.env, { clientId: "e2e-plain" });
  const txn = ConfirmationPublisher.fromEnv(process.env, { clientId: "e2e-txn", transactionalId: `e2e-${randomUUID()}` });
  await plain.connect();
  await txn.connect();
  const published: { record: InputRecord; delivery: Delivery }[] = [];
  const firstReset = records.findIndex((r) => r.schema === "session-reset/1");
  try {
    // before the reset: one by one, and the connector's retry of step 1 as a batch of its own
    for (const record of records.slice(0, firstReset)) published.push({ record, delivery: await plain.publish(record) });
    // an aborted transaction: never confirmed, so no outcome at all
    const dm = recordKey(records[0]!);
    const ghost = buildConfirmation({
      ...(JSON.parse(JSON.stringify(records[0])) as ConfirmationInput & { schema?: string }),
      send_id: "aborted-ghost", payload: { text: "this was never shown" },
    } as ConfirmationInput);
    await assert.rejects(txn.transaction(async (tx) => {
      const d = await tx.publish(ghost);
      assert.equal(d.key, dm);
      throw new Error("the channel did not confirm after all");
    }), /did not confirm/);
    // the reset and everything after it in one committed transaction
    const rest = records.slice(firstReset);
    const deliveries = await txn.transaction((tx) => tx.publishAll(rest));
    rest.forEach((record, i) => published.push({ record, delivery: deliveries[i]! }));
  } finally {
    await plain.close();
    await txn.close();
  }

  // every record went to the partition the worker owns its key from, under its canonical key
  for (const { record, delivery } of published) {
    // a reset has no sender: its full key names its own agent, so any valid agent id will do
    const agent = record.schema === "session-reset/1" ? "a" : record.agent_id;
    assert.equal(delivery.key, canonicalSessionKey(record.session_key, agent));
    assert.equal(delivery.partition, partitionFor(delivery.key, options.partitions!));
    assert.equal(delivery.topic, `${prefix}delivery.confirmations`);
  }
  const values = published.map(({ record }) => JSON.stringify(record));
  writeFileSync(`${out}/published.jsonl`, published.map(({ record, delivery }) =>
    JSON.stringify({ ...delivery, value: JSON.stringify(record) })).join("\n") + "\n");

  // what the worker must write: `transcript-owner replay` of exactly these bytes
  const replay = execFileSync(need("PYTHON"), ["-m", "workers", "replay", "-"], {
    cwd: need("E2E_REPO"), input: values.join("\n") + "\n", encoding: "utf8",
  }).trim().split("\n").map((l) => JSON.parse(l) as Json);
  const expectedEntries = replay.flatMap((o) => (o.entry ? [o.entry as Json] : []));
  const expectedDiags = replay.flatMap((o) => (o.diagnostics as Json[] | undefined) ?? []);
  assert.deepEqual(replay.map((o) => o.outcome), steps.filter((s) => s.expect !== "dead_letter").map((s) => s.expect));

  const kafka = new Kafka({ brokers: options.brokers, logLevel: logLevel.WARN });
  const [entries, diags] = await readBack(kafka, prefix, (e, d) => e.length >= expectedEntries.length && d.length >= expectedDiags.length);
  assert.deepEqual(withoutWrittenAt(entries).sort(bySessionSeq), withoutWrittenAt(expectedEntries).sort(bySessionSeq));
  assert.deepEqual(diags.map(stable).sort(), expectedDiags.map(stable).sort());
  assert.deepEqual(diags.map((d) => `${String(d.level)} ${String(d.code)}`).sort(), [
    "error conflicting_duplicate",
    "info session_key_mismatch",
    "warn destination_bound_to_other_agent",
    "warn in_chat_job_delivered_elsewhere",
    "warn native_only_payload",
  ]);
  assert.ok(!JSON.stringify(entries).includes("aborted-ghost") && !JSON.stringify(diags).includes("aborted-ghost"));
  writeFileSync(`${out}/entries.jsonl`, entries.map((e) => JSON.stringify(e)).join("\n") + "\n");

  // the reader example: one session's entries bound to LATEST (the worker's position there has
  // reached the input's last stable offset), in order
  const dmKey = recordKey(records[0]!);
  const reader = fileURLToPath(new URL("../../examples/read-session.js", import.meta.url));
  const printed = execFileSync(process.execPath, [reader, dmKey], { encoding: "utf8" }).trim().split("\n").map((l) => JSON.parse(l) as Json);
  const dmEntries = entries.filter((e) => e.session_key === dmKey).sort(bySessionSeq);
  assert.deepEqual(printed, dmEntries);
  assert.deepEqual(printed.map((e) => e.seq), [1, 2, 3, 4, 5, 6]);
  assert.deepEqual(printed.map((e) => e.epoch), [0, 0, 0, 1, 1, 1]);
});
