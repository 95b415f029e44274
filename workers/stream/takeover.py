"""The takeover at each assignment: exactly-once, the last owners' transactions end first;
then the state owner closes the stores of partitions that left, opens those that came and reads
them to the changelog's end; then faust's recovery (no table: it resumes the partitions) hands
them to the processor (the lifecycle: workers/core/lifecycle.py)."""

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
from workers.stream import fencing, local_state
from workers.stream.adapter import replace_table_rebalance
from workers.stream.checkpoints import Checkpointer
from workers.stream.clients import offsets_reader
from workers.stream.processor import EXIT_FATAL
from workers.stream.standby import Standbys
from workers.stream.state_owner import StateOwner
from workers.stream.topic_check import MoveGuard
from workers.stream.transactions import BatchTransactions

log = logging.getLogger("transcript_owner.worker")


EXIT_STALE_STATE = 75  # local state ahead of its changelog: discarded, restart me
EXIT_MOVE_PENDING = 2  # a repartition is moving the partitions: start again once it is done


def on_assigned(app, ks: KafkaSettings, transactions: BatchTransactions | None,  # noqa: ANN001
                input_name: str, read: frozenset[str], diagnostics: str, state: StateOwner,
                metrics: Metrics, health: Health, checkpoints: Checkpointer | None = None, *,
                settle_timeout_s: float = 90.0, moves: MoveGuard | None = None,
                standbys: Standbys | None = None) -> None:
    """At each assignment, before faust resumes the partitions. Exactly-once (`transactions`):
    wait until the partitions' last owners' transactions have ended (their offset commits are
    stable, and no transaction is open on their changelog and diagnostics partitions), so the
    changelog is final: a last owner that lost the partitions can no longer commit (its
    offsets carry an older generation). Then, in both guarantees, the state owner brings the
    assigned partitions' stores to the changelog's end. Only then is the committed offset read
    (Processor._starts) and input processed. A failure here exits (70): the next start does
    the same from the beginning; a store the changelog no longer matches is discarded and the
    worker exits 75, to restore it at the next start."""
    stable = offsets_reader(ks, app.conf.id) if transactions is not None else None
    current: list = [None, None]  # the takeover in progress: its task, its superseded flag

    async def on_rebalance(assigned, revoked, newly_assigned, generation_id=0):  # noqa: ANN001, ANN202
        """faust's hook, run inside aiokafka's assignment callback, where this member sends no
        heartbeat: a takeover that waited there for a frozen last owner's transaction (up to
        the transaction timeout) outlived the session timeout and lost the assignment. So the
        takeover runs beside it; the partitions stay paused and flow control off until it
        hands them to faust's recovery."""
        if checkpoints is not None:  # its snapshot would hold a store that may close now
            checkpoints.abandon()
        task, superseded = current
        if task is not None and not task.done():  # a newer assignment: the last one ends first
            superseded.set()
            await asyncio.wait([task])
        if app.should_stop:  # an assignment that arrives as the worker stops: the next start
            return           # takes the partitions over
        superseded = threading.Event()
        current[:] = [asyncio.ensure_future(take_over(
            assigned, revoked, newly_assigned, generation_id, superseded)), superseded]

    async def take_over(assigned, revoked, newly_assigned, generation_id,  # noqa: ANN001, ANN202
                        superseded: threading.Event) -> None:
        def over() -> bool:
            return superseded.is_set() or app.should_stop

        try:
            mine = sorted({tp.partition for tp in assigned if tp.topic == input_name})
            began = settled = time.monotonic()
            loop = asyncio.get_running_loop()
            if standbys is not None:  # their stores may become owned: the tail stops first
                await loop.run_in_executor(None, standbys.stop)
            if moves is not None:
                await refuse_during_a_move(moves, ks)
            if transactions is not None:
                health.send(Assigned(generation_id))
                # this worker's own last incarnation is fenced once its producer holds its id
                await transactions.start()
                # and a departed worker's, by whichever new owner gets here first: beside the
                # waits below, which it ends when there is such a transaction
                fenced = loop.run_in_executor(None, fencing.end_departed, ks, app.conf.id,
                                              transactions.transactional_id)
                await stable([tp for tp in assigned if tp.topic in read])
                done = await loop.run_in_executor(
                    None, local_state.settle, ks,
                    [(topic, p) for topic in (state.changelog, diagnostics) for p in mine],
                    settle_timeout_s, 0.05, over)
                await fenced  # it never raises
                if not done or over():
                    return
                settled = time.monotonic()
                health.send(Settled())
            await loop.run_in_executor(None, state.assign, mine)
            applied = await loop.run_in_executor(None, state.restore, ks)
            metrics.restored += applied
            log.info("assigned input partitions %s: %s%d changelog records applied in %.2fs",
                     mine, "" if transactions is None else
                     f"last owners' transactions ended in {settled - began:.2f}s, ",
                     applied, time.monotonic() - settled)
        except local_state.StaleState as exc:
            gone = state.discard(exc.partitions)
            health.send(Fail())
            log.error("local state is ahead of its changelog (%s): discarded the local state of "
                      "partitions %s; exiting %d, the next start restores it from the "
                      "changelog", exc, gone, EXIT_STALE_STATE)
            logging.shutdown()
            os._exit(EXIT_STALE_STATE)
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
            if standbys is not None:
                standbys.start()

    recover = replace_table_rebalance(app, on_rebalance)  # faust's: the tables' recovery


async def refuse_during_a_move(moves: MoveGuard, ks: KafkaSettings) -> None:
    """A repartition begun since the worker started (it records itself in transcript.layout
    before it changes anything): take nothing, exit 2; the next start refuses until the move
    is done. A metadata request and a ListOffsets of the layout per assignment."""
    why = await asyncio.get_running_loop().run_in_executor(None, moves.pending, ks)
    if why is not None:
        log.error("not taking the assigned partitions: %s; exiting %d", why, EXIT_MOVE_PENDING)
        logging.shutdown()
        os._exit(EXIT_MOVE_PENDING)
