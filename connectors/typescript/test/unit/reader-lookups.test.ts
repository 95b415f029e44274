// SessionReader's lookups without a broker: a stand-in for its Kafka lookups (partition counts,
// last stable offsets, transcript.layout; SessionReader.makeCluster overridden) and a sink
// database as the source. LATEST after a repartition waits for the session's earlier homes
// first; Kafka not answering is waited out (asked again about once a second), then a stale
// read naming what did not answer; a refusal is a ReadError at once. One lookup goes through
// kafkajs itself, to a port on 127.0.0.1 nothing listens on.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";

import kafkajs from "kafkajs";

import {
  LATEST,
  partitionFor,
  ReadError,
  type ReaderCluster,
  type ReadWait,
  SessionReader,
  type SessionReaderOptions,
  StaleReadError,
} from "@transcript-owner/connector";

import { entryJson, sinkDb } from "../support/sink-db.js";

const dir = mkdtempSync(join(tmpdir(), "reader-lookups-"));
after(() => rmSync(dir, { recursive: true, force: true }));

const INPUT = "p.delivery.confirmations";
const ENTRIES = "p.transcript.entries";
const LAYOUT = "p.transcript.layout";
const NOBODY = "127.0.0.1:9"; // never connected to: the lookups are the stand-in's
let dbs = 0;

/** What the reader asks Kafka, answered from fields; `fail` makes a lookup throw (each time it is asked). */
class FakeCluster implements ReaderCluster {
  input = 4;
  entries = 4;
  layout: (string | null)[] | null = null; // null: no such topic
  lsos = new Map<number, bigint>();
  fail: { counts?: () => Error | null; lso?: () => Error | null; layout?: () => Error | null } = {};
  lso?: (topic: string, partition: number) => Promise<bigint>;
  asked = { counts: [] as number[], lso: [] as number[], layoutKeys: 0 };

  async connect(): Promise<void> {}

  async partitionCounts(topics: readonly string[]): Promise<Map<string, number>> {
    this.asked.counts.push(performance.now());
    const e = this.fail.counts?.();
    if (e) throw e;
    return new Map([[topics[0]!, this.input], [topics[1]!, this.entries]]);
  }

  async lastStableOffset(topic: string, partition: number): Promise<bigint> {
    assert.equal(topic, INPUT);
    this.asked.lso.push(partition);
    const e = this.fail.lso?.();
    if (e) throw e;
    if (this.lso) return this.lso(topic, partition);
    return this.lsos.get(partition) ?? 0n;
  }

  async layoutEnd(topic: string): Promise<bigint | null> {
    assert.equal(topic, LAYOUT);
    const e = this.fail.layout?.();
    if (e) throw e;
    return this.layout === null ? null : BigInt(this.layout.length);
  }

  async layoutKeys(topic: string, end: bigint, groupId: string): Promise<(string | null)[]> {
    assert.equal(topic, LAYOUT);
    assert.equal(end, BigInt(this.layout!.length));
    assert.match(groupId, /^p\.transcript-owner\.reader-[0-9a-f-]{36}$/);
    this.asked.layoutKeys += 1;
    return this.layout!;
  }

  async deleteGroup(): Promise<void> {}
  async close(): Promise<void> {}
}

class FakeReader extends SessionReader {
  constructor(
    options: SessionReaderOptions,
    private readonly fake: FakeCluster,
    private readonly real?: (cluster: ReaderCluster) => void,
  ) {
    super(options);
  }

  protected override makeCluster(): ReaderCluster {
    this.real?.(super.makeCluster());
    return this.fake;
  }
}

/** A sink database with the positions given (`partition -> input offset`) and entries of `session`. */
function database(positions: Record<number, number>, session?: string, texts: string[] = []) {
  const { path, db } = sinkDb(dir, `db${dbs++}.db`);
  const setPosition = (partition: number, inputOffset: number, at = new Date()): void => {
    db.prepare("INSERT OR REPLACE INTO positions VALUES (?, ?, ?, 0, ?, 0)").run(ENTRIES, partition, inputOffset, at.toISOString());
  };
  for (const [p, o] of Object.entries(positions)) setPosition(Number(p), o);
  texts.forEach((text, i) => db.prepare("INSERT INTO entries VALUES (?, 0, ?, ?, ?, ?, NULL)").run(session, i + 1, `e${i}`, `s${i}`, entryJson(session!, i + 1, text)));
  return { path, db, setPosition };
}

