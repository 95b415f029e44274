"""Exactly-once: a batch commits in one Kafka transaction, through one producer per worker.

The transaction holds everything the batch wrote, for every input partition in it: entries,
diagnostics, dead letters, re-keyed records, changelog records, checkpoint parts, and the next
offsets of the input partitions and of transcript.control (`send_offsets_to_transaction`), so
read_committed readers see all of it together, or none of it.

Fencing (KIP-447, Kafka Streams' exactly_once_v2): the offsets go with the consumer's group
generation and member id (workers.stream.adapter, TxnOffsetCommit v3), so the group coordinator
refuses them from a worker that lost its partitions in a rebalance, and that transaction aborts.
The transactional id is the worker's own (`<group>-<worker>`, stable across its restarts), so a
restarted worker's first InitProducerId ends what its last incarnation left open. A partition's
next owner reads the committed offsets require_stable (it waits for a pending transactional
offset commit) and its changelog only once every transaction open on it has ended
(local_state.settle), so it starts from the last committed state and offset.

Why aiokafka with a v3 request rather than kafka-python's or confluent-kafka's producer (both
implement KIP-447): measured here (one process, 300-byte records, 10k per transaction),
kafka-python's producer costs 25-27 µs of CPU per record against 3.2 µs for aiokafka's batch
API (workers.stream.batch_send); the worker's whole per-record budget is about 40 µs.
confluent-kafka takes its group metadata only from a confluent-kafka consumer, and faust's
consumer is aiokafka's.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from workers.core.errors import OwnerError
from workers.stream.adapter import (
    GroupFenced,
    GroupMember,
    install_kip447,
    transaction_version,
    use_transactions_v2,
)
from workers.stream.batch_send import Record, send_handed_over

log = logging.getLogger("transcript_owner.transactions")


class TransactionFailed(OwnerError):
    """The batch's transaction did not commit: none of its outputs or offsets are visible."""


class Overtaken(TransactionFailed):
    """It did not commit because the group has moved on: its offsets carry a generation the
    group no longer has (its partitions were given to another member, GroupFenced)."""


def worker_transactional_id(group: str, instance_id: str | None, state_dir: str | Path) -> str:
    """`<group>-<worker>`: the static instance id if set, else a digest of the host and the
    state directory. Stable across a worker's restarts (its restart fences its last
    incarnation at once) and unique among live workers (two cannot share a state directory)."""
    if instance_id:
        return f"{group}-{instance_id}"
    where = f"{socket.gethostname()}:{Path(state_dir).resolve()}"
    return f"{group}-w{hashlib.sha256(where.encode()).hexdigest()[:16]}"


