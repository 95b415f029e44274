// The publisher without a broker: options from the worker's environment, and misuse.
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";

import {
  ConfirmationPublisher,
  ConnectorError,
  buildReset,
  nextPartitionCount,
  PublishError,
  publisherOptionsFromEnv,
} from "@transcript-owner/connector";

describe("publisherOptionsFromEnv", () => {
  test("defaults: the local broker, 8 partitions, no prefix, no TLS or SASL", () => {
    assert.deepEqual(publisherOptionsFromEnv({}), { brokers: ["127.0.0.1:9092"], partitions: 8 });
  });
  test("prefix, partitions, several brokers", () => {
    const o = publisherOptionsFromEnv({ KAFKA_BOOTSTRAP: "a:1, b:2", TRANSCRIPT_TOPIC_PREFIX: "t1.", TRANSCRIPT_PARTITIONS: "12" });
    assert.deepEqual(o, { brokers: ["a:1", "b:2"], partitions: 12, topicPrefix: "t1." });
    assert.equal(new ConfirmationPublisher(o).topic, "t1.delivery.confirmations");
  });
  test("SASL_SSL with SCRAM and a CA file", () => {
    const dir = mkdtempSync(join(tmpdir(), "pub-"));
    writeFileSync(join(dir, "ca.pem"), "CA");
    const o = publisherOptionsFromEnv({
      KAFKA_SECURITY_PROTOCOL: "SASL_SSL", KAFKA_SASL_MECHANISM: "SCRAM-SHA-512",
      KAFKA_SASL_USERNAME: "connector", KAFKA_SASL_PASSWORD: "pw", KAFKA_SSL_CAFILE: join(dir, "ca.pem"),
    });
    assert.deepEqual(o.sasl, { mechanism: "scram-sha-512", username: "connector", password: "pw" });
    assert.equal(String((o.ssl as { ca: Buffer }).ca), "CA");
  });
  test("the partition check's interval", () => {
    assert.equal(publisherOptionsFromEnv({ TRANSCRIPT_PARTITIONS_CHECK_MS: "250" }).partitionsCheckMs, 250);
    for (const bad of ["0", "49", "5s", "-1"]) {
      assert.throws(() => publisherOptionsFromEnv({ TRANSCRIPT_PARTITIONS_CHECK_MS: bad }),
        (e: unknown) => e instanceof ConnectorError && /^TRANSCRIPT_PARTITIONS_CHECK_MS: expected an integer of at least 50/.test((e as Error).message));
    }
    for (const partitionsCheckMs of [0, 49, 1.5, Number.NaN]) {
      assert.throws(() => new ConfirmationPublisher({ brokers: ["127.0.0.1:1"], partitionsCheckMs }), /^ConnectorError: partitionsCheckMs: /);
    }
  });
  test("SSL without files trusts the system's CAs", () => {
    assert.equal(publisherOptionsFromEnv({ KAFKA_SECURITY_PROTOCOL: "ssl" }).ssl, true);
  });
  test("errors name the variable", () => {
    const bad: [Record<string, string>, RegExp][] = [
      [{ KAFKA_BOOTSTRAP: "nohost" }, /^KAFKA_BOOTSTRAP/],
      [{ TRANSCRIPT_PARTITIONS: "0" }, /^TRANSCRIPT_PARTITIONS/],
      [{ KAFKA_SECURITY_PROTOCOL: "TLS" }, /^KAFKA_SECURITY_PROTOCOL/],
      [{ KAFKA_SECURITY_PROTOCOL: "SASL_PLAINTEXT", KAFKA_SASL_USERNAME: "u" }, /KAFKA_SASL_PASSWORD are required/],
      [{ KAFKA_SECURITY_PROTOCOL: "SASL_PLAINTEXT", KAFKA_SASL_MECHANISM: "GSSAPI", KAFKA_SASL_USERNAME: "u", KAFKA_SASL_PASSWORD: "p" }, /^KAFKA_SASL_MECHANISM/],
      [{ KAFKA_SSL_CAFILE: "/x.pem" }, /KAFKA_SSL_CAFILE set, but KAFKA_SECURITY_PROTOCOL=PLAINTEXT/],
      [{ KAFKA_SECURITY_PROTOCOL: "SSL", KAFKA_SSL_CAFILE: "/nonexistent/ca.pem" }, /^KAFKA_SSL_CAFILE: cannot read/],
    ];
    for (const [env, message] of bad) assert.throws(() => publisherOptionsFromEnv(env), (e: unknown) => e instanceof ConnectorError && message.test((e as Error).message));
  });
  test("the password is not in the error message", () => {
    assert.throws(() => publisherOptionsFromEnv({ KAFKA_SECURITY_PROTOCOL: "SASL_SSL", KAFKA_SASL_MECHANISM: "X", KAFKA_SASL_USERNAME: "u", KAFKA_SASL_PASSWORD: "s3cret" }),
      (e: unknown) => !(e as Error).message.includes("s3cret"));
  });
});

describe("nextPartitionCount: the count a connected publisher goes on with", () => {
  const topic = "t.delivery.confirmations";
  test("the same count, or a grown one (transcript-owner repartition): the topic's", () => {
    for (const [current, seen] of [[2, 2], [2, 4], [8, 16], [8, 9], [1, 10_000]] as const) {
      assert.equal(nextPartitionCount(topic, current, seen), seen);
    }
  });
  test("fewer: the topic was recreated, PublishError", () => {
    for (const [current, seen] of [[4, 2], [16, 8], [2, 1]] as const) {
      assert.throws(() => nextPartitionCount(topic, current, seen), (e: unknown) => e instanceof PublishError && (e as Error).message ===
        `topic ${topic} now has ${seen} partitions, this publisher connected with ${current}: the topic was recreated; ` +
        `connect again (TRANSCRIPT_PARTITIONS=${seen}, or unset to take the topic's count)`);
    }
  });
});

describe("ConfirmationPublisher misuse", () => {
  const reset = buildReset({ session_key: "agent:ops:main", reset_at: "2026-05-01T12:00:00Z" });
  test("publishing before connect()", async () => {
    const p = new ConfirmationPublisher({ brokers: ["127.0.0.1:1"] });
    await assert.rejects(p.publish(reset), (e: unknown) => e instanceof PublishError && /not connected/.test((e as Error).message));
    assert.throws(() => p.partitions, /not connected/);
    await p.close();
  });
  test("a transaction without a transactionalId", async () => {
    const p = new ConfirmationPublisher({ brokers: ["127.0.0.1:1"] });
    await assert.rejects(p.transaction(async () => 1), /transactionalId/);
  });
  test("no brokers", () => {
    assert.throws(() => new ConfirmationPublisher({ brokers: [] }), ConnectorError);
  });
  test("a codec kafkajs does not have built in", () => {
    for (const compression of ["zstd", "snappy", "GZIP", "toString"]) {
      assert.throws(() => new ConfirmationPublisher({ brokers: ["127.0.0.1:1"], compression: compression as "gzip" }),
        (e: unknown) => e instanceof ConnectorError && /^compression: expected "none" or "gzip"/.test((e as Error).message));
    }
    assert.equal(new ConfirmationPublisher({ brokers: ["127.0.0.1:1"], compression: "gzip" }).topic, "delivery.confirmations");
  });
  test("an unreachable broker fails connect() with PublishError", async () => {
    const p = new ConfirmationPublisher({ brokers: ["127.0.0.1:1"], connectionTimeoutMs: 300, retry: { retries: 0 }, logLevel: "nothing" });
    await assert.rejects(p.connect(), PublishError);
  });
});
