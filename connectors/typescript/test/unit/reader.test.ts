// The session reader without a broker: what a bound read needs (src/read-plan.ts), the LRU of
// sessions, and what the topic reader holds of a partition (src/session-view.ts): compaction's
// view of a session's exact keys, a partition read again from its start for a session not held
// before without moving any session back, the furthest position.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import {
  ConnectorError,
  deliveryOffset,
  earlierCounts,
  entryKey,
  LATEST,
  LruMap,
  parseBound,
  partitionFor,
  PartitionView,
  planRead,
  positionValue,
  ReadError,
  repartitionReason,
  SessionReader,
} from "@transcript-owner/connector";

const K = "agent:a:main";
const NEIGHBOUR = "agent:a:main#1";

function entryValue(session: string, seq: number, text: string, epoch = 0): Buffer {
  return Buffer.from(JSON.stringify({
    schema: "transcript-entry/1", session_key: session, epoch, seq, entry_id: `e${seq}`, send_id: `s${seq}`,
    role: "assistant", agent_id: "a", text, media: [], source: "automation_result", posted_by: { kind: "job", id: "j" },
    delivered_at: "2026-12-04T10:00:00Z", written_at: "2026-12-04T10:00:00Z", platform_message_ids: [String(seq)],
  }));
}

describe("planRead", () => {
  test("latest: home's LSO, read when the read starts", () => {
    assert.deepEqual(planRead(LATEST, 8, 3), [{ partition: 3, needed: "lso" }]);
  });

  test("latest after repartitions first waits for the session's earlier homes", () => {
    // a publisher that has not yet seen a move still sends to the session's home under the old
    // count; the worker re-keys those records home, so LATEST first waits there
    const keys = Array.from({ length: 400 }, (_, i) => `agent:a:s${i}`);
    const moved = keys.find((k) => new Set([8, 16, 32].map((n) => partitionFor(k, n))).size === 3)!;
    const stayed = keys.find((k) => partitionFor(k, 8) === partitionFor(k, 32))!;
    const home = partitionFor(moved, 32);
    assert.deepEqual(planRead(LATEST, 32, home, { sessionKey: moved, counts: [8, 16] }), [
      { partition: partitionFor(moved, 8), needed: "lso" },
      { partition: partitionFor(moved, 16), needed: "lso" },
      { partition: home, needed: "lso" },
    ]);
    assert.deepEqual(planRead(LATEST, 32, partitionFor(stayed, 32), { sessionKey: stayed, counts: [8] }),
      [{ partition: partitionFor(stayed, 32), needed: "lso" }]);
    // counts not below the input's are no earlier count
    assert.deepEqual(planRead(LATEST, 8, partitionFor(moved, 8), { sessionKey: moved, counts: [8, 16] }),
      [{ partition: partitionFor(moved, 8), needed: "lso" }]);
    // a delivery names its partition: one step on home, two elsewhere, whatever the history
    assert.deepEqual(planRead({ partition: home, offset: "5" }, 32, home, { sessionKey: moved, counts: [8, 16] }),
      [{ partition: home, needed: 6n }]);
  });

  test("the earlier counts are transcript.layout's moves that ended", () => {
    const cases: [(string | Buffer | null)[], number, number[]][] = [
      [[], 8, []],
      [["move/8-16", "move/8-16/0", "move/8-16/7"], 16, [8]],
      [["move/8-16", "move/16-32", "move/16-32/3"], 32, [8, 16]],
      [["move/8-16", "move/16-32"], 16, [8]], // 16 -> 32 not ended: the input has 16
      [["move/08-16", "move/8-16x", "other", null, "move/0-8"], 16, []],
      [[Buffer.from("move/16-32"), Buffer.from("move/8-16"), Buffer.from("move/8-16")], 32, [8, 16]],
      [["move/8-16\n", " move/8-16", "move/1234567-2", "move/2-1234567"], 32, []],
    ];
    for (const [keys, now, earlier] of cases) assert.deepEqual(earlierCounts(keys, now), earlier, JSON.stringify(keys));
  });

  test("a delivery on home: its offset + 1", () => {
    assert.deepEqual(planRead({ partition: 3, offset: "41" }, 8, 3), [{ partition: 3, needed: 42n }]);
    assert.deepEqual(planRead({ partition: 3, offset: 41 }, 8, 3), [{ partition: 3, needed: 42n }]);
    assert.deepEqual(planRead({ partition: 3, offset: 2n ** 63n - 1n }, 8, 3), [{ partition: 3, needed: 2n ** 63n }]);
  });

  test("a delivery on another partition: two steps, its own then home's LSO", () => {
    assert.deepEqual(planRead({ partition: 5, offset: "41" }, 8, 3), [{ partition: 5, needed: 42n }, { partition: 3, needed: "lso" }]);
  });

  test("a delivery's partition beyond the input topic: ReadError; an offset that is none: ConnectorError", () => {
    assert.throws(() => planRead({ partition: 8, offset: "1" }, 8, 3), (e: unknown) => e instanceof ReadError
      && e.message === "bound: partition 8 of a delivery, and the input topic has 8 partitions");
    for (const offset of ["-1", "", "1.0", "01", " 1", "9223372036854775808", -1, 1.5, Number.MAX_SAFE_INTEGER + 1, -1n]) {
      assert.throws(() => planRead({ partition: 3, offset }, 8, 3), ConnectorError, String(offset));
    }
    assert.throws(() => planRead({ partition: -1, offset: "1" }, 8, 3), ConnectorError);
    assert.throws(() => planRead("earliest" as never, 8, 3), ConnectorError);
    assert.equal(deliveryOffset({ partition: 0, offset: "9223372036854775807" }), 2n ** 63n - 1n);
  });

  test("parseBound: latest or P:O", () => {
    assert.equal(parseBound("latest"), LATEST);
    assert.deepEqual(parseBound("3:41"), { partition: 3, offset: "41" });
    for (const bad of ["", "LATEST", "3", "3:", ":4", "-1:4", "3:-1", "03:4", "3:04", "2147483648:1", "3:4:5"]) {
      assert.throws(() => parseBound(bad), ConnectorError, bad);
    }
  });

  test("the repartition reason", () => {
    assert.equal(repartitionReason(16, 8), "a repartition is in progress: delivery.confirmations has 16 partitions, transcript.entries 8");
  });
});

