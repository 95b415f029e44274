"""One transaction's cost under Kafka's transactions v1 and v2 (KIP-890), on the local broker.

    .venv/bin/python bench/txn_versions.py [--transactions 300] [--records 3] [--rounds 3]
                                           [--partitions 8] [--topics 1] [--versions 1,2]

aiokafka has no v2 (the worker adds it: workers/stream/adapter.py), nor have kafka-python
3.0.12 and librdkafka, which hold v2's schemas at most. This drives both over one raw
connection with kafka-python's protocol classes, the same client code for both and no producer
client around it (the broker's floor), one transaction after the other as the worker's are:
`--records` records on each of 8 partitions and one consumer-group offset per transaction.
`--partitions P --topics T` gives a transaction the worker's shape at more partitions:
`--records` on each of P partitions of T topics, and the offsets of P partitions of two of
them (as of the input and of transcript.control). At 1,000/s on 64 partitions a batch of the
worker touches about 31 partitions of its entries (with their positions) and of its
changelog: T = 2.
- v1: AddPartitionsToTxn (asked again every 2 ms while the broker answers
  CONCURRENT_TRANSACTIONS: the last transaction's markers are still being written, as the
  worker's producer does), Produce v11, AddOffsetsToTxn, TxnOffsetCommit v3, EndTxn v3.
- v2: Produce v12 (the broker adds the partitions), TxnOffsetCommit v5 (and the group), EndTxn
  v5, whose answer bumps the producer epoch (sequences start again at 0).
Prints p50 / p99 in ms and how often a request was asked again. Needs a broker with the
`transaction.version` feature at 2 (Kafka 4.0 and later, the default for a new cluster).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import struct
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import BOOTSTRAP, create_topic, delete_topics  # noqa: E402

PARTITIONS = 8
RETRY_S = 0.002
_RETRIABLE = {3, 6, 19, 51}  # a new topic not known yet, not its leader yet, not enough replicas
# (a v1 produce), concurrent transactions


class Connection:
    """Requests over one socket, answered in order (Kafka answers a connection's in order)."""

    def __init__(self) -> None:
        self.correlation = 0
        self.waiting: dict[int, tuple[Any, int, asyncio.Future]] = {}

    async def open(self) -> None:
        host, port = BOOTSTRAP.split(",")[0].rsplit(":", 1)
        self.reader, self.writer = await asyncio.open_connection(host, int(port))
        self.task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        while True:
            size = struct.unpack(">i", await self.reader.readexactly(4))[0]
            data = await self.reader.readexactly(size)
            response, version, future = self.waiting.pop(struct.unpack(">i", data[:4])[0])
            future.set_result(response.decode(data, version=version, header=True))

    def send(self, request: Any, response: Any, version: int) -> asyncio.Future:
        self.correlation += 1
        request.API_VERSION = version
        request.with_header(correlation_id=self.correlation, client_id="txn-versions")
        future = asyncio.get_running_loop().create_future()
        self.waiting[self.correlation] = (response, version, future)
        self.writer.write(request.encode(header=True, framed=True))
        return future

    def close(self) -> None:
        self.task.cancel()
        self.writer.close()


def record_batch(producer_id: int, epoch: int, sequence: int, n: int) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    batch = DefaultRecordBatchBuilder(2, 0, 1, producer_id, epoch, sequence, 1 << 20)
    for i in range(n):
        batch.append(i, timestamp=int(time.time() * 1000), key=b"k", value=b"v" * 300,
                     headers=[])
    return bytes(batch.build())


async def until_ok(c: Connection, request: Any, response: Any, version: int, errors: Any,
                   counts: dict[str, int]) -> Any:
    """Ask until every error code is 0, again after RETRY_S while they are retriable."""
    while True:
        answer = await c.send(request, response, version)
        codes = set(errors(answer))
        if codes == {0}:
            return answer
        if not codes <= _RETRIABLE | {0}:
            raise RuntimeError(f"error codes {sorted(codes)}")
        counts["asked again"] += 1
        await asyncio.sleep(RETRY_S)


async def measure(version: int, topics: list[str], transactions: int, records: int,
                  partitions: int = PARTITIONS) -> tuple[list[float], int]:
    from kafka.protocol.producer import (
        AddOffsetsToTxnRequest,
        AddOffsetsToTxnResponse,
        AddPartitionsToTxnRequest,
        AddPartitionsToTxnResponse,
        EndTxnRequest,
        EndTxnResponse,
        InitProducerIdRequest,
        InitProducerIdResponse,
        ProduceRequest,
        ProduceResponse,
        TxnOffsetCommitRequest,
        TxnOffsetCommitResponse,
    )

    c = Connection()
    await c.open()
    tid, group = f"txnv{version}-{uuid.uuid4().hex[:8]}", f"txnv-{uuid.uuid4().hex[:8]}"
    init = await c.send(InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60000,
                                              producer_id=-1, producer_epoch=-1),
                        InitProducerIdResponse, 5)
    if init.error_code:
        raise RuntimeError(f"InitProducerId: error {init.error_code}")
    pid, epoch = init.producer_id, init.producer_epoch
    sequences = {(t, p): 0 for t in topics for p in range(partitions)}
    offset_topics = topics[:2]  # as the input's and transcript.control's
    offset_partitions = range(partitions) if len(topics) > 1 else range(1)
    counts = {"asked again": 0}
    times: list[float] = []
    Topic = ProduceRequest.TopicProduceData
    OffsetTopic = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    try:
        for i in range(transactions):
            began = time.perf_counter()
            if version == 1:
                await until_ok(c, AddPartitionsToTxnRequest(
                    v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                    v3_and_below_producer_epoch=epoch, v3_and_below_topics=[
                        AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
                            name=topic, partitions=list(range(partitions)))
                        for topic in topics]),
                    AddPartitionsToTxnResponse, 3,
                    lambda a: (p.partition_error_code for t in a.results_by_topic_v3_and_below
                               for p in t.results_by_partition), counts)
            data = [Topic(name=topic, partition_data=[Topic.PartitionProduceData(
                index=p, records=record_batch(pid, epoch, sequences[topic, p], records))
                for p in range(partitions)]) for topic in topics]
            await until_ok(c, ProduceRequest(
                transactional_id=tid, acks=-1, timeout_ms=30000, topic_data=data),
                ProduceResponse, 12 if version == 2 else 11,
                lambda a: (p.error_code for t in a.responses for p in t.partition_responses),
                counts)
            if version == 1:
                await until_ok(c, AddOffsetsToTxnRequest(
                    transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                    group_id=group), AddOffsetsToTxnResponse, 3,
                    lambda a: [a.error_code], counts)
            await until_ok(c, TxnOffsetCommitRequest(
                transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch,
                generation_id=-1, member_id="", group_instance_id=None, topics=[OffsetTopic(
                    name=name, partitions=[OffsetTopic.TxnOffsetCommitRequestPartition(
                        partition_index=p, committed_offset=i + 1, committed_leader_epoch=-1,
                        committed_metadata="") for p in offset_partitions])
                    for name in offset_topics]),
                TxnOffsetCommitResponse, 5 if version == 2 else 3,
                lambda a: (p.error_code for t in a.topics for p in t.partitions), counts)
            end = await c.send(EndTxnRequest(transactional_id=tid, producer_id=pid,
                                             producer_epoch=epoch, committed=True),
                               EndTxnResponse, 5 if version == 2 else 3)
            if end.error_code:
                raise RuntimeError(f"EndTxn: error {end.error_code}")
            if version == 2:  # every transaction bumps the epoch; sequences start again
                pid, epoch = end.producer_id, end.producer_epoch
                sequences = dict.fromkeys(sequences, 0)
            else:
                sequences = {tp: s + records for tp, s in sequences.items()}
            times.append((time.perf_counter() - began) * 1000)
    finally:
        c.close()
    return times, counts["asked again"]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transactions", type=int, default=300)
    parser.add_argument("--records", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=PARTITIONS)
    parser.add_argument("--topics", type=int, default=1)
    parser.add_argument("--versions", default="1,2")
    args = parser.parse_args()
    prefix = f"txnversions{uuid.uuid4().hex[:8]}."
    topics = [f"{prefix}out{t}" for t in range(args.topics)]
    for topic in topics:
        create_topic(topic, args.partitions)
    versions = [int(v) for v in args.versions.split(",")]
    try:
        for n in range(args.rounds):
            for version in versions:
                times, again = asyncio.run(measure(version, topics, args.transactions,
                                                   args.records, args.partitions))
                times.sort()
                print(f"round {n + 1} transactions v{version}: p50 "
                      f"{statistics.median(times):6.2f} ms  p99 "
                      f"{times[int(len(times) * 0.99)]:6.2f} ms  asked again {again}",
                      flush=True)
    finally:
        delete_topics(prefix)
    return 0


if __name__ == "__main__":
    sys.exit(main())
