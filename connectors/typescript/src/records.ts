/**
 * The input records of the wire contract (DESIGN.md "Records"), typed, and their builders.
 *
 * Field names are the wire's (snake_case), as in schemas/json/ and the worker's dead-letter
 * reasons, so an error names the field exactly as the worker would. A builder returns a frozen
 * record that the worker accepts: validated against the JSON Schema (schemas/json/, copied into
 * the package at build time) and against the rules the schema cannot say (Rule 1: the
 * timestamp range, a turn reply's turn, keys that name an agent, size, nesting, lone
 * surrogates, NaN). Anything it would dead-letter throws InvalidRecordError naming the field.
 */

import { readFileSync } from "node:fs";

import { Ajv2020, type ErrorObject, type ValidateFunction } from "ajv/dist/2020.js";

import { InvalidRecordError, InvalidSessionKeyError, UnknownDmScopeError } from "./errors.js";
import { pyLower, pyStrip } from "./pyunicode.js";
import { canonicalSessionKey, type DmScope, sessionKeyForRoute } from "./session-keys.js";
import { timestampProblem, timestampText } from "./timestamps.js";

export const CONFIRMATION_SCHEMA = "delivery-confirmation/1";
export const RESET_SCHEMA = "session-reset/1";
/** Larger records are dead-lettered unread (transcript_connector/parse.py MAX_RECORD_BYTES). */
export const MAX_RECORD_BYTES = 1 << 20;
/** The worker's JSON parser reads no deeper (objects and arrays, the record itself included). */
export const JSON_DEPTH_LIMIT = 200;

export type PeerKind = "direct" | "group" | "channel";
export type OriginKind =
  | "turn_reply"
  | "message_tool"
  | "automation_result"
  | "failure_alert"
  | "subagent_announcement";
export type JobMode = "in_chat" | "background";
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };
/** An RFC 3339 timestamp with offset, or a Date (written as its ISO string, UTC). */
export type TimestampInput = string | Date;

export interface Route {
  channel: string;
  account_id?: string | null;
  peer_kind: PeerKind;
  peer_id: string;
  thread_id?: string | null;
}
export interface Turn {
  session_key: string;
  turn_id: string;
}
export interface Job {
  id: string;
  name?: string | null;
  run_id?: string | null;
  mode: JobMode;
  session_key?: string | null;
}
export interface Subagent {
  run_id: string;
  agent_id: string;
  label?: string | null;
}
interface OriginCommon {
  job?: Job | null;
  subagent?: Subagent | null;
}
/** A turn reply names its turn (Rule 1); other kinds may. */
export type Origin =
  | (OriginCommon & { kind: "turn_reply"; turn: Turn })
  | (OriginCommon & { kind: Exclude<OriginKind, "turn_reply">; turn?: Turn | null });
export interface Media {
  kind: string;
  name: string;
  url?: string | null;
  mime?: string | null;
}
export interface Native {
  kind: string;
  [field: string]: JsonValue;
}
export interface Payload {
  text?: string | null;
  media?: Media[];
  native?: Native[];
}
export interface Receipt {
  platform_message_ids: string[];
  sent_at?: string | null;
}

/** `delivery-confirmation/1`: a channel confirmed that an outbound message was shown in a chat. */
export interface DeliveryConfirmation {
  readonly schema: typeof CONFIRMATION_SCHEMA;
  readonly send_id: string;
  readonly confirmed_at: string;
  readonly agent_id: string;
  readonly session_key: string;
  readonly route: Readonly<Route>;
  readonly destination_agent_id?: string | null;
  readonly origin: Readonly<Origin>;
  readonly payload: Readonly<Payload>;
  readonly receipt: Readonly<Receipt>;
}

/** `session-reset/1`: the chat was reset (same chat, next epoch). */
export interface SessionReset {
  readonly schema: typeof RESET_SCHEMA;
  readonly session_key: string;
  readonly reset_at: string;
  readonly reason?: string | null;
}

export type InputRecord = DeliveryConfirmation | SessionReset;

/**
 * What buildConfirmation takes: the record's fields, without `schema`. The session key is
 * either `session_key` (a key you computed; kept as given, the worker canonicalises it) or
 * `dm_scope` (the agent's DM scope: the key is built from `route` with sessionKeyForRoute, the
 * way inbound producers build it). Give one of the two.
 */
export interface ConfirmationInput {
  send_id: string;
  confirmed_at: TimestampInput;
  agent_id: string;
  session_key?: string;
  dm_scope?: DmScope;
  route: Route;
  destination_agent_id?: string | null;
  origin: Origin;
  payload: Payload;
  receipt: { platform_message_ids: string[]; sent_at?: TimestampInput | null };
}

