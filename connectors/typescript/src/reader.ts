/**
 * SessionReader: a gateway's reader of one session at a position (DESIGN 1.3, "Reading at a
 * position"). A reply turn reads its session bound to LATEST; a gateway that has just published
 * reads bound to the publisher's Delivery. The read returns the session's entries as of a point
 * at or after the bound, or throws StaleReadError at its deadline: it never returns the session
 * as if complete when it cannot say so.
 *
 *     const reader = SessionReader.fromEnv();             // KAFKA_BOOTSTRAP, TRANSCRIPT_TOPIC_PREFIX, …
 *     await reader.connect();                             // once, for the gateway's life
 *     const { entries, position } = await reader.read(sessionKey, LATEST, { timeoutMs: 2000 });
 *
 * The read (the same algorithm as transcript_connector's reader):
 * 1. The partition counts of the input topic and of transcript.entries (asked at most once a
 *    second). While they differ a repartition is in progress: asked again until the deadline,
 *    then StaleReadError with that reason. home = partitionFor(sessionKey, input count). The
 *    counts before each repartition (earlierCounts: transcript.layout's moves), read when the
 *    reader first needs counts and again whenever the input's count is not the one they were
 *    read at; no layout topic: none.
 * 2. What it needs (./read-plan): LATEST: input partition home's last stable offset, read when
 *    the step starts (ListOffsets, READ_COMMITTED; Describe on the input topic), after a
 *    repartition first the same for the session's home under each earlier count that differs
 *    (a publisher that has not yet seen the move still publishes there); a delivery on home:
 *    its offset + 1; a delivery on another partition: that partition's position past it first,
 *    then home's LSO read at that moment.
 * 3. Waits until the source's position for the partition reaches it, or the deadline.
 * 4. Returns the session's entries (compaction's view of its exact keys) and the position.
 *
 * Kafka not answering a lookup (a connection error, a timeout, a retriable error) is waited
 * out: the read starts again about once a second until its deadline, then throws
 * StaleReadError whose reason says what did not answer. A refusal (authorization, a topic that
 * does not exist) is a ReadError at once (./reader-kafka).
 *
 * Sources:
 * - the topic (default): one kafkajs consumer for the reader's life, in a consumer group of its
 *   own (kafkajs has no manual assignment: a throw-away group `<groupIdPrefix><uuid>`, whose
 *   assigner gives its one member every partition of transcript.entries; deleted on close;
 *   offsets never committed), read_committed from the start; subscribed to transcript.layout
 *   too when it exists at connect. Per partition it keeps the
 *   furthest position and the entries of the sessions it was asked for (the
 *   `sessionsPerPartition` most recently read); a session read before is up to date as the
 *   consumer goes, one not held is read again from the partition's start.
 * - a sink database (`sinkDatabase`, SQLite, read-only): the position and the session's rows in
 *   one read transaction, polled every `pollMs` while `PRAGMA data_version` changes. The
 *   partition counts, the LSO and transcript.layout (a consumer of its own, in a throw-away
 *   group, when it must be read) still come from Kafka.
 */

import { randomUUID } from "node:crypto";
import type { ConnectionOptions } from "node:tls";

import {
  type Consumer,
  Kafka,
  type KafkaConfig,
  logLevel as LogLevel,
  type RetryOptions,
  type SASLOptions,
} from "kafkajs";

import type { ChainEntry } from "./chain.js";
import { noPosition, type Position, positionAgeS } from "./entries-topic.js";
import { ConnectorError, ReadError, StaleReadError } from "./errors.js";
import { partitionFor } from "./partitioning.js";
import { CONFIRMATIONS_TOPIC, publisherOptionsFromEnv } from "./publisher.js";
import { earlierCounts, LATEST, planRead, type ReadBound, repartitionReason } from "./read-plan.js";
import {
  everyPartition,
  KafkaCluster,
  KafkaUnavailable,
  LayoutTimeout,
  type ReaderCluster,
  type ReaderIdentity,
  readError,
  who,
} from "./reader-kafka.js";
import { type HeldSession, PartitionView, type SessionEntry, type SessionSnapshot } from "./session-view.js";
import { canonicalSessionKey } from "./session-keys.js";
import { SinkDatabase } from "./sink-database.js";

