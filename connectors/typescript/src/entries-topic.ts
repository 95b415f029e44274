/**
 * What one record of `transcript.entries` is to a reader (DESIGN 1.2, "Reading one session";
 * 1.3, "Reading at a position"): a port of transcript_connector/entries_topic.py, held equal
 * to it by schemas/vectors/positions.json.
 *
 * A record is
 *   an entry     key `<session_key>#<seq, 10 digits>`, a valid `transcript-entry/1` of that
 *                session and seq; a session is its exact keys, never a key prefix;
 *   erased       a tombstone of an entry key;
 *   a position   key `position/<p>`, a valid `input-position/1` of partition p, read from
 *                partition p: every input record of partition p below its `input_offset` has
 *                its outcome before it in the partition;
 *   or a skip    anything else, with a reason that names the field, never the content.
 *
 * Values are read as the worker's pydantic reads them (./json-text): a position's numbers are
 * JSON integers only (not 1.0, "1" or true), a position naming a member twice is skipped, its
 * `at` is RFC 3339 with an offset within 1970..2999; an entry's are read as pydantic's lax
 * mode reads them (its seq may be 1.0 or "1", as the worker's sink takes it). Nothing here does
 * I/O: the readers are shells around `classify`.
 */

import { CHAIN_HEADER, headerText } from "./chain.js";
import { duplicatePath, type JsonNode, member, NotJsonError, parseJson } from "./json-text.js";
import { timestampMicros } from "./timestamps.js";

export const POSITION_SCHEMA = "input-position/1";
export const ENTRY_SCHEMA = "transcript-entry/1";
export const POSITION_PREFIX = "position/";
const MAX_REASON = 300;
const INT32_MAX = 2n ** 31n - 1n;
const INT64_MAX = 2n ** 63n - 1n;
const ENTRY_KEY = /^([\s\S]+)#([0-9]{10})$/;
const POSITION_KEY = /^position\/(0|[1-9][0-9]{0,9})$/;
const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** Where a reader stands in one partition of transcript.entries. */
export interface Position {
  /** The entries partition, which is the input partition it speaks of. */
  readonly partition: number;
  /** Every input record of `partition` below this offset has its outcome in what was read. */
  readonly inputOffset: bigint;
  /** The same for transcript.control. */
  readonly controlOffset: bigint;
  /** The worker's clock when it wrote the position; null: no position record read (it claims nothing). */
  readonly at: Date | null;
  /** The entries offset the position record was read at, when known. */
  readonly offset: bigint | null;
}

/** A partition where no position record was read: offsets 0, claims nothing. */
export function noPosition(partition: number): Position {
  return { partition, inputOffset: 0n, controlOffset: 0n, at: null, offset: null };
}

/** Seconds since the worker wrote `position` (null: it wrote none). */
export function positionAgeS(position: Position, now: number = Date.now()): number | null {
  return position.at === null ? null : Math.max(0, (now - position.at.getTime()) / 1000);
}

/**
 * The position after reading `read` at `current`: it never moves back. (The worker's never do;
 * a record that would is kept by compaction only until the next one, and what the further one
 * claimed stays true.)
 */
export function furthest(current: Position, read: Position): Position {
  if (current.at === null) return read;
  const max = (a: bigint, b: bigint): bigint => (a > b ? a : b);
  return {
    partition: read.partition,
    inputOffset: max(read.inputOffset, current.inputOffset),
    controlOffset: max(read.controlOffset, current.controlOffset),
    at: read.at !== null && read.at.getTime() > current.at.getTime() ? read.at : current.at,
    offset: read.offset ?? current.offset,
  };
}

/** `<session_key>#<seq, 10 digits>`. */
export function entryKey(sessionKey: string, seq: number): string {
  return `${sessionKey}#${String(seq).padStart(10, "0")}`;
}

/**
 * `<session_key>#<seq, 10 digits>` -> its session and seq, or null. A session key may hold `#`,
 * so a reader selects a session by this, never by a key prefix: the keys of session `K#1`
 * start with `K#` too (DESIGN 1.2). A position key has no `#`: never an entry's. Bytes that are
 * not UTF-8 are no entry key.
 */
export function parseEntryKey(key: string | Uint8Array | null | undefined): { sessionKey: string; seq: number } | null {
  const text = keyText(key);
  if (text === null) return null;
  const m = ENTRY_KEY.exec(text);
  return m ? { sessionKey: m[1]!, seq: Number(m[2]) } : null;
}

/** `position/<p>`. */
export function positionKey(partition: number): string {
  return `${POSITION_PREFIX}${partition}`;
}

