/**
 * The hash chain of a session's transcript entries (DESIGN.md 1.2, "Tamper evidence"): a port of
 * transcript_connector/chain.py, held equal to it by schemas/vectors/chain.json.
 *
 * Every entry carries the Kafka header `chain`: the lowercase hex SHA-256 of the previous entry's
 * chain (32 raw bytes) followed by this entry's value bytes, exactly as written. A chain starts at
 * the root `SHA-256("transcript-chain/1\n" + session_key + "\n" + epoch)`, with the epoch of its
 * first entry; a reset continues it, an erasure ends it.
 *
 * `verifySession` checks one session from its live entries alone (the compacted topic, a sink's
 * `chain` column) and, given the worker's head for the session, that none was removed from or
 * added at the end, and where its chain starts. It reads each value as Python's verifier does:
 * JSON in UTF-8 (no BOM, no NaN), whose `session_key` and `seq` are the key's and whose `epoch`
 * is a whole number, an integer literal (`2.0` is not 2, `true` is not 1; an epoch past 2**53
 * keeps every digit). Entries alone find corruption, not a writer of the topic; the head is the
 * tamper check (docs/audit-and-erasure.md).
 *
 * A record's `chain` headers are read by one rule (`headerText`). An entry without one is
 * "written before the chain" only where the chain had not begun: before any chained entry of
 * the session and, with the worker's head, below the seq its chain starts at
 * (`ChainHead.chainFrom`), else by its `written_at`, before `CHAIN_SINCE`.
 */

import { createHash } from "node:crypto";

export const CHAIN_HEADER = "chain";
const ROOT_PREFIX = "transcript-chain/1\n";
/** When the chain began (1.2): no worker wrote a chain before it. An entry without a `chain` header
 * whose `written_at` is at or after it should have one, unless the worker's head says where its
 * chain starts. */
export const CHAIN_SINCE = new Date("2026-12-02T00:00:00Z");

/** One live entry of a session: its seq (from its key), value bytes and `chain` header (null: none). */
export interface ChainEntry {
  seq: number;
  value: Uint8Array;
  chain: string | Uint8Array | null | undefined;
}

/** What the worker's state holds of the session: its next seq and last chain (null: no entry
 * chained since the chain began or was ended by an erasure); the seq its chain starts (or, after
 * an erasure, will start) at: an entry there or after without a chain is a finding; and the
 * lowest seq that may be live: every one below it was erased, so an entry there is a finding, and
 * one between it and `chainFrom` without a chain was written before the chain. Either null or
 * absent: not known (a head written before it recorded them). */
export interface ChainHead {
  nextSeq: number;
  chain: Uint8Array | null;
  chainFrom?: number | null;
  liveFrom?: number | null;
}

export interface ChainFinding {
  seq: number;
  problem: string;
}

export interface VerifiedSession {
  findings: ChainFinding[];
  /** entries whose chain was checked */
  chained: number;
  /** entries written before the chain began (before 1.2): not covered */
  unchained: number;
  ok: boolean;
}

/** Where a session's chain starts in `epoch` (32 bytes); the epoch in decimal, as Python's `%d`. */
export function chainRoot(sessionKey: string, epoch: number | bigint): Buffer {
  if (typeof epoch === "number" && !Number.isSafeInteger(epoch)) {
    throw new RangeError(`epoch must be an integer (a bigint past 2**53), got ${epoch}`);
  }
  if (/\p{Cs}/u.test(sessionKey)) {
    // Python's str.encode() refuses it; Buffer.from would write U+FFFD
    throw new RangeError("the session key holds a lone surrogate: it has no UTF-8 bytes");
  }
  return createHash("sha256").update(`${ROOT_PREFIX}${sessionKey}\n${BigInt(epoch)}`, "utf8").digest();
}

/** The chain of an entry whose value is `value`, after the chain `previous` (32 bytes). */
export function chainLink(previous: Uint8Array, value: Uint8Array): Buffer {
  return createHash("sha256").update(previous).update(value).digest();
}

/**
 * The one rule for a record's `chain` header, given the value of each header of that name the
 * record carries: null when there is none (the entry has no chain: written before it, or
 * stripped); the text of the one value when there is exactly one, bytes or text, all ASCII
 * (whether it is 64 lowercase hex digits is checked by verification); else "" (more than one, a
 * null value, one that is not ASCII: never a chain, and a finding wherever it is).
 */
export function headerText(values: readonly unknown[]): string | null {
  if (values.length === 0) return null;
  const one = values.length === 1 ? values[0] : null;
  if (one instanceof Uint8Array) {
    for (const b of one) if (b > 0x7f) return "";
    return Buffer.from(one).toString("latin1");
  }
  return typeof one === "string" && /^[\x00-\x7f]*$/.test(one) ? one : "";
}