export const ENTRIES_TOPIC = "transcript.entries";
/** The moves `transcript-owner repartition` made (`move/P-N`): the counts before each repartition. */
export const LAYOUT_TOPIC = "transcript.layout";
const DEFAULT_APP_ID = "transcript-owner"; // TRANSCRIPT_APP_ID's default: the worker's group
export const DEFAULT_READ_TIMEOUT_MS = 10_000;
export const DEFAULT_SESSIONS_PER_PARTITION = 1024;
const METADATA_EVERY_MS = 1000; // partition counts: asked at most once a second; Kafka not answering: asked again
const LOOKUP_AT_LEAST_MS = 1000; // a lookup's answer is waited for until the read's deadline, or this long
// the lookups' client retries briefly: a read asks again itself, about once a second
const LOOKUP_RETRY: RetryOptions = { initialRetryTime: 100, maxRetryTime: 500, retries: 2 };
const NOT_COMPLETE = "the session's entries are still being read from the partition's start";

export interface SessionReaderOptions {
  /** `host:port` of the brokers (KAFKA_BOOTSTRAP). */
  brokers: string[];
  /** Prefix of every topic name (TRANSCRIPT_TOPIC_PREFIX). */
  topicPrefix?: string;
  /** The input topic's full name, when it is not `<topicPrefix>delivery.confirmations`. */
  inputTopic?: string;
  /** The entries topic's full name, when it is not `<topicPrefix>transcript.entries`. */
  entriesTopic?: string;
  /** The layout topic's full name, when it is not `<topicPrefix>transcript.layout`. */
  layoutTopic?: string;
  /** Read entries and positions from this sink database (SQLite) instead of the topic. */
  sinkDatabase?: string;
  /** Topic source: how many sessions per partition it keeps up to date (the most recently read; default 1024). */
  sessionsPerPartition?: number;
  /** A read's deadline when `read` is given none (default 10 000 ms). */
  timeoutMs?: number;
  /** Topic source: how long the broker holds a fetch with nothing new (default 20 ms). */
  maxWaitTimeInMs?: number;
  /** The consumer groups' ids are this and a UUID: the topic source's, and the throw-away one that reads transcript.layout when it must (default `<topicPrefix>transcript-owner.reader-`, the group prefix topics.yaml grants the reader principal). */
  groupIdPrefix?: string;
  /** Sink database: how often it looks for a change (PRAGMA data_version; default 5 ms). */
  pollMs?: number;
  /** Called when a read starts waiting for a partition's position (logs, metrics, tests). */
  onWaiting?: (wait: ReadWait) => void;
  clientId?: string;
  ssl?: boolean | ConnectionOptions;
  sasl?: SASLOptions;
  connectionTimeoutMs?: number;
  requestTimeoutMs?: number;
  /** kafkajs's retries, for the consumers; also for the lookups (default: 2 retries within about a second, as a read asks again itself). */
  retry?: RetryOptions;
  logLevel?: "nothing" | "error" | "warn" | "info" | "debug";
}

/** A read that waits: for `partition`'s position to reach input offset `needed` (it is at `reached`). */
export interface ReadWait {
  readonly sessionKey: string;
  readonly partition: number;
  readonly needed: bigint;
  readonly reached: bigint;
}

/** What a read returns: the session's entries as of a point at or after its bound. */
export interface SessionRead {
  readonly sessionKey: string;
  /** The session's partition (of the input topic and of transcript.entries). */
  readonly partition: number;
  /** The position the entries reflect at least: every input record of `partition` below `position.inputOffset`. */
  readonly position: Position;
  /** The valid entries, in seq order. */
  readonly entries: readonly SessionEntry[];
  /** Every live value, for `verifySession(sessionKey, chainEntries)`. */
  readonly chainEntries: readonly ChainEntry[];
}

const LOG_LEVELS = {
  nothing: LogLevel.NOTHING,
  error: LogLevel.ERROR,
  warn: LogLevel.WARN,
  info: LogLevel.INFO,
  debug: LogLevel.DEBUG,
} as const;

