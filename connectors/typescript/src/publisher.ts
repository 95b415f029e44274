/**
 * ConfirmationPublisher: delivery confirmations and resets onto the worker's input topic.
 *
 * Each record is validated (as the builders validate), keyed by its canonical session key and
 * sent to the partition the worker owns that key from (murmur2 mod the partition count, the
 * Java client's partitioner: ./partitioning), so the worker never has to re-key it and a
 * session's records stay in order. The producer is idempotent (a retried send is written
 * once), acks=all, one request in flight (order kept across retries), and never creates a
 * topic. `publish` resolves when the broker has acknowledged the record.
 *
 * With `transactionalId`, records go out in Kafka transactions: `transaction(fn)` commits what
 * `fn` published, or aborts it when `fn` throws (an aborted confirmation was never confirmed:
 * the worker, reading read_committed, gives it no outcome). `publish` outside `transaction`
 * then runs in a transaction of its own.
 *
 * Repartitioning: `transcript-owner repartition --partitions N` grows the input topic as its
 * last step, and workers restart with TRANSCRIPT_PARTITIONS=N. A connected publisher notices
 * without a restart: at the start of a publish call, at most once per `partitionsCheckMs` (5 s),
 * it asks the topic's count (one Metadata request, on an admin client kept connected). A count
 * that grew is adopted for that call and every later one, logged once at INFO; records
 * published under the old count before then are re-keyed by the worker (slower, never lost). A
 * count that shrank means the topic was recreated: every call throws PublishError, and nothing
 * is sent, until the publisher connects again.
 */

import { readFileSync } from "node:fs";
import type { ConnectionOptions } from "node:tls";

import kafkajs, {
  type Admin,
  CompressionTypes,
  type ICustomPartitioner,
  Kafka,
  logLevel as LogLevel,
  Partitioners,
  type Producer,
  type RecordMetadata,
  type RetryOptions,
  type SASLOptions,
} from "kafkajs";

import { ConnectorError, PublishError } from "./errors.js";
import { partitionFor } from "./partitioning.js";
import { type InputRecord, recordKey, validateRecord } from "./records.js";

export const CONFIRMATIONS_TOPIC = "delivery.confirmations";
/** How often, by default, a connected publisher looks at the topic's partition count. */
export const DEFAULT_PARTITIONS_CHECK_MS = 5000;
/** The shortest `partitionsCheckMs`: a Metadata request per 50 ms at most. */
const MIN_PARTITIONS_CHECK_MS = 50;

export interface PublisherOptions {
  /** `host:port` of the brokers (KAFKA_BOOTSTRAP). */
  brokers: string[];
  /** Prefix of every topic name (TRANSCRIPT_TOPIC_PREFIX); the topic is `<prefix>delivery.confirmations`. */
  topicPrefix?: string;
  /** The input topic's full name, when it is not `<topicPrefix>delivery.confirmations`. */
  topic?: string;
  /**
   * The partition count the worker runs with (TRANSCRIPT_PARTITIONS, 8 by default): `connect`
   * fails when the topic has another, since records would land where the worker does not
   * expect them. Omit to take the topic's count as it is.
   */
  partitions?: number;
  /**
   * How often, at most, a connected publisher looks for a changed partition count
   * (TRANSCRIPT_PARTITIONS_CHECK_MS, 5000 by default, 50 at least): a repartition grows the
   * topic while gateways publish. Looked at when a publish call starts, never by a timer.
   */
  partitionsCheckMs?: number;
  clientId?: string;
  /** TLS: `true` (the system's CAs) or Node's tls options (`ca`, `cert`, `key`, …). */
  ssl?: boolean | ConnectionOptions;
  /** SASL: `{ mechanism: "plain" | "scram-sha-256" | "scram-sha-512", username, password }`. */
  sasl?: SASLOptions;
  /** Enables transactions; one id per publisher process (a second one with the id fences the first). */
  transactionalId?: string;
  /** How long the broker keeps a transaction open (default 60 000). */
  transactionTimeoutMs?: number;
  /** `publish` fails with PublishError after this long without an acknowledgement (default 120 000). */
  deliveryTimeoutMs?: number;
  connectionTimeoutMs?: number;
  requestTimeoutMs?: number;
  /** Retries of connections and requests (kafkajs RetryOptions); a send is retried until acknowledged. */
  retry?: RetryOptions;
  logLevel?: "nothing" | "error" | "warn" | "info" | "debug";
  /**
   * How each batch is compressed (default "none"): "gzip" is the one codec kafkajs has built
   * in. The worker reads gzip, snappy, lz4 and zstd batches alike.
   */
  compression?: "none" | "gzip";
}

