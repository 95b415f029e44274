// SessionReader on the real broker, without a worker: each test makes an input topic and an
// entries topic of its own (a UUID prefix under TRANSCRIPT_TOPIC_PREFIX), publishes input
// records with the publisher and writes entries and position records with kafkajs, as the
// worker would, then reads. tests/integration/test_typescript_partitions.py runs it
// (`npm run test:broker`) and deletes its topics after.
//
// No sleep stands for a wait: a record that must come after a read started waiting is
// written from the reader's onWaiting callback.
//
// Environment: KAFKA_BOOTSTRAP (default 127.0.0.1:9092), TRANSCRIPT_TOPIC_PREFIX (else one is made).
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";

import { type Admin, Kafka, logLevel, Partitioners, type Producer } from "kafkajs";

import {
  buildReset,
  ConfirmationPublisher,
  type Delivery,
  entryKey,
  LATEST,
  partitionFor,
  positionKey,
  positionValue,
  publisherOptionsFromEnv,
  type ReadWait,
  SessionReader,
  type SessionReaderOptions,
  StaleReadError,
} from "@transcript-owner/connector";

import { entryJson, sinkDb } from "../support/sink-db.js";

const options = publisherOptionsFromEnv();
const base = options.topicPrefix ?? `t${randomUUID().replaceAll("-", "").slice(0, 10)}.`;
const host = options.brokers[0]!.replace(/:\d+$/, "");
assert.ok(["127.0.0.1", "localhost", "[::1]"].includes(host), "tests only talk to a broker on loopback");
const kafka = new Kafka({ brokers: options.brokers, logLevel: logLevel.WARN });
const dir = mkdtempSync(join(tmpdir(), "reader-"));
after(() => rmSync(dir, { recursive: true, force: true }));

interface World {
  prefix: string;
  input: string;
  entries: string;
  layout: string;
  admin: Admin;
  producer: Producer;
  publisher: ConfirmationPublisher;
  /** Publishes a reset of `session` (to its home partition); the publisher's Delivery. */
  publish(session: string): Promise<Delivery>;
  /** Writes records to transcript.entries partition `partition`, as the worker does (acknowledged). */
  write(partition: number, records: { key: string; value: Buffer | string | null; chain?: string }[]): Promise<void>;
  /** A position record of `partition`: every input record below `inputOffset` decided. */
  position(partition: number, inputOffset: number | bigint, at?: Date): Promise<void>;
  reader(extra?: Partial<SessionReaderOptions>): Promise<SessionReader>;
}

/**
 * Topics of this test (input and entries: `partitions` each, or `[input, entries]`; with
 * `layout`, transcript.layout holding those keys, as `transcript-owner repartition` writes them:
 * a move's record, then its markers in a transaction); deleted after.
 */