interface Counts {
  input: number;
  entries: number;
  at: number; // performance.now() when asked
}

/** What a read knows so far, for the StaleReadError of a read whose deadline came while Kafka did not answer. */
interface Attempt {
  sessionKey: string;
  home: number | null; // the session's home under the last counts
  needed: bigint; // the last offset a step needed
  unavailable: string | null; // why the last lookup failed
}

/** A lookup still unanswered at the read's deadline. */
class NoAnswerYet extends KafkaUnavailable {}

/** transcript.layout as the topic source's consumer reads it: its keys, and how far it has read. */
class LayoutFollower {
  readonly keys = new Set<string>();
  readTo = 0n;
  private readonly waiters = new Set<() => void>();

  add(key: Buffer | null): void {
    if (key !== null) this.keys.add(key.toString("latin1"));
  }

  advance(next: bigint): void {
    if (next > this.readTo) this.readTo = next;
    this.notify();
  }

  notify(): void {
    for (const wake of [...this.waiters]) wake();
  }

  /** Resolves once read to `end`; rejects with `failed()` (the consumer stopped) or LayoutTimeout after `timeoutMs`. */
  until(end: bigint, timeoutMs: number, failed: () => Error | undefined): Promise<void> {
    return new Promise((resolve, reject) => {
      const check = (): void => {
        const failure = failed();
        if (failure) finish(failure);
        else if (this.readTo >= end) finish(null);
      };
      const finish = (e: Error | null): void => {
        clearTimeout(timer);
        this.waiters.delete(check);
        if (e) reject(e);
        else resolve();
      };
      const timer = setTimeout(() => finish(new LayoutTimeout(`not read to its end in ${timeoutMs} ms`)), timeoutMs);
      this.waiters.add(check);
      check();
    });
  }
}

export class SessionReader {
  readonly inputTopic: string;
  readonly entriesTopic: string;
  readonly layoutTopic: string;
  /** The topic source's consumer group (deleted on close); null for a sink database. */
  readonly groupId: string | null;
  private readonly kafka: Kafka; // the consumers'
  private readonly lookups: Kafka; // the admin client's (short retries)
  private readonly options: SessionReaderOptions;
  private readonly capacity: number;
  private readonly groupIdPrefix: string;
  private readonly identity: ReaderIdentity;
  private cluster: ReaderCluster | undefined;
  private consumer: Consumer | undefined;
  private follower: LayoutFollower | undefined; // transcript.layout, when the consumer reads it
  private earlier: number[] = []; // the counts before each repartition (earlierCounts)
  private layoutAt: number | null = null; // the input's count when the layout was read
  private layoutReading: { input: number; promise: Promise<number[]> } | undefined;
  private database: SinkDatabase | undefined;
  private readonly views = new Map<number, PartitionView>();
  private counts: Counts | undefined;
  private asking: Promise<Counts> | undefined;
  private failure: Error | undefined; // the consumer stopped for good, or the reader closed
  private connecting: Promise<void> | undefined;

  /** A reader configured from the worker's environment variables (as ConfirmationPublisher.fromEnv). */
  static fromEnv(env: NodeJS.ProcessEnv = process.env, overrides: Partial<SessionReaderOptions> = {}): SessionReader {
    const { brokers, topicPrefix, ssl, sasl } = publisherOptionsFromEnv(env);
    return new SessionReader({
      brokers,
      ...(topicPrefix !== undefined ? { topicPrefix } : {}),
      ...(ssl !== undefined ? { ssl } : {}),
      ...(sasl !== undefined ? { sasl } : {}),
      ...overrides,
    });
  }

