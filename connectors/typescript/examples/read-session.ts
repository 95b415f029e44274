// Read one session's transcript as a read_committed reader sees it now, and print its entries
// as JSON lines, in order.
//
//     node build/examples/read-session.js 'agent:ops:telegram:direct:u1'
//
// Configured like the worker (KAFKA_BOOTSTRAP, TRANSCRIPT_TOPIC_PREFIX, TRANSCRIPT_PARTITIONS, and
// the KAFKA_SECURITY_PROTOCOL / SASL / SSL variables). A session's entries are all in one partition
// of transcript.entries, partitionFor(key, N), keyed `<session_key>#<seq, 10 digits>`: the reader
// reads that partition only, from its start to the end offset it had when the reader started.
// kafkajs has no manual assignment, so it joins a throw-away consumer group whose assignor hands it
// that one partition, commits nothing, and deletes the group when done.
//
// A session key may hold `#`, so the session's entries are its exact keys (parseEntryKey), never a
// key prefix: session `K#1`'s keys start with `K#` too. It prints compaction's view (the latest
// value per key; a tombstone erases one; a value that is no entry of its key is left out), each
// line with the characters a terminal would act on (C0 and C1 controls, bidi overrides) written as
// \u escapes: the same JSON value, nothing in it that can drive the terminal.
//
// It checks the session's hash chain over those live entries (their `chain` headers; DESIGN 1.2
// "Tamper evidence") and prints each finding on stderr, exiting 3 when there is one. From the
// entries alone: a changed, removed, inserted or reordered entry, not a cut-off end or entries
// appended and chained again; `transcript-owner audit` checks those against the worker's head.
import { randomUUID } from "node:crypto";
import { pathToFileURL } from "node:url";

import { AssignerProtocol, Kafka, logLevel, type PartitionAssigner } from "kafkajs";

import {
  CHAIN_HEADER,
  canonicalSessionKey,
  partitionFor,
  publisherOptionsFromEnv,
  pyLower,
  pyStrip,
  type VerifiedSession,
  verifySession,
} from "@transcript-owner/connector";

const onePartition = (topic: string, partition: number): PartitionAssigner => () => ({
  name: "OnePartition",
  version: 1,
  async assign({ members }) {
    return members.map((m, i) => ({
      memberId: m.memberId,
      memberAssignment: AssignerProtocol.MemberAssignment.encode({
        version: 1, assignment: i === 0 ? { [topic]: [partition] } : {}, userData: Buffer.alloc(0),
      }),
    }));
  },
  protocol({ topics }) {
    return { name: "OnePartition", metadata: AssignerProtocol.MemberMetadata.encode({ version: 1, topics, userData: Buffer.alloc(0) }) };
  },
});

/** `<session_key>#<seq, 10 digits>` -> its session and seq, or null (DESIGN 1.2). */
export function parseEntryKey(key: string): { sessionKey: string; seq: number } | null {
  const m = /^([\s\S]+)#([0-9]{10})$/.exec(key);
  return m ? { sessionKey: m[1]!, seq: Number(m[2]) } : null;
}

/** A record of transcript.entries: its key, value (null: a tombstone) and `chain` header. */
export interface EntryRecord {
  key: string;
  value: string | Uint8Array | null;
  chain?: string | Uint8Array | null;
}

/** The latest record of each of `session`'s exact keys among `records` (in offset order), by seq. */
function latest(session: string, records: Iterable<EntryRecord>): [number, EntryRecord][] {
  const bySeq = new Map<number, EntryRecord>();
  for (const record of records) {
    const parsed = parseEntryKey(record.key);
    if (parsed?.sessionKey === session) bySeq.set(parsed.seq, record);
  }
  return [...bySeq].sort(([a], [b]) => a - b);
}

/** The live entries of `session` among `records` (in offset order), in seq order: the latest
 * value of each of its exact keys, when that is an entry of that session and seq. */
