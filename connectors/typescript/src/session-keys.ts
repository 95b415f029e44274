/**
 * Canonical session keys: a line-by-line port of transcript_connector/session_keys.py.
 *
 * A transcript write must land in the exact session an inbound reply uses, so a connector
 * must key a confirmation exactly as the worker canonicalises it. These functions return the
 * Python functions' results for every input (schemas/vectors/session_keys.json holds the
 * cases both test suites run), using Python's whitespace, lowercasing and repr (./pyunicode).
 *
 * Key shapes (DESIGN.md "Canonical session keys"):
 *     agent:<a>:main                                   DM scope main
 *     agent:<a>:direct:<peer>                          DM scope per-peer
 *     agent:<a>:<channel>:direct:<peer>                DM scope per-channel-peer
 *     agent:<a>:<channel>:<account>:direct:<peer>      DM scope per-account-channel-peer
 *     agent:<a>:<channel>:<group|channel>:<peer>       groups and channels (no account)
 *     … + :thread:<id>   (Telegram: :topic:<id>)       a thread is its own session
 *     agent:<a>:cron:<job>[:run:<run>], …:subagent:…, …:hook:<uuid>   other sources
 *
 * The canonicaliser repairs spelling only (whitespace, case outside case-preserving peer ids,
 * the legacy `dm`, a missing `agent:<id>:` prefix, `main`/empty, Telegram `thread` → `topic`).
 * Build keys from the identity inbound messages carry with `sessionKeyForRoute`. Both refuse an
 * `agentId` that is not an agent id, as the worker refuses such a record (never lowercased).
 */

import { InvalidSessionKeyError, UnknownDmScopeError } from "./errors.js";
import { pyLower, pyRepr, pyStrip } from "./pyunicode.js";

export const DM_SCOPES = ["main", "per-peer", "per-channel-peer", "per-account-channel-peer"] as const;
export type DmScope = (typeof DM_SCOPES)[number];
export const DEFAULT_ACCOUNT_ID = "default";

/** A chat's identity as a channel reports it (the `route` of a confirmation). */
export interface RouteLike {
  readonly channel: string;
  readonly account_id?: string | null;
  readonly peer_kind: string;
  readonly peer_id: string;
  readonly thread_id?: string | null;
}

const AGENT_ID_PATTERN = "^[a-z0-9][a-z0-9_-]{0,63}$";
const AGENT_ID = new RegExp(AGENT_ID_PATTERN);
const PEER_KINDS = new Set(["direct", "dm", "group", "channel"]);
const DIRECT_KINDS = new Set(["direct", "dm"]);
const SUFFIX_MARKERS = new Set(["thread", "topic"]);
// First segments that name a source, not a channel: their keys have no peer structure.
const SOURCES = new Set(["main", "cron", "subagent", "hook", "acp", "agent"]);

/**
 * The canonical form of `raw`, a key the sending agent `agentId` computed.
 *
 * Throws InvalidSessionKeyError when `agentId` is not an agent id, or when `raw` is an `agent:`
 * key whose agent segment is not one (the key names no agent, so no session can be chosen for it).
 */
export function canonicalSessionKey(raw: string, agentId: string): string {
  if (!AGENT_ID.test(agentId)) {
    throw new InvalidSessionKeyError(`invalid agent_id ${pyRepr(agentId)}: an agent id matches ${AGENT_ID_PATTERN}`, raw);
  }
  // Whitespace around a segment is never part of an id: trim the key and every segment.
  const parts = raw.split(":").map(pyStrip);
  let agent: string;
  let rest: string[];
  if (parts.length >= 2 && pyLower(parts[0]!) === "agent") {
    agent = pyLower(parts[1]!);
    if (!AGENT_ID.test(agent)) {
      throw new InvalidSessionKeyError(`malformed agent key: ${pyRepr(parts[1]!)} is not an agent id`, raw);
    }
    rest = parts.slice(2);
  } else {
    agent = agentId;
    rest = parts;
  }
  if (rest.length === 0 || (rest.length === 1 && ["", "main"].includes(pyLower(rest[0]!)))) {
    return `agent:${agent}:main`;
  }
  return `agent:${agent}:${canonicalRest(rest)}`;
}