  constructor(options: SessionReaderOptions) {
    if (!options.brokers?.length) throw new ConnectorError("brokers: at least one host:port is required");
    const positive = (name: keyof SessionReaderOptions, min: number): void => {
      const v = options[name];
      if (v !== undefined && (!Number.isInteger(v) || (v as number) < min)) {
        throw new ConnectorError(`${name}: expected an integer of at least ${min}, got ${String(v)}`);
      }
    };
    positive("sessionsPerPartition", 1);
    positive("timeoutMs", 0);
    positive("maxWaitTimeInMs", 0);
    positive("pollMs", 1);
    this.options = options;
    this.capacity = options.sessionsPerPartition ?? DEFAULT_SESSIONS_PER_PARTITION;
    const prefix = options.topicPrefix ?? "";
    this.inputTopic = options.inputTopic ?? `${prefix}${CONFIRMATIONS_TOPIC}`;
    this.entriesTopic = options.entriesTopic ?? `${prefix}${ENTRIES_TOPIC}`;
    this.layoutTopic = options.layoutTopic ?? `${prefix}${LAYOUT_TOPIC}`;
    // on a secured cluster topics.yaml grants the reader Read and Delete on "<prefix><app_id>.reader-*"
    this.groupIdPrefix = options.groupIdPrefix ?? `${prefix}${DEFAULT_APP_ID}.reader-`;
    this.groupId = options.sinkDatabase === undefined ? `${this.groupIdPrefix}${randomUUID()}` : null;
    const config: KafkaConfig = {
      clientId: options.clientId ?? "transcript-owner-reader",
      brokers: options.brokers,
      ...(options.ssl !== undefined ? { ssl: options.ssl } : {}),
      ...(options.sasl !== undefined ? { sasl: options.sasl } : {}),
      ...(options.connectionTimeoutMs !== undefined ? { connectionTimeout: options.connectionTimeoutMs } : {}),
      ...(options.requestTimeoutMs !== undefined ? { requestTimeout: options.requestTimeoutMs } : {}),
      logLevel: LOG_LEVELS[options.logLevel ?? "warn"],
    };
    this.kafka = new Kafka({ ...config, ...(options.retry !== undefined ? { retry: options.retry } : {}) });
    this.lookups = new Kafka({ ...config, retry: options.retry ?? LOOKUP_RETRY });
    this.identity = {
      bootstrap: options.brokers.join(","),
      who: who(options.sasl, options.ssl),
      inputTopic: this.inputTopic,
      entriesTopic: this.entriesTopic,
      layoutTopic: this.layoutTopic,
      groupIdPrefix: this.groupIdPrefix,
    };
  }

  /** The lookups' client (kafkajs): a subclass may stand in for it (tests). */
  protected makeCluster(): ReaderCluster {
    return new KafkaCluster(this.lookups, this.kafka, this.layoutTimeoutMs());
  }

  private layoutTimeoutMs(): number {
    return this.options.requestTimeoutMs ?? 30_000;
  }

  /**
   * Connects: checks both topics exist (never creates one), opens the sink database or starts
   * the consumer (resolves once it has joined its group), reads transcript.layout. Throws
   * ReadError.
   */
  async connect(): Promise<void> {
    this.connecting ??= this.start().catch(async (e: unknown) => {
      await this.stop();
      this.connecting = undefined;
      throw e instanceof ConnectorError ? e : new ReadError(`cannot connect: ${(e as Error).message}`, { cause: e });
    });
    return this.connecting;
  }