/** A session key whose home under 2 partitions is not its home under 4 (nor under 8, when asked). */
function moving(alsoEight = false): string {
  for (let i = 0; ; i++) {
    const k = `agent:a:m${i}`;
    const homes = new Set([partitionFor(k, 2), partitionFor(k, 4), ...(alsoEight ? [partitionFor(k, 8)] : [])]);
    if (homes.size === (alsoEight ? 3 : 2)) return k;
  }
}

// kafkajs is CommonJS: its error classes come off its default export
const { KafkaJSConnectionError, KafkaJSNumberOfRetriesExceeded, KafkaJSProtocolError, KafkaJSRequestTimeoutError } = kafkajs;
const texts = (read: { entries: readonly { entryJson: string }[] }): string[] => read.entries.map((e) => JSON.parse(e.entryJson).text);
const connectionError = (): Error => new KafkaJSNumberOfRetriesExceeded(
  new KafkaJSConnectionError("Connection error: connect ECONNREFUSED 127.0.0.1:9", { broker: NOBODY, code: "ECONNREFUSED" } as never),
  { retryCount: 2, retryTime: 400 } as never);
const protocolError = (type: string, message: string, retriable: boolean): Error =>
  new KafkaJSProtocolError(Object.assign(new Error(message), { type, code: 0, retriable }));

async function reader(fake: FakeCluster, path: string, extra: Partial<SessionReaderOptions> = {}): Promise<SessionReader> {
  const r = new FakeReader({ brokers: [NOBODY], topicPrefix: "p.", sinkDatabase: path, ...extra }, fake);
  await r.connect();
  return r;
}

describe("LATEST after a repartition", () => {
  test("waits for the session's home under the earlier count first, then home's; a delivery-bound read is unchanged", async () => {
    const K = moving();
    const old = partitionFor(K, 2);
    const home = partitionFor(K, 4);
    const fake = new FakeCluster();
    fake.layout = ["move/2-4", "move/2-4/0", "move/2-4/1", "move/4-8"]; // 4 -> 8 not ended: the input has 4
    fake.lsos = new Map([[old, 5n], [home, 2n]]);
    const { path, db, setPosition } = database({ [old]: 4, [home]: 2 }, K, ["one", "two"]);
    const waits: [number, bigint, bigint][] = [];
    const r = await reader(fake, path, {
      onWaiting: ({ partition, needed, reached }: ReadWait) => {
        waits.push([partition, needed, reached]);
        setPosition(old, 5); // the worker re-keys what the old publisher sent, moving old's position
      },
    });
    try {
      assert.equal(fake.asked.layoutKeys, 1); // read at connect, with the counts
      const read = await r.read(K, LATEST, { timeoutMs: 5000 });
      assert.deepEqual(waits, [[old, 5n, 4n]]);
      assert.deepEqual(fake.asked.lso, [old, home]); // each LSO taken when its step starts
      assert.deepEqual([read.partition, read.position.inputOffset, texts(read)], [home, 2n, ["one", "two"]]);
      fake.asked.lso = [];
      const delivered = await r.read(K, { partition: home, offset: "1" }, { timeoutMs: 5000 });
      assert.deepEqual([fake.asked.lso, texts(delivered)], [[], ["one", "two"]]);
      assert.equal(fake.asked.layoutKeys, 1); // the input's count has not changed
    } finally {
      await r.close();
      db.close();
    }
  });

  test("the layout is read again when the input's partition count changes; none when the topic is missing", async () => {
    const K = moving(true);
    const fake = new FakeCluster();
    fake.layout = null;
    const all = Object.fromEntries(Array.from({ length: 8 }, (_, p) => [p, 10]));
    const { path, db } = database(all, K, ["one"]);
    const r = await reader(fake, path);
    try {
      await r.read(K, LATEST, { timeoutMs: 5000 });
      assert.deepEqual([fake.asked.layoutKeys, fake.asked.lso], [0, [partitionFor(K, 4)]]);
      // the worker moved 4 -> 8: the layout has the move, then both topics have 8 partitions
      fake.layout = ["move/2-4", "move/4-8", "move/4-8/3"];
      fake.input = 8;
      fake.entries = 8;
      fake.asked.lso = [];
      await new Promise((resolve) => setTimeout(resolve, 1050)); // the counts are asked at most once a second
      await r.read(K, LATEST, { timeoutMs: 5000 });
      assert.equal(fake.asked.layoutKeys, 1);
      assert.deepEqual(fake.asked.lso, [partitionFor(K, 2), partitionFor(K, 4), partitionFor(K, 8)]);
    } finally {
      await r.close();
      db.close();
    }
  });
});

