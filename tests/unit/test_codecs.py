"""Both Kafka clients read every codec a producer may use: the one place a missing library fails.

aiokafka (the worker, through faust, and its restore) and kafka-python (audit, sink, show, forget)
each look for their compression libraries at import and, without one, stop on the first
batch in that codec (UnsupportedCodecError): one compressed record would crash-loop the
worker. The libraries are dependencies in pyproject.toml; these tests name the one missing.
Each batch is built by one client and read by the other, so neither only agrees with itself.
"""

from __future__ import annotations

from types import ModuleType

import aiokafka.codec
import kafka.codec
import pytest
from aiokafka.record.memory_records import MemoryRecords as AioMemoryRecords
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}  # the batch attribute's codec ids
RECORDS = [(f"agent:ops:main#{i:010d}".encode(), b'{"text": "%d"}' % i * 20) for i in range(50)]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("client", [aiokafka.codec, kafka.codec], ids=["aiokafka", "kafka-python"])
def test_each_client_has_the_codec(client: ModuleType, codec: str) -> None:
    assert getattr(client, f"has_{codec}")(), f"{client.__name__}: no library for {codec}"


def kafka_python_batch(codec: int) -> bytes:
    b = MemoryRecordsBuilder(magic=2, compression_type=codec, batch_size=1 << 20)
    for i, (key, value) in enumerate(RECORDS):
        assert b.append(timestamp=1_700_000_000_000 + i, key=key, value=value) is not None
    b.close()
    return bytes(b.buffer())


def aiokafka_batch(codec: int) -> bytes:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=0,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 20)
    for i, (key, value) in enumerate(RECORDS):
        assert b.append(i, timestamp=1_700_000_000_000 + i, key=key, value=value,
                        headers=[]) is not None
    return bytes(b.build())


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_reads_a_batch_kafka_python_compressed(codec: str) -> None:
    data = kafka_python_batch(CODECS[codec])
    assert len(data) < sum(len(v) for _, v in RECORDS)  # really compressed
    batch = AioMemoryRecords(data).next_batch()
    assert batch.compression_type == CODECS[codec]
    assert [(r.key, r.value) for r in batch] == RECORDS


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_reads_a_batch_aiokafka_compressed(codec: str) -> None:
    data = aiokafka_batch(CODECS[codec])
    assert len(data) < sum(len(v) for _, v in RECORDS)
    batch = MemoryRecords(data).next_batch()
    assert batch.compression_type == CODECS[codec]
    assert [(r.key, r.value) for r in batch] == RECORDS
