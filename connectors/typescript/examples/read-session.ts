// Read one session's transcript as a read_committed reader sees it now, and print its entries
// as JSON lines, in order.
//
//     node build/examples/read-session.js 'agent:ops:telegram:direct:u1'
//
// Configured like the worker (KAFKA_BOOTSTRAP, TRANSCRIPT_TOPIC_PREFIX, TRANSCRIPT_PARTITIONS, and
// the KAFKA_SECURITY_PROTOCOL / SASL / SSL variables). A session's entries are all in one partition
// of transcript.entries, partitionFor(key, N), keyed `<session_key>#<seq>`: the reader reads that
// partition only, from its start to the end offset it had when the reader started. kafkajs has no
// manual assignment, so it joins a throw-away consumer group whose assignor hands it that one
// partition, commits nothing, and deletes the group when done.
import { randomUUID } from "node:crypto";

import { AssignerProtocol, Kafka, logLevel, type PartitionAssigner } from "kafkajs";

import { canonicalSessionKey, partitionFor, publisherOptionsFromEnv } from "@transcript-owner/connector";

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

async function main(raw: string, timeoutMs = 30_000): Promise<number> {
  const options = publisherOptionsFromEnv();
  const session = canonicalSessionKey(raw, "");
  if (session.startsWith("agent::")) throw new Error("give a full agent:<agent_id>:… key");
  const topic = `${options.topicPrefix ?? ""}transcript.entries`;
  const partition = partitionFor(session, options.partitions!);
  const kafka = new Kafka({ brokers: options.brokers, ssl: options.ssl, sasl: options.sasl, logLevel: logLevel.WARN });
  const admin = kafka.admin();
  await admin.connect();
  const offsets = await admin.fetchTopicOffsets(topic);
  const end = BigInt(offsets.find((o) => o.partition === partition)?.high ?? "0");
  const start = BigInt(offsets.find((o) => o.partition === partition)?.low ?? "0");
  const entries: unknown[] = [];
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
        if (BigInt(message.offset) < end && key.startsWith(`${session}#`) && message.value) {
          entries.push(JSON.parse(message.value.toString()));
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
  for (const e of entries) process.stdout.write(`${JSON.stringify(e)}\n`);
  return 0;
}

const [key] = process.argv.slice(2);
if (key === undefined) {
  process.stderr.write("usage: read-session SESSION_KEY\n");
  process.exit(2);
}
main(key).then(
  (code) => process.exit(code),
  (e: unknown) => {
    process.stderr.write(`error: ${(e as Error).message}\n`);
    process.exit(1);
  },
);
