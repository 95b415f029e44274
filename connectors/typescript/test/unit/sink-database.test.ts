// A sink database as the reader reads it (src/sink-database.ts), without a broker: the format it
// needs (4: table positions), what it refuses, one read transaction for a position and a
// session's rows, PRAGMA data_version. The databases are made here with the sink's layout
// (workers/commands/sink.py, transcript_connector/sink_format.py).
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";

import type Database from "better-sqlite3";

import { ReadError, SINK_APPLICATION_ID, SinkDatabase } from "@transcript-owner/connector";

import { entryJson, sinkDb as makeSinkDb } from "../support/sink-db.js";

const dir = mkdtempSync(join(tmpdir(), "sink-db-"));
after(() => rmSync(dir, { recursive: true, force: true }));
const K = "agent:a:main";
const TOPIC = "p.transcript.entries";

const sinkDb = (name: string, format = 4, app = SINK_APPLICATION_ID): ReturnType<typeof makeSinkDb> => makeSinkDb(dir, name, format, app);

describe("SinkDatabase.open refuses", () => {
  test("a missing file, a file that is not SQLite, a database that is not a sink's", async () => {
    await assert.rejects(SinkDatabase.open(join(dir, "missing.db")), (e: unknown) => e instanceof ReadError
      && e.message === `${join(dir, "missing.db")}: no such sink database`);
    const junk = join(dir, "junk.db");
    writeFileSync(junk, "this is no database, not even close ".repeat(40));
    await assert.rejects(SinkDatabase.open(junk), (e: unknown) => e instanceof ReadError && /not a SQLite database/.test(e.message));
    const { path, db } = sinkDb("other.db", 4, 1234);
    db.close();
    await assert.rejects(SinkDatabase.open(path), (e: unknown) => e instanceof ReadError
      && e.message === `${path}: not a sink database (PRAGMA application_id 1234, a sink's is ${SINK_APPLICATION_ID})`);
  });

  test("a format below 4 (no positions) or newer than 4", async () => {
    const old = sinkDb("old.db", 3);
    old.db.close();
    await assert.rejects(SinkDatabase.open(old.path), (e: unknown) => e instanceof ReadError
      && e.message === "sink database format 3 has no positions: run a sink of this version on it first");
    const newer = sinkDb("newer.db", 5);
    newer.db.close();
    await assert.rejects(SinkDatabase.open(newer.path), (e: unknown) => e instanceof ReadError
      && e.message === "sink database format 5 is newer than this reader's (4): update the connector");
  });
});

describe("SinkDatabase.read", () => {
  test("the position, and once it reaches what is needed the session's rows, from one snapshot", async () => {
    const { path, db } = sinkDb("sink.db");
    const insert = db.prepare("INSERT INTO entries VALUES (?, 0, ?, ?, ?, ?, ?)");
    insert.run(K, 2, "e2", "s2", entryJson(K, 2, "two"), "b".repeat(64));
    insert.run(K, 1, "e1", "s1", entryJson(K, 1, "one"), null);
    insert.run(`${K}#1`, 1, "e1", "s1", entryJson(`${K}#1`, 1, "another chat"), null);
    const reader = await SinkDatabase.open(path);
    try {
      assert.deepEqual(reader.read(TOPIC, 3, 0n, K).position, { partition: 3, inputOffset: 0n, controlOffset: 0n, at: null, offset: null });
      const version = reader.version();
      db.prepare("INSERT INTO positions VALUES (?, ?, ?, ?, ?, ?)").run(TOPIC, 3, 2n ** 63n - 1n, 4, "2026-12-04T10:00:00.250Z", 17);
      db.prepare("INSERT INTO positions VALUES (?, ?, ?, ?, ?, ?)").run("other.transcript.entries", 3, 99, 4, "2026-12-04T10:00:00Z", 1);
      assert.notEqual(reader.version(), version); // another connection committed
      const below = reader.read(TOPIC, 3, 2n ** 63n, K);
      assert.equal(below.snapshot, null);
      const { position, snapshot } = reader.read(TOPIC, 3, 2n ** 63n - 1n, K);
      assert.deepEqual(position, {
        partition: 3, inputOffset: 2n ** 63n - 1n, controlOffset: 4n, at: new Date("2026-12-04T10:00:00.250Z"), offset: 17n,
      });
      assert.deepEqual(snapshot!.entries.map((e) => [e.seq, e.entryId, e.chain, JSON.parse(e.entryJson).text]),
        [[1, "e1", null, "one"], [2, "e2", "b".repeat(64), "two"]]);
      assert.deepEqual(snapshot!.chainEntries.map((e) => e.seq), [1, 2]);
      assert.equal(reader.version(), reader.version()); // nothing committed since
    } finally {
      reader.close();
      db.close();
    }
  });

  test("read-only: the reader never writes", async () => {
    const { path, db } = sinkDb("ro.db");
    db.close();
    const reader = await SinkDatabase.open(path);
    try {
      const raw = (reader as unknown as { db: Database.Database }).db;
      assert.equal(raw.readonly, true);
      assert.throws(() => raw.exec("DELETE FROM entries"), /readonly/);
    } finally {
      reader.close();
    }
  });
});
