/**
 * What a session reader asks Kafka besides the entries (the port of
 * transcript_connector/reader_kafka.py): both topics' partition counts, an input partition's last
 * stable offset, and transcript.layout's keys (the moves `transcript-owner repartition` made),
 * through one admin client kept for the reader's life; and the one translation of kafkajs's
 * errors into ReadError, naming what failed and, when refused, who and which ACL a reader needs.
 *
 * Kafka not answering (a connection error, a timeout, any retriable Kafka error) is
 * KafkaUnavailable: a read waits it out, asking again about once a second until its deadline,
 * and then throws StaleReadError with its text as the reason. Anything else (an authorization
 * refusal, a topic that does not exist, bad options) is a ReadError at once.
 */

import {
  type Admin,
  AssignerProtocol,
  type Kafka,
  type PartitionAssigner,
  type SASLOptions,
} from "kafkajs";

import { ConnectorError, ReadError } from "./errors.js";

/** Kafka did not answer now (a broker restarting, a leader moving): a read waits and asks again until its deadline. */
export class KafkaUnavailable extends ReadError {
  override name = "KafkaUnavailable";
}

/**
 * The lookups a SessionReader makes (KafkaCluster; a test may stand in for it by overriding
 * `SessionReader.makeCluster`). Methods throw the client's errors as they come (the reader
 * translates them, readError), or a ConnectorError of their own.
 */
export interface ReaderCluster {
  connect(): Promise<void>;
  /** The partition count of each topic (0: not in the metadata). */
  partitionCounts(topics: readonly string[]): Promise<Map<string, number>>;
  /** Partition `partition` of `topic`: its last stable offset (ListOffsets, READ_COMMITTED). */
  lastStableOffset(topic: string, partition: number): Promise<bigint>;
  /** The last stable offset of `topic`'s partition 0; null when the topic does not exist. */
  layoutEnd(topic: string): Promise<bigint | null>;
  /** Every key of `topic`'s partition 0 below `end`, read by a consumer of its own (group `groupId`, deleted after). */
  layoutKeys(topic: string, end: bigint, groupId: string): Promise<(Uint8Array | string | null)[]>;
  deleteGroup(groupId: string): Promise<void>;
  close(): Promise<void>;
}

/** Who a reader is and what it reads, for its error messages. */
export interface ReaderIdentity {
  readonly bootstrap: string;
  readonly who: string;
  readonly inputTopic: string;
  readonly entriesTopic: string;
  readonly layoutTopic: string;
  readonly groupIdPrefix: string;
}

/** Who connects, for an error message: the SASL user and mechanism, never the password. */
export function who(sasl: SASLOptions | undefined, ssl: unknown): string {
  const protocol = sasl ? (ssl ? "SASL_SSL" : "SASL_PLAINTEXT") : ssl ? "SSL" : "PLAINTEXT";
  if (!sasl) return `this client (KAFKA_SECURITY_PROTOCOL=${protocol})`;
  const username = "username" in sasl && typeof sasl.username === "string" ? sasl.username : null;
  const how = `SASL ${sasl.mechanism.toUpperCase()} over ${protocol}`;
  return username === null ? `this client (${how})` : `KAFKA_SASL_USERNAME=${JSON.stringify(username)} (${how})`;
}

/** The ACL a reader needs on `topic`. */
function aclNeeded(id: ReaderIdentity, topic: string): string {
  return topic === id.inputTopic ? "Describe" : "Read"; // entries, layout
}

interface Cause {
  name?: unknown;
  message?: unknown;
  type?: unknown;
  retriable?: unknown;
  cause?: unknown;
}

/** `error` and the errors it wraps (kafkajs's retrier wraps the one it gave up on), outermost first. */
function chain(error: unknown): Cause[] {
  const found: Cause[] = [];
  let e: unknown = error;
  while (e !== null && typeof e === "object" && found.length < 8 && !found.includes(e as Cause)) {
    found.push(e as Cause);
    e = (e as Cause).cause;
  }
  return found;
}