/** A `chain` header's 32 bytes; null when it is not 64 lowercase hex digits. */
export function parseChain(header: string | Uint8Array | null | undefined): Buffer | null {
  if (header == null || header.length !== 64) return null;
  const text = typeof header === "string" ? header : Buffer.from(header).toString("latin1");
  return /^[0-9a-f]{64}$/.test(text) ? Buffer.from(text, "hex") : null;
}

/**
 * Check the chain over a session's live entries (any order; one per seq). Each entry must chain
 * from the previous live one, or from the root of its epoch where the chain starts; an entry
 * without a chain must be one written before the chain began (`unchainedProblem`, with
 * `chainedSince` for `CHAIN_SINCE`); with `head`, the last chained entry must be seq
 * `head.nextSeq - 1` holding `head.chain`, and no entry may be below `head.liveFrom`. Each problem
 * is a finding naming the seq where it shows.
 */
export function verifySession(sessionKey: string, entries: Iterable<ChainEntry>, head?: ChainHead | null,
  chainedSince: Date = CHAIN_SINCE): VerifiedSession {
  const since = Math.floor(chainedSince.getTime() / 1000);
  if (!Number.isSafeInteger(since)) throw new RangeError("chainedSince must be a valid date");
  const liveFrom = head?.liveFrom ?? null;
  const findings: ChainFinding[] = [];
  let previous: Buffer | null = null; // the last chained entry's chain (null: the chain starts)
  let unknown = false; // the last entry's chain cannot be read (reported): no link to check
  let lastSeq = 0; // the last entry's seq
  let chainedSeq = 0; // the last chained entry's
  let chained = 0;
  let unchained = 0;
  const sorted = [...entries].sort((a, b) => a.seq - b.seq); // stable, as Python's sorted()
  for (const { seq } of sorted) {
    if (!Number.isSafeInteger(seq)) throw new RangeError(`seq must be an integer, got ${seq}`);
  }
  for (const { seq, value, chain: header } of sorted) {
    if (liveFrom !== null && seq < liveFrom) { // not part of the session any more
      findings.push({ seq, problem: `the worker's state erased every seq below ${liveFrom}: this entry was put back` });
      continue;
    }
    const chain = header == null ? null : parseChain(header);
    const { epoch, written } = readEntry(value, sessionKey, seq);
    let problem = typeof epoch === "string" ? epoch : null;
    let stripped: string | null = null; // why an entry without a chain should have one
    if (header == null) {
      if (previous === null) stripped = unchainedProblem(seq, written, head ?? null, since);
      if (previous === null && !unknown && stripped === null) {
        unchained += 1; // written before the chain began
      } else {
        problem = stripped ?? "no chain header after chained entries: the entry was rewritten";
      }
    } else if (chain === null) {
      problem = header.length > 0 ? "the chain header is not 64 lowercase hex digits"
        : "the chain header is empty, repeated, null or not ASCII";
    } else {
      chained += 1;
    }
    if (chain !== null && problem === null && !unknown) {
      if (previous === null && !chain.equals(chainLink(chainRoot(sessionKey, epoch as bigint), value))) {
        problem = "does not chain from the session's root: this entry was changed, "
          + "or entries before it removed";
      } else if (previous !== null && !chain.equals(chainLink(previous, value))) {
        const gap = seq > lastSeq + 1 ? `; seq ${lastSeq + 1}..${seq - 1} missing` : "";
        problem = `does not chain from seq ${lastSeq}: this entry was changed, or `
          + `one before it removed, inserted or moved${gap}`;
      }
    }
    if (problem !== null) findings.push({ seq, problem });
    if (header != null || previous !== null || unknown || stripped !== null) {
      unknown = chain === null;
      if (chain !== null) {
        previous = chain;
        chainedSeq = seq;
      }
    }
    lastSeq = seq;
  }
  if (head != null) findings.push(...againstHead(head, previous, chainedSeq));
  return { findings, chained, unchained, ok: findings.length === 0 };
}

/**
 * Why an entry without a chain, before any chained entry of its session, should have one (null:
 * it was written before the chain began). With the worker's head that knows where its chain
 * starts, the head decides: from `chainFrom` on, every entry is chained; below it (and at or above
 * `liveFrom`, checked before) entries were written before the chain. Otherwise the entry's
 * `written_at` decides: before `since` (seconds since 1970 UTC: CHAIN_SINCE) no worker chained; at
 * or after it, or when no `written_at` reads, the entry should be chained.
 */
