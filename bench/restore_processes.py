"""A restore alone, in one process and split over more (TRANSCRIPT_RESTORE_PROCESSES), side by
side in one run: what workers/stream/restore_processes.py is worth on this machine.

Writes a changelog of its own (16 partitions; `--per-partition` records each, in one
transaction a partition: session-like keys, 80-byte values, the first 8 partitions with every
other record a tombstone, as an old partition's store catches up after `repartition`), then
restores all 16 partitions into fresh stores with the state owner the worker uses, once per
process count and run, alternating, each in a fresh process of its own, and prints each
restore's seconds and peak RSS (the restoring process's, and its largest child's). The topic is
deleted at the end.

    KAFKA_BOOTSTRAP=127.0.0.1:9092 .venv/bin/python bench/restore_processes.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from workers.settings import kafka_settings  # noqa: E402
from workers.stream import restore_processes  # noqa: E402
from workers.stream.state_owner import StateOwner  # noqa: E402
from workers.stream.store_memory import StoreMemory  # noqa: E402

PARTITIONS = 16


def write(bootstrap: str, topic: str, per_partition: int) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    async def go() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
        finally:
            await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_batch_size=1 << 20,
                                    transactional_id=f"{topic}-writer")
        await producer.start()
        rnd = random.Random(44)
        try:
            for p in range(PARTITIONS):
                async with producer.transaction():
                    batch, futures = producer.create_batch(), []
                    for i in range(per_partition):
                        key = f"s\x00agent:main:telegram:direct:{rnd.randrange(10**9)}".encode()
                        value = None if p < 8 and i % 2 else os.urandom(40).hex().encode()
                        if batch.append(key=key, value=value, timestamp=None, headers=[]) is None:
                            futures.append(await producer.send_batch(batch, topic, partition=p))
                            batch = producer.create_batch()
                            batch.append(key=key, value=value, timestamp=None, headers=[])
                    futures.append(await producer.send_batch(batch, topic, partition=p))
                    await asyncio.gather(*futures)
        finally:
            await producer.stop()

    asyncio.run(go())


def restore(bootstrap: str, topic: str, processes: int) -> dict:
    """One restore of every partition into fresh stores, in this (fresh) process: a child's
    peak RSS counts from its own start, not from a parent that restored before."""
    restore_processes.SPLIT_RECORDS = 1  # every count as given, whatever the size
    ks = kafka_settings({"KAFKA_BOOTSTRAP": bootstrap})
    directory = Path(tempfile.mkdtemp(prefix="restore-bench-"))
    try:
        owner = StateOwner(directory, "sessions", topic, StoreMemory(64), PARTITIONS,
                           restore_processes=processes)
        owner.assign(range(PARTITIONS))
        began = time.monotonic()
        applied = owner.restore(ks)
        seconds = time.monotonic() - began
        owner.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return {"applied": applied, "seconds": seconds,
            "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "child_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-partition", type=int, default=170_000)
    parser.add_argument("--processes", default="1,2,3")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--restore", nargs=2, metavar=("TOPIC", "PROCESSES"),
                        help=argparse.SUPPRESS)  # one restore, in a process of its own
    args = parser.parse_args()
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    if args.restore:
        print(json.dumps(restore(bootstrap, args.restore[0], int(args.restore[1]))))
        return
    counts = [int(n) for n in args.processes.split(",")]
    topic = f"bench-restore-{uuid.uuid4().hex[:8]}"
    write(bootstrap, topic, args.per_partition)
    try:
        print(f"{PARTITIONS * args.per_partition:,} changelog records on {PARTITIONS} "
              f"partitions; load average {os.getloadavg()[0]:.2f}")
        for run in range(1, args.runs + 1):
            for n in counts:
                out = subprocess.run([sys.executable, __file__, "--restore", topic, str(n)],
                                     check=True, capture_output=True, text=True).stdout
                r = json.loads(out.splitlines()[-1])
                children = f", a child {r['child_rss_mb']:.0f} MB" if n > 1 else ""
                print(f"run {run}: {n} process{'es' if n > 1 else ''}: {r['applied']:,} records "
                      f"in {r['seconds']:.2f} s ({r['applied'] / r['seconds']:,.0f}/s); peak "
                      f"RSS: the restoring process {r['rss_mb']:.0f} MB{children}", flush=True)
    finally:
        from kafka.admin import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.delete_topics([topic])
        admin.close()


if __name__ == "__main__":
    main()
