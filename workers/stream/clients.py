"""The worker's own Kafka clients beside faust's: its producer, and the offsets reader.

faust's producer and consumer carry the group and the fetches; these are the ones the batch
path (workers.stream.processor) and the takeover (workers.stream.takeover) use themselves.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from workers.settings import KafkaSettings
from workers.stream.adapter import cap_requests

log = logging.getLogger("transcript_owner.worker")
# a produce request's bound (workers.stream.request_cap), so also a record's
REQUEST_BYTES = 4 * 1024 * 1024
COMMITTED_OFFSETS_TIMEOUT_S = 120.0  # then the worker exits (70) and its supervisor restarts it


def offsets_reader(ks: KafkaSettings, group: str) -> OffsetsReader:
    """The group's committed offsets, and partitions' first and last stable offsets, asked of
    the cluster (once per rebalance, off the loop) on a connection of their own: faust's
    consumer has a fetch waiting on the broker most of the time, and a request sent behind it
    waits for it (up to its max wait, 100 ms: three lookups on it held a restart's first batch
    for 0.3 s). Stable committed offsets (KIP-447 require_stable, which a read_committed
    consumer asks for): while an offset commit of a transaction that has not ended is pending
    on a partition, the broker answers UNSTABLE_OFFSET_COMMIT and the ask is repeated, so a
    partition's new owner never starts below what its last owner's last transaction
    commits."""
    from kafka import IsolationLevel, KafkaConsumer, OffsetSpec, TopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaError

    client: list[KafkaConsumer] = []
    # first and last offsets through an admin client: the consumer's lookup of a topic it has
    # not seen refreshes its metadata after kafka-python's fixed 100 ms backoff (each restart's
    # first batch waited it, twice)
    admin: list[KafkaAdminClient] = []
    lock = threading.Lock()

    def connect_admin() -> KafkaAdminClient:
        with lock:
            if not admin:
                admin.append(KafkaAdminClient(**ks.kafka_python_kwargs(),
                                              client_id=f"{group}-offsets"))
            return admin[0]

    def connect() -> KafkaConsumer:
        with lock:  # a consumer that never subscribes: it asks, it does not join the group
            if not client:
                client.append(KafkaConsumer(**ks.kafka_python_kwargs(), group_id=group,
                                            client_id=f"{group}-offsets",
                                            isolation_level="read_committed",
                                            enable_auto_commit=False))
            return client[0]

    def warm_up() -> None:
        try:
            connect()
            connect_admin()
        except Exception:  # noqa: BLE001  (ask connects again, and says why it cannot)
            log.debug("the offsets client did not connect ahead of the first batch", exc_info=True)

    # connected while faust starts: a kafka-python client takes 0.2-0.5 s to bootstrap, and the
    # first batch waits for the committed offsets
    threading.Thread(target=warm_up, name="offsets-client", daemon=True).start()

    def retrying(deadline: float, what: str, call: Callable[[int], Any]) -> Any:
        """`call(ms left)` until it answers; a retriable error (the coordinator or a leader
        moved or loads; a transaction ends) is asked again until the deadline."""
        pause = 0.2
        while True:
            try:
                return call(max(1000, int((deadline - time.monotonic()) * 1000)))
            except KafkaError as exc:
                if not getattr(exc, "retriable", False) or time.monotonic() > deadline:
                    raise
                log.warning("%s not readable yet (%s); retrying", what, type(exc).__name__)
                time.sleep(pause)
                pause = min(2.0, pause * 2)

    def ask(tps: list) -> dict:
        deadline = time.monotonic() + COMMITTED_OFFSETS_TIMEOUT_S
        return {tp: retrying(deadline, "committed offsets", lambda ms, tp=tp: connect().committed(
                    TopicPartition(tp.topic, tp.partition), timeout_ms=ms))
                for tp in tps}

    def bounds(tps: list, earliest: bool) -> dict:
        mine = {TopicPartition(tp.topic, tp.partition): tp for tp in tps}
        spec = OffsetSpec.EARLIEST if earliest else OffsetSpec.LATEST

        def list_offsets(_ms: int) -> dict:
            client_ = connect_admin()
            with lock:  # one call at a time on the client
                return client_.list_partition_offsets(
                    dict.fromkeys(mine, spec), isolation_level=IsolationLevel.READ_COMMITTED)

        found = retrying(time.monotonic() + COMMITTED_OFFSETS_TIMEOUT_S, "partition offsets",
                         list_offsets)
        return {mine[tp]: info.offset for tp, info in found.items()}

    return OffsetsReader(ask, bounds)


class OffsetsReader:
    """`await reader(tps)`: committed offsets ({tp: offset or None}); `earliest(tps)` and
    `ends(tps)`: the partitions' first offsets and last stable offsets ({tp: offset})."""

    def __init__(self, ask, bounds) -> None:  # noqa: ANN001
        self._ask, self._bounds = ask, bounds

    async def __call__(self, tps: list) -> dict:
        return await asyncio.get_running_loop().run_in_executor(None, self._ask, tps)

    async def earliest(self, tps: list) -> dict:
        return await asyncio.get_running_loop().run_in_executor(None, self._bounds, tps, True)

    async def ends(self, tps: list) -> dict:
        return await asyncio.get_running_loop().run_in_executor(None, self._bounds, tps, False)


def producer_factory(ks: KafkaSettings, app_id: str, transaction_timeout_s: float = 60.0):  # noqa: ANN201
    """The processor's producer: idempotent, acks from all in-sync replicas, large batches,
    requests of at most REQUEST_BYTES;
    `new_producer(transactional_id)` for the exactly-once worker's (one per worker)."""

    def new_producer(transactional_id: str | None = None):  # noqa: ANN202  (on the running loop)
        from aiokafka import AIOKafkaProducer

        # the connection (bootstrap, TLS context, SASL) exactly as every kafka-python client's
        return cap_requests(AIOKafkaProducer(
            **ks.kafka_python_kwargs(), client_id=f"{app_id}-outputs",
            acks="all", enable_idempotence=True, max_batch_size=1024 * 1024,
            max_request_size=REQUEST_BYTES, linger_ms=0,
            transactional_id=transactional_id,
            transaction_timeout_ms=int(transaction_timeout_s * 1000),
        ))

    return new_producer