  private async start(): Promise<void> {
    this.failure = undefined;
    const cluster = this.makeCluster();
    this.cluster = cluster;
    try {
      await cluster.connect();
    } catch (e) {
      throw readError("cannot connect", e, [this.inputTopic], this.identity);
    }
    const counts = await this.askCounts();
    if (this.options.sinkDatabase !== undefined) {
      this.database = await SinkDatabase.open(this.options.sinkDatabase);
      await this.earlierCountsAt(counts.input);
      return;
    }
    let layoutEnd: bigint | null;
    try {
      layoutEnd = await cluster.layoutEnd(this.layoutTopic);
    } catch (e) {
      throw readError(`cannot read ${this.layoutTopic}`, e, [this.layoutTopic], this.identity);
    }
    // transcript.layout exists: the consumer follows it (its assigner gives it that partition too)
    const follower = layoutEnd === null ? undefined : new LayoutFollower();
    this.follower = follower;
    const topics = follower ? [this.entriesTopic, this.layoutTopic] : [this.entriesTopic];
    const consumer = this.kafka.consumer({
      groupId: this.groupId!,
      partitionAssigners: [everyPartition],
      readUncommitted: false,
      allowAutoTopicCreation: false,
      maxWaitTimeInMs: this.options.maxWaitTimeInMs ?? 20,
      metadataMaxAge: 5000, // a grown entries topic is assigned within seconds
    });
    this.consumer = consumer;
    const joined = new Promise<void>((resolve, reject) => {
      consumer.on(consumer.events.GROUP_JOIN, () => resolve());
      consumer.on(consumer.events.CRASH, ({ payload }) => {
        const found = readError("the reader's consumer stopped", payload.error, topics, this.identity);
        const error = new ReadError(found.message, { cause: payload.error }); // never waited out: it stopped
        if (!payload.restart) this.fail(error);
        reject(error);
      });
    });
    if (follower) {
      // after each batch, one of a transaction's markers only too (what ends the topic may be one)
      consumer.on(consumer.events.END_BATCH_PROCESS, ({ payload }) => {
        if (payload.topic === this.layoutTopic) follower.advance(BigInt(payload.lastOffset) + 1n);
      });
    }
    await consumer.connect();
    await consumer.subscribe({ topics, fromBeginning: true });
    await consumer.run({
      autoCommit: false,
      eachBatchAutoResolve: true,
      eachBatch: async ({ batch, isStale }) => {
        if (batch.topic === this.layoutTopic) {
          for (const message of batch.messages) follower?.add(message.key);
          return;
        }
        if (isStale()) return; // read from the start again: this batch was fetched before
        const view = this.view(batch.partition);
        let last: bigint | null = null;
        for (const message of batch.messages) {
          last = BigInt(message.offset);
          view.apply(message.key, message.value, message.headers, last);
        }
        if (last !== null) view.advance(last + 1n);
      },
    });
    await joined;
    await this.earlierCountsAt(counts.input);
  }

  /**
   * Reads `sessionKey` (canonical: a Delivery's `key`, or canonicalSessionKey's) bound to LATEST
   * or to a delivery. Resolves with its entries and the position reached; throws
   * StaleReadError at the deadline (`timeoutMs`, else the reader's), ReadError when it cannot
   * read at all.
   */
  async read(sessionKey: string, bound: ReadBound = LATEST, options: { timeoutMs?: number } = {}): Promise<SessionRead> {
    checkCanonical(sessionKey);
    const timeoutMs = options.timeoutMs ?? this.options.timeoutMs ?? DEFAULT_READ_TIMEOUT_MS;
    if (!Number.isFinite(timeoutMs) || timeoutMs < 0) throw new ConnectorError(`timeoutMs: expected a non-negative number, got ${timeoutMs}`);
    const deadline = performance.now() + timeoutMs;
    if (!this.cluster || (!this.consumer && !this.database)) throw new ReadError("not connected: call connect() first");
    this.check();
    const attempt: Attempt = { sessionKey, home: null, needed: 0n, unavailable: null };
    for (;;) {
      try {
        return await this.attempt(sessionKey, bound, deadline, attempt);
      } catch (e) {
        if (!(e instanceof KafkaUnavailable)) throw e;
        // a lookup still unanswered at the deadline: the error of one that failed before says more
        if (!(e instanceof NoAnswerYet && attempt.unavailable !== null)) attempt.unavailable = e.message;
        this.kafka.logger().namespace("SessionReader").debug(`waiting for Kafka: ${e.message}`);
      }
      // asked again about once a second until the deadline (the read starts again)
      const left = deadline - performance.now();
      if (left > 0) await this.sleep(Math.min(left, METADATA_EVERY_MS));
      this.check();
      if (performance.now() >= deadline) throw this.staleUnavailable(attempt);
    }
  }