/** p of a position key `position/<p>` (decimal, no leading zero, at most 10 digits), or null. */
export function parsePositionKey(key: string | Uint8Array | null | undefined): number | null {
  const text = keyText(key);
  const m = text === null ? null : POSITION_KEY.exec(text);
  return m ? Number(m[1]) : null;
}

/** An `input-position/1` value as the worker writes it (compact JSON, `at` in UTC milliseconds). */
export function positionValue(partition: number, inputOffset: bigint | number, controlOffset: bigint | number, at: Date): Buffer {
  return Buffer.from(`{"schema":"${POSITION_SCHEMA}","partition":${partition},"input_offset":${inputOffset},`
    + `"control_offset":${controlOffset},"at":"${at.toISOString()}"}`);
}

/** A valid entry of its key's session and seq. */
export interface EntryRecord {
  readonly kind: "entry";
  readonly sessionKey: string;
  readonly epoch: bigint;
  readonly seq: number;
  readonly entryId: string;
  readonly sendId: string;
  /** The value, exactly as written (UTF-8 JSON text). */
  readonly entryJson: string;
  /** The record's `chain` header (chainHeader). */
  readonly chain: string | null;
}
/** A tombstone of an entry key. */
export interface ErasedRecord {
  readonly kind: "erased";
  readonly sessionKey: string;
  readonly seq: number;
}
export interface PositionRecord {
  readonly kind: "position";
  readonly position: Position;
}
export interface SkippedRecord {
  readonly kind: "skip";
  readonly reason: string;
}
export type Classified = EntryRecord | ErasedRecord | PositionRecord | SkippedRecord;

/** Record headers as kafkajs gives them (a repeated header is an array). */
export type RecordHeaders = Record<string, Buffer | string | null | (Buffer | string | null)[] | undefined>;

/**
 * The text of a record's `chain` header, by the one rule of `headerText` (chain.ts): null when the
 * record has none; "" when it has more than one, or one whose value is null or not ASCII (never a
 * chain: verification reports it); else its text (what it should hold is checked by
 * verification). Never throws.
 */
export function chainHeader(headers: RecordHeaders | null | undefined): string | null {
  const found: unknown = headers?.[CHAIN_HEADER];
  if (found === undefined) return null;
  return headerText(Array.isArray(found) ? found : [found]);
}

/**
 * The position record of key `position/<p>` read from `partition` (undefined: not known), or
 * why it is none. A position names its own partition, in its key, its value and where it is:
 * anything else is skipped (a forged or misplaced record claims nothing).
 */
export function decodePosition(p: number, value: Uint8Array | null, partition?: number, offset?: bigint | null): Position | SkippedRecord {
  if (value === null) return skip("position: a tombstone (the worker writes none)");
  let doc: JsonNode;
  try {
    doc = parseJson(value);
  } catch (e) {
    if (e instanceof NotJsonError) return skip("invalid position: value: json_invalid");
    return skip(`position: ${(e as Error).name}`);
  }
  const fields = positionFields(doc);
  if (typeof fields === "string") return skip(`invalid position: ${fields}`);
  const duplicate = duplicatePath(doc);
  if (duplicate !== null) return skip(`invalid position: duplicate member: ${duplicate}`);
  if (fields.partition !== BigInt(p) || (partition !== undefined && p !== partition)) {
    const where = partition === undefined ? "" : `, read from partition ${partition}`;
    return skip(`position: key names partition ${p}, value ${fields.partition}${where}`);
  }
  return { partition: p, inputOffset: fields.inputOffset, controlOffset: fields.controlOffset, at: fields.at, offset: offset ?? null };
}

/**
 * What one record of `transcript.entries` read from `partition` (at `offset`) is. Never
 * throws. `headers` only give an entry its chain: whatever they hold, the entry is kept.
 */
export function classify(
  key: string | Uint8Array | null | undefined,
  value: Uint8Array | string | null | undefined,
  headers?: RecordHeaders | null,
  partition?: number,
  offset?: bigint | null,
): Classified {
  const bytes = value == null ? null : typeof value === "string" ? Buffer.from(value, "utf8") : value;
  const p = parsePositionKey(key);
  if (p !== null) {
    const found = decodePosition(p, bytes, partition, offset);
    return "kind" in found ? found : { kind: "position", position: found };
  }
  if (key == null) return skip("key: missing");
  if (keyText(key) === null) return skip("key: not UTF-8");
  const parsed = parseEntryKey(key);
  if (parsed === null) return skip("key: not <session_key>#<seq, 10 digits> nor position/<partition>");
  const { sessionKey, seq } = parsed;
  if (bytes === null) return { kind: "erased", sessionKey, seq };
  let doc: JsonNode;
  let entryJson: string;
  try {
    entryJson = utf8.decode(bytes);
    doc = parseJson(entryJson);
  } catch (e) {
    if (e instanceof NotJsonError || e instanceof TypeError) return skip("invalid entry: value: json_invalid");
    return skip(`value: ${(e as Error).name}`);
  }
  const entry = entryFields(doc);
  if (typeof entry === "string") return skip(`invalid entry: ${entry}`);
  if (entry.sessionKey !== sessionKey || entry.seq !== BigInt(seq)) {
    return skip("key: does not match the entry's session_key and seq");
  }
  return {
    kind: "entry", sessionKey, epoch: entry.epoch, seq, entryId: entry.entryId, sendId: entry.sendId,
    entryJson, chain: chainHeader(headers),
  };
}