async function withWorld(partitions: number | [number, number], fn: (w: World) => Promise<void>,
  layout?: { moves: string[]; markers: string[] }): Promise<void> {
  const [nInput, nEntries] = typeof partitions === "number" ? [partitions, partitions] : partitions;
  const prefix = `${base}r${randomUUID().replaceAll("-", "").slice(0, 8)}.`;
  const input = `${prefix}delivery.confirmations`;
  const entries = `${prefix}transcript.entries`;
  const layoutTopic = `${prefix}transcript.layout`;
  const admin = kafka.admin();
  await admin.connect();
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner, allowAutoTopicCreation: false });
  const publisher = new ConfirmationPublisher({ ...options, topic: input, partitions: nInput });
  const readers: SessionReader[] = [];
  try {
    assert.ok(await admin.createTopics({
      topics: [{ topic: input, numPartitions: nInput, replicationFactor: 1 }, { topic: entries, numPartitions: nEntries, replicationFactor: 1 }],
      waitForLeaders: false, // kafkajs's own wait fails now and then on a partition not hosted yet
    }));
    await leaders(admin, [input, entries]);
    await producer.connect();
    if (layout) {
      assert.ok(await admin.createTopics({ topics: [{ topic: layoutTopic, numPartitions: 1, replicationFactor: 1 }], waitForLeaders: false }));
      await leaders(admin, [layoutTopic]);
      await producer.send({ topic: layoutTopic, acks: -1, messages: layout.moves.map((key) => ({ key, value: "{}" })) });
      const tx = kafka.producer({ transactionalId: `${prefix}repartition`, idempotent: true, maxInFlightRequests: 1 });
      await tx.connect();
      const marking = await tx.transaction();
      await marking.send({ topic: layoutTopic, messages: layout.markers.map((key) => ({ key, value: "{}" })) });
      await marking.commit(); // the topic ends with the transaction's marker
      await tx.disconnect();
    }
    await publisher.connect();
    const world: World = {
      prefix, input, entries, layout: layoutTopic, admin, producer, publisher,
      publish: (session) => publisher.publish(buildReset({ session_key: session, reset_at: "2026-12-04T10:00:00Z" })),
      async write(partition, records) {
        await producer.send({
          topic: entries, acks: -1,
          messages: records.map(({ key, value, chain }) => ({ key, value, partition, ...(chain ? { headers: { chain } } : {}) })),
        });
      },
      position: (partition, inputOffset, at = new Date()) =>
        world.write(partition, [{ key: positionKey(partition), value: positionValue(partition, inputOffset, 0, at) }]),
      async reader(extra = {}) {
        const reader = new SessionReader({ brokers: options.brokers, topicPrefix: prefix, ...extra });
        readers.push(reader);
        await reader.connect();
        return reader;
      },
    };
    await fn(world);
  } finally {
    for (const reader of readers) await reader.close();
    await publisher.close();
    await producer.disconnect();
    await admin.deleteTopics({ topics: layout ? [input, entries, layoutTopic] : [input, entries] }).catch(() => undefined);
    await admin.disconnect();
  }
}