  /** One attempt at a read: the counts (waiting while a repartition is in progress), the plan, its steps. */
  private async attempt(sessionKey: string, bound: ReadBound, deadline: number, attempt: Attempt): Promise<SessionRead> {
    const plan = async (counts: Counts): Promise<ReturnType<typeof planRead>> => {
      attempt.home = partitionFor(sessionKey, counts.input);
      const earlier = await this.lookup(`cannot read ${this.layoutTopic}`, [this.layoutTopic], deadline,
        () => this.earlierCountsAt(counts.input));
      return planRead(bound, counts.input, attempt.home, { sessionKey, counts: earlier });
    };
    let counts = await this.countsBy(deadline);
    let steps = await plan(counts);
    while (counts.input !== counts.entries) {
      const left = deadline - performance.now();
      if (left <= 0) {
        const [first] = steps;
        const needed = first!.needed === "lso" ? await this.lso(first!.partition, deadline) : first!.needed;
        attempt.needed = needed;
        const position = this.positionNow(first!.partition, needed);
        throw new StaleReadError(first!.partition, position.inputOffset, needed, positionAgeS(position),
          repartitionReason(counts.input, counts.entries));
      }
      await this.sleep(Math.min(left, Math.max(0, counts.at + METADATA_EVERY_MS - performance.now())));
      counts = await this.countsBy(deadline);
      steps = await plan(counts);
    }
    const home = attempt.home!;
    if (this.database) return this.readDatabase(this.database, sessionKey, home, steps, deadline, attempt);

    const view = this.view(home);
    const { session, replay } = view.hold(sessionKey);
    try {
      if (replay) {
        try {
          this.consumer!.seek({ topic: this.entriesTopic, partition: home, offset: "0" });
        } catch (e) {
          throw new ReadError(`cannot read partition ${home} of ${this.entriesTopic} from its start: ${(e as Error).message}`, { cause: e });
        }
      }
      for (const [i, step] of steps.entries()) {
        const needed = step.needed === "lso" ? await this.lso(step.partition, deadline) : step.needed;
        attempt.needed = needed;
        await this.reach(this.view(step.partition), sessionKey, needed, i === steps.length - 1 ? session : null, deadline);
      }
      const { entries, chainEntries } = session.snapshot();
      return { sessionKey, partition: home, position: view.position, entries, chainEntries };
    } finally {
      view.release(session);
    }
  }

  /**
   * The stale read of a read whose deadline came while Kafka did not answer: at the session's
   * home under the last counts it had (the read's, else the reader's; 0: none), where the
   * source stands there, the last offset a step needed; the reason what did not answer.
   */
  private staleUnavailable(attempt: Attempt): StaleReadError {
    const counts = this.counts;
    const partition = attempt.home ?? (counts ? partitionFor(attempt.sessionKey, counts.input) : 0);
    const position = this.positionNow(partition, attempt.needed);
    return new StaleReadError(partition, position.inputOffset, attempt.needed, positionAgeS(position),
      attempt.unavailable ?? "Kafka did not answer");
  }

  /** Stops the consumer, deletes its group, disconnects; reads waiting throw ReadError. Safe to call twice. */
  async close(): Promise<void> {
    this.fail(new ReadError("the reader was closed"));
    await this.connecting?.catch(() => undefined);
    this.connecting = undefined;
    await this.stop();
  }

  private async stop(): Promise<void> {
    const { consumer, cluster, database } = this;
    this.consumer = undefined;
    this.cluster = undefined;
    this.database = undefined;
    this.follower = undefined;
    database?.close();
    if (consumer) await consumer.disconnect().catch(() => undefined);
    if (cluster) {
      if (consumer && this.groupId) {
        await cluster.deleteGroup(this.groupId).catch((e: unknown) => {
          this.kafka.logger().namespace("SessionReader").warn(`consumer group ${this.groupId} not deleted: ${(e as Error).message}`);
        });
      }
      await cluster.close().catch(() => undefined);
    }
    this.views.clear();
    this.counts = undefined;
    this.earlier = [];
    this.layoutAt = null;
    this.layoutReading = undefined;
  }

  private fail(error: Error): void {
    this.failure ??= error;
    for (const view of this.views.values()) view.notify();
    this.follower?.notify();
  }

  private check(): void {
    if (this.failure) throw this.failure;
  }

  private view(partition: number): PartitionView {
    let view = this.views.get(partition);
    if (!view) {
      view = new PartitionView(partition, this.capacity);
      this.views.set(partition, view);
    }
    return view;
  }

