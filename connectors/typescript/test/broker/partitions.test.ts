// On the real broker, without a worker: a topic grown under a connected publisher, as
// `transcript-owner repartition` grows the input topic last (CreatePartitions), and the advice
// connect() gives for another count. tests/integration/test_typescript_partitions.py runs it
// (`npm run test:broker`) with a prefix of its own and deletes its topics after.
//
// Environment: KAFKA_BOOTSTRAP (default 127.0.0.1:9092), TRANSCRIPT_TOPIC_PREFIX (else one is made).
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { mock, test } from "node:test";

import { Kafka, logLevel } from "kafkajs";

import {
  buildReset,
  ConfirmationPublisher,
  type Delivery,
  partitionFor,
  PublishError,
  publisherOptionsFromEnv,
  recordKey,
} from "@transcript-owner/connector";

const options = publisherOptionsFromEnv();
const prefix = options.topicPrefix ?? `t${randomUUID().replaceAll("-", "").slice(0, 10)}.`;
const host = options.brokers[0]!.replace(/:\d+$/, "");
assert.ok(["127.0.0.1", "localhost", "[::1]"].includes(host), "tests only talk to a broker on loopback");

/** A topic of this run with `partitions` partitions; deleted when `fn` is done. */
async function withTopic(name: string, partitions: number, fn: (topic: string, grow: (to: number) => Promise<void>) => Promise<void>): Promise<void> {
  const admin = new Kafka({ brokers: options.brokers, logLevel: logLevel.WARN }).admin();
  const topic = `${prefix}${name}`;
  await admin.connect();
  try {
    assert.ok(await admin.createTopics({ topics: [{ topic, numPartitions: partitions, replicationFactor: 1 }], waitForLeaders: true }));
    await fn(topic, async (to) => {
      await admin.createPartitions({ topicPartitions: [{ topic, count: to }] });
    });
  } finally {
    await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
    await admin.disconnect();
  }
}

/** A session key whose home under 4 partitions is not its home under 2. */
function movingKey(): string {
  for (let i = 0; i < 100; i++) {
    const key = `agent:ops:main-${i}`;
    if (partitionFor(key, 4) !== partitionFor(key, 2)) return key;
  }
  throw new Error("no key moves between 2 and 4 partitions");
}

test("a topic grown while connected is adopted, logged once", { timeout: 120_000 }, async () => {
  await withTopic("delivery.confirmations", 2, async (topic, grow) => {
    const record = buildReset({ session_key: movingKey(), reset_at: "2026-05-01T12:00:00Z" });
    const key = recordKey(record);
    // kafkajs's logger writes INFO lines with console.info: kept here, not printed
    const info = mock.method(console, "info", () => undefined);
    const publisher = new ConfirmationPublisher({ ...options, topic, partitions: 2, partitionsCheckMs: 50, logLevel: "info" });
    const acked = (d: Delivery): Delivery => {
      assert.notEqual(d.offset, "-1", `not acknowledged: ${JSON.stringify(d)}`); // never dropped on the way
      return d;
    };
    try {
      await publisher.connect();
      assert.equal(acked(await publisher.publish(record)).partition, partitionFor(key, 2));
      assert.equal(publisher.partitions, 2);
      await grow(4);
      const deadline = Date.now() + 60_000;
      let delivery = acked(await publisher.publish(record));
      while (delivery.partition !== partitionFor(key, 4)) {
        assert.equal(delivery.partition, partitionFor(key, 2)); // the old home, until noticed
        assert.ok(Date.now() < deadline, "the grown topic was not noticed in 60 s");
        delivery = acked(await publisher.publish(record));
      }
      assert.equal(publisher.partitions, 4);
      // from then on, every record goes to its home under 4
      const deliveries = (await publisher.publishAll([record, record, record])).map(acked);
      assert.deepEqual(deliveries.map((d) => d.partition), [4, 4, 4].map((n) => partitionFor(key, n)));
    } finally {
      await publisher.close();
      info.mock.restore();
    }
    const grew = info.mock.calls.map((c) => String(c.arguments[0])).filter((line) => line.includes(" grew from "));
    assert.equal(grew.length, 1, grew.join("\n"));
    const logged = JSON.parse(grew[0]!) as { level: string; message: string };
    assert.equal(logged.level, "INFO");
    assert.equal(logged.message,
      `[ConfirmationPublisher] topic ${topic} grew from 2 to 4 partitions (transcript-owner repartition): publishing with 4`);
  });
});

test("connect() says what to do about another count", { timeout: 60_000 }, async () => {
  await withTopic("other.delivery.confirmations", 4, async (topic) => {
    const refused = new ConfirmationPublisher({ ...options, topic, partitions: 2 });
    await assert.rejects(refused.connect(), (e: unknown) => e instanceof PublishError && e.message ===
      `topic ${topic} has 4 partitions, the worker expects 2 (TRANSCRIPT_PARTITIONS): if the deployment was ` +
      "repartitioned (transcript-owner repartition), set TRANSCRIPT_PARTITIONS=4, or unset it to take the topic's count");
    const { partitions: _, ...unset } = options;
    const taken = new ConfirmationPublisher({ ...unset, topic });
    try {
      await taken.connect();
      assert.equal(taken.partitions, 4);
    } finally {
      await taken.close();
    }
  });
});
