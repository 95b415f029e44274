// The reader example (examples/read-session.ts) without a broker: what it prints of a read (a
// session's entries as the reader holds them, lines that carry no character a terminal acts
// on), the chain checked over the same live values, its arguments and exit codes.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { chainLink, chainRoot, entryKey, LATEST, PartitionView, positionValue, type SessionRead } from "@transcript-owner/connector";

import { EXIT_CHAIN, EXIT_STALE, jsonLine, parseArgs, report, sessionKeyOf, visible } from "../../examples/read-session.js";

const K = "agent:a:main";
const NEIGHBOUR = "agent:a:main#1";

function entry(session: string, seq: number, text: string, epoch = 0): Buffer {
  return Buffer.from(JSON.stringify({
    schema: "transcript-entry/1", session_key: session, epoch, seq, entry_id: `e${seq}`, send_id: `s${seq}`,
    role: "assistant", agent_id: "a", text, media: [], source: "automation_result", posted_by: { kind: "job", id: "j" },
    delivered_at: "2026-12-04T10:00:00Z", written_at: "2026-12-04T10:00:00Z", platform_message_ids: [String(seq)],
  }));
}

/** Records of `session` seqs 1..n as the worker writes them, each with its `chain` header. */
function chained(session: string, n: number): { key: string; value: Buffer; chain: string }[] {
  let previous = chainRoot(session, 0);
  return Array.from({ length: n }, (_, i) => {
    const value = entry(session, i + 1, `m${i + 1}`);
    previous = chainLink(previous, value);
    return { key: entryKey(session, i + 1), value, chain: previous.toString("hex") };
  });
}

/** What a read of `session` returns after these records (in offset order). */
function readOf(session: string, records: { key: string; value: Buffer | null; chain?: string }[]): SessionRead {
  const view = new PartitionView(0, 10);
  const { session: held } = view.hold(session);
  records.forEach((r, i) => view.apply(r.key, r.value, r.chain ? { chain: r.chain } : {}, BigInt(i)));
  view.apply("position/0", positionValue(0, 5, 0, new Date()), null, BigInt(records.length));
  view.advance(BigInt(records.length + 1));
  return { sessionKey: session, partition: 0, position: view.position, ...held.snapshot() };
}

function run(read: SessionRead): { out: string[]; err: string[]; code: number } {
  const out: string[] = [];
  const err: string[] = [];
  const code = report(read, (l) => out.push(l), (l) => err.push(l));
  return { out, err, code };
}

describe("read-session", () => {
  test("prints the session's entries, in order, and an honest chain: exit 0", () => {
    const mine = chained(K, 3);
    const theirs = chained(NEIGHBOUR, 2);
    const { out, err, code } = run(readOf(K, [mine[0]!, theirs[0]!, mine[1]!, theirs[1]!, mine[2]!]));
    assert.equal(code, 0);
    assert.deepEqual(out.map((l) => JSON.parse(l).text), ["m1", "m2", "m3"]);
    assert.match(err[0]!, /^position: partition 0, input offset 5 \(written \d+\.\ds ago\)$/);
    assert.equal(err.at(-1), "chain: 3 entries chained, 0 written before the chain, 0 findings");
  });

  test("an entry tombstoned or rewritten in the middle is a finding: exit 3", () => {
    const mine = chained(K, 3);
    const tombstoned = run(readOf(K, [...mine, { key: mine[1]!.key, value: null }]));
    assert.equal(tombstoned.code, EXIT_CHAIN);
    assert.match(tombstoned.err.join("\n"), /chain: seq 3: .*seq 2\.\.2 missing/);
    const rewritten = run(readOf(K, [...mine, { ...mine[1]!, value: entry(K, 2, "m9") }]));
    assert.equal(rewritten.code, EXIT_CHAIN);
    assert.deepEqual(rewritten.out.map((l) => JSON.parse(l).text), ["m1", "m9", "m3"]);
    // a value that is no entry is not printed, and is still a finding of the chain
    const notJson = run(readOf(K, [...mine, { ...mine[2]!, value: Buffer.from("{not json") }]));
    assert.deepEqual(notJson.out.map((l) => JSON.parse(l).seq), [1, 2]);
    assert.match(notJson.err.join("\n"), /chain: seq 3: the value is not JSON/);
    assert.equal(EXIT_STALE, 4);
  });

  test("a line holds no control or bidi character, and is the same JSON value", () => {
    const value = { text: "\u001b[2J\u001b]0;pwned\u0007 \u009b31m \u202egnp.exe\u2066\u2069\r\n", name: "héllo 👩\u200d👧" };
    const line = jsonLine(value);
    assert.doesNotMatch(line, /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/);
    assert.match(line, /\\u001b\[2J\\u001b\]0;pwned\\u0007 \\u009b31m \\u202egnp\.exe\\u2066\\u2069/);
    assert.deepEqual(JSON.parse(line), value);
    assert.equal(visible("ok\u001b"), "ok\\u001b");
    const printed = run(readOf(K, [{ key: entryKey(K, 1), value: entry(K, 1, "\u001b[31mred") }])).out[0]!;
    assert.doesNotMatch(printed, /\u001b/);
  });

  test("arguments: a full key, latest by default, --at P:O, --timeout seconds", () => {
    assert.deepEqual(parseArgs([K]), { key: K, bound: LATEST, timeoutMs: 10_000 });
    assert.deepEqual(parseArgs([K, "--at", "3:41", "--timeout", "2.5"]), { key: K, bound: { partition: 3, offset: "41" }, timeoutMs: 2500 });
    for (const bad of [[], [K, K], [K, "--at"], [K, "--at", "x"], [K, "--timeout", "-1"], [K, "--other"]]) assert.equal(parseArgs(bad), null);
    assert.equal(sessionKeyOf("Agent:A:Telegram:DM:U1"), "agent:a:telegram:direct:u1");
    assert.throws(() => sessionKeyOf("main"), /full agent/);
  });
});