describe("LruMap", () => {
  test("forgets the least recently used beyond capacity; get touches, peek does not", () => {
    const lru = new LruMap<string, number>(2);
    assert.deepEqual(lru.set("a", 1), []);
    assert.deepEqual(lru.set("b", 2), []);
    assert.equal(lru.get("a"), 1); // a is now the most recent
    assert.deepEqual(lru.set("c", 3), ["b"]);
    assert.equal(lru.peek("c"), 3);
    assert.deepEqual(lru.set("d", 4), ["a"]); // peek did not touch c... a was older
    assert.deepEqual([...lru.keys()], ["c", "d"]);
    assert.deepEqual(lru.set("c", 5), []); // replacing: no room needed
    assert.deepEqual([...lru.keys()], ["d", "c"]);
  });

  test("keeps what is in use, and forgets it once released", () => {
    const pinned = new Set(["a"]);
    const lru = new LruMap<string, number>(1, (_v, k) => pinned.has(k));
    lru.set("a", 1);
    assert.deepEqual(lru.set("b", 2), []); // a is in use, b is the one being added
    assert.equal(lru.size, 2);
    pinned.delete("a");
    assert.deepEqual(lru.trim(), ["a"]);
    assert.deepEqual([...lru.keys()], ["b"]);
    assert.throws(() => new LruMap(0), RangeError);
  });
});

