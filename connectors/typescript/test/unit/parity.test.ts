// Parity with the Python implementation on every vector of schemas/vectors/session_keys.json,
// and on every code point for the Python string functions the canonicaliser relies on.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { describe, test } from "node:test";

import {
  canonicalSessionKey,
  type DmScope,
  InvalidSessionKeyError,
  partitionFor,
  PY_UNICODE_VERSION,
  pyLower,
  pyRepr,
  pyStrip,
  type RouteLike,
  sessionKeyForRoute,
  timestampProblem,
  UnknownDmScopeError,
} from "@transcript-owner/connector";

import { type ErrorExpectation, loadVectors, shown } from "../helpers.js";

const vectors = loadVectors();
const ERROR_CLASSES = { InvalidSessionKeyError, UnknownDmScopeError } as const;

function expectOutcome(call: () => string, v: { expect?: string; error?: ErrorExpectation }): void {
  if (v.error) {
    const cls = ERROR_CLASSES[v.error.typescript as keyof typeof ERROR_CLASSES];
    assert.ok(cls, `unknown error class ${v.error.typescript}`);
    assert.throws(call, (e: unknown) => {
      assert.ok(e instanceof cls, `expected ${v.error!.typescript}, got ${String(e)}`);
      assert.equal((e as Error).message, v.error!.message);
      return true;
    });
  } else {
    assert.equal(call(), v.expect);
  }
}

test("the vectors and the tables come from the same Python Unicode version", () => {
  assert.equal(vectors.unicode, PY_UNICODE_VERSION);
});

test("there are enough vectors, and every kind of edge is among them", () => {
  assert.ok(vectors.canonical.length + vectors.route.length >= 300);
  const tags = new Set([...vectors.canonical, ...vectors.route].flatMap((v) => v.tags));
  for (const t of ["whitespace", "bom", "control", "signal", "matrix", "telegram-topic", "legacy-dm", "main",
    "case-folding", "invalid", "unicode-version", "sigma"]) {
    assert.ok(tags.has(t), `no vector tagged ${t}`);
  }
});

describe("canonicalSessionKey: every vector", () => {
  for (const v of vectors.canonical) {
    test(`${v.id} ${shown(v.raw)} as ${shown(v.agent_id)}`, () => {
      expectOutcome(() => canonicalSessionKey(v.raw, v.agent_id), v);
    });
  }
});

describe("sessionKeyForRoute: every vector", () => {
  for (const v of vectors.route) {
    test(`${v.id} ${v.dm_scope} ${shown(JSON.stringify(v.route))}`, () => {
      expectOutcome(() => sessionKeyForRoute(v.agent_id, v.route as RouteLike, v.dm_scope as DmScope), v);
    });
  }
});

test("partitionFor (kafkajs's DefaultPartitioner) equals workers/partitioning.partition_for", () => {
  let checked = 0;
  const cases = [
    ...vectors.canonical.map((v) => ({ key: v.expect, partitions: v.partitions })),
    ...vectors.route.map((v) => ({ key: v.expect, partitions: v.partitions })),
    ...vectors.partition,
  ];
  for (const { key, partitions } of cases) {
    if (key === undefined || !partitions) continue;
    for (const n of vectors.partition_counts) {
      assert.equal(partitionFor(key, n), partitions[String(n)], `${shown(key)} mod ${n}`);
      checked++;
    }
  }
  assert.ok(checked > 3000, `only ${checked} checks`);
});

test("timestamps: the builder accepts exactly what the vectors say (never what Python rejects)", () => {
  for (const t of vectors.timestamps) {
    const problem = timestampProblem(t.text);
    assert.equal(problem === null ? "valid" : "invalid", t.typescript, `${shown(t.text)}: ${problem}`);
    if (t.python !== "valid") assert.notEqual(problem, null);
  }
});

function digest(make: (c: string) => string): string {
  const out: string[] = new Array(0x110000);
  for (let cp = 0; cp < 0x110000; cp++) out[cp] = make(String.fromCodePoint(cp));
  return createHash("sha256").update(Buffer.from(out.join("\n"), "utf16le")).digest("hex");
}

describe("Python's str functions on every code point (0..0x10FFFF)", () => {
  const d = vectors.unicode_digests;
  test("str.lower()", () => assert.equal(digest(pyLower), d.lower));
  test("final sigma after each character", () => assert.equal(digest((c) => pyLower(`A${c}\u03a3`)), d.sigma_before));
  test("final sigma before each character", () => assert.equal(digest((c) => pyLower(`A\u03a3${c}`)), d.sigma_after));
  test("str.strip()", () => assert.equal(digest((c) => pyStrip(`${c}x${c}`)), d.strip));
  test("repr()", () => assert.equal(digest(pyRepr), d.repr));
});

describe("why the port does not use trim() and toLowerCase()", () => {
  test("trim() keeps U+001C..U+001F and U+0085, and removes U+FEFF", () => {
    for (const c of "\x1c\x1d\x1e\x1f\x85") {
      assert.equal(pyStrip(c), "");
      assert.equal(c.trim(), c);
    }
    assert.equal(pyStrip("\ufeff"), "\ufeff");
    assert.equal("\ufeff".trim(), "");
  });
  test("toLowerCase() follows a newer Unicode than Python's", () => {
    assert.equal(pyLower("\ua7cb"), "\ua7cb");
    assert.notEqual("\ua7cb".toLowerCase(), "\ua7cb"); // ICU: U+0264
  });
  test("the key a naive port would give differs", () => {
    assert.equal(canonicalSessionKey("agent:ops:main\x1f", "ops"), "agent:ops:main");
    assert.throws(() => canonicalSessionKey("agent:ops\ufeff:main", "ops"), InvalidSessionKeyError);
  });
});
