"""The worker's consumer against the broker: what one fetch brings at many partitions.

Its consumer is built as the worker builds it (faust's consumer thread, adapter.read_committed_
consumer, a partition's share and the response's bound from WorkerSettings). The input holds
producer batches of some 600 KiB (a connector's client batches up to 1 MB by default), on 64
partitions with the default fetch buffer of 8 MB. A partition's share below a batch brought
one partition a fetch, and the others' share of bytes they could not use (issue 43: batches of
some 2,000 records at 64 partitions against 20,000 at 8); a share that holds the largest batch
brings whole batches of several partitions in one response, and the Fetcher asks again only
once they are taken.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.conftest import delete_topics
from workers.settings import MAX_INPUT_BATCH_BYTES, kafka_settings, worker_settings
from workers.stream import adapter

pytestmark = pytest.mark.kafka

PARTITIONS = 64
FILLED = 4  # partitions given one batch each
RECORDS = 600  # of 1 KiB: a batch of about 600 KiB, above the old share of 256 KiB


def test_a_fetch_brings_whole_batches_of_several_partitions(env, prefix, tmp_path: Path):
    import faust
    from aiokafka import AIOKafkaProducer
    from aiokafka.structs import TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    ks = kafka_settings(env)
    ws = worker_settings({**env, "TRANSCRIPT_PARTITIONS": str(PARTITIONS)})
    assert ws.fetch_bytes() == 4 * 1024 * 1024  # the default buffer, over all partitions
    assert ws.fetch_bytes_per_partition() == MAX_INPUT_BATCH_BYTES
    topic = prefix + "fetch-shape"
    admin = KafkaAdminClient(**ks.kafka_python_kwargs())
    admin.create_topics([NewTopic(topic, PARTITIONS, 1,
                                  topic_configs={"max.message.bytes": str(MAX_INPUT_BATCH_BYTES)})])
    admin.close()

    async def first_fetch(share: int) -> tuple[dict[int, int], float]:
        app = faust.App(f"{prefix}fetch-{share}", broker=f"kafka://{ks.bootstrap}",
                        datadir=str(tmp_path / str(share)), web_enabled=False,
                        consumer_max_fetch_size=share)
        adapter.use_consumer(app, adapter.read_committed_consumer(
            fetch_max_wait_ms=100, offsets_in_transactions=True, fetch_max_bytes=ws.fetch_bytes()))
        client = app.consumer._thread._create_worker_consumer(app.transport)
        await client.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            client.assign(tps)
            await client.seek_to_beginning(*tps)
            got = await client.getmany(timeout_ms=10_000)
            return ({tp.partition: len(records) for tp, records in got.items()},
                    client._fetcher._prefetch_backoff)
        finally:
            await client.stop()

    async def scenario() -> tuple:
        producer = AIOKafkaProducer(**ks.kafka_python_kwargs(), linger_ms=500,
                                    max_batch_size=1024 * 1024,
                                    max_request_size=MAX_INPUT_BATCH_BYTES)
        await producer.start()
        try:
            sent = [await producer.send(topic, b"x" * 1000, partition=p)
                    for p in range(FILLED) for _ in range(RECORDS)]
            await asyncio.gather(*sent)
        finally:
            await producer.stop()
        return (await first_fetch(ws.fetch_bytes_per_partition()),
                await first_fetch(ws.fetch_bytes() // PARTITIONS))

    try:
        (now, hold), (before, _) = asyncio.run(scenario())
    finally:
        delete_topics(ks.bootstrap, prefix)
    # a share that holds the batch: all of them in one response (4 x 600 KiB < 4 MB), whole
    assert now == {p: RECORDS for p in range(FILLED)}, now
    assert hold == adapter.FETCH_HOLD_S
    # the buffer split over 64 partitions (64 KiB each): the first partition's batch only
    assert len(before) == 1 and set(before.values()) == {RECORDS}, before