describe("PartitionView", () => {
  const at = new Date("2026-12-04T10:00:00Z");
  const feed = (view: PartitionView, records: [string, Buffer | null, bigint][]): void => {
    for (const [key, value, offset] of records) view.apply(key, value, { chain: "c".repeat(64) }, offset);
    view.advance(records.at(-1)![2] + 1n);
  };

  test("a session held from the start: its exact keys, the latest record of each, in seq order", () => {
    const view = new PartitionView(3, 10);
    const { session, replay } = view.hold(K);
    assert.equal(replay, false); // nothing read yet: everything to come is applied
    assert.equal(session.complete, true);
    feed(view, [
      [entryKey(K, 2), entryValue(K, 2, "erased"), 0n],
      [entryKey(NEIGHBOUR, 1), entryValue(NEIGHBOUR, 1, "another chat"), 1n],
      [entryKey(K, 1), entryValue(K, 1, "first"), 2n],
      [entryKey(K, 2), null, 3n],
      [entryKey(K, 3), entryValue(K, 3, "old"), 4n],
      [entryKey(K, 3), entryValue(K, 3, "new"), 5n],
      [entryKey(K, 4), entryValue(NEIGHBOUR, 4, "names another session"), 6n],
      [entryKey(K, 5), Buffer.from("{not json"), 7n],
      ["position/3", positionValue(3, 17, 2, at), 8n],
    ]);
    const { entries, chainEntries } = session.snapshot();
    assert.deepEqual(entries.map((e) => [e.seq, JSON.parse(e.entryJson).text]), [[1, "first"], [3, "new"]]);
    assert.deepEqual(entries.map((e) => e.chain), ["c".repeat(64), "c".repeat(64)]);
    // the chain is checked over every live value, those that are no entry too
    assert.deepEqual(chainEntries.map((e) => e.seq), [1, 3, 4, 5]);
    assert.equal(view.holds(NEIGHBOUR), false);
    assert.deepEqual(view.position, { partition: 3, inputOffset: 17n, controlOffset: 2n, at, offset: 8n });
    assert.equal(view.readTo, 9n);
  });

  test("a position of another partition, or one that moves back, changes nothing", () => {
    const view = new PartitionView(3, 10);
    feed(view, [["position/3", positionValue(3, 17, 2, at), 0n], ["position/4", positionValue(4, 99, 9, at), 1n]]);
    feed(view, [["position/3", positionValue(3, 99, 9, at), 2n]].map(([k, v, o]) => [k as string, Buffer.from(String(v).replace('"partition":3', '"partition":4')), o as bigint]));
    feed(view, [["position/3", positionValue(3, 10, 1, new Date(at.getTime() - 1000)), 3n]]);
    assert.deepEqual(view.position, { partition: 3, inputOffset: 17n, controlOffset: 2n, at, offset: 3n });
  });

  test("a session not held: complete once the partition was read again from its start, never moved back", () => {
    const view = new PartitionView(3, 10);
    const held = view.hold(K).session;
    const first: [string, Buffer | null, bigint][] = [
      [entryKey(NEIGHBOUR, 1), entryValue(NEIGHBOUR, 1, "one"), 0n],
      [entryKey(K, 1), entryValue(K, 1, "k old"), 1n],
      [entryKey(NEIGHBOUR, 1), entryValue(NEIGHBOUR, 1, "one again"), 2n],
      [entryKey(K, 1), entryValue(K, 1, "k new"), 3n],
      [entryKey(NEIGHBOUR, 2), null, 4n],
    ];
    feed(view, first);
    const { session, replay } = view.hold(NEIGHBOUR);
    assert.equal(replay, true);
    assert.equal(session.complete, false);
    assert.equal(session.until, 5n);
    // the reader reads the partition from its start again (batches fetched before are skipped)
    feed(view, first.slice(0, 3));
    assert.equal(session.complete, false);
    assert.deepEqual(held.snapshot().entries.map((e) => JSON.parse(e.entryJson).text), ["k new"]); // never moved back
    feed(view, first.slice(3));
    assert.equal(session.complete, true);
    feed(view, [[entryKey(NEIGHBOUR, 3), entryValue(NEIGHBOUR, 3, "three"), 5n]]);
    assert.deepEqual(session.snapshot().entries.map((e) => JSON.parse(e.entryJson).text), ["one again", "three"]);
    assert.deepEqual(held.snapshot().entries.map((e) => JSON.parse(e.entryJson).text), ["k new"]);
    assert.equal(view.readTo, 6n);
  });

  test("the sessions held: the most recently read, never one a read is using", () => {
    const view = new PartitionView(3, 2);
    const a = view.hold("agent:a:one");
    const b = view.hold("agent:a:two");
    view.release(b.session);
    const c = view.hold("agent:a:three"); // one is in use: two goes
    assert.deepEqual([view.holds("agent:a:one"), view.holds("agent:a:two"), view.holds("agent:a:three")], [true, false, true]);
    view.release(c.session);
    view.hold("agent:a:four"); // one is still in use: three goes
    assert.deepEqual([view.holds("agent:a:one"), view.holds("agent:a:three")], [true, false]);
    view.release(a.session);
    assert.equal(view.held, 2);
    assert.equal(view.hold("agent:a:one").replay, false);
  });

  test("watchers wake after each batch", () => {
    const view = new PartitionView(3, 2);
    let woke = 0;
    const stop = view.watch(() => (woke += 1));
    feed(view, [["position/3", positionValue(3, 1, 1, at), 0n]]);
    stop();
    feed(view, [["position/3", positionValue(3, 2, 1, at), 1n]]);
    assert.equal(woke, 1);
  });
});

describe("SessionReader options", () => {
  test("topics from the prefix; the group is a throw-away one; bad options refused", () => {
    const reader = new SessionReader({ brokers: ["127.0.0.1:9"], topicPrefix: "p." });
    assert.equal(reader.inputTopic, "p.delivery.confirmations");
    assert.equal(reader.entriesTopic, "p.transcript.entries");
    // the group prefix topics.yaml grants the reader principal: <prefix><app_id>.reader-*
    assert.match(reader.groupId!, /^p\.transcript-owner\.reader-[0-9a-f-]{36}$/);
    assert.equal(new SessionReader({ brokers: ["h:1"], sinkDatabase: "/x" }).groupId, null);
    assert.throws(() => new SessionReader({ brokers: [] }), ConnectorError);
    assert.throws(() => new SessionReader({ brokers: ["h:1"], sessionsPerPartition: 0 }), ConnectorError);
    const env = SessionReader.fromEnv({ KAFKA_BOOTSTRAP: "h:1", TRANSCRIPT_TOPIC_PREFIX: "q." });
    assert.equal(env.entriesTopic, "q.transcript.entries");
  });

  test("reading before connect, or a key that is not canonical, is refused", async () => {
    const reader = new SessionReader({ brokers: ["127.0.0.1:9"] });
    await assert.rejects(reader.read(K), (e: unknown) => e instanceof ReadError && /not connected/.test(e.message));
    for (const key of ["main", "agent:A:main", "agent:a:dm:x", " agent:a:main", "agent::main"]) {
      await assert.rejects(reader.read(key), (e: unknown) => e instanceof ConnectorError && /canonical/.test((e as Error).message), key);
    }
  });
});
