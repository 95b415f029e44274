// What a record of transcript.entries is (src/entries-topic.ts) equal to
// transcript_connector/entries_topic.py on every vector of schemas/vectors/positions.json
// (written by schemas/vectors/positions.py from the Python) and on the cases of
// test/fixtures/entries-cases.json (written by scripts/entries_cases.py from the Python: the
// parser's edges, timestamps, an entry's fields in pydantic's lax mode); and by hand.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";

import {
  chainHeader,
  classify,
  entryKey,
  furthest,
  noPosition,
  parseEntryKey,
  parsePositionKey,
  type Position,
  positionAgeS,
  positionKey,
  positionValue,
  ReadError,
  StaleReadError,
} from "@transcript-owner/connector";

import { PACKAGE_ROOT, REPO_ROOT } from "../helpers.js";

interface KeyVector {
  key: string;
  partition: number | null;
}
interface RecordVector {
  key: string | null;
  value: string | null;
  read_from: number;
  kind: "entry" | "erased" | "position" | "skip";
  partition?: number;
  input_offset?: number | string;
  control_offset?: number | string;
  at_ms?: number;
  epoch?: string;
  name?: string;
}

const VECTORS_FILE = process.env.POSITION_VECTORS ?? `${REPO_ROOT}schemas/vectors/positions.json`;
// offsets as strings: JSON.parse would round one past 2**53
const bigAsText = (text: string): string => text.replace(/("(?:input|control)_offset": *)([0-9]+)/g, '$1"$2"');
const vectors = JSON.parse(bigAsText(readFileSync(VECTORS_FILE, "utf8"))) as { keys: KeyVector[]; records: RecordVector[] };
const cases = JSON.parse(readFileSync(`${PACKAGE_ROOT}test/fixtures/entries-cases.json`, "utf8")) as RecordVector[];
const hex = (h: string | null): Buffer | null => (h === null ? null : Buffer.from(h, "hex"));
const shown = (h: string | null): string => (h === null ? "null" : JSON.stringify(Buffer.from(h, "hex").toString("latin1").slice(0, 80)));

function expectRecord(v: RecordVector): void {
  const found = classify(hex(v.key), hex(v.value), null, v.read_from, 42n);
  assert.equal(found.kind, v.kind, found.kind === "skip" ? found.reason : undefined);
  if (found.kind === "position") {
    const p = found.position;
    assert.equal(p.inputOffset, BigInt(v.input_offset!));
    if (v.partition !== undefined) assert.equal(p.partition, v.partition);
    if (v.control_offset !== undefined) assert.equal(p.controlOffset, BigInt(v.control_offset));
    assert.equal(p.at?.getTime(), v.at_ms);
    assert.equal(p.offset, 42n);
  }
  if (found.kind === "entry" && v.epoch !== undefined) assert.equal(found.epoch, BigInt(v.epoch));
}

test("the vectors hold every kind", () => {
  assert.ok(vectors.keys.length >= 20 && vectors.records.length >= 20);
  for (const kind of ["entry", "erased", "position", "skip"]) assert.ok(vectors.records.some((r) => r.kind === kind), kind);
  assert.ok(cases.length >= 100);
});

describe("parsePositionKey: every vector", () => {
  for (const v of vectors.keys) {
    test(shown(v.key), () => {
      assert.equal(parsePositionKey(hex(v.key)), v.partition);
      const text = Buffer.from(v.key, "hex").toString("utf8");
      if (Buffer.from(text, "utf8").equals(Buffer.from(v.key, "hex"))) assert.equal(parsePositionKey(text), v.partition);
    });
  }
});

describe("classify: every vector", () => {
  for (const [i, v] of vectors.records.entries()) {
    test(`${i}: ${shown(v.key)} ${shown(v.value)} from ${v.read_from}`, () => expectRecord(v));
  }
});

describe("classify: every case of entries-cases.json", () => {
  for (const v of cases) test(v.name!, () => expectRecord(v));
});