/** Until every partition of `topics` has a leader (set-up only: what the tests wait for is never polled). */
async function leaders(admin: Admin, topics: string[]): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      const meta = await admin.fetchTopicMetadata({ topics });
      if (meta.topics.every((t) => t.partitions.length > 0 && t.partitions.every((p) => p.leader >= 0))) return;
    } catch (e) {
      if (Date.now() > deadline) throw e;
    }
    assert.ok(Date.now() < deadline, `no leaders for ${topics.join(", ")} in 30 s`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** A session key of agent a whose home under `n` partitions is `home` (and not `not`). */
function keyAt(n: number, home: number, tag = "s"): string {
  for (let i = 0; i < 10_000; i++) {
    const key = `agent:a:${tag}-${i}`;
    if (partitionFor(key, n) === home) return key;
  }
  throw new Error(`no key of partition ${home} of ${n}`);
}

const texts = (read: { entries: readonly { entryJson: string }[] }): string[] => read.entries.map((e) => JSON.parse(e.entryJson).text);
const entry = (session: string, seq: number, text: string): { key: string; value: string } =>
  ({ key: entryKey(session, seq), value: entryJson(session, seq, text) });

test("latest returns at once when the position equals the input's last stable offset (not its high watermark)", { timeout: 60_000 }, async () => {
  await withWorld(4, async (w) => {
    const K = keyAt(4, 2);
    for (let i = 0; i < 3; i++) assert.equal((await w.publish(K)).partition, 2);
    await w.write(2, [entry(K, 1, "one"), entry(keyAt(4, 2, "other"), 1, "another chat"), entry(K, 2, "two")]);
    await w.position(2, 3);
    const waits: ReadWait[] = [];
    const reader = await w.reader({ onWaiting: (wait) => waits.push(wait) });
    const first = await reader.read(K, LATEST, { timeoutMs: 10_000 });
    assert.deepEqual(texts(first), ["one", "two"]);
    assert.equal(first.position.inputOffset, 3n);
    assert.equal(first.partition, 2);
    // a transaction open on the input partition: past the high watermark, not the LSO
    const tx = kafka.producer({ transactionalId: `${w.prefix}open`, idempotent: true, maxInFlightRequests: 1 });
    await tx.connect();
    const open = await tx.transaction();
    await open.send({ topic: w.input, messages: [{ key: K, value: "{}", partition: 2 }] });
    const high = (await w.admin.fetchTopicOffsets(w.input)).find((o) => o.partition === 2)!;
    assert.equal(high.high, "3", "kafkajs's fetchTopicOffsets gives the last stable offset");
    waits.length = 0;
    const started = performance.now();
    const second = await reader.read(K, LATEST, { timeoutMs: 10_000 });
    const ms = performance.now() - started;
    assert.deepEqual(waits, []); // it never waited
    assert.ok(ms < 500, `${ms} ms`);
    assert.deepEqual(texts(second), ["one", "two"]);
    await open.abort();
    await tx.disconnect();
    // closing deletes the reader's consumer group
    const groupId = reader.groupId!;
    assert.ok((await w.admin.listGroups()).groups.some((g) => g.groupId === groupId));
    await reader.close();
    assert.ok(!(await w.admin.listGroups()).groups.some((g) => g.groupId === groupId));
  });
});

test("stale at the deadline: the partition, both positions, the position's age", { timeout: 60_000 }, async () => {
  await withWorld(4, async (w) => {
    const K = keyAt(4, 1);
    for (let i = 0; i < 3; i++) await w.publish(K);
    await w.position(1, 1, new Date(Date.now() - 5000));
    const reader = await w.reader();
    const started = performance.now();
    await assert.rejects(reader.read(K, LATEST, { timeoutMs: 1500 }), (e: unknown) => {
      assert.ok(e instanceof StaleReadError, String(e));
      assert.deepEqual([e.partition, e.reached, e.needed, e.reason], [1, 1n, 3n, null]);
      assert.ok(e.ageS !== null && e.ageS >= 5 && e.ageS < 30, String(e.ageS));
      assert.match(e.message, /^stale read: partition 1 reached input offset 1, needed 3; the worker's last position there is \d+\.\ds old$/);
      return true;
    });
    const ms = performance.now() - started;
    assert.ok(ms >= 1490 && ms < 4000, `${ms} ms`);
    // no position at all on another partition: no age
    const other = keyAt(4, 3);
    const delivery = await w.publish(other);
    await assert.rejects(reader.read(other, delivery, { timeoutMs: 300 }), (e: unknown) => e instanceof StaleReadError
      && e.message === `stale read: partition 3 reached input offset 0, needed ${BigInt(delivery.offset) + 1n}; `
        + "the worker has written no position there");
  });
});

test("a read waiting for its delivery returns as soon as the position record is written", { timeout: 60_000 }, async () => {
  await withWorld(4, async (w) => {
    const K = keyAt(4, 0);
    const d0 = await w.publish(K);
    const d1 = await w.publish(K);
    await w.write(0, [entry(K, 1, "one")]);
    await w.position(0, BigInt(d0.offset) + 1n);
    let acked = 0;
    let written: Promise<void> | undefined;
    const waits: ReadWait[] = [];
    const reader = await w.reader({
      onWaiting: (wait) => {
        waits.push(wait);
        // the worker decides d1: its entry, then its position, in one go
        written = w.write(0, [entry(K, 2, "two"), { key: positionKey(0), value: positionValue(0, BigInt(d1.offset) + 1n, 0, new Date()) }])
          .then(() => { acked = performance.now(); });
      },
    });
    const read = await reader.read(K, d1, { timeoutMs: 20_000 });
    const returned = performance.now();
    await written;
    assert.deepEqual(waits.map((x) => [x.partition, x.needed]), [[0, BigInt(d1.offset) + 1n]]);
    assert.deepEqual(texts(read), ["one", "two"]);
    assert.equal(read.position.inputOffset, BigInt(d1.offset) + 1n);
    assert.ok(returned - acked < 1000, `returned ${returned - acked} ms after the position was acknowledged`);
  });
});

test("a delivery on a partition other than the session's home takes two steps", { timeout: 60_000 }, async () => {
  await withWorld(4, async (w) => {
    const K = keyAt(4, 1);
    const dp = 3; // where a publisher that counted 2 partitions (or a key not canonical) put it
    const [sent] = await w.producer.send({ topic: w.input, acks: -1, messages: [{ key: K, value: "{}", partition: dp }] });
    const d = BigInt(sent!.baseOffset!);
    await w.publish(K); // input partition 1: LSO 1
    const waits: [number, bigint][] = [];
    const reader = await w.reader({
      onWaiting: ({ partition, needed }) => {
        waits.push([partition, needed]);
        // the worker: first moves dp past d (re-keying the record home), then decides it at home
        if (partition === dp) void w.position(dp, d + 1n);
        else void w.write(1, [entry(K, 1, "re-keyed"), { key: positionKey(1), value: positionValue(1, 1, 0, new Date()) }]);
      },
    });
    const read = await reader.read(K, { partition: dp, offset: String(d) }, { timeoutMs: 20_000 });
    assert.deepEqual(waits, [[dp, d + 1n], [1, 1n]]);
    assert.deepEqual(texts(read), ["re-keyed"]);
    assert.equal(read.partition, 1);
  });
});

test("latest after a repartition waits for the session's home under the earlier count first (transcript.layout), from the topic and a sink database", { timeout: 60_000 }, async () => {
  await withWorld(4, async (w) => {
    const K = Array.from({ length: 100 }, (_, i) => `agent:a:moved-${i}`).find((k) => partitionFor(k, 2) !== partitionFor(k, 4))!;
    const old = partitionFor(K, 2);
    const home = partitionFor(K, 4);
    // a publisher that has not yet seen the move 2 -> 4 sends to the old home; an up-to-date one home
    await w.producer.send({ topic: w.input, acks: -1, messages: [{ key: K, value: "{}", partition: old }] });
    assert.equal((await w.publish(K)).partition, home);
    const waits: [number, bigint][] = [];
    const reader = await w.reader({
      onWaiting: ({ partition, needed }) => {
        waits.push([partition, needed]);
        // the worker: moves old's position past the record, re-keying it home; then decides it there
        if (partition === old) void w.position(old, 1);
        else void w.write(home, [entry(K, 1, "re-keyed"), { key: positionKey(home), value: positionValue(home, 1, 0, new Date()) }]);
      },
    });
    const read = await reader.read(K, LATEST, { timeoutMs: 20_000 });
    assert.deepEqual(waits, [[old, 1n], [home, 1n]]);
    assert.deepEqual([read.partition, texts(read)], [home, ["re-keyed"]]);
    // a delivery-bound read is unchanged: its own partition only
    waits.length = 0;
    assert.deepEqual(texts(await reader.read(K, { partition: home, offset: "0" }, { timeoutMs: 10_000 })), ["re-keyed"]);
    assert.equal(waits.length, 0);

    // a sink database: the layout read by a consumer of its own, in a group deleted after
    const { path, db } = sinkDb(dir, `${randomUUID()}.db`);
    try {
      const setPosition = db.prepare("INSERT OR REPLACE INTO positions VALUES (?, ?, ?, 0, ?, 0)");
      db.prepare("INSERT INTO entries VALUES (?, 0, 1, 'e1', 's1', ?, NULL)").run(K, entryJson(K, 1, "re-keyed"));
      setPosition.run(w.entries, home, 1, new Date().toISOString());
      setPosition.run(w.entries, old, 0, new Date().toISOString());
      const groupIdPrefix = `${w.prefix}layout-reader-`;
      const fromDb = await w.reader({
        sinkDatabase: path, groupIdPrefix,
        onWaiting: ({ partition, needed }) => {
          waits.push([partition, needed]);
          setPosition.run(w.entries, old, 1, new Date().toISOString());
        },
      });
      assert.ok(!(await w.admin.listGroups()).groups.some((g) => g.groupId.startsWith(groupIdPrefix)));
      assert.deepEqual(texts(await fromDb.read(K, LATEST, { timeoutMs: 10_000 })), ["re-keyed"]);
      assert.deepEqual(waits, [[old, 1n]]);
    } finally {
      db.close();
    }
  }, { moves: ["move/2-4"], markers: ["move/2-4/0", "move/2-4/1"] });
});

test("while the partition counts differ, a read is stale with the repartition as its reason", { timeout: 60_000 }, async () => {
  await withWorld([4, 2], async (w) => {
    const K = keyAt(4, 3);
    await w.publish(K);
    const reader = await w.reader();
    const started = performance.now();
    await assert.rejects(reader.read(K, LATEST, { timeoutMs: 1500 }), (e: unknown) => {
      assert.ok(e instanceof StaleReadError, String(e));
      assert.deepEqual([e.partition, e.reached, e.needed], [3, 0n, 1n]);
      assert.equal(e.reason, "a repartition is in progress: delivery.confirmations has 4 partitions, transcript.entries 2");
      assert.ok(e.message.endsWith("; a repartition is in progress: delivery.confirmations has 4 partitions, transcript.entries 2"));
      return true;
    });
    assert.ok(performance.now() - started >= 1490);
  });
});

test("a session not held is read from the partition's start; one held follows; aborted entries never show", { timeout: 60_000 }, async () => {
  await withWorld(2, async (w) => {
    const A = keyAt(2, 0, "a");
    const B = keyAt(2, 0, "b");
    await w.publish(A);
    await w.write(0, [entry(B, 1, "b one"), entry(A, 1, "a one"), entry(B, 2, "b two")]);
    await w.position(0, 1);
    const reader = await w.reader({ sessionsPerPartition: 1 });
    assert.deepEqual(texts(await reader.read(A, LATEST, { timeoutMs: 10_000 })), ["a one"]);
    // an entry of A in an aborted transaction, then a committed one
    const tx = kafka.producer({ transactionalId: `${w.prefix}worker`, idempotent: true, maxInFlightRequests: 1 });
    await tx.connect();
    const aborted = await tx.transaction();
    await aborted.send({ topic: w.entries, messages: [{ ...entry(A, 2, "aborted"), partition: 0 }] });
    await aborted.abort();
    const committed = await tx.transaction();
    await committed.send({ topic: w.entries, messages: [{ ...entry(A, 2, "a two"), partition: 0 }] });
    await committed.commit();
    await tx.disconnect();
    await w.publish(A);
    await w.position(0, 2);
    assert.deepEqual(texts(await reader.read(A, LATEST, { timeoutMs: 10_000 })), ["a one", "a two"]);
    // B was never held (and holding it forgets A: one session per partition): read from the start
    assert.deepEqual(texts(await reader.read(B, LATEST, { timeoutMs: 10_000 })), ["b one", "b two"]);
    assert.deepEqual(texts(await reader.read(A, LATEST, { timeoutMs: 10_000 })), ["a one", "a two"]);
  });
});

test("from a sink database: at once when reached, stale at the deadline, a waiting read returns when the sink writes", { timeout: 60_000 }, async () => {
  await withWorld(4, async (w) => {
    const K = keyAt(4, 2);
    for (let i = 0; i < 2; i++) await w.publish(K);
    const { path, db } = sinkDb(dir, `${randomUUID()}.db`);
    try {
      const insert = db.prepare("INSERT INTO entries VALUES (?, 0, ?, ?, ?, ?, NULL)");
      const setPosition = db.prepare("INSERT OR REPLACE INTO positions VALUES (?, ?, ?, 0, ?, 0)");
      insert.run(K, 1, "e1", "s1", entryJson(K, 1, "one"));
      setPosition.run(w.entries, 2, 1, new Date(Date.now() - 3000).toISOString());
      const reader = await w.reader({
        sinkDatabase: path,
        onWaiting: () => {
          db.transaction(() => {
            insert.run(K, 2, "e2", "s2", entryJson(K, 2, "two"));
            setPosition.run(w.entries, 2, 2, new Date().toISOString());
          })();
        },
      });
      assert.equal(reader.groupId, null);
      const delivered = await reader.read(K, { partition: 2, offset: "0" }, { timeoutMs: 5000 });
      assert.deepEqual(texts(delivered), ["one"]);
      const latest = await reader.read(K, LATEST, { timeoutMs: 5000 }); // waits: the sink writes from onWaiting
      assert.deepEqual(texts(latest), ["one", "two"]);
      assert.equal(latest.position.inputOffset, 2n);
      await w.publish(K);
      const stale = new SessionReader({ brokers: options.brokers, topicPrefix: w.prefix, sinkDatabase: path });
      await stale.connect();
      try {
        await assert.rejects(stale.read(K, LATEST, { timeoutMs: 800 }), (e: unknown) => e instanceof StaleReadError
          && e.partition === 2 && e.reached === 2n && e.needed === 3n && e.ageS !== null && e.ageS < 30);
      } finally {
        await stale.close();
      }
    } finally {
      db.close();
    }
  });
});