function unchainedProblem(seq: number, written: number | null, head: ChainHead | null, since: number): string | null {
  const chainFrom = head?.chainFrom ?? null;
  if (chainFrom !== null) {
    if (seq >= chainFrom) {
      return `no chain header at or after seq ${chainFrom}, where the worker's state says the chain starts: `
        + "the header was stripped";
    }
    if ((head?.liveFrom ?? null) !== null) return null;
  }
  if (written !== null && written < since) return null;
  const stamp = `${new Date(since * 1000).toISOString().slice(0, 19)}Z`;
  return `no chain header, and written_at is not before ${stamp}, when the chain began: `
    + "the header was stripped (or a worker before 1.2 wrote the entry)";
}

/** The last chained entry against the worker's head for the session. */
function againstHead(head: ChainHead, last: Buffer | null, lastSeq: number): ChainFinding[] {
  const end = head.nextSeq - 1;
  if (head.chain === null) {
    if (last !== null) {
      return [{ seq: lastSeq, problem: "chained entries the worker's state does not know of "
        + "(the state's head has no chain): inserted" }];
    }
    return [];
  }
  if (last === null) {
    return [{ seq: end, problem: "the worker's state holds a chain through this seq, and no "
      + "chained entry is left: removed" }];
  }
  if (lastSeq < end) {
    return [{ seq: end, problem: `the worker's state has entries through this seq; they end at `
      + `seq ${lastSeq}: removed` }];
  }
  if (lastSeq > end) return [{ seq: lastSeq, problem: `after the worker's last entry (seq ${end}): inserted` }];
  if (!last.equals(head.chain)) {
    return [{ seq: end, problem: "differs from the chain the worker's state holds: entries were "
      + "rewritten (and chained again)" }];
  }
  return [];
}

/** The entry's epoch (or what is wrong with the value: a finding) and its `written_at`
 * (`writtenSeconds`; null: none that reads). */
function readEntry(value: Uint8Array, sessionKey: string, seq: number): { epoch: bigint | string; written: number | null } {
  let doc: Map<string, Member> | null;
  try {
    doc = readObject(utf8.decode(value));
  } catch (e) {
    // TypeError: not UTF-8
    if (e instanceof NotJson || e instanceof TypeError) return { epoch: "the value is not JSON", written: null };
    throw e;
  }
  if (doc === null) return { epoch: "the value is not a transcript entry", written: null };
  const written = writtenSeconds(doc.get("written_at"));
  const named = doc.get("seq");
  if (doc.get("session_key") !== sessionKey || typeof named !== "bigint" || named !== BigInt(seq)) {
    return { epoch: "the value names another session or seq than its key", written };
  }
  const epoch = doc.get("epoch");
  if (typeof epoch !== "bigint" || epoch < 0n) return { epoch: "the value's epoch is not a whole number", written };
  return { epoch, written };
}