/** Where a record was written. */
export interface Delivery {
  readonly topic: string;
  readonly partition: number;
  /** Offset, as a decimal string (Kafka offsets are 64-bit). */
  readonly offset: string;
  /** The Kafka key: the record's canonical session key. */
  readonly key: string;
}

/** Publishing inside `ConfirmationPublisher.transaction`. */
export interface Transaction {
  publish(record: InputRecord): Promise<Delivery>;
  publishAll(records: readonly InputRecord[]): Promise<Delivery[]>;
}

const SASL_MECHANISMS: Record<string, "plain" | "scram-sha-256" | "scram-sha-512"> = {
  PLAIN: "plain",
  "SCRAM-SHA-256": "scram-sha-256",
  "SCRAM-SHA-512": "scram-sha-512",
};

/**
 * Options from the environment variables the worker reads (docs/configuration.md):
 * KAFKA_BOOTSTRAP, TRANSCRIPT_TOPIC_PREFIX, TRANSCRIPT_PARTITIONS, KAFKA_SECURITY_PROTOCOL,
 * KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD, KAFKA_SSL_CAFILE,
 * KAFKA_SSL_CERTFILE, KAFKA_SSL_KEYFILE; and the connector's own TRANSCRIPT_PARTITIONS_CHECK_MS.
 * Throws ConnectorError naming the variable.
 */
export function publisherOptionsFromEnv(env: NodeJS.ProcessEnv = process.env): PublisherOptions {
  const get = (name: string): string | undefined => {
    const v = env[name]?.trim();
    return v ? v : undefined;
  };
  const brokers = (get("KAFKA_BOOTSTRAP") ?? "127.0.0.1:9092").split(",").map((b) => b.trim());
  if (brokers.some((b) => !/^[^\s:]+:\d+$/.test(b) && !/^\[[0-9a-fA-F:]+\]:\d+$/.test(b))) {
    throw new ConnectorError("KAFKA_BOOTSTRAP: expected host:port[,host:port…]");
  }
  const partitionsText = get("TRANSCRIPT_PARTITIONS") ?? "8";
  const partitions = Number(partitionsText);
  if (!/^\d+$/.test(partitionsText) || partitions < 1) {
    throw new ConnectorError(`TRANSCRIPT_PARTITIONS: expected a positive integer, got ${JSON.stringify(partitionsText)}`);
  }
  const protocol = (get("KAFKA_SECURITY_PROTOCOL") ?? "PLAINTEXT").toUpperCase();
  if (!["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"].includes(protocol)) {
    throw new ConnectorError(
      `KAFKA_SECURITY_PROTOCOL: expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, got ${JSON.stringify(protocol)}`,
    );
  }
  const options: PublisherOptions = { brokers, partitions };
  const checkText = get("TRANSCRIPT_PARTITIONS_CHECK_MS");
  if (checkText !== undefined) {
    if (!/^\d+$/.test(checkText) || Number(checkText) < MIN_PARTITIONS_CHECK_MS) {
      throw new ConnectorError(
        `TRANSCRIPT_PARTITIONS_CHECK_MS: expected an integer of at least ${MIN_PARTITIONS_CHECK_MS} (ms), got ${JSON.stringify(checkText)}`,
      );
    }
    options.partitionsCheckMs = Number(checkText);
  }
  const prefix = env.TRANSCRIPT_TOPIC_PREFIX;
  if (prefix) options.topicPrefix = prefix;
  const tlsFiles = ["KAFKA_SSL_CAFILE", "KAFKA_SSL_CERTFILE", "KAFKA_SSL_KEYFILE"].filter((n) => get(n));
  if (protocol === "SSL" || protocol === "SASL_SSL") {
    const tls: ConnectionOptions = {};
    const read = (name: string): Buffer | undefined => {
      const file = get(name);
      if (!file) return undefined;
      try {
        return readFileSync(file);
      } catch (e) {
        throw new ConnectorError(`${name}: cannot read ${file}: ${(e as Error).message}`);
      }
    };
    const ca = read("KAFKA_SSL_CAFILE");
    const cert = read("KAFKA_SSL_CERTFILE");
    const key = read("KAFKA_SSL_KEYFILE");
    if (key && !cert) throw new ConnectorError("KAFKA_SSL_KEYFILE is set without KAFKA_SSL_CERTFILE");
    if (ca) tls.ca = ca;
    if (cert) {
      tls.cert = cert;
      tls.key = key ?? cert; // one PEM file may hold both, as the worker allows
    }
    options.ssl = Object.keys(tls).length ? tls : true;
  } else if (tlsFiles.length) {
    throw new ConnectorError(`${tlsFiles.join(", ")} set, but KAFKA_SECURITY_PROTOCOL=${protocol} (no TLS)`);
  }
  if (protocol.startsWith("SASL_")) {
    const name = (get("KAFKA_SASL_MECHANISM") ?? "PLAIN").toUpperCase();
    const mechanism = SASL_MECHANISMS[name];
    if (!mechanism) {
      throw new ConnectorError(`KAFKA_SASL_MECHANISM: expected PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, got ${JSON.stringify(name)}`);
    }
    const username = env.KAFKA_SASL_USERNAME;
    const password = env.KAFKA_SASL_PASSWORD;
    if (!username || !password) {
      throw new ConnectorError(`KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD are required with KAFKA_SECURITY_PROTOCOL=${protocol}`);
    }
    options.sasl = { mechanism, username, password };
  }
  return options;
}