  private positionNow(partition: number, needed: bigint): Position {
    if (this.database) return this.database.read(this.entriesTopic, partition, needed, null).position;
    return this.views.get(partition)?.position ?? noPosition(partition);
  }

  /** Waits until `view`'s position reaches `needed` (and `session` is complete), or throws StaleReadError at `deadline`. */
  private async reach(view: PartitionView, sessionKey: string, needed: bigint, session: HeldSession | null, deadline: number): Promise<void> {
    const done = (): boolean => {
      this.check();
      return view.position.inputOffset >= needed && (session === null || session.complete);
    };
    if (done()) return;
    this.options.onWaiting?.({ sessionKey, partition: view.partition, needed, reached: view.position.inputOffset });
    const reached = await new Promise<boolean>((resolve, reject) => {
      const finish = (value: boolean | Error): void => {
        clearTimeout(timer);
        unwatch();
        if (value instanceof Error) reject(value);
        else resolve(value);
      };
      const timer = setTimeout(() => finish(false), Math.max(0, deadline - performance.now()));
      const unwatch = view.watch(() => {
        try {
          if (done()) finish(true);
        } catch (e) {
          finish(e as Error);
        }
      });
    });
    if (reached || done()) return;
    const { position } = view;
    throw new StaleReadError(view.partition, position.inputOffset, needed, positionAgeS(position),
      position.inputOffset >= needed ? NOT_COMPLETE : null);
  }

  private async readDatabase(db: SinkDatabase, sessionKey: string, home: number, steps: ReturnType<typeof planRead>, deadline: number,
    attempt: Attempt): Promise<SessionRead> {
    const pollMs = this.options.pollMs ?? 5;
    for (const [i, step] of steps.entries()) {
      const last = i === steps.length - 1;
      const needed = step.needed === "lso" ? await this.lso(step.partition, deadline) : step.needed;
      attempt.needed = needed;
      let seen: bigint | null = null;
      let waiting = false;
      for (;;) {
        this.check();
        const version = db.version();
        if (version !== seen) {
          seen = version;
          const { position, snapshot } = db.read(this.entriesTopic, step.partition, needed, last ? sessionKey : null);
          if (position.inputOffset >= needed) {
            if (!last) break;
            return { sessionKey, partition: home, position, entries: snapshot!.entries, chainEntries: snapshot!.chainEntries };
          }
          if (performance.now() >= deadline) {
            throw new StaleReadError(step.partition, position.inputOffset, needed, positionAgeS(position));
          }
          if (!waiting) {
            waiting = true;
            this.options.onWaiting?.({ sessionKey, partition: step.partition, needed, reached: position.inputOffset });
          }
        } else if (performance.now() >= deadline) {
          const { position } = db.read(this.entriesTopic, step.partition, needed, null);
          throw new StaleReadError(step.partition, position.inputOffset, needed, positionAgeS(position));
        }
        await this.sleep(Math.min(pollMs, Math.max(0, deadline - performance.now())));
      }
    }
    throw new Error("unreachable: a read has at least one step");
  }

  /** The partition counts, asked at most once a second (concurrent reads share one request). */
  private async countsNow(): Promise<Counts> {
    if (this.counts && performance.now() - this.counts.at < METADATA_EVERY_MS) return this.counts;
    return this.askCounts();
  }

  private countsBy(deadline: number): Promise<Counts> {
    return this.lookup("cannot read the topics' metadata", [this.inputTopic, this.entriesTopic], deadline, () => this.countsNow());
  }

  private askCounts(): Promise<Counts> {
    this.asking ??= (async () => {
      const cluster = this.cluster;
      if (!cluster) throw new ReadError("not connected: call connect() first");
      const topics = [this.inputTopic, this.entriesTopic];
      let found: Map<string, number>;
      try {
        found = await cluster.partitionCounts(topics);
      } catch (e) {
        throw readError("cannot read the topics' metadata", e, topics, this.identity);
      }
      const counts = { input: found.get(this.inputTopic) ?? 0, entries: found.get(this.entriesTopic) ?? 0, at: performance.now() };
      for (const [topic, n] of [[this.inputTopic, counts.input], [this.entriesTopic, counts.entries]] as const) {
        if (n === 0) throw new ReadError(`topic ${topic} does not exist (transcript-owner topics apply creates it)`);
      }
      this.counts = counts;
      return counts;
    })().finally(() => {
      this.asking = undefined;
    });
    return this.asking;
  }