export function liveEntries(session: string, records: Iterable<EntryRecord>): unknown[] {
  const entries: unknown[] = [];
  for (const [seq, { value }] of latest(session, records)) {
    let e: unknown;
    try {
      e = value === null ? null : JSON.parse(typeof value === "string" ? value : Buffer.from(value).toString("utf8"));
    } catch {
      continue; // not JSON: the sink skips it too
    }
    const fields = e as { session_key?: unknown; seq?: unknown } | null;
    if (typeof e === "object" && fields?.session_key === session && fields.seq === seq) entries.push(e);
  }
  return entries;
}

/** The session's chain over its live values (every one, also those liveEntries leaves out). */
export function verifyEntries(session: string, records: Iterable<EntryRecord>): VerifiedSession {
  return verifySession(session, latest(session, records).flatMap(([seq, { value, chain }]) =>
    value === null ? [] : [{ seq, value: typeof value === "string" ? Buffer.from(value) : value, chain: chain ?? null }]));
}

const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

/** `text` with every character a terminal acts on written as its \u escape. */
export function visible(text: string): string {
  return text.replace(UNSAFE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

/** One entry as a JSON line that a terminal prints as text: the same JSON value. */
export const jsonLine = (entry: unknown): string => visible(JSON.stringify(entry));

async function main(raw: string, timeoutMs = 30_000): Promise<number> {
  const options = publisherOptionsFromEnv();
  // a full key names its own agent (the agent id given is then never used): refuse any other
  if (pyLower(pyStrip(raw.split(":")[0] ?? "")) !== "agent" || !raw.includes(":")) {
    throw new Error("give a full agent:<agent_id>:… key");
  }
  const session = canonicalSessionKey(raw, "a");
  const topic = `${options.topicPrefix ?? ""}transcript.entries`;
  const partition = partitionFor(session, options.partitions!);
  const kafka = new Kafka({ brokers: options.brokers, ssl: options.ssl, sasl: options.sasl, logLevel: logLevel.WARN });
  const admin = kafka.admin();
  await admin.connect();
  const offsets = await admin.fetchTopicOffsets(topic);
  const end = BigInt(offsets.find((o) => o.partition === partition)?.high ?? "0");
  const start = BigInt(offsets.find((o) => o.partition === partition)?.low ?? "0");
  const records: EntryRecord[] = [];
  if (end > start) {
    const groupId = `read-session-${randomUUID()}`;
    const consumer = kafka.consumer({ groupId, readUncommitted: false, partitionAssigners: [onePartition(topic, partition)] });
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    const done = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`offset ${end} not reached in ${timeoutMs} ms (an open transaction?)`)), timeoutMs);
      // after each fetched batch, records and transaction markers alike: stop at the end offset
      consumer.on(consumer.events.END_BATCH_PROCESS, ({ payload }) => {
        if (payload.partition === partition && BigInt(payload.lastOffset) + 1n >= end) {
          clearTimeout(timer);
          resolve();
        }
      });
    });
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ message }) => {
        const key = message.key?.toString() ?? "";
        if (BigInt(message.offset) < end && parseEntryKey(key)?.sessionKey === session) {
          const chain = message.headers?.[CHAIN_HEADER]; // repeated: none the worker wrote ("")
          records.push({ key, value: message.value, chain: Array.isArray(chain) ? (chain.length === 1 ? chain[0] : "") : chain });
        }
      },
    });
    try {
      await done;
    } finally {
      await consumer.disconnect();
      await admin.deleteGroups([groupId]).catch(() => undefined);
    }
  }
  await admin.disconnect();
  for (const e of liveEntries(session, records)) process.stdout.write(`${jsonLine(e)}\n`);
  const verified = verifyEntries(session, records);
  for (const f of verified.findings) process.stderr.write(`chain: seq ${f.seq}: ${f.problem}\n`);
  process.stderr.write(`chain: ${verified.chained} entries chained, ${verified.unchained} written before the chain, `
    + `${verified.findings.length} findings\n`);
  return verified.ok ? 0 : 3;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const [key] = process.argv.slice(2);
  if (key === undefined) {
    process.stderr.write("usage: read-session SESSION_KEY\n");
    process.exit(2);
  }
  main(key).then(
    (code) => process.exit(code),
    (e: unknown) => {
      process.stderr.write(`error: ${visible((e as Error).message)}\n`);
      process.exit(1);
    },
  );
}
