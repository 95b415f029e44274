/**
 * What a topic reader holds of one partition of transcript.entries, fed record by record in
 * offset order (no I/O: the Kafka shell is ./reader.ts):
 *
 * - the furthest position read (a position record of another partition is skipped);
 * - `readTo`: one past the last record applied, the furthest it has read;
 * - the sessions it was asked for (a least-recently-used set), each as compaction's view of
 *   its exact keys: per seq the record of the highest offset read. A record of a lower offset
 *   than the one held changes nothing, so the partition may be read again from its start
 *   (for a session not held before) without moving any session back.
 *
 * A session not held before holds nothing below `readTo` yet: it is complete once the
 * partition has been read again from its start to there (`until`), and a read waits for that.
 */

import type { ChainEntry } from "./chain.js";
import {
  chainHeader,
  classify,
  type Classified,
  furthest,
  noPosition,
  parseEntryKey,
  parsePositionKey,
  type Position,
  type RecordHeaders,
} from "./entries-topic.js";
import { LruMap } from "./read-plan.js";

/** One entry of a session, as a read returns it. */
export interface SessionEntry {
  readonly seq: number;
  readonly epoch: bigint;
  readonly entryId: string;
  readonly sendId: string;
  /** The value as written: the JSON text of a `transcript-entry/1`. */
  readonly entryJson: string;
  /** The record's `chain` header (DESIGN 1.2, "Tamper evidence"); null: none. */
  readonly chain: string | null;
}

/** A session's entries as compaction leaves them, and what its chain is checked over. */
export interface SessionSnapshot {
  /** The valid entries, in seq order (a value that is no entry of its key is left out). */
  readonly entries: SessionEntry[];
  /** Every live value, those left out of `entries` too, for verifySession(sessionKey, chainEntries). */
  readonly chainEntries: ChainEntry[];
}

interface Held {
  readonly offset: bigint;
  readonly found: Classified; // entry, erased or skip (a value that is no entry of this key)
  readonly value: Uint8Array | null;
  readonly chain: string | null;
}

export class HeldSession {
  /** Complete once the partition has been read from its start to this offset (null: complete). */
  until: bigint | null;
  /** Reads in progress: a session in use is never forgotten. */
  pins = 0;
  private readonly bySeq = new Map<number, Held>();

  constructor(until: bigint | null) {
    this.until = until;
  }

  get complete(): boolean {
    return this.until === null;
  }

  /** The record at `offset` of key seq `seq`, unless one of a higher offset is held. */
  put(seq: number, offset: bigint, found: Classified, value: Uint8Array | null, chain: string | null): void {
    const held = this.bySeq.get(seq);
    if (held !== undefined && held.offset >= offset) return;
    this.bySeq.set(seq, { offset, found, value, chain });
  }

  snapshot(): SessionSnapshot {
    const entries: SessionEntry[] = [];
    const chainEntries: ChainEntry[] = [];
    for (const seq of [...this.bySeq.keys()].sort((a, b) => a - b)) {
      const { found, value, chain } = this.bySeq.get(seq)!;
      if (found.kind === "entry") {
        const { epoch, entryId, sendId, entryJson } = found;
        entries.push({ seq, epoch, entryId, sendId, entryJson, chain });
      }
      if (value !== null) chainEntries.push({ seq, value, chain });
    }
    return { entries, chainEntries };
  }
}

export class PartitionView {
  position: Position;
  /** One past the offset of the last record applied (the furthest, across reads from the start). */
  readTo = 0n;
  private readonly sessions: LruMap<string, HeldSession>;
  private readonly waiters = new Set<() => void>();

  constructor(
    readonly partition: number,
    sessionsPerPartition: number,
  ) {
    this.position = noPosition(partition);
    this.sessions = new LruMap(sessionsPerPartition, (s) => s.pins > 0);
  }

  /** How many sessions it holds. */
  get held(): number {
    return this.sessions.size;
  }

  /** Whether it holds `sessionKey` (without making it the most recent). */
  holds(sessionKey: string): boolean {
    return this.sessions.peek(sessionKey) !== undefined;
  }

  /**
   * Holds `sessionKey` for a read (pinned until `release`). `replay`: the partition must be
   * read again from its start, since the session was not held and records were read before.
   */
  hold(sessionKey: string): { session: HeldSession; replay: boolean } {
    let session = this.sessions.get(sessionKey);
    let replay = false;
    if (session === undefined) {
      session = new HeldSession(this.readTo === 0n ? null : this.readTo);
      replay = !session.complete;
      this.sessions.set(sessionKey, session);
    }
    session.pins += 1;
    return { session, replay };
  }

  release(session: HeldSession): void {
    session.pins -= 1;
    if (session.pins === 0) this.sessions.trim();
  }

  /** One record read from this partition at `offset`, in offset order (a read from the start again included). */
  apply(key: Uint8Array | string | null, value: Uint8Array | null, headers: RecordHeaders | null | undefined, offset: bigint): void {
    if (parsePositionKey(key) !== null) {
      const found = classify(key, value, headers, this.partition, offset);
      if (found.kind === "position") this.position = furthest(this.position, found.position);
      return;
    }
    const parsed = parseEntryKey(key);
    if (parsed === null) return;
    const session = this.sessions.peek(parsed.sessionKey);
    if (session === undefined) return; // a session nobody asked for: not even its value is read
    const found = classify(key, value, headers, this.partition, offset);
    session.put(parsed.seq, offset, found, value, found.kind === "erased" ? null : chainHeader(headers));
  }

  /** After the records of one batch: `next` is one past the last offset applied. Wakes the waiters. */
  advance(next: bigint): void {
    if (next > this.readTo) this.readTo = next;
    for (const session of this.sessions.values()) {
      if (session.until !== null && next >= session.until) session.until = null;
    }
    this.notify();
  }

  /** Calls `wake` after every change until it is removed (the returned function). */
  watch(wake: () => void): () => void {
    this.waiters.add(wake);
    return () => this.waiters.delete(wake);
  }

  notify(): void {
    for (const wake of [...this.waiters]) wake();
  }
}
