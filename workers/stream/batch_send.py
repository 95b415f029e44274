"""Send many records at once: one producer batch per partition, then await them all.

`AIOKafkaProducer.send` costs a future, a task and an accumulator lookup per record, and
awaiting each one serialises the batch. Building the record batches ourselves
(`create_batch`/`send_batch`, aiokafka's public batch API) costs a few µs a record. Records
keep their order within a partition: a partition's batches are queued in order, and the
producer is idempotent, so a retry cannot reorder or duplicate them.

`send_handed_over` takes the caller's list of records: each slot is emptied once its record is
in a producer batch, so a large batch's outputs are held once (in the producer's batches) and
not twice while they are acked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, cast

# (topic, partition, key, value, headers)
Record = tuple[str, int, bytes | None, bytes, Sequence[tuple[str, bytes]]]


async def send_all(producer: Any, records: Sequence[Record]) -> list[int]:
    """Send `records` and wait until all are acked; returns the offset each was written at."""
    return await _send(producer, records, None)


async def send_handed_over(producer: Any, records: list[Record | None]) -> list[int]:
    """`send_all`, emptying each slot of `records` (set to None) once its record is in a
    producer batch: the caller hands the records over."""
    return await _send(producer, cast(list[Record], records), records)


async def _send(producer: Any, records: Sequence[Record],
                release: list[Record | None] | None) -> list[int]:
    by_partition: dict[tuple[str, int], list[int]] = {}
    for i, record in enumerate(records):
        by_partition.setdefault((record[0], record[1]), []).append(i)
    pending: list[tuple[list[int], Any]] = []  # (indices of records, future of their batch)
    for (topic, partition), indices in by_partition.items():
        batch, members = producer.create_batch(), []
        for i in indices:
            _, _, key, value, headers = records[i]
            if batch.append(key=key, value=value, timestamp=None, headers=list(headers)) is None:
                if members:  # full: send it, start the next
                    pending.append((members, await producer.send_batch(
                        batch, topic, partition=partition)))
                    batch, members = producer.create_batch(), []
                if batch.append(key=key, value=value, timestamp=None,
                                headers=list(headers)) is None:
                    # larger than a batch may be: the producer sends it on its own
                    pending.append(([i], await producer.send(
                        topic, value, key=key, partition=partition, headers=list(headers))))
                    continue
            members.append(i)
        if release is not None:
            for i in indices:
                release[i] = None
        if members:
            pending.append((members, await producer.send_batch(batch, topic,
                                                               partition=partition)))
    offsets = [0] * len(records)
    results = await asyncio.gather(*(future for _, future in pending))
    for (members, _), metadata in zip(pending, results, strict=True):
        for n, i in enumerate(members):
            offsets[i] = metadata.offset + n
    return offsets
