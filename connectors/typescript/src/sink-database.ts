/**
 * A sink database (`transcript-owner sink sqlite PATH`) as a session reader reads it: the layout
 * of transcript_connector/sink_format.py, through better-sqlite3 (an optional dependency, built
 * from source when no prebuilt binary can be fetched; loaded only when a database is read).
 *
 *     entries(session_key, epoch, seq, entry_id, send_id, entry_json, chain)
 *     positions(topic, partition, input_offset, control_offset, at, entries_offset)   format 4
 *         each partition's furthest position record, written in the same SQLite transaction
 *         as the rows before it: a reader that sees a position sees every row it covers
 *
 * Opened read-only. A database is the sink's when `PRAGMA application_id` is APPLICATION_ID;
 * `PRAGMA user_version` is its format, and a reader of positions needs format 4 exactly
 * (POSITIONS_SINCE .. SCHEMA_VERSION). Each `read` is one read transaction: the position and,
 * when it is reached, the session's rows, from one snapshot.
 */

import { existsSync, statSync } from "node:fs";

import type BetterSqlite3 from "better-sqlite3";

import type { ChainEntry } from "./chain.js";
import { classify, entryKey, noPosition, type Position } from "./entries-topic.js";
import { ReadError } from "./errors.js";
import type { SessionEntry, SessionSnapshot } from "./session-view.js";
import { timestampMicros } from "./timestamps.js";

export const SINK_APPLICATION_ID = 0x54524e53; // "TRNS"
export const SINK_SCHEMA_VERSION = 4; // PRAGMA user_version of the newest format
export const SINK_POSITIONS_SINCE = 4; // the first format with table `positions`
export const SELECT_POSITION = "SELECT input_offset, control_offset, at, entries_offset FROM positions "
  + "WHERE topic = ? AND partition = ?";
export const SELECT_SESSION = "SELECT seq, entry_json, chain FROM entries WHERE session_key = ? ORDER BY seq";

type Database = BetterSqlite3.Database;
type Statement = BetterSqlite3.Statement;
interface PositionRow {
  input_offset: bigint;
  control_offset: bigint;
  at: string | null;
  entries_offset: bigint;
}
interface SessionRow {
  seq: bigint;
  entry_json: string;
  chain: string | null;
}

let driver: Promise<typeof BetterSqlite3> | undefined;

/** better-sqlite3's constructor, or ReadError when it is not installed (an optional dependency). */
async function loadDriver(): Promise<typeof BetterSqlite3> {
  driver ??= import("better-sqlite3").then(
    (m) => m.default,
    (e: unknown) => {
      driver = undefined;
      throw new ReadError("reading a sink database needs the better-sqlite3 package, which is not installed "
        + "(an optional dependency of this package: its build failed or was skipped)", { cause: e });
    },
  );
  return driver;
}

export class SinkDatabase {
  private readonly position: Statement;
  private readonly session: Statement;
  private readonly dataVersion: Statement;
  private readonly inTransaction: <T>(fn: () => T) => T;

  private constructor(
    readonly path: string,
    private readonly db: Database,
  ) {
    this.position = db.prepare(SELECT_POSITION).safeIntegers(true);
    this.session = db.prepare(SELECT_SESSION).safeIntegers(true);
    this.dataVersion = db.prepare("PRAGMA data_version").pluck().safeIntegers(true);
    this.inTransaction = <T>(fn: () => T): T => db.transaction(fn)();
  }

  /** Opens `path` read-only, or ReadError: missing, not SQLite, not a sink's, or of another format. */
  static async open(path: string): Promise<SinkDatabase> {
    if (!existsSync(path)) throw new ReadError(`${path}: no such sink database`);
    if (!statSync(path).isFile()) throw new ReadError(`${path}: not a file`);
    const Driver = await loadDriver();
    let db: Database;
    try {
      db = new Driver(path, { readonly: true, fileMustExist: true });
    } catch (e) {
      throw new ReadError(`${path}: cannot open: ${(e as Error).message}`, { cause: e });
    }
    try {
      let app: number;
      let format: number;
      try {
        app = Number(db.pragma("application_id", { simple: true }));
        format = Number(db.pragma("user_version", { simple: true }));
      } catch (e) {
        throw new ReadError(`${path}: not a SQLite database (${(e as Error).message})`, { cause: e });
      }
      if (app !== SINK_APPLICATION_ID) {
        throw new ReadError(`${path}: not a sink database (PRAGMA application_id ${app}, a sink's is ${SINK_APPLICATION_ID})`);
      }
      if (format < SINK_POSITIONS_SINCE) {
        throw new ReadError(`sink database format ${format} has no positions: run a sink of this version on it first`);
      }
      if (format > SINK_SCHEMA_VERSION) {
        throw new ReadError(`sink database format ${format} is newer than this reader's (${SINK_SCHEMA_VERSION}): `
          + "update the connector");
      }
      return new SinkDatabase(path, db);
    } catch (e) {
      db.close();
      throw e;
    }
  }

  /** `PRAGMA data_version`: changes when another connection committed (then read again). */
  version(): bigint {
    return this.dataVersion.get() as bigint;
  }

  /**
   * In one read transaction: the position of entries partition `partition` (of topic `topic`,
   * the entries topic's full name) and, when its input offset reaches `needed` and a session is
   * asked for, that session's rows.
   */
  read(topic: string, partition: number, needed: bigint, sessionKey: string | null): { position: Position; snapshot: SessionSnapshot | null } {
    try {
      return this.inTransaction(() => {
        const row = this.position.get(topic, partition) as PositionRow | undefined;
        const position = row === undefined ? noPosition(partition) : positionOf(partition, row);
        if (position.inputOffset < needed || sessionKey === null) return { position, snapshot: null };
        const rows = this.session.all(sessionKey) as SessionRow[];
        return { position, snapshot: snapshotOf(sessionKey, rows) };
      });
    } catch (e) {
      if (e instanceof ReadError) throw e;
      throw new ReadError(`${this.path}: ${(e as Error).message}`, { cause: e });
    }
  }

  close(): void {
    this.db.close();
  }
}

function positionOf(partition: number, row: PositionRow): Position {
  const micros = typeof row.at === "string" ? timestampMicros(row.at) : null;
  return {
    partition,
    inputOffset: BigInt(row.input_offset),
    controlOffset: BigInt(row.control_offset),
    at: micros === null ? null : new Date(Number(micros / 1000n)),
    offset: BigInt(row.entries_offset),
  };
}

/** The sink's rows of a session (it stored valid entries only), as a read returns them. */
function snapshotOf(sessionKey: string, rows: SessionRow[]): SessionSnapshot {
  const entries: SessionEntry[] = [];
  const chainEntries: ChainEntry[] = [];
  for (const row of rows) {
    const seq = Number(row.seq);
    const value = Buffer.from(row.entry_json, "utf8");
    chainEntries.push({ seq, value, chain: row.chain });
    const found = classify(entryKey(sessionKey, seq), value);
    if (found.kind === "entry") {
      const { epoch, entryId, sendId, entryJson } = found;
      entries.push({ seq, epoch, entryId, sendId, entryJson, chain: row.chain });
    }
  }
  return { entries, chainEntries };
}