/**
 * The partition count to publish with when the topic shows `seen` partitions to a publisher
 * using `current`. More: a repartition grew it (Kafka topics only grow), adopt it. Fewer: the
 * topic was deleted and created again, and a record's home under either count may be wrong, so
 * PublishError until the publisher connects again.
 */
export function nextPartitionCount(topic: string, current: number, seen: number): number {
  if (seen < current) {
    throw new PublishError(
      `topic ${topic} now has ${seen} partitions, this publisher connected with ${current}: ` +
        `the topic was recreated; connect again (TRANSCRIPT_PARTITIONS=${seen}, or unset to take the topic's count)`,
    );
  }
  return seen;
}

// kafkajs exports its errors by a spread Node's ES module loader does not see (so: the default
// export); its types declare no argument, the constructor takes the message (KafkaJSError's)
const MetadataNotLoaded = kafkajs.KafkaJSMetadataNotLoaded as unknown as new (message: string) => Error;

/**
 * kafkajs's DefaultPartitioner (it keeps the partition each message names: partitionFor's),
 * refusing a partition the producer's own metadata does not list yet. kafkajs would drop such
 * a message without an error (its produce request names only the partitions it knows), and a
 * grown topic can reach the publisher's admin client before the producer's metadata; the
 * refusal is the error kafkajs answers with a metadata refresh and a retry.
 */
const knownPartitionsOnly: ICustomPartitioner = () => {
  const partitioner = Partitioners.DefaultPartitioner();
  return (args) => {
    const partition = partitioner(args);
    if (partition >= args.partitionMetadata.length) { // a topic's partitions are 0..n-1
      throw new MetadataNotLoaded(
        `the producer's metadata does not list partition ${partition} of ${args.topic} yet (${args.partitionMetadata.length} partitions): refreshing`,
      );
    }
    return partition;
  };
};

const COMPRESSION = { none: CompressionTypes.None, gzip: CompressionTypes.GZIP } as const;

const LOG_LEVELS = {
  nothing: LogLevel.NOTHING,
  error: LogLevel.ERROR,
  warn: LogLevel.WARN,
  info: LogLevel.INFO,
  debug: LogLevel.DEBUG,
} as const;

export class ConfirmationPublisher {
  readonly topic: string;
  private readonly kafka: Kafka;
  private readonly options: PublisherOptions;
  private readonly checkMs: number;
  private producer: Producer | undefined;
  private admin: Admin | undefined; // kept connected: the partition count is asked on it
  private partitionCount: number | undefined;
  private checkedAt = 0; // performance.now() of the last look at the topic's count
  private checking: Promise<number> | undefined; // the look in flight, shared by concurrent calls
  private queue: Promise<unknown> = Promise.resolve(); // one transaction at a time

  /** A publisher configured from the worker's environment variables (publisherOptionsFromEnv). */
  static fromEnv(env: NodeJS.ProcessEnv = process.env, overrides: Partial<PublisherOptions> = {}): ConfirmationPublisher {
    return new ConfirmationPublisher({ ...publisherOptionsFromEnv(env), ...overrides });
  }