/** Lowercase everything but a case-preserving peer id; `dm` → `direct`; Telegram topics. */
function canonicalRest(rest: string[]): string {
  const lower = rest.map(pyLower);
  const kindAt = peerKindIndex(lower);
  if (kindAt === null) return lower.join(":");
  const channel = kindAt > 0 ? lower[0]! : null; // null: a per-peer DM key names no channel
  const kind = lower[kindAt] === "dm" ? "direct" : lower[kindAt]!;
  // The peer id runs from after the kind up to the last thread/topic marker (a Matrix
  // room id `!Room:server.org[:port]` contains colons, so it can be several segments).
  let suffixAt = rest.length;
  for (let j = rest.length - 2; j > kindAt + 1; j--) {
    if (SUFFIX_MARKERS.has(lower[j]!)) {
      suffixAt = j;
      break;
    }
  }
  let peer = rest.slice(kindAt + 1, suffixAt).join(":");
  if (!preservesCase(channel, kind, peer)) peer = pyLower(peer);
  const out = [...lower.slice(0, kindAt), kind, peer];
  if (suffixAt < rest.length) {
    const marker = channel === "telegram" ? "topic" : lower[suffixAt]!;
    out.push(marker, lower.slice(suffixAt + 1).join(":"));
  }
  return out.join(":");
}

/** Where the peer-kind segment is: `direct:…`, `<ch>:<kind>:…`, `<ch>:<acct>:direct:…`. */
function peerKindIndex(lower: string[]): number | null {
  const n = lower.length;
  if (n >= 2 && DIRECT_KINDS.has(lower[0]!)) return 0;
  if (SOURCES.has(lower[0]!)) return null;
  if (n >= 3 && PEER_KINDS.has(lower[1]!)) return 1;
  if (n >= 4 && DIRECT_KINDS.has(lower[2]!)) return 2;
  return null;
}

/**
 * Signal group ids and Matrix room ids (`!opaque:server[:port]`) are case-sensitive. A per-peer DM
 * key (`direct:<peer>`, `channel` null) names no channel, so a room id is known by its `!`: no other
 * channel's peer ids start with one, so every `direct:!…` key is a Matrix DM room.
 */
function preservesCase(channel: string | null, kind: string, peer: string): boolean {
  if (channel === "signal") return kind === "group";
  if (channel === "matrix" || channel === null) return peer.startsWith("!");
  return false;
}

/**
 * The canonical key of the chat `route` names, for `agentId` with DM scope `dmScope`.
 *
 * Build keys from the identity inbound messages carry (the Slack user id, the X conversation
 * id, the chat type the inbound side sees), never from a send target. Throws UnknownDmScopeError
 * for an unknown DM scope, InvalidSessionKeyError for an `agentId` that is not an agent id.
 */
export function sessionKeyForRoute(agentId: string, route: RouteLike, dmScope: DmScope): string {
  if (!(DM_SCOPES as readonly unknown[]).includes(dmScope)) {
    const shown = typeof dmScope === "string" ? pyRepr(dmScope) : String(dmScope);
    throw new UnknownDmScopeError(`unknown DM scope ${shown}; expected one of ${DM_SCOPES.join(", ")}`, dmScope);
  }
  const channel = pyLower(pyStrip(route.channel));
  const peer = pyStrip(route.peer_id);
  let base: string;
  if (route.peer_kind === "direct") {
    if (dmScope === "main") base = "main";
    else if (dmScope === "per-peer") base = `direct:${peer}`;
    else if (dmScope === "per-channel-peer") base = `${channel}:direct:${peer}`;
    else {
      const account = pyLower(pyStrip(route.account_id ?? "")) || DEFAULT_ACCOUNT_ID;
      base = `${channel}:${account}:direct:${peer}`;
    }
  } else {
    base = `${channel}:${route.peer_kind}:${peer}`;
  }
  const thread = pyStrip(route.thread_id ?? "");
  if (thread) base += `:${channel === "telegram" ? "topic" : "thread"}:${thread}`;
  return canonicalSessionKey(`agent:${agentId}:${base}`, agentId);
}
