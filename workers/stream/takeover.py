"""The exactly-once takeover at each assignment: the last owners' transactions end, then the
local state is brought up to the changelog's end, then faust's recovery hands the partitions
to the processor (the lifecycle: workers/core/lifecycle.py)."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time

from workers.core.lifecycle import Assigned, Fail, Settled
from workers.ops.health import Health
from workers.ops.metrics import Metrics
from workers.settings import KafkaSettings
from workers.stream import local_state
from workers.stream.adapter import partition_store, replace_table_rebalance
from workers.stream.checkpoints import Checkpointer
from workers.stream.clients import committed_offsets
from workers.stream.processor import EXIT_FATAL
from workers.stream.transactions import BatchTransactions

log = logging.getLogger("transcript_owner.worker")


def on_assigned(app, ks: KafkaSettings, transactions: BatchTransactions, input_name: str,  # noqa: ANN001
                read: frozenset[str], changelog: str, diagnostics: str, table,  # noqa: ANN001
                metrics: Metrics, health: Health, checkpoints: Checkpointer | None = None, *,
                settle_timeout_s: float = 90.0) -> None:
    """Exactly-once, at each assignment and before faust's table recovery: wait until the
    partitions' last owners' transactions have ended (their offset commits are stable, and no
    transaction is open on their changelog and diagnostics partitions), then bring their local
    state up to the changelog's end, which is final then: a last owner that lost the partitions
    can no longer commit (its offsets carry an older generation). Only then is the committed
    offset read (Processor._starts) and input processed. A failure here exits (70): the next
    start does the same from the beginning."""
    stable = committed_offsets(ks, app.conf.id)
    current: list = [None, None]  # the takeover in progress: its task, its superseded flag

    async def on_rebalance(assigned, revoked, newly_assigned, generation_id=0):  # noqa: ANN001, ANN202
        """faust's hook, run inside aiokafka's assignment callback, where this member sends no
        heartbeat: a takeover that waited there for a frozen last owner's transaction (up to
        the transaction timeout) outlived the session timeout and lost the assignment. So the
        takeover runs beside it; the partitions stay paused and flow control off until it
        hands them to faust's recovery."""
        if checkpoints is not None:  # its snapshot would hold a store faust closes and reopens
            checkpoints.abandon()
        task, superseded = current
        if task is not None and not task.done():  # a newer assignment: the last one ends first
            superseded.set()
            await asyncio.wait([task])
        if app.should_stop:  # an assignment that arrives as the worker stops: faust's stores
            return           # are closing, and the next start takes the partitions over
        superseded = threading.Event()
        current[:] = [asyncio.ensure_future(take_over(
            assigned, revoked, newly_assigned, generation_id, superseded)), superseded]

    async def take_over(assigned, revoked, newly_assigned, generation_id,  # noqa: ANN001, ANN202
                        superseded: threading.Event) -> None:
        def over() -> bool:
            return superseded.is_set() or app.should_stop

        try:
            mine = sorted({tp.partition for tp in assigned if tp.topic == input_name})
            health.send(Assigned(generation_id))
            began = time.monotonic()
            # this worker's own last incarnation is fenced once its producer holds its id
            await transactions.start()
            await stable([tp for tp in assigned if tp.topic in read])
            loop = asyncio.get_running_loop()
            done = await loop.run_in_executor(None, local_state.settle, ks,
                                              [(topic, p) for topic in (changelog, diagnostics)
                                               for p in mine], settle_timeout_s, 0.05, over)
            if not done or over():
                return
            settled = time.monotonic()
            health.send(Settled())
            dbs = {p: partition_store(table, p) for p in mine}
            applied = await loop.run_in_executor(None, local_state.top_up, ks, changelog, dbs)
            # faust's stores are the only holders again: a stop meanwhile clears them, and a
            # handle kept here would hold the RocksDB lock against their reopening
            del dbs
            metrics.restored += applied
            log.info("assigned input partitions %s: last owners' transactions ended in %.2fs, "
                     "%d changelog records applied in %.2fs", mine, settled - began, applied,
                     time.monotonic() - settled)
        except Exception:
            if over():
                log.info("the assigned partitions were not taken over: %s",
                         "stopping" if app.should_stop else "a newer assignment came")
                return
            health.send(Fail())
            log.exception("fatal: the assigned partitions could not be taken over; exiting")
            logging.shutdown()
            os._exit(EXIT_FATAL)
        if not over():  # a stop or a newer assignment came while the top-up ran
            await recover(assigned, revoked, newly_assigned, generation_id)

    recover = replace_table_rebalance(app, on_rebalance)  # faust's: the tables' recovery
