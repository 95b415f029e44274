"""Where one exactly-once transaction's time goes, on the local broker (docs/performance.md).

    .venv/bin/python bench/txn_phases.py [--transactions 300] [--records 24]
                                         [--backoffs 0.02,0.002]

One transactional aiokafka producer writes `--records` 300-byte records to an 8-partition
topic per transaction, then commits one consumer-group offset, as the worker does (records,
then offsets, then commit), for each value of aiokafka's CONCURRENT_TRANSACTIONS backoff
(`sender.BACKOFF_OVERRIDE`; aiokafka's own 0.02 s, the worker's 0.002 s). Prints p50/p99 per
phase. The topic and group are under a unique prefix; the topic is deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import BOOTSTRAP, create_topic, delete_topics  # noqa: E402
from workers.stream.batch_send import send_all  # noqa: E402


async def measure(topic: str, group: str, backoff: float, n: int, records: int) -> dict:
    from aiokafka import AIOKafkaProducer, TopicPartition
    from aiokafka.producer import sender

    sender.BACKOFF_OVERRIDE = backoff
    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all", linger_ms=0,
                                enable_idempotence=True, max_batch_size=1024 * 1024,
                                transactional_id=f"{group}-{backoff}")
    await producer.start()
    phases: dict[str, list[float]] = {"records": [], "offsets": [], "commit": [], "total": []}
    try:
        batch = [(topic, i % 8, b"k", b"v" * 300, ()) for i in range(records)]
        for i in range(n):
            t0 = time.perf_counter()
            await producer.begin_transaction()
            await send_all(producer, batch)
            t1 = time.perf_counter()
            await producer.send_offsets_to_transaction({TopicPartition(topic, 0): i + 1}, group)
            t2 = time.perf_counter()
            await producer.commit_transaction()
            t3 = time.perf_counter()
            for name, a, b in (("records", t0, t1), ("offsets", t1, t2), ("commit", t2, t3),
                               ("total", t0, t3)):
                phases[name].append((b - a) * 1000)
    finally:
        await producer.stop()
    return phases


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transactions", type=int, default=300)
    parser.add_argument("--records", type=int, default=24)
    parser.add_argument("--backoffs", default="0.02,0.002")
    args = parser.parse_args()
    prefix = f"txnphases{uuid.uuid4().hex[:8]}."
    topic = prefix + "out"
    create_topic(topic)
    try:
        for backoff in (float(b) for b in args.backoffs.split(",")):
            phases = asyncio.run(measure(topic, prefix + "group", backoff, args.transactions,
                                         args.records))
            print(f"backoff {backoff * 1000:g} ms:")
            for name, values in phases.items():
                values.sort()
                print(f"  {name:8s} p50 {statistics.median(values):7.2f} ms   "
                      f"p99 {values[int(len(values) * 0.99)]:7.2f} ms")
    finally:
        delete_topics(prefix)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