function skip(reason: string): SkippedRecord {
  return { kind: "skip", reason: reason.slice(0, MAX_REASON) };
}

function keyText(key: string | Uint8Array | null | undefined): string | null {
  if (key == null) return null;
  if (typeof key === "string") return key;
  try {
    return utf8.decode(key);
  } catch {
    return null;
  }
}

// --- the models, as pydantic validates them -------------------------------------------------

type Problem = string; // `field: pydantic's error type`

/** input-position/1 (transcript_connector.records.InputPosition): strict integers. */
function positionFields(doc: JsonNode): { partition: bigint; inputOffset: bigint; controlOffset: bigint; at: Date } | Problem {
  if (doc.type !== "object") return "value: model_type";
  const schema = literal(doc, "schema", [POSITION_SCHEMA]);
  if (schema !== null) return schema;
  const strict = (name: string, max: bigint): bigint | Problem => {
    const node = member(doc, name);
    if (node === undefined) return `${name}: missing`;
    if (node.type !== "int") return `${name}: int_type`;
    if (node.value < 0n) return `${name}: greater_than_equal`;
    if (node.value > max) return `${name}: less_than_equal`;
    return node.value;
  };
  const partition = strict("partition", INT32_MAX);
  if (typeof partition === "string") return partition;
  const inputOffset = strict("input_offset", INT64_MAX);
  if (typeof inputOffset === "string") return inputOffset;
  const controlOffset = strict("control_offset", INT64_MAX);
  if (typeof controlOffset === "string") return controlOffset;
  const at = timestamp(doc, "at");
  if (typeof at === "string") return at;
  return { partition, inputOffset, controlOffset, at: dateOf(at) };
}

const ORIGIN_KINDS = ["turn_reply", "message_tool", "automation_result", "failure_alert", "subagent_announcement"];
const POSTED_BY_KINDS = ["job", "subagent", "agent"];
const AGENT_ID = /^[a-z0-9][a-z0-9_-]{0,63}$/;

/** transcript-entry/1 (transcript_connector.records.TranscriptEntry), in pydantic's lax mode. */
function entryFields(doc: JsonNode): { sessionKey: string; epoch: bigint; seq: bigint; entryId: string; sendId: string } | Problem {
  if (doc.type !== "object") return "value: model_type";
  const schema = literal(doc, "schema", [ENTRY_SCHEMA]);
  if (schema !== null) return schema;
  const sessionKey = str(doc, "session_key");
  if (typeof sessionKey !== "object") return sessionKey;
  const epoch = laxInt(doc, "epoch", 0n);
  if (typeof epoch === "string") return epoch;
  const seq = laxInt(doc, "seq", 1n);
  if (typeof seq === "string") return seq;
  const entryId = str(doc, "entry_id");
  if (typeof entryId !== "object") return entryId;
  const sendId = str(doc, "send_id");
  if (typeof sendId !== "object") return sendId;
  const sendIdLength = [...sendId.value].length; // code points, as Python counts
  if (sendIdLength < 1) return "send_id: string_too_short";
  if (sendIdLength > 512) return "send_id: string_too_long";
  const checks: (Problem | null)[] = [
    literal(doc, "role", ["assistant"]),
    pattern(doc, "agent_id", AGENT_ID),
    strProblem(doc, "text"),
    list(doc, "media", (item, at) => model(item, at, (o) => strProblem(o, "kind", at) ?? strProblem(o, "name", at))),
    literal(doc, "source", ORIGIN_KINDS),
    model(member(doc, "posted_by"), "posted_by", (o) => literal(o, "kind", POSTED_BY_KINDS, "posted_by")
      ?? strProblem(o, "id", "posted_by") ?? optionalStr(o, "name", "posted_by") ?? optionalStr(o, "run_id", "posted_by")),
    timestampProblemOf(doc, "delivered_at"),
    timestampProblemOf(doc, "written_at"),
    list(doc, "platform_message_ids", (item, at) => (item.type === "string" ? null : `${at}: string_type`)),
  ];
  const problem = checks.find((c) => c !== null);
  if (problem) return problem;
  return { sessionKey: sessionKey.value, epoch, seq, entryId: entryId.value, sendId: sendId.value };
}