  constructor(options: PublisherOptions) {
    if (!options.brokers?.length) throw new ConnectorError("brokers: at least one host:port is required");
    if (options.compression !== undefined && !Object.hasOwn(COMPRESSION, options.compression)) {
      throw new ConnectorError(`compression: expected "none" or "gzip", got ${JSON.stringify(options.compression)}`);
    }
    const checkMs = options.partitionsCheckMs ?? DEFAULT_PARTITIONS_CHECK_MS;
    if (!Number.isInteger(checkMs) || checkMs < MIN_PARTITIONS_CHECK_MS) {
      throw new ConnectorError(`partitionsCheckMs: expected an integer of at least ${MIN_PARTITIONS_CHECK_MS}, got ${checkMs}`);
    }
    this.checkMs = checkMs;
    this.options = options;
    this.topic = options.topic ?? `${options.topicPrefix ?? ""}${CONFIRMATIONS_TOPIC}`;
    this.kafka = new Kafka({
      clientId: options.clientId ?? "transcript-owner-connector",
      brokers: options.brokers,
      ...(options.ssl !== undefined ? { ssl: options.ssl } : {}),
      ...(options.sasl !== undefined ? { sasl: options.sasl } : {}),
      ...(options.connectionTimeoutMs !== undefined ? { connectionTimeout: options.connectionTimeoutMs } : {}),
      ...(options.requestTimeoutMs !== undefined ? { requestTimeout: options.requestTimeoutMs } : {}),
      ...(options.retry !== undefined ? { retry: options.retry } : {}),
      logLevel: LOG_LEVELS[options.logLevel ?? "warn"],
    });
  }

  /**
   * The input topic's partition count records are published with (known once connected; a
   * repartition grows it while connected). Throws PublishError before `connect`.
   */
  get partitions(): number {
    if (this.partitionCount === undefined) throw new PublishError("not connected: call connect() first");
    return this.partitionCount;
  }

  /** Whether `transaction` is available (a transactionalId was given). */
  get transactional(): boolean {
    return this.options.transactionalId !== undefined;
  }

  /**
   * Connects, after checking that the topic exists (it is never created here: a mistyped
   * prefix would make a topic the worker does not read) and has the partition count the
   * worker expects. Throws PublishError.
   */
  async connect(): Promise<void> {
    if (this.producer) return;
    const admin = this.kafka.admin();
    try {
      await admin.connect();
      const topics = await admin.listTopics();
      if (!topics.includes(this.topic)) {
        throw new PublishError(`topic ${this.topic} does not exist (transcript-owner topics apply creates it)`);
      }
      const meta = await admin.fetchTopicMetadata({ topics: [this.topic] });
      const count = meta.topics[0]?.partitions.length ?? 0;
      const expected = this.options.partitions;
      if (expected !== undefined && count !== expected) {
        throw new PublishError(
          `topic ${this.topic} has ${count} partitions, the worker expects ${expected} (TRANSCRIPT_PARTITIONS): ` +
            `if the deployment was repartitioned (transcript-owner repartition), set TRANSCRIPT_PARTITIONS=${count}, ` +
            "or unset it to take the topic's count",
        );
      }
      this.partitionCount = count;
    } catch (e) {
      await admin.disconnect().catch(() => undefined);
      throw e instanceof PublishError ? e : new PublishError(`cannot connect: ${(e as Error).message}`, { cause: e });
    }
    const producer = this.kafka.producer({
      // the producer's view of the partitions catches up with the admin's at least this often
      metadataMaxAge: this.checkMs,
      idempotent: true,
      maxInFlightRequests: 1,
      // kafkajs gives the producer the client's retry options: an idempotent producer retries
      // a send until it is acknowledged (deliveryTimeoutMs bounds how long publish waits)
      retry: { ...this.options.retry, retries: Number.MAX_SAFE_INTEGER },
      allowAutoTopicCreation: false,
      createPartitioner: knownPartitionsOnly,
      ...(this.options.transactionalId !== undefined ? { transactionalId: this.options.transactionalId } : {}),
      ...(this.options.transactionTimeoutMs !== undefined ? { transactionTimeout: this.options.transactionTimeoutMs } : {}),
    });
    try {
      await producer.connect();
    } catch (e) {
      await admin.disconnect().catch(() => undefined);
      throw new PublishError(`cannot connect: ${(e as Error).message}`, { cause: e });
    }
    this.producer = producer;
    this.admin = admin;
    this.checkedAt = performance.now();
  }

  /** Publishes one record; resolves when the broker acknowledged it (in a transaction: committed). */
  async publish(record: InputRecord): Promise<Delivery> {
    const [delivery] = await this.publishAll([record]);
    return delivery!;
  }

  /**
   * Publishes records in order (per session: the worker decides them in this order); resolves
   * when all are acknowledged. Every record is validated before any is sent: an invalid one
   * throws InvalidRecordError and nothing is published.
   */
  async publishAll(records: readonly InputRecord[]): Promise<Delivery[]> {
    if (this.transactional) return this.transaction((tx) => tx.publishAll(records));
    const producer = this.connected();
    return this.send(records, (messages) => producer.send(messages));
  }

