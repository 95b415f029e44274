"""(a) The ceiling: raw aiokafka consume -> produce passthrough, no logic, at-least-once.

Same guarantee as the worker: the producer is idempotent with acks=all, and a batch's offsets
are committed only after every record it produced is acked (getmany, send, await, commit).
"""

from __future__ import annotations

import asyncio
import time

from bench.common import BOOTSTRAP


async def _run(src: str, dst: str, group: str, n: int, timeout: float) -> dict:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    consumer = AIOKafkaConsumer(
        src, bootstrap_servers=BOOTSTRAP, group_id=group, enable_auto_commit=False,
        auto_offset_reset="earliest", max_partition_fetch_bytes=4 * 1024 * 1024,
        fetch_max_bytes=16 * 1024 * 1024)
    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all", enable_idempotence=True,
                                linger_ms=5,
                                max_batch_size=512 * 1024, max_request_size=4 * 1024 * 1024)
    await producer.start()
    await consumer.start()
    seen, first, last = 0, None, None
    deadline = time.monotonic() + timeout
    try:
        while seen < n and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500, max_records=2000)
            if not batch:
                continue
            if first is None:
                first = time.time()
            futures = []
            for tp, records in batch.items():
                for r in records:
                    futures.append(await producer.send(dst, r.value, key=r.key,
                                                       partition=tp.partition))
                seen += len(records)
            await asyncio.gather(*futures)
            await consumer.commit()
            last = time.time()
    finally:
        await consumer.stop()
        await producer.stop()
    elapsed = (last - first) if first and last else float("nan")
    return {"events": seen, "seconds": elapsed, "events_per_s": seen / elapsed if seen else 0.0}


def run(src: str, dst: str, group: str, n: int, timeout: float = 180) -> dict:
    return asyncio.run(_run(src, dst, group, n, timeout))
