// Sink databases as the sink makes them (workers/commands/sink.py, format 4:
// transcript_connector/sink_format.py), for the reader's tests.
import { join } from "node:path";

import Database from "better-sqlite3";

import { SINK_APPLICATION_ID } from "@transcript-owner/connector";

export const SINK_DDL = [
  `CREATE TABLE entries (session_key TEXT NOT NULL, epoch INTEGER NOT NULL, seq INTEGER NOT NULL,
    entry_id TEXT NOT NULL, send_id TEXT NOT NULL, entry_json TEXT NOT NULL, chain TEXT, UNIQUE (session_key, seq))`,
  "CREATE TABLE offsets (topic TEXT NOT NULL, partition INTEGER NOT NULL, next_offset INTEGER NOT NULL, PRIMARY KEY (topic, partition))",
  `CREATE TABLE positions (topic TEXT NOT NULL, partition INTEGER NOT NULL, input_offset INTEGER NOT NULL,
    control_offset INTEGER NOT NULL, at TEXT NOT NULL, entries_offset INTEGER NOT NULL, PRIMARY KEY (topic, partition))`,
];

/** A sink database of format `format` in `dir` (WAL, as the sink keeps it), open for writing. */
export function sinkDb(dir: string, name: string, format = 4, app = SINK_APPLICATION_ID): { path: string; db: Database.Database } {
  const path = join(dir, name);
  const db = new Database(path);
  db.pragma("journal_mode = WAL");
  for (const ddl of SINK_DDL) db.exec(ddl);
  db.pragma(`application_id = ${app}`);
  db.pragma(`user_version = ${format}`);
  return { path, db };
}

/** A transcript-entry/1 value of `session` and `seq`, as the worker writes it. */
export function entryJson(session: string, seq: number, text: string, epoch = 0): string {
  return JSON.stringify({
    schema: "transcript-entry/1", session_key: session, epoch, seq, entry_id: `e${seq}`, send_id: `s${seq}`,
    role: "assistant", agent_id: "a", text, media: [], source: "automation_result", posted_by: { kind: "job", id: "j" },
    delivered_at: "2026-12-04T10:00:00Z", written_at: "2026-12-04T10:00:00Z", platform_message_ids: [String(seq)],
  });
}