  /**
   * The counts before each repartition that ended at or below `input` (earlierCounts), from
   * transcript.layout, read again when the input's count is not the one it was last read at
   * (concurrent reads share one reading). No layout topic: none.
   */
  private earlierCountsAt(input: number): Promise<number[]> {
    if (this.layoutAt === input) return Promise.resolve(this.earlier);
    if (this.layoutReading?.input === input) return this.layoutReading.promise;
    const promise: Promise<number[]> = this.layoutKeys().then(
      (keys) => {
        if (this.layoutReading?.promise === promise) {
          this.earlier = earlierCounts(keys, input);
          this.layoutAt = input;
        }
        return earlierCounts(keys, input);
      },
      (e: unknown) => {
        throw readError(`cannot read ${this.layoutTopic}`, e, [this.layoutTopic], this.identity);
      },
    ).finally(() => {
      if (this.layoutReading?.promise === promise) this.layoutReading = undefined;
    });
    this.layoutReading = { input, promise };
    return promise;
  }

  /** transcript.layout's keys to its end: as the consumer has read them (it follows the topic), else by a consumer of its own. */
  private async layoutKeys(): Promise<Iterable<string | Uint8Array | null>> {
    const cluster = this.cluster;
    if (!cluster) throw this.failure ?? new ReadError("not connected: call connect() first");
    const end = await cluster.layoutEnd(this.layoutTopic);
    if (end === null) return [];
    const follower = this.follower;
    if (follower) {
      await follower.until(end, this.layoutTimeoutMs(), () => this.failure);
      return [...follower.keys];
    }
    return cluster.layoutKeys(this.layoutTopic, end, `${this.groupIdPrefix}${randomUUID()}`);
  }

  /** Input partition `partition`'s last stable offset. */
  private lso(partition: number, deadline: number): Promise<bigint> {
    return this.lookup(`cannot read the last stable offset of ${this.inputTopic}[${partition}]`, [this.inputTopic], deadline, () => {
      const cluster = this.cluster;
      if (!cluster) throw this.failure ?? new ReadError("not connected: call connect() first");
      return cluster.lastStableOffset(this.inputTopic, partition);
    });
  }

  /**
   * `ask`'s answer, its error as ReadError (KafkaUnavailable: Kafka did not answer), or
   * NoAnswerYet when none came by the read's deadline (or within LOOKUP_AT_LEAST_MS when less
   * is left: a read with no time left still asks once). The question is left to finish alone.
   */
  private async lookup<T>(what: string, topics: readonly string[], deadline: number, ask: () => Promise<T>): Promise<T> {
    const call = (async () => ask())().catch((e: unknown) => {
      throw readError(what, e, topics, this.identity);
    });
    call.catch(() => undefined); // answered after the deadline: nobody waits for it
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new NoAnswerYet(`${what}: Kafka at ${this.identity.bootstrap} did not answer by the read's deadline`)),
        Math.max(deadline - performance.now(), LOOKUP_AT_LEAST_MS));
    });
    try {
      return await Promise.race([call, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => setTimeout(resolve, ms));
  }
}

/** A canonical key is its own canonical form: anything else names a session the worker does not write. */
function checkCanonical(sessionKey: string): void {
  const agent = /^agent:([^:]*):/.exec(sessionKey)?.[1];
  let canonical: string | null = null;
  if (agent !== undefined) {
    try {
      canonical = canonicalSessionKey(sessionKey, agent);
    } catch {
      canonical = null;
    }
  }
  if (canonical !== sessionKey) {
    throw new ConnectorError("sessionKey: expected a canonical session key (a Delivery's key, or canonicalSessionKey's)");
  }
}

export type { SessionEntry, SessionSnapshot };
