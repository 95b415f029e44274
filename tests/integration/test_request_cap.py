"""The worker's producer against the broker with its requests bounded (workers.stream.request_cap,
installed by adapter.cap_requests): every produce request stays within max_request_size (or
holds one batch), the batches held back go in the node's next requests, and every record
arrives once, in its partition's order."""

from __future__ import annotations

import asyncio

import pytest

from tests.conftest import delete_topics
from workers.kafka_io import read
from workers.settings import kafka_settings
from workers.stream.adapter import cap_requests

pytestmark = pytest.mark.kafka

CAP = 64 * 1024
BATCH = 16 * 1024


def test_requests_stay_within_the_bound_and_deliver_everything_in_order(env, prefix):
    from aiokafka import AIOKafkaProducer
    from aiokafka.producer.message_accumulator import MessageAccumulator
    from kafka.admin import KafkaAdminClient, NewTopic

    ks = kafka_settings(env)
    topic = prefix + "requests"
    admin = KafkaAdminClient(**ks.kafka_python_kwargs())
    admin.create_topics([NewTopic(topic, 16, 1)])
    admin.close()
    requests: list[list[int]] = []  # each drained request: its batches' bytes

    async def scenario() -> tuple[int, int]:
        capped = cap_requests(AIOKafkaProducer(
            **ks.kafka_python_kwargs(), acks="all", enable_idempotence=True,
            max_batch_size=BATCH, max_request_size=CAP, linger_ms=0))
        plain = AIOKafkaProducer(**ks.kafka_python_kwargs(), max_batch_size=BATCH,
                                 max_request_size=CAP, linger_ms=0)
        drain = MessageAccumulator.drain_by_nodes  # cap_requests installed its bound on it

        def spy(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
            nodes, unknown = drain(self, *args, **kwargs)
            if self is capped._message_accumulator:
                requests.extend([b._builder.size() for b in batches.values()]
                                for batches in nodes.values())
            else:
                largest.append(max((sum(b._builder.size() for b in batches.values())
                                    for batches in nodes.values()), default=0))
            return nodes, unknown

        largest: list[int] = []
        MessageAccumulator.drain_by_nodes = spy
        try:
            await capped.start()
            await plain.start()
            for producer, name in ((capped, b"capped"), (plain, b"plain")):
                # 16 partitions x 40 records of 1 KiB, sent before any is awaited: about
                # 640 KiB ready at once, ten times the bound
                sent = [await producer.send(topic, name + b":%d:%d:" % (p, i) + b"x" * 1000,
                                            key=b"k", partition=p)
                        for i in range(40) for p in range(16)]
                await asyncio.gather(*sent)
            return len(requests), max(largest)
        finally:
            MessageAccumulator.drain_by_nodes = drain
            await capped.stop()
            await plain.stop()

    try:
        n, plain_largest = asyncio.run(scenario())
        values = list(read(ks, topic, timeout=60))
    finally:
        delete_topics(env["KAFKA_BOOTSTRAP"], prefix)
    assert n >= 10, "the capped producer's 640 KiB went in many requests"
    for sizes in requests:
        assert sum(sizes) <= CAP or len(sizes) == 1, sizes
    assert plain_largest > CAP, "without the bound aiokafka drains it all in one request"
    by_partition: dict[int, list[bytes]] = {}
    for r in values:
        by_partition.setdefault(r.partition, []).append(r.value)
    for p in range(16):
        got = [v.split(b":")[:3] for v in by_partition.get(p, [])]
        assert got == [[name, b"%d" % p, b"%d" % i] for name in (b"capped", b"plain")
                       for i in range(40)], p