/** What buildReset takes. The key must be a full `agent:<agent_id>:…` key (a reset names no agent). */
export interface ResetInput {
  session_key: string;
  reset_at: TimestampInput;
  reason?: string | null;
}

// --- validation against schemas/json ---------------------------------------------------

const ajv = new Ajv2020({ strict: true, allErrors: true });
// The schemas say `format: date-time`; the worker's reading of it is ./timestamps.
ajv.addFormat("date-time", { type: "string", validate: (s: string) => timestampProblem(s) === null });

function schema(name: string): ValidateFunction {
  const text = readFileSync(new URL(`./schemas/${name}.schema.json`, import.meta.url), "utf8");
  return ajv.compile(JSON.parse(text) as object);
}

let validators: { confirmation: ValidateFunction; reset: ValidateFunction } | undefined;
function validatorsOf(): { confirmation: ValidateFunction; reset: ValidateFunction } {
  validators ??= { confirmation: schema("delivery-confirmation"), reset: schema("session-reset") };
  return validators;
}

function path(instancePath: string, extra?: string): string {
  const parts = instancePath.split("/").slice(1);
  if (extra !== undefined) parts.push(extra);
  let out = "";
  for (const raw of parts) {
    const p = raw.replace(/~1/g, "/").replace(/~0/g, "~");
    out += /^\d+$/.test(p) ? `[${p}]` : out ? `.${p}` : p;
  }
  return out;
}

function problemOf(e: ErrorObject, value: unknown): string {
  switch (e.keyword) {
    case "required":
      return e.schemaPath.includes("/then/") ? "field required when origin.kind is turn_reply" : "field required";
    case "type":
      return `must be ${(e.params as { type: string }).type}`;
    case "pattern":
      return `does not match ${(e.params as { pattern: string }).pattern}`;
    case "minLength":
      return (e.params as { limit: number }).limit === 1 ? "must not be empty" : e.message ?? "too short";
    case "maxLength":
      return `longer than ${(e.params as { limit: number }).limit} characters`;
    case "enum":
      return `must be one of ${(e.params as { allowedValues: unknown[] }).allowedValues.map((v) => `'${String(v)}'`).join(", ")}`;
    case "const":
      return `must be '${String((e.params as { allowedValue: unknown }).allowedValue)}'`;
    case "format":
      return timestampProblem(String(valueAt(value, e.instancePath))) ?? "not an RFC 3339 timestamp";
    default:
      return e.message ?? e.keyword;
  }
}

/** ajv's errors as the worker words them: `field.path: problem`, the first one's field in `.field`. */
function describe(errors: readonly ErrorObject[], value: unknown): InvalidRecordError {
  const found: [string, string][] = [];
  const anyOfAt = new Set(errors.filter((e) => e.keyword === "anyOf").map((e) => e.instancePath));
  for (const e of errors) {
    if (e.keyword === "if") continue;
    if (anyOfAt.has(e.instancePath) && e.keyword !== "anyOf") continue; // reported by their anyOf
    if (e.keyword === "anyOf") {
      // a nullable field: the value is of the right type but wrong (pattern …), or of neither type
      const branches = errors.filter((o) => o.instancePath === e.instancePath && o.keyword !== "anyOf");
      const specific = branches.find((o) => o.keyword !== "type");
      const types = [...new Set(branches.filter((o) => o.keyword === "type").map((o) => (o.params as { type: string }).type))];
      found.push([path(e.instancePath), specific ? problemOf(specific, value) : types.length ? `must be ${types.join(" or ")}` : "invalid"]);
      continue;
    }
    const field = e.keyword === "required"
      ? path(e.instancePath, (e.params as { missingProperty: string }).missingProperty)
      : path(e.instancePath);
    found.push([field, problemOf(e, value)]);
  }
  const [first, ...rest] = found.length ? found : [["", "invalid record"] as [string, string]];
  const err = new InvalidRecordError(first![0], first![1]);
  if (rest.length) {
    const shown = rest.slice(0, 2).map(([f, p]) => (f ? `${f}: ${p}` : p));
    const more = rest.length - shown.length;
    err.message += `; ${shown.join("; ")}${more > 0 ? ` (+${more} more)` : ""}`;
  }
  return err;
}

function valueAt(value: unknown, instancePath: string): unknown {
  let v = value;
  for (const p of instancePath.split("/").slice(1)) v = (v as Record<string, unknown> | undefined)?.[p];
  return v;
}

/**
 * Throws InvalidRecordError unless `value` is JSON the worker reads: plain objects, arrays,
 * strings without lone surrogates, finite numbers, booleans, null; at most JSON_DEPTH_LIMIT
 * levels deep. (JSON.stringify would turn NaN into null and a lone surrogate into an escape
 * the worker cannot parse, and drop undefined: the record would change on the way.)
 */