  /**
   * Runs `fn` in a Kafka transaction: commits what it published when it resolves, aborts when
   * it throws (and rethrows). Transactions of one publisher run one after another.
   */
  async transaction<T>(fn: (tx: Transaction) => Promise<T>): Promise<T> {
    if (!this.transactional) throw new PublishError("transactions need the transactionalId option");
    const producer = this.connected();
    const run = async (): Promise<T> => {
      let ktx: Awaited<ReturnType<Producer["transaction"]>>;
      try {
        ktx = await producer.transaction();
      } catch (e) {
        throw new PublishError(`cannot begin a transaction: ${(e as Error).message}`, { cause: e });
      }
      const tx: Transaction = {
        publishAll: (records) => this.send(records, (messages) => ktx.send(messages)),
        publish: async (record) => (await tx.publishAll([record]))[0]!,
      };
      let result: T;
      try {
        result = await fn(tx);
      } catch (e) {
        if (ktx.isActive()) await ktx.abort().catch(() => undefined); // the broker aborts it anyway, at its timeout
        throw e;
      }
      try {
        await ktx.commit();
      } catch (e) {
        throw new PublishError(`transaction not committed: ${(e as Error).message}`, { cause: e });
      }
      return result;
    };
    const next = this.queue.then(run, run);
    this.queue = next.catch(() => undefined);
    return next;
  }

  /** Disconnects (waiting for requests in flight). Safe to call twice. */
  async close(): Promise<void> {
    const producer = this.producer;
    const admin = this.admin;
    this.producer = undefined;
    this.admin = undefined;
    if (admin) await admin.disconnect().catch(() => undefined);
    if (producer) await producer.disconnect();
  }

  private connected(): Producer {
    if (!this.producer || this.partitionCount === undefined) {
      throw new PublishError("not connected: call connect() first");
    }
    return this.producer;
  }

  /**
   * The partition count this publish call uses: the topic's, asked at most once per
   * partitionsCheckMs (concurrent calls share one request). A refusal is asked again on the
   * next call: it lasts until a reconnect.
   */
  private async countNow(): Promise<number> {
    if (performance.now() - this.checkedAt < this.checkMs) return this.partitionCount!;
    this.checking ??= this.askCount().finally(() => {
      this.checking = undefined;
    });
    return this.checking;
  }

  private async askCount(): Promise<number> {
    const admin = this.admin;
    if (!admin) throw new PublishError("not connected: call connect() first"); // closed meanwhile
    let seen: number;
    try {
      const meta = await admin.fetchTopicMetadata({ topics: [this.topic] });
      seen = meta.topics[0]?.partitions.length ?? 0;
    } catch (e) {
      throw new PublishError(`not published: cannot read the partition count of ${this.topic}: ${(e as Error).message}`, { cause: e });
    }
    const current = this.partitionCount!;
    const count = nextPartitionCount(this.topic, current, seen);
    this.checkedAt = performance.now();
    if (count !== current) {
      this.partitionCount = count;
      this.kafka.logger().namespace("ConfirmationPublisher").info(
        `topic ${this.topic} grew from ${current} to ${count} partitions (transcript-owner repartition): publishing with ${count}`,
      );
    }
    return count;
  }

  private async send(
    records: readonly InputRecord[],
    send: (batch: Parameters<Producer["send"]>[0]) => Promise<RecordMetadata[]>,
  ): Promise<Delivery[]> {
    const n = await this.countNow(); // before any send: a refusal sends nothing
    const messages = records.map((record) => {
      validateRecord(record);
      const key = recordKey(record);
      return { key, value: JSON.stringify(record), partition: partitionFor(key, n) };
    });
    if (!messages.length) return [];
    const timeoutMs = this.options.deliveryTimeoutMs ?? 120_000;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new PublishError(`not acknowledged within ${timeoutMs} ms`)), timeoutMs);
    });
    let acked: RecordMetadata[];
    try {
      const compression = COMPRESSION[this.options.compression ?? "none"];
      acked = await Promise.race([send({ topic: this.topic, acks: -1, messages, compression }), timeout]);
    } catch (e) {
      throw e instanceof PublishError ? e : new PublishError(`not published: ${(e as Error).message}`, { cause: e });
    } finally {
      clearTimeout(timer);
    }
    // One record batch per partition: a partition's records have consecutive offsets.
    const base = new Map(acked.map((m) => [m.partition, BigInt(m.baseOffset ?? "-1")]));
    const next = new Map<number, bigint>();
    return messages.map(({ key, partition }) => {
      const offset = next.get(partition) ?? base.get(partition) ?? -1n;
      next.set(partition, offset + 1n);
      return { topic: this.topic, partition, offset: offset.toString(), key };
    });
  }
}