describe("by hand", () => {
  const at = new Date("2026-12-04T10:00:00.250Z");

  test("keys: an entry's, a position's", () => {
    assert.equal(entryKey("agent:a:main#1", 12), "agent:a:main#1#0000000012");
    assert.deepEqual(parseEntryKey(entryKey("agent:a:main#1", 12)), { sessionKey: "agent:a:main#1", seq: 12 });
    assert.deepEqual(parseEntryKey("a#0000000001#0000000002"), { sessionKey: "a#0000000001", seq: 2 });
    for (const bad of ["", "agent:a:main", "agent:a:main#", "#0000000001", "k#123", "k#00000000001", "k#000000000\u0661", null]) {
      assert.equal(parseEntryKey(bad), null, String(bad));
    }
    assert.equal(parseEntryKey(Buffer.from([0x61, 0xff, 0x23, ...Buffer.from("0000000001")])), null); // not UTF-8
    assert.equal(positionKey(7), "position/7");
    assert.equal(parsePositionKey(positionKey(2147483647)), 2147483647);
  });

  test("a position as the worker writes it reads back; anywhere else it claims nothing", () => {
    const value = positionValue(3, 2n ** 63n - 1n, 4, at);
    assert.equal(value.toString(), '{"schema":"input-position/1","partition":3,"input_offset":9223372036854775807,'
      + '"control_offset":4,"at":"2026-12-04T10:00:00.250Z"}');
    assert.deepEqual(classify("position/3", value, null, 3, 9n), {
      kind: "position", position: { partition: 3, inputOffset: 2n ** 63n - 1n, controlOffset: 4n, at, offset: 9n },
    });
    assert.equal(classify("position/3", value, null, 4).kind, "skip");
    assert.equal(classify("position/4", value, null, 4).kind, "skip");
    assert.equal(classify("position/3", value).kind, "position"); // where it was read: not known
    const skipped = classify("position/3", value, null, 4);
    assert.deepEqual(skipped, { kind: "skip", reason: "position: key names partition 3, value 3, read from partition 4" });
    assert.deepEqual(classify("position/3", null, null, 3), { kind: "skip", reason: "position: a tombstone (the worker writes none)" });
  });

  test("a reason names the field, never the content", () => {
    const secret = "my secret text";
    const found = classify("agent:a:main#0000000001", JSON.stringify({ schema: "transcript-entry/1", text: secret }));
    assert.equal(found.kind, "skip");
    assert.doesNotMatch((found as { reason: string }).reason, /secret/);
    const duplicate = classify("position/3", '{"schema":"input-position/1","partition":3,"input_offset":1,'
      + '"control_offset":1,"at":"2026-12-04T10:00:00Z","x":{"a":1,"a":2}}', null, 3);
    assert.deepEqual(duplicate, { kind: "skip", reason: "invalid position: duplicate member: x.a" });
  });

  test("an entry keeps its value's text and its chain header", () => {
    const value = JSON.stringify({
      schema: "transcript-entry/1", session_key: "agent:a:main", epoch: 0, seq: 1, entry_id: "e1", send_id: "s1",
      role: "assistant", agent_id: "a", text: "héllo 👋", media: [], source: "automation_result",
      posted_by: { kind: "job", id: "j" }, delivered_at: "2026-12-04T10:00:00Z", written_at: "2026-12-04T10:00:00Z",
      platform_message_ids: ["1"],
    });
    const chain = "ab".repeat(32);
    const found = classify("agent:a:main#0000000001", Buffer.from(value), { chain: Buffer.from(chain) }, 3, 1n);
    assert.deepEqual(found, {
      kind: "entry", sessionKey: "agent:a:main", epoch: 0n, seq: 1, entryId: "e1", sendId: "s1", entryJson: value, chain,
    });
    assert.deepEqual(classify("agent:a:main#0000000001", null), { kind: "erased", sessionKey: "agent:a:main", seq: 1 });
  });

  test("chainHeader: none is null; one ASCII header, its text; anything else \"\" (a finding)", () => {
    assert.equal(chainHeader({ chain: Buffer.from("abc") }), "abc");
    assert.equal(chainHeader({ chain: "abc" }), "abc");
    assert.equal(chainHeader({ chain: [Buffer.from("a"), Buffer.from("b")] }), "");
    assert.equal(chainHeader({ chain: Buffer.from([0x61, 0xe9]) }), "");
    assert.equal(chainHeader({ chain: "é" }), "");
    assert.equal(chainHeader({ chain: null }), "");
    assert.equal(chainHeader({ chain: [] }), null);
    assert.equal(chainHeader({ other: "x" }), null);
    assert.equal(chainHeader(null), null);
  });

  test("furthest never moves back; no position claims nothing", () => {
    const p = (input: bigint, control: bigint, ms: number, offset: bigint | null): Position => ({
      partition: 3, inputOffset: input, controlOffset: control, at: new Date(ms), offset,
    });
    assert.deepEqual(furthest(noPosition(3), p(5n, 1n, 1000, 7n)), p(5n, 1n, 1000, 7n));
    assert.deepEqual(furthest(p(5n, 1n, 2000, 7n), p(4n, 2n, 1000, 9n)), p(5n, 2n, 2000, 9n));
    assert.deepEqual(furthest(p(5n, 1n, 2000, 7n), p(6n, 0n, 3000, null)), p(6n, 1n, 3000, 7n));
    assert.equal(positionAgeS(noPosition(3)), null);
    assert.equal(positionAgeS(p(1n, 1n, 1000, null), 3500), 2.5);
    assert.equal(positionAgeS(p(1n, 1n, 5000, null), 3500), 0); // a clock ahead: never negative
  });

  test("StaleReadError: Python's message, word for word", () => {
    // from transcript_connector.errors.StaleReadError, printed by Python
    const cases: [StaleReadError, string][] = [
      [new StaleReadError(3, 5n, 8n, 2.25),
        "stale read: partition 3 reached input offset 5, needed 8; the worker's last position there is 2.2s old"],
      [new StaleReadError(3, 0n, 8n, null, "a repartition is in progress: delivery.confirmations has 16 partitions, transcript.entries 8"),
        "stale read: partition 3 reached input offset 0, needed 8; the worker has written no position there; "
        + "a repartition is in progress: delivery.confirmations has 16 partitions, transcript.entries 8"],
      [new StaleReadError(0, 9223372036854775806n, 9223372036854775807n, 0.05),
        "stale read: partition 0 reached input offset 9223372036854775806, needed 9223372036854775807; "
        + "the worker's last position there is 0.1s old"],
      [new StaleReadError(7, 1n, 2n, 12345.75),
        "stale read: partition 7 reached input offset 1, needed 2; the worker's last position there is 12345.8s old"],
    ];
    for (const [error, message] of cases) {
      assert.equal(error.message, message);
      assert.ok(error instanceof StaleReadError && !(error instanceof ReadError));
      assert.equal(error.name, "StaleReadError");
    }
    const e = cases[0]![0];
    assert.deepEqual([e.partition, e.reached, e.needed, e.ageS, e.reason], [3, 5n, 8n, 2.25, null]);
  });
});