function checkJson(value: unknown, at: string, depth: number, seen: Set<object>): void {
  if (value === null || typeof value === "boolean") return;
  if (typeof value === "string") {
    if (/[\ud800-\udfff]/u.test(value)) throw new InvalidRecordError(at, "holds a lone surrogate (not Unicode text)");
    return;
  }
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new InvalidRecordError(at, "NaN/Infinity are not JSON");
    return;
  }
  if (typeof value !== "object") throw new InvalidRecordError(at, `a ${typeof value} is not JSON`);
  if (depth + 1 > JSON_DEPTH_LIMIT) {
    const shown = at.length > 60 ? `${at.slice(0, at.indexOf("[", 40) > 0 ? at.indexOf("[", 40) : 60)}…` : at;
    throw new InvalidRecordError(shown, `nested too deeply (the limit is ${JSON_DEPTH_LIMIT} levels)`);
  }
  if (seen.has(value)) throw new InvalidRecordError(at, "holds a cycle");
  seen.add(value);
  if (Array.isArray(value)) {
    value.forEach((v, i) => checkJson(v, `${at}[${i}]`, depth + 1, seen));
  } else {
    const proto = Object.getPrototypeOf(value) as unknown;
    if (proto !== Object.prototype && proto !== null) {
      throw new InvalidRecordError(at, "must be a plain object");
    }
    for (const [k, v] of Object.entries(value)) {
      if (/[\ud800-\udfff]/u.test(k)) throw new InvalidRecordError(at, "a field name holds a lone surrogate");
      if (v === undefined) continue; // omitted, as JSON.stringify omits it
      checkJson(v, at ? `${at}.${k}` : k, depth + 1, seen);
    }
  }
  seen.delete(value);
}

function deepFreeze<T>(value: T): T {
  if (value && typeof value === "object" && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value)) deepFreeze(v);
  }
  return value;
}

function stamp(field: string, value: unknown): string {
  const text = timestampText(value);
  if (typeof text !== "string") throw new InvalidRecordError(field, text.problem);
  return text;
}

function keyOrThrow(field: string, raw: string, agentId: string): string {
  try {
    return canonicalSessionKey(raw, agentId);
  } catch (e) {
    if (e instanceof InvalidSessionKeyError) throw new InvalidRecordError(field, e.message);
    throw e;
  }
}

function pick<T extends object>(from: T | null | undefined, keys: readonly string[]): T | null | undefined {
  if (from === null || from === undefined || typeof from !== "object" || Array.isArray(from)) return from;
  const out: Record<string, unknown> = {};
  for (const k of keys) {
    const v = (from as Record<string, unknown>)[k];
    if (v !== undefined) out[k] = v;
  }
  return out as T;
}

function list<T extends object>(items: unknown, keys: readonly string[] | null): unknown {
  if (!Array.isArray(items)) return items;
  return items.map((m: unknown) =>
    keys === null ? (m && typeof m === "object" && !Array.isArray(m) ? { ...m } : m) : pick(m as T, keys),
  );
}

