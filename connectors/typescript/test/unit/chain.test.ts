// The hash chain (src/chain.ts) equal to transcript_connector/chain.py on every vector of
// schemas/vectors/chain.json (written by schemas/vectors/chain.py from the Python), and by hand
// on headers and sessions the vectors leave out.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";

import {
  CHAIN_HEADER,
  CHAIN_SINCE,
  type ChainEntry,
  type ChainHead,
  chainHeader,
  chainLink,
  chainRoot,
  headerText,
  parseChain,
  verifySession,
  writtenSeconds,
} from "@transcript-owner/connector";

import { REPO_ROOT } from "../helpers.js";

interface SessionVector {
  name: string;
  session_key: string;
  entries: [number, string, string | null][];
  hex?: true;
  head: { next_seq: number; chain: string | null; chain_from: number | null; live_from: number | null } | null;
  chained_since?: string;
  finding_seqs: number[];
  problems: string[];
  chained: number;
  unchained: number;
}
interface ChainVectors {
  roots: { session_key: string; epoch: number; root: string }[];
  links: { previous: string; value: string; chain: string }[];
  sessions: SessionVector[];
  headers: { name: string; values: (string | null)[]; text: string | null }[];
}

const VECTORS_FILE = process.env.CHAIN_VECTORS ?? `${REPO_ROOT}schemas/vectors/chain.json`;
const vectors = JSON.parse(readFileSync(VECTORS_FILE, "utf8")) as ChainVectors;
const K = "agent:main:telegram:direct:42";

const entriesOf = (v: SessionVector): ChainEntry[] =>
  v.entries.map(([seq, value, chain]) => ({ seq, value: Buffer.from(value, v.hex ? "hex" : "utf8"), chain }));
const headOf = (v: SessionVector): ChainHead | null =>
  v.head && {
    nextSeq: v.head.next_seq, chain: v.head.chain === null ? null : Buffer.from(v.head.chain, "hex"),
    chainFrom: v.head.chain_from, liveFrom: v.head.live_from,
  };
const sinceOf = (v: SessionVector): Date => (v.chained_since === undefined ? CHAIN_SINCE : new Date(v.chained_since));

/** A session written honestly from the root of epoch 0: seqs 1..n. */
function honest(n: number): ChainEntry[] {
  const out: ChainEntry[] = [];
  let previous = chainRoot(K, 0);
  for (let seq = 1; seq <= n; seq++) {
    const value = Buffer.from(JSON.stringify({ schema: "transcript-entry/1", session_key: K, epoch: 0, seq, text: `héllo ${seq} 👋` }));
    previous = chainLink(previous, value);
    out.push({ seq, value, chain: previous.toString("hex") });
  }
  return out;
}

test("the header is `chain`, and the vectors hold every kind of case", () => {
  assert.equal(CHAIN_HEADER, "chain");
  assert.ok(vectors.roots.length >= 20 && vectors.links.length >= 4 && vectors.sessions.length >= 50);
  assert.ok(vectors.sessions.some((v) => v.hex), "no value that is not UTF-8");
  assert.ok(vectors.sessions.some((v) => v.finding_seqs.length === 0 && v.head !== null));
  assert.ok(vectors.roots.some((v) => v.epoch === 2 ** 53 - 1));
});

describe("chainRoot: every vector", () => {
  for (const v of vectors.roots) {
    test(`${JSON.stringify(v.session_key)} epoch ${v.epoch}`, () => {
      assert.equal(chainRoot(v.session_key, v.epoch).toString("hex"), v.root);
      assert.equal(chainRoot(v.session_key, BigInt(v.epoch)).toString("hex"), v.root);
    });
  }
});

test("chainLink: every vector", () => {
  for (const v of vectors.links) {
    assert.equal(chainLink(Buffer.from(v.previous, "hex"), Buffer.from(v.value, "utf8")).toString("hex"), v.chain);
    assert.equal(chainLink(new Uint8Array(Buffer.from(v.previous, "hex")), new TextEncoder().encode(v.value)).toString("hex"), v.chain);
  }
});

describe("verifySession: every vector", () => {
  for (const v of vectors.sessions) {
    test(v.name, () => {
      const got = verifySession(v.session_key, entriesOf(v), headOf(v), sinceOf(v));
      assert.deepEqual(got.findings.map((f) => f.seq), v.finding_seqs);
      assert.deepEqual(got.findings.map((f) => f.problem), v.problems);
      assert.deepEqual([got.chained, got.unchained, got.ok], [v.chained, v.unchained, v.finding_seqs.length === 0]);
      // the headers as a Kafka client hands them over (bytes), the entries in another order
      const asBytes = entriesOf(v).reverse().map((e) => ({ ...e, chain: e.chain == null ? null : Buffer.from(e.chain as string, "latin1") }));
      assert.deepEqual(verifySession(v.session_key, asBytes, headOf(v), sinceOf(v)), got);
      if (v.head !== null && v.head.chain_from === null && v.head.live_from === null) {
        // a head without them, as one written before heads recorded them
        const { chainFrom: _f, liveFrom: _l, ...old } = headOf(v)!;
        assert.deepEqual(verifySession(v.session_key, entriesOf(v), old, sinceOf(v)), got);
      }
    });
  }
});

