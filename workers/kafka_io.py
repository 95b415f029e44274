"""kafka-python clients for the command-line shells (demo, show, audit, forget, loadgen), the
tests and the bench; `polls` is the one loop that reads them (read_committed, to the end
offsets or on as records are written).

The worker itself talks to Kafka through faust, and restores its state with aiokafka
(workers/stream/local_state.py); these are the plain clients around it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.consumer.fetcher import ConsumerRecord
from transcript_connector.partitioning import partition_for

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


def polls(c: KafkaConsumer, ends: dict[TopicPartition, int] | None = None, *,
          timeout: float | None = None, idle: float | None = None, poll_ms: int = 500,
          max_records: int = 10_000) -> Iterator[list[ConsumerRecord]]:
    """The one read loop: what `c` (assigned, positioned) reads from its positions on, one list
    a poll (empty when the poll brought nothing).

    With `ends` (an offset for each assigned partition), only the records below them, and no
    more polls once c's position in every partition has reached its end. A read_committed
    reader steps over transaction markers and aborted records, so its position gets there also
    when the last offsets hold no record; a partition the caller seeks to its end is done.
    Without `ends`, on (following what is written) until the caller stops. Raises TimeoutError
    when `timeout` seconds pass first, or `idle` seconds without a record (a read whose length
    grows with the log, such as a restore, bounds its stalls rather than its time)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    last_record = time.monotonic()
    pending = None if ends is None else {tp for tp, end in ends.items() if c.position(tp) < end}
    while pending is None or pending:
        now = time.monotonic()
        if deadline is not None and now > deadline:
            topics = ", ".join(sorted({tp.topic for tp in pending or c.assignment()}))
            raise TimeoutError(f"{topics} not read to its end in {timeout}s")
        if idle is not None and now - last_record > idle:
            left = ", ".join(f"{tp.topic}[{tp.partition}]"
                             for tp in sorted(pending or c.assignment()))
            raise TimeoutError(f"no record for {idle:.0f}s; {left} not read to its end")
        batch = c.poll(timeout_ms=poll_ms, max_records=max_records)
        if batch:
            last_record = time.monotonic()
        if ends is None:
            yield [r for recs in batch.values() for r in recs]
        else:
            yield [r for tp, recs in batch.items() for r in recs if r.offset < ends[tp]]
            pending = {tp for tp in pending if c.position(tp) < ends[tp]}


def read(ks: KafkaSettings, topic: str, *, partitions: Iterable[int] | None = None,
         start: dict[int, int] | None = None, until_end: bool = True,
         timeout: float | None = None, **overrides) -> Iterator[ConsumerRecord]:
    """Records of `topic` from `start` (default: the beginning) to the end offsets seen at call,
    or on as they are written when `until_end` is False (then until the caller stops).

    read_committed (unless `overrides` say otherwise: options of consumer()), so what a
    transcript reader would see. Raises TimeoutError when not done within `timeout` seconds."""
    c = consumer(ks, **overrides)
    try:
        if partitions is None:
            partitions = c.partitions_for_topic(topic) or ()
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        c.assign(tps)
        for tp in tps:
            if start and tp.partition in start:
                c.seek(tp, start[tp.partition])
            else:
                c.seek_to_beginning(tp)
        for batch in polls(c, c.end_offsets(tps) if until_end else None, timeout=timeout):
            yield from batch
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
    ends = {tp: end for tp, (_, end) in ranges.items()}
    holding: set[TopicPartition] = set()
    try:
        for batch in polls(c, ends, timeout=timeout, poll_ms=50, max_records=100):
            for r in batch:
                tp = TopicPartition(r.topic, r.partition)
                if tp not in holding:
                    holding.add(tp)
                    c.seek(tp, ends[tp])  # one record decides it: done with the partition
    except TimeoutError:
        holding.update(tp for tp, end in ends.items() if c.position(tp) < end)
    return holding