/** Schema, then what the schema cannot say (the worker's Rule 1 checks), then size. */
function check(record: Record<string, unknown>, validate: ValidateFunction, dmScope?: DmScope): void {
  checkJson(record, "", 0, new Set());
  if (!validate(record)) throw describe(validate.errors ?? [], record);
  if (record.schema === RESET_SCHEMA) {
    resetKey(record.session_key as string);
  } else {
    const agentId = record.agent_id as string;
    if (dmScope !== undefined) {
      try {
        record.session_key = sessionKeyForRoute(agentId, record.route as Route, dmScope);
      } catch (e) {
        if (e instanceof UnknownDmScopeError) throw new InvalidRecordError("dm_scope", e.message);
        if (e instanceof InvalidSessionKeyError) throw new InvalidRecordError("session_key", e.message);
        throw e;
      }
    }
    keyOrThrow("session_key", record.session_key as string, agentId);
    // The worker dead-letters a turn reply whose turn key, or an in-chat job whose key, names no agent.
    const o = record.origin as Origin;
    if (o.kind === "turn_reply") keyOrThrow("origin.turn.session_key", o.turn.session_key, agentId);
    if (o.job && o.job.mode === "in_chat" && typeof o.job.session_key === "string") {
      keyOrThrow("origin.job.session_key", o.job.session_key, agentId);
    }
  }
  const size = Buffer.byteLength(JSON.stringify(record), "utf8");
  if (size > MAX_RECORD_BYTES) throw new InvalidRecordError("", `oversize: ${size} bytes > 1 MiB`);
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/**
 * A `delivery-confirmation/1` record the worker accepts, from `input` (the record's fields).
 * Throws InvalidRecordError naming the field when the worker would dead-letter it.
 */
export function buildConfirmation(input: ConfirmationInput): DeliveryConfirmation {
  if (!isObject(input)) throw new InvalidRecordError("", "not a JSON object");
  const hasKey = input.session_key !== undefined;
  const hasScope = input.dm_scope !== undefined;
  if (hasKey === hasScope) {
    throw new InvalidRecordError(
      "session_key",
      hasKey ? "give session_key or dm_scope, not both" : "field required (or dm_scope, to build it from route)",
    );
  }
  const origin = pick(input.origin, ["kind", "turn", "job", "subagent"]) as Record<string, unknown> | undefined;
  if (isObject(origin)) {
    if (origin.turn !== undefined) origin.turn = pick(origin.turn as Turn, ["session_key", "turn_id"]);
    if (origin.job !== undefined) origin.job = pick(origin.job as Job, ["id", "name", "run_id", "mode", "session_key"]);
    if (origin.subagent !== undefined) {
      origin.subagent = pick(origin.subagent as Subagent, ["run_id", "agent_id", "label"]);
    }
  }
  const payload = pick(input.payload, ["text", "media", "native"]) as Record<string, unknown> | undefined;
  if (isObject(payload)) {
    if (payload.media !== undefined) payload.media = list<Media>(payload.media, ["kind", "name", "url", "mime"]);
    if (payload.native !== undefined) payload.native = list<Native>(payload.native, null);
  }
  const receipt = pick(input.receipt, ["platform_message_ids", "sent_at"]) as Record<string, unknown> | undefined;
  if (isObject(receipt)) {
    if (Array.isArray(receipt.platform_message_ids)) receipt.platform_message_ids = [...receipt.platform_message_ids];
    if (receipt.sent_at !== undefined && receipt.sent_at !== null) receipt.sent_at = stamp("receipt.sent_at", receipt.sent_at);
  }
  const record: Record<string, unknown> = {
    schema: CONFIRMATION_SCHEMA,
    send_id: input.send_id,
    confirmed_at: input.confirmed_at === undefined ? undefined : stamp("confirmed_at", input.confirmed_at),
    agent_id: input.agent_id,
    session_key: hasKey ? input.session_key : "", // built below, once route is known to be valid
    route: pick(input.route, ["channel", "account_id", "peer_kind", "peer_id", "thread_id"]),
    destination_agent_id: input.destination_agent_id,
    origin,
    payload,
    receipt,
  };
  for (const k of Object.keys(record)) if (record[k] === undefined) delete record[k];
  check(record, validatorsOf().confirmation, input.dm_scope);
  return deepFreeze(record) as unknown as DeliveryConfirmation;
}

/**
 * A `session-reset/1` record the worker accepts. Its key must be a full `agent:<agent_id>:…`
 * key: a reset carries no agent id to complete a bare one.
 */
export function buildReset(input: ResetInput): SessionReset {
  if (!isObject(input)) throw new InvalidRecordError("", "not a JSON object");
  const record: Record<string, unknown> = {
    schema: RESET_SCHEMA,
    session_key: input.session_key,
    reset_at: input.reset_at === undefined ? undefined : stamp("reset_at", input.reset_at),
    reason: input.reason,
  };
  for (const k of Object.keys(record)) if (record[k] === undefined) delete record[k];
  check(record, validatorsOf().reset);
  return deepFreeze(record) as unknown as SessionReset;
}

// A reset has no sender, and its full `agent:<id>:…` key names its own agent, so
// canonicalSessionKey never uses the agent id it is given for one: any valid id will do.
const NO_SENDER = "a";

/** The canonical key of a reset's session (decide.session_key_of); throws InvalidRecordError. */
export function resetKey(raw: string): string {
  const colon = raw.indexOf(":");
  if (colon < 0 || pyLower(pyStrip(raw.slice(0, colon))) !== "agent") {
    throw new InvalidRecordError("session_key", "a reset needs a full agent:<agent_id>:… key");
  }
  return keyOrThrow("session_key", raw, NO_SENDER);
}

/** The Kafka key the worker expects for `record`: its canonical session key. */
export function recordKey(record: InputRecord): string {
  if (record.schema === RESET_SCHEMA) return resetKey(record.session_key);
  return keyOrThrow("session_key", record.session_key, record.agent_id);
}

/**
 * Validates a record built elsewhere (or changed since it was built) as the builders do.
 * Throws InvalidRecordError; returns the record.
 */
export function validateRecord<T extends InputRecord>(record: T): T {
  if (!isObject(record)) throw new InvalidRecordError("", "not a JSON object");
  const rec = record as unknown as Record<string, unknown>;
  check(rec, rec.schema === RESET_SCHEMA ? validatorsOf().reset : validatorsOf().confirmation);
  return record;
}
