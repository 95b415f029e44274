// Read one session's transcript as a reply turn reads it, bound to LATEST (DESIGN 1.3): every
// confirmation published to the session's input partition before the read started is in what it
// prints, or it says it cannot tell. Entries as JSON lines, in order.
//
//     node build/examples/read-session.js 'agent:ops:telegram:direct:u1' [--at latest|P:O] [--timeout S]
//
// Configured like the worker (KAFKA_BOOTSTRAP, TRANSCRIPT_TOPIC_PREFIX and the
// KAFKA_SECURITY_PROTOCOL / SASL / SSL variables); TRANSCRIPT_SINK_DATABASE reads a sink database
// instead of the topic. It reads through SessionReader: the input partition's last stable offset
// when it starts, then transcript.entries (or the database) until the worker's position there has
// reached it. `--at P:O` binds the read to a delivery instead (a publisher's acknowledgement).
//
// Exit codes: 0 read; 3 the session's hash chain has a finding (DESIGN 1.2 "Tamper evidence":
// a changed, removed, inserted or reordered entry; not a cut-off end, which `transcript-owner
// audit` checks); 4 a stale read: the position was not reached by the deadline (the message on
// stderr names the partition, both positions and how old the worker's last position is); 2 usage;
// 1 any other error (no broker, no such topic or database).
//
// A line holds every character a terminal would act on (C0 and C1 controls, bidi overrides)
// written as its \u escape: the same JSON value, nothing in it that can drive the terminal.
import { pathToFileURL } from "node:url";

import {
  canonicalSessionKey,
  LATEST,
  parseBound,
  positionAgeS,
  pyLower,
  pyStrip,
  type ReadBound,
  type SessionRead,
  SessionReader,
  StaleReadError,
  verifySession,
} from "@transcript-owner/connector";

export const EXIT_CHAIN = 3;
export const EXIT_STALE = 4;

const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

/** `text` with every character a terminal acts on written as its \u escape. */
export function visible(text: string): string {
  return text.replace(UNSAFE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

/** One entry as a JSON line that a terminal prints as text: the same JSON value. */
export const jsonLine = (entry: unknown): string => visible(JSON.stringify(entry));

/** Prints a read (entries on `out`, the position and the chain check on `err`); the exit code. */
export function report(read: SessionRead, out: (line: string) => void, err: (line: string) => void): number {
  for (const e of read.entries) out(jsonLine(JSON.parse(e.entryJson)));
  const { position } = read;
  const age = positionAgeS(position);
  err(`position: partition ${position.partition}, input offset ${position.inputOffset}`
    + (age === null ? " (no position written)" : ` (written ${age.toFixed(1)}s ago)`));
  const verified = verifySession(read.sessionKey, read.chainEntries);
  for (const f of verified.findings) err(`chain: seq ${f.seq}: ${f.problem}`);
  err(`chain: ${verified.chained} entries chained, ${verified.unchained} written before the chain, `
    + `${verified.findings.length} findings`);
  return verified.ok ? 0 : EXIT_CHAIN;
}

/** The canonical key of a full `agent:<agent_id>:…` key (a key that names no agent is refused). */
export function sessionKeyOf(raw: string): string {
  // a full key names its own agent (the agent id given is then never used): refuse any other
  if (pyLower(pyStrip(raw.split(":")[0] ?? "")) !== "agent" || !raw.includes(":")) {
    throw new Error("give a full agent:<agent_id>:… key");
  }
  return canonicalSessionKey(raw, "a");
}

async function main(raw: string, bound: ReadBound, timeoutMs: number): Promise<number> {
  const session = sessionKeyOf(raw);
  const sinkDatabase = process.env.TRANSCRIPT_SINK_DATABASE?.trim();
  const reader = SessionReader.fromEnv(process.env, sinkDatabase ? { sinkDatabase } : {});
  try {
    await reader.connect();
    const read = await reader.read(session, bound, { timeoutMs });
    return report(read, (line) => process.stdout.write(`${line}\n`), (line) => process.stderr.write(`${visible(line)}\n`));
  } catch (e) {
    if (e instanceof StaleReadError) {
      process.stderr.write(`${e.message}\n`);
      return EXIT_STALE;
    }
    throw e;
  } finally {
    await reader.close();
  }
}

/** SESSION_KEY [--at latest|P:O] [--timeout S]; null: a usage error. */
export function parseArgs(args: readonly string[]): { key: string; bound: ReadBound; timeoutMs: number } | null {
  let key: string | undefined;
  let bound: ReadBound = LATEST;
  let timeoutMs = 10_000;
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg === "--at" || arg === "--timeout") {
      const value = args[++i];
      if (value === undefined) return null;
      if (arg === "--at") {
        try {
          bound = parseBound(value);
        } catch {
          return null;
        }
      } else {
        if (!/^[0-9]+(\.[0-9]+)?$/.test(value)) return null;
        timeoutMs = Math.round(Number(value) * 1000);
      }
    } else if (key === undefined && !arg.startsWith("--")) {
      key = arg;
    } else {
      return null;
    }
  }
  return key === undefined ? null : { key, bound, timeoutMs };
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const args = parseArgs(process.argv.slice(2));
  if (args === null) {
    process.stderr.write("usage: read-session SESSION_KEY [--at latest|PARTITION:OFFSET] [--timeout SECONDS]\n");
    process.exit(2);
  }
  main(args.key, args.bound, args.timeoutMs).then(
    (code) => process.exit(code),
    (e: unknown) => {
      process.stderr.write(`error: ${visible((e as Error).message)}\n`);
      process.exit(1);
    },
  );
}
