// The reader example (examples/read-session.ts) without a broker: a session is its exact entry keys,
// never a key prefix (session `K#1` beside `K`), in compaction's view, and its lines carry no
// character a terminal acts on; the chain is checked over the same live records.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { chainLink, chainRoot } from "@transcript-owner/connector";

import { type EntryRecord, jsonLine, liveEntries, parseEntryKey, verifyEntries, visible } from "../../examples/read-session.js";

const K = "agent:a:main";
const NEIGHBOUR = "agent:a:main#1";
const key = (session: string, seq: number): string => `${session}#${String(seq).padStart(10, "0")}`;
const value = (session: string, seq: number, text: string): string => JSON.stringify({ session_key: session, seq, text });

/** Records of `session` seqs 1..n as the worker writes them: each with its `chain` header (bytes). */
function chainedRecords(session: string, n: number): EntryRecord[] {
  let previous = chainRoot(session, 0);
  return Array.from({ length: n }, (_, i) => {
    const v = Buffer.from(JSON.stringify({ session_key: session, epoch: 0, seq: i + 1, text: `m${i + 1}` }));
    previous = chainLink(previous, v);
    return { key: key(session, i + 1), value: v, chain: Buffer.from(previous.toString("hex")) };
  });
}

describe("read-session", () => {
  test("an entry key parses to its session and seq: exactly 10 ASCII digits after the last #", () => {
    assert.deepEqual(parseEntryKey(key(NEIGHBOUR, 3)), { sessionKey: NEIGHBOUR, seq: 3 });
    assert.deepEqual(parseEntryKey(key("a#0000000001", 12)), { sessionKey: "a#0000000001", seq: 12 });
    for (const bad of ["", K, `${K}#`, "#0000000001", `${K}#123`, `${K}#00000000001`, `${K}#000000000\u0661`]) {
      assert.equal(parseEntryKey(bad), null, bad);
    }
  });

  test("only the session's own keys, the latest value of each, in seq order", () => {
    const records = [
      { key: key(K, 2), value: value(K, 2, "erased") },
      { key: key(NEIGHBOUR, 1), value: value(NEIGHBOUR, 1, "another chat") },
      { key: key(K, 1), value: value(K, 1, "first") },
      { key: key(K, 2), value: null },
      { key: key(K, 3), value: value(K, 3, "old") },
      { key: key(K, 3), value: value(K, 3, "new") },
      { key: key(K, 4), value: value(NEIGHBOUR, 4, "names another session") },
      { key: key(K, 5), value: "{not json" },
    ];
    assert.deepEqual(liveEntries(K, records), [{ session_key: K, seq: 1, text: "first" }, { session_key: K, seq: 3, text: "new" }]);
    assert.deepEqual(liveEntries(NEIGHBOUR, records), [{ session_key: NEIGHBOUR, seq: 1, text: "another chat" }]);
  });

  test("the chain over the session's live records: honest, an entry tombstoned, one rewritten", () => {
    const records = chainedRecords(K, 3);
    const neighbour = chainedRecords(NEIGHBOUR, 2);
    const mixed = [records[0]!, neighbour[0]!, records[1]!, neighbour[1]!, records[2]!];
    assert.deepEqual(verifyEntries(K, mixed), { findings: [], chained: 3, unchained: 0, ok: true });
    assert.deepEqual(verifyEntries(NEIGHBOUR, mixed), { findings: [], chained: 2, unchained: 0, ok: true });
    assert.deepEqual(liveEntries(K, mixed).map((e) => (e as { seq: number }).seq), [1, 2, 3]);

    const tombstoned = verifyEntries(K, [...mixed, { key: key(K, 2), value: null }]);
    assert.deepEqual(tombstoned.findings.map((f) => f.seq), [3]);
    assert.match(tombstoned.findings[0]!.problem, /seq 2\.\.2 missing/);

    const rewritten = { ...records[1]!, value: Buffer.from(String(records[1]!.value).replace("m2", "m9")) };
    assert.deepEqual(verifyEntries(K, [...mixed, rewritten]).findings.map((f) => f.seq), [2]);
    // a value liveEntries leaves out is still a finding of the chain
    const notJson = verifyEntries(K, [...mixed, { ...records[2]!, value: "{not json" }]);
    assert.deepEqual(notJson.findings, [{ seq: 3, problem: "the value is not JSON" }]);
    // records without headers: written before the chain, not covered
    assert.deepEqual(verifyEntries(K, records.map(({ key: k, value: v }) => ({ key: k, value: v }))),
      { findings: [], chained: 0, unchained: 3, ok: true });
  });

  test("a line holds no control or bidi character, and is the same JSON value", () => {
    const entry = { text: "\u001b[2J\u001b]0;pwned\u0007 \u009b31m \u202egnp.exe\u2066\u2069\r\n", name: "héllo 👩\u200d👧" };
    const line = jsonLine(entry);
    assert.doesNotMatch(line, /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/);
    assert.match(line, /\\u001b\[2J\\u001b\]0;pwned\\u0007 \\u009b31m \\u202egnp\.exe\\u2066\\u2069/);
    assert.deepEqual(JSON.parse(line), entry);
    assert.equal(visible("ok\u001b"), "ok\\u001b");
  });
});
