/**
 * What a bound read needs (DESIGN 1.3, "Reading at a position"), decided without I/O: the same
 * algorithm as transcript_connector's reader.
 *
 * - LATEST: (home, the LSO of input partition home, read when the step starts), after a
 *   repartition first the same for the session's home under each earlier count (oldest first,
 *   those that differ from home): a publisher that has not yet seen a move still publishes
 *   there under the old count, and the worker re-keys those records home. The earlier counts
 *   are transcript.layout's moves (earlierCounts).
 * - a delivery (dp, d) with dp == home: (home, d + 1).
 * - a delivery with dp != home (published under an older partition count, or keyed
 *   non-canonically: the worker re-keys such a record to its home partition, in the
 *   transaction that moves dp's position past d): first (dp, d + 1), then (home, the LSO of
 *   input partition home read at that moment). dp beyond the input topic: ReadError.
 */

import { ConnectorError, ReadError } from "./errors.js";
import { partitionFor } from "./partitioning.js";

/** Bound a read to the input partition's last stable offset when the read starts (a reply turn's read). */
export const LATEST = "latest";

/** Where a record was published: what ConfirmationPublisher's `Delivery` holds (its partition and offset). */
export interface DeliveryBound {
  readonly partition: number;
  /** The record's offset: a decimal string (as `Delivery.offset`), a safe integer or a bigint. */
  readonly offset: string | number | bigint;
}

export type ReadBound = typeof LATEST | DeliveryBound;

/** One step of a read: the entries partition and the input offset its position must reach ("lso": read it then). */
export interface ReadStep {
  readonly partition: number;
  readonly needed: bigint | "lso";
}

/** A delivery's offset as a bigint; ConnectorError when it is none (an unacknowledged "-1" included). */
export function deliveryOffset(bound: DeliveryBound): bigint {
  const { offset } = bound;
  let value: bigint | null = null;
  if (typeof offset === "bigint") value = offset;
  else if (typeof offset === "number" && Number.isSafeInteger(offset)) value = BigInt(offset);
  else if (typeof offset === "string" && /^(0|[1-9][0-9]{0,18})$/.test(offset)) value = BigInt(offset);
  if (value === null || value < 0n || value > 2n ** 63n - 1n) {
    throw new ConnectorError(`bound: the delivery's offset must be a non-negative integer, got ${JSON.stringify(String(offset))}`);
  }
  return value;
}

/** `latest` or `P:O` (a partition and an offset, as `show --at` takes them). */
export function parseBound(text: string): ReadBound {
  if (text === LATEST) return LATEST;
  const m = /^(0|[1-9][0-9]{0,9}):(0|[1-9][0-9]{0,18})$/.exec(text);
  if (!m || Number(m[1]) > 2 ** 31 - 1) throw new ConnectorError(`bound: expected latest or PARTITION:OFFSET, got ${JSON.stringify(text)}`);
  return { partition: Number(m[1]), offset: m[2]! };
}

const MOVE_KEY = /^move\/([1-9][0-9]{0,5})-([1-9][0-9]{0,5})$/;

/**
 * The counts the deployment had before each repartition that ended at or below
 * `inputPartitions` (the input's count now), sorted, each once, from transcript.layout's keys
 * (`move/P-N`, one per move; a marker `move/P-N/p` or any other key is not one).
 */
export function earlierCounts(layoutKeys: Iterable<Uint8Array | string | null | undefined>, inputPartitions: number): number[] {
  const moves = new Set<number>();
  for (const key of layoutKeys) {
    if (key === null || key === undefined) continue;
    const text = typeof key === "string" ? key : Buffer.from(key.buffer, key.byteOffset, key.byteLength).toString("latin1");
    const m = MOVE_KEY.exec(text);
    if (m && Number(m[2]) <= inputPartitions) moves.add(Number(m[1]));
  }
  return [...moves].sort((a, b) => a - b);
}

/** The session a read is of and the counts before each repartition (earlierCounts), for a read bound to LATEST. */
export interface EarlierCounts {
  readonly sessionKey: string;
  readonly counts: readonly number[];
}

/**
 * The steps of a read of a session whose home (input and entries) partition is `home`; with
 * `earlier`, a read bound to LATEST first waits for the session's home under each earlier count
 * below the input's (oldest first, each partition once, home's own step last).
 */
export function planRead(bound: ReadBound, inputPartitions: number, home: number, earlier?: EarlierCounts): ReadStep[] {
  if (bound === LATEST) {
    const before = new Set<number>();
    for (const n of earlier?.counts ?? []) {
      if (Number.isInteger(n) && n > 0 && n < inputPartitions) before.add(partitionFor(earlier!.sessionKey, n));
    }
    before.delete(home);
    return [...[...before].map((partition) => ({ partition, needed: "lso" as const })), { partition: home, needed: "lso" }];
  }
  if (typeof bound !== "object" || bound === null || !Number.isInteger(bound.partition) || bound.partition < 0) {
    throw new ConnectorError("bound: expected LATEST or a delivery { partition, offset }");
  }
  const needed = deliveryOffset(bound) + 1n;
  if (bound.partition >= inputPartitions) {
    throw new ReadError(`bound: partition ${bound.partition} of a delivery, and the input topic has ${inputPartitions} partitions`);
  }
  if (bound.partition === home) return [{ partition: home, needed }];
  return [{ partition: bound.partition, needed }, { partition: home, needed: "lso" }];
}

/** The reason a read cannot be complete while the two topics' partition counts differ. */
export function repartitionReason(inputPartitions: number, entriesPartitions: number): string {
  return `a repartition is in progress: delivery.confirmations has ${inputPartitions} partitions, `
    + `transcript.entries ${entriesPartitions}`;
}

/**
 * A Map that forgets its least recently used keys beyond `capacity`, except those `keep`
 * says to keep (in use): `get` and `set` make a key the most recent, `peek` does not.
 */
export class LruMap<K, V> {
  private readonly map = new Map<K, V>();

  constructor(
    readonly capacity: number,
    private readonly keep: (value: V, key: K) => boolean = () => false,
  ) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError(`capacity must be a positive integer, got ${capacity}`);
  }

  get size(): number {
    return this.map.size;
  }

  peek(key: K): V | undefined {
    return this.map.get(key);
  }

  get(key: K): V | undefined {
    const value = this.map.get(key);
    if (value !== undefined) {
      this.map.delete(key);
      this.map.set(key, value);
    }
    return value;
  }

  /** Adds or replaces `key` as the most recent; returns the keys forgotten to make room. */
  set(key: K, value: V): K[] {
    this.map.delete(key);
    this.map.set(key, value);
    const evicted: K[] = [];
    if (this.map.size <= this.capacity) return evicted;
    for (const [k, v] of this.map) {
      if (this.map.size <= this.capacity) break;
      if (k === key || this.keep(v, k)) continue;
      this.map.delete(k);
      evicted.push(k);
    }
    return evicted;
  }

  /** Forgets the least recently used keys beyond capacity that may now go (after a release). */
  trim(): K[] {
    const evicted: K[] = [];
    for (const [k, v] of this.map) {
      if (this.map.size <= this.capacity) break;
      if (this.keep(v, k)) continue;
      this.map.delete(k);
      evicted.push(k);
    }
    return evicted;
  }

  keys(): IterableIterator<K> {
    return this.map.keys();
  }

  values(): IterableIterator<V> {
    return this.map.values();
  }
}
