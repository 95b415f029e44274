/**
 * Where a session's records live: partition `murmur2(key) mod N`, the Java client's default
 * partitioner applied to the canonical session key (DESIGN.md "Topics"; the worker's
 * transcript_connector/partitioning.py). The publisher uses kafkajs's DefaultPartitioner, which is that
 * partitioner (kafkajs >= 2: murmur2 of the key's UTF-8 bytes, `& 0x7fffffff`, mod the topic's
 * partition count); `partitionFor` asks the very same partitioner, so what it says is where
 * the publisher's record goes. The parity vectors check both against Python.
 */

import { Partitioners, type PartitionMetadata } from "kafkajs";

const partitioner = Partitioners.DefaultPartitioner();
const metadata = new Map<number, PartitionMetadata[]>();

/** The partition (0..partitions-1) of a topic with `partitions` partitions that `key` goes to. */
export function partitionFor(key: string, partitions: number): number {
  if (!Number.isInteger(partitions) || partitions < 1) {
    throw new RangeError(`partitions must be a positive integer, got ${partitions}`);
  }
  let parts = metadata.get(partitions);
  if (!parts) {
    parts = Array.from({ length: partitions }, (_, i) => ({
      partitionErrorCode: 0, partitionId: i, leader: 0, replicas: [0], isr: [0],
    }));
    metadata.set(partitions, parts);
  }
  return partitioner({ topic: "", partitionMetadata: parts, message: { key, value: null } });
}
