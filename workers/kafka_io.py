"""kafka-python clients for the command-line shells (demo, show, audit, loadgen) and tests.

The worker itself talks to Kafka through faust; these are the plain clients around it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.consumer.fetcher import ConsumerRecord

from workers.core.partitioning import partition_for
from workers.kafka_auth import check_access
from workers.settings import KafkaSettings


def producer(ks: KafkaSettings, **overrides) -> KafkaProducer:
    options = dict(acks="all", linger_ms=5, max_request_size=4 * 1024 * 1024)
    options.update(overrides)
    check_access(ks)
    return KafkaProducer(**ks.kafka_python_kwargs(), **options)


def consumer(ks: KafkaSettings, **overrides) -> KafkaConsumer:
    options = dict(
        isolation_level="read_committed", enable_auto_commit=False,
        auto_offset_reset="earliest", fetch_max_bytes=16 * 1024 * 1024,
        max_partition_fetch_bytes=4 * 1024 * 1024,
    )
    options.update(overrides)
    check_access(ks)
    return KafkaConsumer(**ks.kafka_python_kwargs(), **options)


def publish(ks: KafkaSettings, topic: str, records: Iterable[tuple[bytes | None, bytes]],
            partitions: int | None = None) -> int:
    """Send (key, value) pairs to `topic` (cluster name) and wait for every ack; returns count.

    With `partitions`, a record goes to partition_for(key) explicitly (the contract's partitioner).
    """
    p = producer(ks)
    futures = []
    for key, value in records:
        part = partition_for(key.decode(), partitions) if (partitions and key) else None
        futures.append(p.send(topic, key=key, value=value, partition=part))
    p.flush()
    for f in futures:
        f.get(timeout=30)
    p.close()
    return len(futures)


def end_offsets(ks: KafkaSettings, topic: str) -> dict[int, int]:
    c = consumer(ks)
    try:
        parts = sorted(c.partitions_for_topic(topic) or ())
        tps = [TopicPartition(topic, p) for p in parts]
        return {tp.partition: off for tp, off in c.end_offsets(tps).items()}
    finally:
        c.close()


def read(ks: KafkaSettings, topic: str, *, partitions: Iterable[int] | None = None,
         start: dict[int, int] | None = None, until_end: bool = True,
         idle_timeout_s: float = 5.0) -> Iterator[ConsumerRecord]:
    """Records of `topic` from `start` (default: the beginning) to the end offsets seen at call.

    read_committed, so what a transcript reader would see. Stops at the end offsets (or after
    `idle_timeout_s` without progress when `until_end` is False).
    """
    c = consumer(ks)
    try:
        if partitions is None:
            partitions = c.partitions_for_topic(topic) or ()
        parts = sorted(partitions)
        tps = [TopicPartition(topic, p) for p in parts]
        c.assign(tps)
        for tp in tps:
            if start and tp.partition in start:
                c.seek(tp, start[tp.partition])
            else:
                c.seek_to_beginning(tp)
        ends = c.end_offsets(tps)
        pending = {tp for tp in tps if c.position(tp) < ends[tp]}
        last = time.monotonic()
        while pending:
            batch = c.poll(timeout_ms=500, max_records=10000)
            if batch:
                last = time.monotonic()
            for tp, recs in batch.items():
                for r in recs:
                    if r.offset < ends[tp]:
                        yield r
            for tp in list(pending):
                if c.position(tp) >= ends[tp]:
                    pending.discard(tp)
            if not until_end and time.monotonic() - last > idle_timeout_s:
                break
    finally:
        c.close()


def ranges_with_records(c: KafkaConsumer, ranges: dict[TopicPartition, tuple[int, int]],
                        timeout: float = 5.0) -> set[TopicPartition]:
    """The partitions whose offsets [start, end) hold a record, read by `c` (a read_committed
    consumer): it skips transaction markers and aborted records, and its position reaches `end`
    without a record when there is none. A range not read to its end within `timeout` (an open
    transaction holds it at the last stable offset) counts as holding one."""
    c.assign(list(ranges))
    for tp, (start, _) in ranges.items():
        c.seek(tp, start)
    holding: set[TopicPartition] = set()
    undecided = set(ranges)
    deadline = time.monotonic() + timeout
    while undecided and time.monotonic() < deadline:
        for tp, recs in c.poll(timeout_ms=50, max_records=100).items():
            if tp in undecided and any(r.offset < ranges[tp][1] for r in recs):
                holding.add(tp)
                undecided.discard(tp)
        undecided = {tp for tp in undecided if c.position(tp) < ranges[tp][1]}
    return holding | undecided