const WRITTEN_AT = /^([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.[0-9]+)?(?:[Zz]|([+-])([0-9]{2}):([0-9]{2}))$/;

/**
 * An entry's `written_at` (RFC 3339 as the entry schema's pattern has it: a `T`, `t` or space
 * between date and time, any fraction, `Z`, `z` or an offset) in whole seconds since 1970 UTC, the
 * fraction dropped; null for anything else. Plain arithmetic on the fields, as Python's
 * `written_seconds`: the same number for any text of that form.
 */
export function writtenSeconds(text: unknown): number | null {
  const m = typeof text === "string" ? WRITTEN_AT.exec(text) : null;
  if (m === null) return null;
  const [y, mo, d, h, mi, s] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  const offset = m[7] === undefined ? 0 : (Number(m[8]) * 60 + Number(m[9])) * (m[7] === "+" ? 1 : -1);
  return days(y, mo, d) * 86400 + h * 3600 + (mi - offset) * 60 + s;
}

/** Days from 1970-01-01 to the proleptic Gregorian date y-m-d (H. Hinnant's days_from_civil). */
function days(year: number, m: number, d: number): number {
  const y = m <= 2 ? year - 1 : year;
  const era = Math.floor(y / 400);
  const yoe = y - era * 400;
  const doy = Math.floor((153 * (m + (m > 2 ? -3 : 9)) + 2) / 5) + d - 1;
  return era * 146097 + yoe * 365 + Math.floor(yoe / 4) - Math.floor(yoe / 100) + doy - 719468;
}

// JSON as Python's json.loads reads a str (RFC 8259, nothing more): UTF-8 with no BOM (kept by
// the decoder, then refused as a character), whitespace " \t\n\r" only, no NaN or Infinity.
// Integer literals are bigints; like Python's int(), one of more than 4300 digits is refused.
// The one difference: Python gives up on values nested about 1000 deep (RecursionError, "not
// JSON"); this reader, a loop, takes them.
const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const MAX_INT_DIGITS = 4300; // sys.int_info.default_max_str_digits
/** A top-level member's value: a string, an integer, or anything else. */
type Member = string | bigint | typeof OTHER;
const OTHER = Symbol("other");
const NUMBER = /-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?/y;
const HEX4 = /^[0-9a-fA-F]{4}$/;
const ESCAPES = new Map([['"', '"'], ["\\", "\\"], ["/", "/"], ["b", "\b"], ["f", "\f"], ["n", "\n"], ["r", "\r"], ["t", "\t"]]);

class NotJson extends Error {}

/** A document's top-level members when it is an object (the last of a repeated name), else null. */
function readObject(text: string): Map<string, Member> | null {
  const r = new Reader(text);
  r.space();
  let members: Map<string, Member> | null = null;
  if (r.peek() === "{") {
    members = new Map();
    r.i += 1;
    r.space();
    if (r.peek() === "}") {
      r.i += 1;
    } else {
      for (;;) {
        const name = r.name();
        members.set(name, r.value());
        r.space();
        const c = r.take();
        if (c === "}") break;
        if (c !== ",") throw new NotJson();
      }
    }
  } else {
    r.value();
  }
  r.space();
  if (r.i !== text.length) throw new NotJson(); // data after the document
  return members;
}

class Reader {
  i = 0;
  constructor(readonly s: string) {}

  peek(): string | undefined {
    return this.s[this.i];
  }

  take(): string | undefined {
    return this.s[this.i++];
  }

  space(): void {
    let c = this.s.charCodeAt(this.i);
    while (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) c = this.s.charCodeAt(++this.i);
  }

  /** `"name" :` with the space around, as an object's member begins. */
  name(): string {
    this.space();
    if (this.peek() !== '"') throw new NotJson();
    const name = this.string();
    this.space();
    if (this.take() !== ":") throw new NotJson();
    return name;
  }

  /** A value after optional space: strings and integers as such, anything else OTHER. */
  value(): Member {
    this.space();
    const c = this.peek();
    if (c === '"') return this.string();
    if (c === "{" || c === "[") {
      this.nested();
      return OTHER;
    }
    for (const word of ["true", "false", "null"]) {
      if (this.s.startsWith(word, this.i)) {
        this.i += word.length;
        return OTHER;
      }
    }
    NUMBER.lastIndex = this.i;
    const m = NUMBER.exec(this.s);
    if (m === null) throw new NotJson();
    this.i += m[0].length;
    if (m[1] !== undefined || m[2] !== undefined) return OTHER; // a float
    if (m[0].replace("-", "").length > MAX_INT_DIGITS) throw new NotJson();
    return BigInt(m[0]);
  }

  /** An object or an array, read to its end without recursion (any depth). */
  nested(): void {
    const open: string[] = []; // the closing bracket of each container entered
    for (;;) {
      // a value is expected
      this.space();
      const c = this.peek();
      if (c === "{" || c === "[") {
        this.i += 1;
        this.space();
        const close = c === "{" ? "}" : "]";
        if (this.peek() === close) {
          this.i += 1;
        } else {
          open.push(close);
          if (close === "}") this.name();
          continue;
        }
      } else {
        this.value();
      }
      // a value ended: a comma, or the end of its containers
      for (;;) {
        const close = open.at(-1);
        if (close === undefined) return;
        this.space();
        const d = this.take();
        if (d === close) {
          open.pop();
          continue;
        }
        if (d !== ",") throw new NotJson();
        if (close === "}") this.name();
        break;
      }
    }
  }

  /** A string literal, its escapes decoded (a lone surrogate escape kept, as Python keeps it). */
  string(): string {
    this.i += 1; // the opening quote
    let out = "";
    let from = this.i;
    for (;;) {
      const c = this.s.charCodeAt(this.i);
      if (Number.isNaN(c) || c < 0x20) throw new NotJson(); // the end, or a raw control character
      if (c === 0x22) break;
      if (c === 0x5c) {
        out += this.s.slice(from, this.i);
        const e = this.s[this.i + 1] ?? "";
        if (e === "u") {
          const hex = this.s.slice(this.i + 2, this.i + 6);
          if (!HEX4.test(hex)) throw new NotJson();
          out += String.fromCharCode(parseInt(hex, 16));
          this.i += 6;
        } else {
          const decoded = ESCAPES.get(e);
          if (decoded === undefined) throw new NotJson();
          out += decoded;
          this.i += 2;
        }
        from = this.i;
      } else {
        this.i += 1;
      }
    }
    out += this.s.slice(from, this.i);
    this.i += 1; // the closing quote
    return out;
  }
}