describe("Kafka not answering", () => {
  test("is waited out: the read asks again about once a second and returns once Kafka answers", async () => {
    const K = "agent:a:main";
    const home = partitionFor(K, 4);
    const fake = new FakeCluster();
    fake.lsos = new Map([[home, 1n]]);
    let failures = 2;
    const at: number[] = [];
    fake.fail.lso = () => {
      at.push(performance.now());
      return failures-- > 0 ? new KafkaJSRequestTimeoutError("Request ListOffsets(key: 2, version: 3) timed out") : null;
    };
    const { path, db } = database({ [home]: 1 }, K, ["one"]);
    const r = await reader(fake, path);
    try {
      const started = performance.now();
      const read = await r.read(K, LATEST, { timeoutMs: 10_000 });
      const ms = performance.now() - started;
      assert.deepEqual(texts(read), ["one"]);
      assert.equal(at.length, 3);
      for (const gap of [at[1]! - at[0]!, at[2]! - at[1]!]) assert.ok(gap >= 950 && gap < 1500, `asked again after ${gap} ms`);
      assert.ok(ms >= 1900 && ms < 4000, `${ms} ms`);
    } finally {
      await r.close();
      db.close();
    }
  });

  test("at the deadline: stale, at the session's home, the reason what did not answer", async () => {
    const K = "agent:a:main";
    const home = partitionFor(K, 4);
    const fake = new FakeCluster();
    const { path, db } = database({ [home]: 3 }, K, ["one"]);
    const r = await reader(fake, path);
    try {
      fake.fail.counts = connectionError;
      fake.fail.lso = connectionError;
      fake.asked.counts = [];
      const started = performance.now();
      await assert.rejects(r.read(K, LATEST, { timeoutMs: 2500 }), (e: unknown) => {
        assert.ok(e instanceof StaleReadError, String(e));
        assert.equal(e.reason, "cannot read the topics' metadata: Kafka at 127.0.0.1:9 did not answer: "
          + "KafkaJSConnectionError: Connection error: connect ECONNREFUSED 127.0.0.1:9");
        assert.deepEqual([e.partition, e.reached, e.needed], [home, 3n, 0n]);
        assert.match(e.message, new RegExp(`^stale read: partition ${home} reached input offset 3, needed 0; the worker's last `
          + "position there is \\d+\\.\\ds old; cannot read the topics' metadata: Kafka at 127\\.0\\.0\\.1:9 did not answer: "));
        return true;
      });
      const ms = performance.now() - started;
      assert.ok(ms >= 2490 && ms < 3500, `${ms} ms`);
      // the counts of connect were fresh at first; then asked again about once a second
      assert.ok(fake.asked.counts.length >= 1 && fake.asked.counts.length <= 3, String(fake.asked.counts.length));
    } finally {
      await r.close();
      db.close();
    }
  });

  test("a lookup unanswered at the deadline: stale, saying so", async () => {
    const K = "agent:a:main";
    const home = partitionFor(K, 4);
    const fake = new FakeCluster();
    fake.lso = () => new Promise(() => undefined); // never answers
    const { path, db } = database({ [home]: 3 }, K, ["one"]);
    const r = await reader(fake, path);
    try {
      const started = performance.now();
      await assert.rejects(r.read(K, LATEST, { timeoutMs: 1500 }), (e: unknown) => e instanceof StaleReadError
        && e.partition === home && e.reason === `cannot read the last stable offset of ${INPUT}[${home}]: Kafka at 127.0.0.1:9 did not `
          + "answer by the read's deadline");
      const ms = performance.now() - started;
      assert.ok(ms >= 1490 && ms < 2500, `${ms} ms`);
    } finally {
      await r.close();
      db.close();
    }
  });

  test("through kafkajs: a port nothing listens on is waited out, then stale naming the connection error", async () => {
    const port = await new Promise<number>((resolve) => {
      const server = createServer();
      server.listen(0, "127.0.0.1", () => {
        const { port: p } = server.address() as { port: number };
        server.close(() => resolve(p));
      });
    });
    const K = "agent:a:main";
    const home = partitionFor(K, 4);
    const fake = new FakeCluster();
    const { path, db } = database({ [home]: 3 }, K, ["one"]);
    let real: ReaderCluster | undefined;
    const r = new FakeReader({ brokers: [`127.0.0.1:${port}`], topicPrefix: "p.", sinkDatabase: path, logLevel: "nothing" }, fake,
      (cluster) => { real = cluster; });
    await r.connect();
    // the counts from the stand-in (connect), the LSO from kafkajs's admin client
    fake.lso = (topic, partition) => real!.lastStableOffset(topic, partition);
    try {
      await assert.rejects(r.read(K, LATEST, { timeoutMs: 2000 }), (e: unknown) => {
        assert.ok(e instanceof StaleReadError, String(e));
        assert.equal(e.partition, home);
        assert.match(e.reason!, new RegExp(`^cannot read the last stable offset of ${INPUT.replaceAll(".", "\\.")}\\[${home}\\]: Kafka at `
          + `127\\.0\\.0\\.1:${port} did not answer: KafkaJS\\w+: .*ECONNREFUSED`));
        return true;
      });
      assert.ok(fake.asked.lso.length >= 2, `asked ${fake.asked.lso.length} times`);
    } finally {
      await r.close();
      await real?.close().catch(() => undefined);
      db.close();
    }
  });
});