class BatchTransactions:
    """The worker's transactional producer: one transaction per batch."""

    def __init__(self, new_producer: Callable[[str], Any], transactional_id: str,
                 version: str = "auto") -> None:
        install_kip447()
        self.new_producer, self.transactional_id = new_producer, transactional_id
        self.version_wanted = version  # "auto": v2 where the cluster has it, else "1"
        self.version = 0  # what the producer speaks, once started
        self.producer: Any = None
        self._starting = asyncio.Lock()
        self._idle = asyncio.Event()  # no transaction open (settle); commits are one at a time
        self._idle.set()
        self.results = {"committed": 0, "aborted": 0}  # transactions so far (the metrics)

    async def start(self) -> None:
        """Start the producer, once, and wait for its producer id: the broker has then ended
        any transaction this worker's last incarnation left open. Called by the first
        assignment (before the partitions' state is read) or the processor, whichever is
        first."""
        async with self._starting:
            if self.producer is not None:
                return
            producer = self.new_producer(self.transactional_id)
            try:
                await producer.start()  # returns once InitProducerId has answered
            except Exception as exc:
                await producer.stop()
                raise TransactionFailed(f"the transactional producer {self.transactional_id!r} "
                                        f"did not start: {type(exc).__name__}: {exc}") from exc
            self.version = await self._choose_version(producer)
            self.producer = producer

    async def _choose_version(self, producer: Any) -> int:
        """Transactions v2 (KIP-890: no AddPartitionsToTxn or AddOffsetsToTxn, half a v1
        transaction's time here) where the cluster has finalized it; v1 otherwise, or when the
        operator asked for it (TRANSCRIPT_TRANSACTION_VERSION=1). Both fence alike."""
        if self.version_wanted == "1":
            return 1
        try:
            found = await transaction_version(producer)
        except Exception as exc:  # noqa: BLE001  (v1 is always there: slower, as safe)
            log.warning("the cluster's transaction.version is unknown (%s); using "
                        "transactions v1", type(exc).__name__)
            return 1
        if found >= 2:
            use_transactions_v2(producer)
            log.info("transactions v2 (the cluster's transaction.version is %d)", found)
            return 2
        log.info("transactions v1 (the cluster's transaction.version is %d)", found)
        return 1

    async def close(self) -> None:
        producer, self.producer = self.producer, None
        if producer is not None:
            await producer.stop()

    async def settle(self, timeout_s: float) -> None:
        """The worker stops: the transaction open now ends (at most `timeout_s`) before faust's
        consumer leaves the group, as its offsets carry this member and the group refuses them
        once it has left. A batch's input messages hold faust's stop by themselves (it waits for
        their acks); a quiet partition's checkpoint has none."""
        if self._idle.is_set():
            return
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except TimeoutError:
            log.warning("stopping: a transaction still open after %.0fs; leaving the group",
                        timeout_s)

    async def commit(self, records: list[Record | None],
                     next_offsets: Mapping[tuple[str, int], int], member: GroupMember
                     ) -> list[int]:
        """Send `records` and commit the input offsets `next_offsets` ((topic, partition) ->
        the next offset to read) as `member` in one transaction; the offsets the records were
        written at. `records` is handed over: the transaction empties each slot once its record
        is in a producer batch (batch_send.send_handed_over), so a batch's outputs are not held
        twice while it commits."""
        self._idle.clear()
        try:
            return await self._transaction(records, next_offsets, member)
        finally:
            self._idle.set()

    async def _transaction(self, records: list[Record | None],
                           next_offsets: Mapping[tuple[str, int], int],
                           member: GroupMember) -> list[int]:
        producer = self.producer
        if producer is None:
            raise TransactionFailed("the transactional producer is not started")
        try:
            await producer.begin_transaction()
        except Exception as exc:
            raise TransactionFailed(f"the transaction did not begin: {type(exc).__name__}: "
                                    f"{exc}") from exc
        try:
            # the offsets after the records' acks, not beside them: sent together, the
            # AddOffsetsToTxn sometimes met the last transaction's markers still being written
            # and aiokafka waited 100 ms (its retry backoff) for it: p99 of a 24-record
            # transaction here 112 ms against 13 ms one after the other
            offsets = await send_handed_over(producer, records)
            if next_offsets:
                from aiokafka import TopicPartition

                await producer.send_offsets_to_transaction(
                    {TopicPartition(topic, partition): offset
                     for (topic, partition), offset in next_offsets.items()}, member)
            await producer.commit_transaction()
            self.results["committed"] += 1
        except Exception as exc:
            await self._abort(producer)
            failed = Overtaken if isinstance(exc, GroupFenced) else TransactionFailed
            raise failed(f"the transaction did not commit: {type(exc).__name__}: {exc}") from exc
        except BaseException:  # cancelled: abort what was begun, if the producer still can
            await asyncio.shield(self._abort(producer))
            raise
        return offsets

    async def _abort(self, producer: Any) -> None:
        self.results["aborted"] += 1
        try:
            await asyncio.wait_for(producer.abort_transaction(), 10)
        except Exception as exc:  # noqa: BLE001  (fenced or broken: the broker aborts it)
            log.warning("the transaction could not be aborted (%s); the broker aborts it when "
                        "this worker's producer restarts or the transaction times out",
                        type(exc).__name__)