const NOT_ANSWERING = new Set([
  "KafkaJSConnectionError",
  "KafkaJSConnectionClosedError",
  "KafkaJSRequestTimeoutError",
  "KafkaJSBrokerNotFound",
  "KafkaJSNoBrokerAvailableError",
  "KafkaJSMetadataNotLoaded",
  "KafkaJSTopicMetadataNotLoaded",
  "KafkaJSGroupCoordinatorNotFound",
  "KafkaJSTimeout",
  "KafkaJSLockTimeout",
  "KafkaJSNumberOfRetriesExceeded",
]);

const AUTHORIZATION = new Set(["TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED"]);

/** `Class: message` of the innermost error (what kafkajs gave up on). */
function reason(error: unknown): string {
  const errors = chain(error);
  const e = errors.at(-1);
  if (e === undefined) return String(error);
  const name = typeof e.name === "string" ? e.name : "Error";
  const text = typeof e.message === "string" ? e.message.split(/\s+/).join(" ").trim() : "";
  return text ? `${name}: ${text}` : name;
}

/**
 * kafkajs's `error`, met doing `what` with `topics`, as one line for the user: ReadError, or
 * KafkaUnavailable when Kafka did not answer. A ConnectorError is returned as it is.
 */
export function readError(what: string, error: unknown, topics: readonly string[], id: ReaderIdentity): ReadError {
  if (error instanceof ReadError) return error;
  if (error instanceof ConnectorError) return new ReadError(error.message, { cause: error });
  const errors = chain(error);
  const names = errors.map((e) => e.name);
  const types = errors.map((e) => e.type);
  if (names.includes("KafkaJSSASLAuthenticationError") || types.includes("SASL_AUTHENTICATION_FAILED")) {
    return new ReadError(`${what}: authentication failed: Kafka at ${id.bootstrap} refused ${id.who}; check `
      + `KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD and KAFKA_SASL_MECHANISM: ${reason(error)}`, { cause: error });
  }
  const refused = types.find((t) => typeof t === "string" && AUTHORIZATION.has(t)) as string | undefined;
  if (refused === "GROUP_AUTHORIZATION_FAILED") {
    return new ReadError(`${what}: ${refused}: ${id.who} is not authorized: a reader needs an ACL allowing Read and `
      + `Delete on consumer groups prefixed ${id.groupIdPrefix}`, { cause: error });
  }
  if (refused !== undefined) {
    const acls = topics.map((t) => `${aclNeeded(id, t)} on topic ${t}`).join(" and ");
    return new ReadError(`${what}: ${refused}: ${id.who} is not authorized: a reader needs an ACL allowing ${acls} `
      + `(and Describe on ${id.inputTopic}, Read on ${id.entriesTopic} and ${id.layoutTopic})`, { cause: error });
  }
  if (types.includes("UNKNOWN_TOPIC_OR_PARTITION")) {
    return new ReadError(`${what}: topic ${topics.join(" or ")} does not exist (transcript-owner topics apply creates it)`,
      { cause: error });
  }
  const root = errors.at(-1);
  const kafkaError = typeof root?.name === "string" && root.name.startsWith("KafkaJS");
  if (names.some((n) => typeof n === "string" && NOT_ANSWERING.has(n)) || (kafkaError && root?.retriable === true)
    || (root !== undefined && /^E(CONNREFUSED|CONNRESET|HOSTUNREACH|NETUNREACH|TIMEDOUT|PIPE|AI_AGAIN)$/.test(String((root as { code?: unknown }).code)))) {
    return new KafkaUnavailable(`${what}: Kafka at ${id.bootstrap} did not answer: ${reason(error)}`, { cause: error });
  }
  return new ReadError(`${what}: ${reason(error)}`, { cause: error });
}

/** An assigner that gives the group's first member every partition of the topics subscribed (kafkajs has no manual assignment). */
export const everyPartition: PartitionAssigner = ({ cluster }) => ({
  name: "TranscriptReaderEveryPartition",
  version: 1,
  async assign({ members, topics }) {
    const assignment: Record<string, number[]> = {};
    for (const topic of topics) assignment[topic] = cluster.findTopicPartitionMetadata(topic).map((m) => m.partitionId);
    return members.map((m, i) => ({
      memberId: m.memberId,
      memberAssignment: AssignerProtocol.MemberAssignment.encode({
        version: 1, assignment: i === 0 ? assignment : {}, userData: Buffer.alloc(0),
      }),
    }));
  },
  protocol({ topics }) {
    return {
      name: "TranscriptReaderEveryPartition",
      metadata: AssignerProtocol.MemberMetadata.encode({ version: 1, topics, userData: Buffer.alloc(0) }),
    };
  },
});