const path = (parent: string | undefined, name: string): string => (parent ? `${parent}.${name}` : name);

function literal(doc: JsonNode, name: string, allowed: readonly string[], parent?: string): Problem | null {
  const node = member(doc, name);
  if (node === undefined) return `${path(parent, name)}: missing`;
  return node.type === "string" && allowed.includes(node.value) ? null : `${path(parent, name)}: literal_error`;
}

function str(doc: JsonNode, name: string, parent?: string): { value: string } | Problem {
  const node = member(doc, name);
  if (node === undefined) return `${path(parent, name)}: missing`;
  return node.type === "string" ? { value: node.value } : `${path(parent, name)}: string_type`;
}

function strProblem(doc: JsonNode, name: string, parent?: string): Problem | null {
  const found = str(doc, name, parent);
  return typeof found === "string" ? found : null;
}

function optionalStr(doc: JsonNode, name: string, parent?: string): Problem | null {
  const node = member(doc, name);
  return node === undefined || node.type === "null" || node.type === "string" ? null : `${path(parent, name)}: string_type`;
}

function pattern(doc: JsonNode, name: string, re: RegExp): Problem | null {
  const found = str(doc, name);
  if (typeof found === "string") return found;
  return re.test(found.value) ? null : `${name}: string_pattern_mismatch`;
}

function model(node: JsonNode | undefined, at: string, check: (o: JsonNode) => Problem | null): Problem | null {
  if (node === undefined) return `${at}: missing`;
  return node.type === "object" ? check(node) : `${at}: model_type`;
}

function list(doc: JsonNode, name: string, check: (item: JsonNode, at: string) => Problem | null): Problem | null {
  const node = member(doc, name);
  if (node === undefined) return `${name}: missing`;
  if (node.type !== "array") return `${name}: tuple_type`;
  for (let i = 0; i < node.items.length; i++) {
    const problem = check(node.items[i]!, `${name}.${i}`);
    if (problem !== null) return problem;
  }
  return null;
}

function timestamp(doc: JsonNode, name: string): bigint | Problem {
  const node = member(doc, name);
  if (node === undefined) return `${name}: missing`;
  if (node.type !== "string") return `${name}: value_error`;
  const micros = timestampMicros(node.value);
  return micros === null ? `${name}: datetime_parsing` : micros;
}

function timestampProblemOf(doc: JsonNode, name: string): Problem | null {
  const found = timestamp(doc, name);
  return typeof found === "string" ? found : null;
}

/** Milliseconds, rounded half to even as the vectors' `round(at.timestamp() * 1000)`. */
function dateOf(micros: bigint): Date {
  let ms = micros / 1000n;
  const rest = micros % 1000n;
  if (rest > 500n || (rest === 500n && ms % 2n !== 0n)) ms += 1n;
  return new Date(Number(ms));
}

// pydantic's lax int (JSON input): an integer; a float that is a whole number within int64;
// true/false; a string of one, after Unicode whitespace, with `.0…` after it or `_` between its
// digits
const WHITE_SPACE = "\\t\\n\\v\\f\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
const TRIM = new RegExp(`^[${WHITE_SPACE}]+|[${WHITE_SPACE}]+$`, "g");
const INT_TEXT = /^[+-]?[0-9]+(?:_[0-9]+)*$/;
const FLOAT_INT64 = 2 ** 63;

function laxInt(doc: JsonNode, name: string, min: bigint): bigint | Problem {
  const node = member(doc, name);
  if (node === undefined) return `${name}: missing`;
  let value: bigint;
  switch (node.type) {
    case "int":
      value = node.value;
      break;
    case "bool":
      value = node.value ? 1n : 0n;
      break;
    case "float":
      if (!Number.isFinite(node.value)) return `${name}: finite_number`;
      if (!Number.isInteger(node.value)) return `${name}: int_from_float`;
      if (Math.abs(node.value) >= FLOAT_INT64) return `${name}: int_parsing_size`;
      value = BigInt(node.value);
      break;
    case "string": {
      let text = node.value.replace(TRIM, "");
      const dot = text.indexOf(".");
      if (dot >= 0) {
        if (!/^\.0+$/.test(text.slice(dot))) return `${name}: int_parsing`;
        text = text.slice(0, dot);
      }
      if (!INT_TEXT.test(text)) return `${name}: int_parsing`;
      value = BigInt(text.replaceAll("_", "").replace(/^\+/, ""));
      break;
    }
    default:
      return `${name}: int_type`;
  }
  return value < min ? `${name}: greater_than_equal` : value;
}
