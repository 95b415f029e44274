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
 */

import { readFileSync } from "node:fs";
import type { ConnectionOptions } from "node:tls";

import {
  CompressionTypes,
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
 * KAFKA_SSL_CERTFILE, KAFKA_SSL_KEYFILE. Throws ConnectorError naming the variable.
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
  private producer: Producer | undefined;
  private partitionCount: number | undefined;
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
          `topic ${this.topic} has ${count} partitions, the worker expects ${expected} (TRANSCRIPT_PARTITIONS)`,
        );
      }
      this.partitionCount = count;
    } catch (e) {
      throw e instanceof PublishError ? e : new PublishError(`cannot connect: ${(e as Error).message}`, { cause: e });
    } finally {
      await admin.disconnect().catch(() => undefined);
    }
    const producer = this.kafka.producer({
      idempotent: true,
      maxInFlightRequests: 1,
      // kafkajs gives the producer the client's retry options: an idempotent producer retries
      // a send until it is acknowledged (deliveryTimeoutMs bounds how long publish waits)
      retry: { ...this.options.retry, retries: Number.MAX_SAFE_INTEGER },
      allowAutoTopicCreation: false,
      createPartitioner: Partitioners.DefaultPartitioner,
      ...(this.options.transactionalId !== undefined ? { transactionalId: this.options.transactionalId } : {}),
      ...(this.options.transactionTimeoutMs !== undefined ? { transactionTimeout: this.options.transactionTimeoutMs } : {}),
    });
    try {
      await producer.connect();
    } catch (e) {
      throw new PublishError(`cannot connect: ${(e as Error).message}`, { cause: e });
    }
    this.producer = producer;
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
    this.producer = undefined;
    if (producer) await producer.disconnect();
  }

  private connected(): Producer {
    if (!this.producer || this.partitionCount === undefined) {
      throw new PublishError("not connected: call connect() first");
    }
    return this.producer;
  }

  private async send(
    records: readonly InputRecord[],
    send: (batch: Parameters<Producer["send"]>[0]) => Promise<RecordMetadata[]>,
  ): Promise<Delivery[]> {
    const n = this.partitionCount!;
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