describe("a refusal is a ReadError at once", () => {
  const refused = (e: unknown, message: string): boolean => {
    assert.ok(e instanceof ReadError && !(e instanceof StaleReadError), String(e));
    assert.equal(e.name, "ReadError");
    assert.equal(e.message, message);
    return true;
  };

  test("authorization on the input (Describe), on the layout (Read); a topic that does not exist", async () => {
    const K = "agent:a:main";
    const home = partitionFor(K, 4);
    const fake = new FakeCluster();
    const { path, db } = database({ [home]: 3 }, K, ["one"]);
    const r = await reader(fake, path);
    try {
      fake.fail.lso = () => protocolError("TOPIC_AUTHORIZATION_FAILED", "Not authorized to access topics: [Topic authorization failed]", false);
      const started = performance.now();
      await assert.rejects(r.read(K, LATEST, { timeoutMs: 5000 }), (e: unknown) => refused(e,
        `cannot read the last stable offset of ${INPUT}[${home}]: TOPIC_AUTHORIZATION_FAILED: this client `
        + `(KAFKA_SECURITY_PROTOCOL=PLAINTEXT) is not authorized: a reader needs an ACL allowing Describe on topic ${INPUT} `
        + `(and Describe on ${INPUT}, Read on ${ENTRIES} and ${LAYOUT})`));
      fake.fail.lso = () => new KafkaJSNumberOfRetriesExceeded(
        protocolError("UNKNOWN_TOPIC_OR_PARTITION", "This server does not host this topic-partition", true), { retryCount: 2, retryTime: 400 } as never);
      await assert.rejects(r.read(K, LATEST, { timeoutMs: 5000 }), (e: unknown) => refused(e,
        `cannot read the last stable offset of ${INPUT}[${home}]: topic ${INPUT} does not exist (transcript-owner topics apply creates it)`));
      assert.ok(performance.now() - started < 1000);
    } finally {
      await r.close();
      db.close();
    }
    // the layout refused: who, never the password, and Read on the layout topic
    const layoutRefused = new FakeCluster();
    layoutRefused.fail.layout = () => protocolError("TOPIC_AUTHORIZATION_FAILED", "Not authorized to access topics: [Topic authorization failed]", false);
    const sasl = { mechanism: "scram-sha-512" as const, username: "gw", password: "hunter2" };
    await assert.rejects(reader(layoutRefused, path, { sasl }), (e: unknown) => refused(e,
      `cannot read ${LAYOUT}: TOPIC_AUTHORIZATION_FAILED: KAFKA_SASL_USERNAME="gw" (SASL SCRAM-SHA-512 over SASL_PLAINTEXT) is not `
      + `authorized: a reader needs an ACL allowing Read on topic ${LAYOUT} (and Describe on ${INPUT}, Read on ${ENTRIES} and ${LAYOUT})`));
  });
});