describe("headerText and chainHeader: every vector", () => {
  for (const v of vectors.headers) {
    test(v.name, () => {
      const values = v.values.map((x) => (x === null ? null : Buffer.from(x, "hex")));
      assert.equal(headerText(values), v.text);
      // as kafkajs gives them: one value as such, a repeated header as an array
      const given = values.length === 0 ? {} : { chain: values.length === 1 ? values[0]! : values, other: Buffer.from("x") };
      assert.equal(chainHeader(given), v.text);
    });
  }
});

test("the chain began on CHAIN_SINCE; written_at is read to the second in any offset", () => {
  assert.equal(CHAIN_SINCE.toISOString(), "2026-12-02T00:00:00.000Z");
  const since = CHAIN_SINCE.getTime() / 1000;
  for (const text of ["2026-12-02T00:00:00.999+00:00", "2026-12-01t19:00:00-05:00", "2026-12-02 05:30:00+05:30", "2026-12-02T00:00:00z"]) {
    assert.equal(writtenSeconds(text), since, text);
  }
  for (const text of ["2026-12-02T00:00:00", "2026-12-02T00:00:00Z\n", "2026-12-02", null, 1, "", "２０２６-12-02T00:00:00Z"]) {
    assert.equal(writtenSeconds(text), null, String(text));
  }
});

describe("by hand", () => {
  const hex = chainRoot(K, 0).toString("hex");

  test("a header that is not 64 lowercase hex digits reads as none", () => {
    assert.deepEqual(parseChain(hex), chainRoot(K, 0));
    assert.deepEqual(parseChain(Buffer.from(hex)), chainRoot(K, 0));
    for (const bad of [hex.toUpperCase(), `${hex.slice(0, 63)}A`, hex.slice(0, 63), `${hex}0`, `${hex.slice(0, 63)}g`,
      ` ${hex.slice(1)}`, `${hex.slice(0, 62)}\u00e9`, `${hex.slice(0, 62)}٠`, "", null, undefined]) {
      assert.equal(parseChain(bad), null, String(bad));
      if (typeof bad === "string") assert.equal(parseChain(Buffer.from(bad, "utf8")), null, bad);
    }
    // a byte that is no ASCII, in a header of 64 bytes
    assert.equal(parseChain(Buffer.concat([Buffer.from(hex.slice(0, 63)), Buffer.from([0xe1])])), null);
  });

  test("an uppercase header is a finding, not a chain", () => {
    const entries = honest(3);
    entries[1]!.chain = (entries[1]!.chain as string).toUpperCase();
    const got = verifySession(K, entries);
    assert.deepEqual(got.findings, [{ seq: 2, problem: "the chain header is not 64 lowercase hex digits" }]);
    assert.equal(got.chained, 2);
  });

  test("an empty session: nothing to find, unless the worker's state holds a chain", () => {
    assert.deepEqual(verifySession(K, []), { findings: [], chained: 0, unchained: 0, ok: true });
    assert.deepEqual(verifySession(K, [], { nextSeq: 1, chain: null }).findings, []);
    assert.deepEqual(verifySession(K, [], { nextSeq: 4, chain: chainRoot(K, 0) }).findings.map((f) => f.seq), [3]);
  });

  test("every single changed byte of a value, and every changed hex digit, is found", () => {
    const entries = honest(4);
    const last = parseChain(entries[3]!.chain)!;
    const head = { nextSeq: 5, chain: last };
    assert.equal(verifySession(K, entries, head).ok, true);
    for (let i = 0; i < entries.length; i++) {
      const { value, chain } = entries[i]!;
      for (let at = 0; at < value.length; at += 7) {
        const changed = Buffer.from(value);
        changed[at] = changed[at]! ^ 0x01;
        const copy = entries.map((e, j) => (j === i ? { ...e, value: changed } : e));
        assert.equal(verifySession(K, copy, head).ok, false, `seq ${i + 1} byte ${at}`);
      }
      for (let at = 0; at < 64; at++) {
        const text = chain as string;
        const digit = text[at] === "0" ? "1" : "0";
        const copy = entries.map((e, j) => (j === i ? { ...e, chain: text.slice(0, at) + digit + text.slice(at + 1) } : e));
        assert.equal(verifySession(K, copy, head).ok, false, `seq ${i + 1} digit ${at}`);
      }
    }
  });

  test("an epoch past 2**53 keeps every digit; a number past it is refused", () => {
    assert.notEqual(chainRoot(K, 2n ** 53n + 1n).toString("hex"), chainRoot(K, 2n ** 53n).toString("hex"));
    assert.equal(chainRoot(K, -0).toString("hex"), chainRoot(K, 0n).toString("hex"));
    assert.throws(() => chainRoot(K, 2 ** 53), RangeError);
    assert.throws(() => chainRoot(K, 1.5), RangeError);
    assert.throws(() => chainRoot("agent:a:\ud800", 0), RangeError); // Python's encode() refuses it too
  });

  test("a seq that is not an integer is refused", () => {
    assert.throws(() => verifySession(K, [{ seq: 1.5, value: Buffer.from("{}"), chain: null }]), RangeError);
  });
});
