"""Exactly-once: a batch's share of each input partition commits in one Kafka transaction.

One transactional producer per input partition, its transactional.id `<group>-<partition>`
(faust's own scheme). aiokafka's transactional requests carry no consumer-group metadata (no
KIP-447), so the broker cannot fence a zombie by group generation; it fences by transactional
id instead: the partition's next owner starts a producer with the same id, which aborts the old
owner's open transaction and bumps the epoch, so the old owner can never commit again. Each
transaction holds the partition's outputs (entries, diagnostics, dead letters, re-keyed records),
its changelog records, and its input offsets (`send_offsets_to_transaction`: of the input
partition and of the same partition of transcript.control, read with it), so all of them
become visible to read_committed readers together, or none do.

Why not one producer per worker with KIP-447 (confluent-kafka): it would mean a second Kafka
client beside faust's aiokafka, with its own configuration, TLS and SASL handling, and no way to
take faust's consumer group metadata. The cost of a producer per partition is measured by
`make bench` (exactly_once beside at_least_once).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from workers.stream.batch_send import Record, send_all

log = logging.getLogger("transcript_owner.transactions")


class TransactionFailed(Exception):
    """A partition's transaction did not commit: its outputs and offset stay invisible."""


def transactional_id(group: str, partition: int) -> str:
    return f"{group}-{partition}"


class PartitionProducers:
    """The transactional producers of the input partitions this worker owns."""

    def __init__(self, new_producer: Callable[[str], Any], group: str) -> None:
        self.new_producer, self.group = new_producer, group
        self._producers: dict[int, Any] = {}
        self.results = {"committed": 0, "aborted": 0}  # transactions so far (the metrics)

    @property
    def partitions(self) -> set[int]:
        return set(self._producers)

    async def assign(self, partitions: Iterable[int]) -> None:
        """Start a producer for each partition that has none. Returns once each holds its
        producer id: the partition's last owner is fenced, and its open transaction is
        aborted (or, if it was committing, complete), so the changelog and the committed
        offset of the partition are final."""
        new = sorted(set(partitions) - set(self._producers))
        if not new:
            return
        started = await asyncio.gather(*(self._start(p) for p in new), return_exceptions=True)
        failed = [(p, r) for p, r in zip(new, started, strict=True) if isinstance(r, BaseException)]
        if failed:
            p, exc = failed[0]
            raise TransactionFailed(f"the producer of partition {p} did not start: "
                                    f"{type(exc).__name__}: {exc}") from exc

    async def _start(self, partition: int) -> None:
        producer = self.new_producer(transactional_id(self.group, partition))
        await producer.start()
        try:
            # the InitProducerId exchange (aiokafka starts it in the background at start)
            await asyncio.shield(producer._txn_manager.wait_for_pid())
        except BaseException:
            await producer.stop()
            raise
        self._producers[partition] = producer

    async def revoke(self, partitions: Iterable[int]) -> None:
        gone = [self._producers.pop(p) for p in sorted(set(partitions)) if p in self._producers]
        await asyncio.gather(*(producer.stop() for producer in gone), return_exceptions=True)

    async def close(self) -> None:
        await self.revoke(list(self._producers))

    async def commit(self, partition: int, records: Sequence[Record],
                     next_offsets: Mapping[str, int] | None) -> list[int]:
        """Send `records` and commit the next offsets of partition `partition` of the topics
        read (the input, transcript.control; None: leave them) in one transaction; the offsets
        the records were written at."""
        producer = self._producers.get(partition)
        if producer is None:
            raise TransactionFailed(f"partition {partition} has no producer (not assigned)")
        try:
            await producer.begin_transaction()
        except Exception as exc:
            raise TransactionFailed(f"partition {partition}: the transaction did not begin: "
                                    f"{type(exc).__name__}: {exc}") from exc
        try:
            offsets = await send_all(producer, records)
            if next_offsets:
                from aiokafka import TopicPartition

                await producer.send_offsets_to_transaction(
                    {TopicPartition(topic, partition): offset
                     for topic, offset in next_offsets.items()}, self.group)
            await producer.commit_transaction()
            self.results["committed"] += 1
        except Exception as exc:
            await self._abort(partition, producer)
            raise TransactionFailed(f"partition {partition}: the transaction did not commit: "
                                    f"{type(exc).__name__}: {exc}") from exc
        except BaseException:  # cancelled: abort what was begun, if the producer still can
            await asyncio.shield(self._abort(partition, producer))
            raise
        return offsets

    async def _abort(self, partition: int, producer: Any) -> None:
        self.results["aborted"] += 1
        try:
            await asyncio.wait_for(producer.abort_transaction(), 10)
        except Exception as exc:  # noqa: BLE001  (fenced or broken: the broker aborts it)
            log.warning("partition %s: the transaction could not be aborted (%s); the broker "
                        "aborts it when the partition's next producer starts or it times out",
                        partition, type(exc).__name__)