/** Not read to its end within the time given (Kafka did not answer). */
export class LayoutTimeout extends Error {
  override name = "KafkaJSTimeout";
}

/**
 * The lookups through kafkajs: one admin client (of `lookups`, a client whose retries are short:
 * the read itself asks again), and for transcript.layout a consumer of `consumers` made when it
 * must be read and closed after.
 */
export class KafkaCluster implements ReaderCluster {
  private readonly admin: Admin;

  constructor(
    lookups: Kafka,
    private readonly consumers: Kafka,
    private readonly layoutTimeoutMs: number,
  ) {
    this.admin = lookups.admin();
  }

  connect(): Promise<void> {
    return this.admin.connect();
  }

  async partitionCounts(topics: readonly string[]): Promise<Map<string, number>> {
    const meta = await this.admin.fetchTopicMetadata({ topics: [...topics] });
    return new Map(topics.map((t) => [t, meta.topics.find((m) => m.name === t)?.partitions.length ?? 0]));
  }

  /**
   * kafkajs's admin sends ListOffsets v2+ without an isolation level of its own, and the
   * request's default is READ_COMMITTED, so `high` is the LSO, not the high watermark.
   */
  async lastStableOffset(topic: string, partition: number): Promise<bigint> {
    const offsets = await this.admin.fetchTopicOffsets(topic);
    const found = offsets.find((o) => o.partition === partition);
    if (!found) throw new ReadError(`${topic} has no partition ${partition}`);
    return BigInt(found.high);
  }

  async layoutEnd(topic: string): Promise<bigint | null> {
    // the topics this principal may describe: the layout topic absent is no move ever made
    if (!(await this.admin.listTopics()).includes(topic)) return null;
    return this.lastStableOffset(topic, 0);
  }

  async layoutKeys(topic: string, end: bigint, groupId: string): Promise<(Uint8Array | string | null)[]> {
    if (end <= 0n) return [];
    const consumer = this.consumers.consumer({
      groupId, partitionAssigners: [everyPartition], readUncommitted: false, allowAutoTopicCreation: false,
      maxWaitTimeInMs: 20, retry: { retries: 0 },
    });
    const keys: (Uint8Array | null)[] = [];
    try {
      await new Promise<void>((resolve, reject) => {
        let readTo = 0n;
        const timer = setTimeout(() => reject(new LayoutTimeout(`${topic} not read to its end in ${this.layoutTimeoutMs} ms`)),
          this.layoutTimeoutMs);
        const done = (e?: Error): void => {
          clearTimeout(timer);
          if (e) reject(e);
          else resolve();
        };
        consumer.on(consumer.events.CRASH, ({ payload }) => done(payload.error));
        // every batch, one of control records only too (a transaction's marker may end the topic)
        consumer.on(consumer.events.END_BATCH_PROCESS, ({ payload }) => {
          if (payload.topic !== topic) return;
          const next = BigInt(payload.lastOffset) + 1n;
          if (next > readTo) readTo = next;
          if (readTo >= end) done();
        });
        (async () => {
          await consumer.connect();
          await consumer.subscribe({ topics: [topic], fromBeginning: true });
          await consumer.run({
            autoCommit: false,
            eachBatch: async ({ batch }) => {
              for (const m of batch.messages) keys.push(m.key);
            },
          });
        })().catch((e: unknown) => done(e as Error));
      });
    } finally {
      await consumer.disconnect().catch(() => undefined);
      await this.deleteGroup(groupId).catch(() => undefined);
    }
    return keys;
  }

  async deleteGroup(groupId: string): Promise<void> {
    await this.admin.deleteGroups([groupId]);
  }

  close(): Promise<void> {
    return this.admin.disconnect();
  }
}
