"""The worker's hot path: batches of input messages through `Owner.handle`, outputs, state, acks.

For each batch, in this order (docs/guarantees.md, "Processing guarantee"):
  1. decide every record (core) against the session store (workers.stream.session_store: the batch's
     pending writes over the local RocksDB), then one bounded upkeep slice (expiry, migration);
  2. exactly-once (the default): one Kafka transaction holds the batch's outputs (entries,
     diagnostics, dead letters, re-keyed records), its state changes (changelog records), the
     checkpoint parts due and the next offsets of every input partition in it, committed
     with the consumer's group generation (workers.stream.transactions);
     at-least-once: all outputs are sent and acked, then the state changes (changelog);
  3. only then are the state changes written to the local RocksDB, and
  4. the input messages acked: faust's bookkeeping (and, at-least-once, its offset commit).
A transaction that fails exits the worker (70) with nothing of the batch applied locally: the
next owner of each partition waits for the transactions open on it to end, reads the changelog
to its end and starts at the committed offsets, so nothing is repeated or skipped.
At-least-once, a crash between 2 and 3 repeats entries (same key, same content); nothing is
ever skipped.

SIGTERM: the batch in flight finishes (its transaction commits) within the shutdown timeout, or
is cancelled (its transaction aborts); faust then leaves the group.

Rebalances: a batch is only started while flow control is active (faust's recovery is done) and
its messages are tracked before the first await, so faust's revocation waits for the batch to be
acked. Messages fetched under an older consumer generation are dropped unacked: faust seeks to
the committed offset after the rebalance and they come again.

Where each partition starts: in a new generation a partition must start at its committed offset
(or the log start). faust 0.15 can deliver a partition's first messages of a generation *past*
that point when records arrive while it finishes recovery (seen here: the first 13-25 records of
each partition never delivered, and later acks would have committed past them). So the first
message of each partition is checked against where it should start; if it is later, the consumer
is sought back once and the partition is taken up from there. Within a generation the consumer
only moves forward, so an offset that is skipped there holds no record for us (a transaction
marker, or records removed by retention): it is acked with the batch, or faust could never
commit past it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from faust.types import TP, ConsumerMessage
from transcript_connector.partitioning import murmur2

from workers.core.lifecycle import Checked, Fail
from workers.core.outputs import DIAGNOSTICS, Source
from workers.core.owner import Owner, apply, record_clock
from workers.ops.health import Health
from workers.ops.metrics import Metrics
from workers.stream import heap
from workers.stream.adapter import GroupMember
from workers.stream.batch_send import Record, send_all, send_handed_over
from workers.stream.checkpoints import Checkpointer
from workers.stream.clients import OffsetsReader
from workers.stream.ingest import Inbox
from workers.stream.local_state import OFFSET_KEY
from workers.stream.positions import GapWatch, PositionKeeper
from workers.stream.session_store import SessionStore
from workers.stream.state_owner import StateOwner
from workers.stream.transactions import BatchTransactions, Overtaken

log = logging.getLogger("transcript_owner.processor")
EXIT_FATAL = 70
SWEEP_SHARE = 4  # a batch's upkeep slice (expiry, migration): a quarter as many stored keys
_LARGE_GAP = 1000  # a skipped range this long is worth a warning (records lost to retention?)

# the group member this worker is in a generation (its offsets' fence: workers.stream.adapter)
MemberOf = Callable[[int], GroupMember]


class BatchClock:
    """The entries' `written_at`: the wall clock read once per batch, as a batch is written
    together (reading it per record cost about 4% of the worker's time)."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def tick(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


@dataclass
class _Cursor:
    """Where one partition stands in the current generation."""

    start: int  # the committed offset, or the log start
    next: int | None = None  # offset after the last admitted message
    resync_below: int | None = None  # after a seek back: skip until an offset <= this arrives
    sought: bool = False  # sought back once already (a control record may sit at `start`)

    @property
    def position(self) -> int:
        """The next offset to process (what its offset commit says)."""
        return self.next if self.next is not None else self.start


async def until_flowing(app: Any) -> bool:
    """Wait until faust's flow runs; False once the app is stopping. A stop suspends the flow
    (faust's App._stop_consumer) and never resumes it: a batch that waited on the flow alone
    held a SIGTERM for the whole batch_stop_s and aborted its transaction."""
    while not app.flow_control.is_active():
        if app.should_stop:
            return False
        await app.wait(app.flow_control.acquire())  # or until the app stops
    return not app.should_stop


class Processor:
    def __init__(
        self, app: Any, inbox: Inbox, state: StateOwner, owner: Owner, topic_names: dict[str, str],
        topic_partitions: dict[str, int], committed: OffsetsReader,
        new_producer: Callable[[], Any], clock: BatchClock, *, max_batch: int = 20_000,
        linger_s: float = 0.001, cache_size: int = 200_000,
        transactions: BatchTransactions | None = None, member: MemberOf | None = None,
        batch_stop_s: float = 15.0, metrics: Metrics | None = None,
        health: Health | None = None, checkpoints: Checkpointer | None = None,
        positions: PositionKeeper | None = None,
    ) -> None:
        self.metrics = metrics or Metrics()
        self.health = health or Health(liveness_timeout_s=float("inf"))
        # exactly-once: a batch in one transaction (workers.stream.transactions), its offsets
        # committed as `member(generation)`; None: at-least-once through one idempotent producer
        self.transactions, self.member = transactions, member
        self.batch_stop_s = batch_stop_s  # SIGTERM: the batch in flight gets this long
        self.clock = clock  # the owner's clock: ticked at the start of each batch
        self.committed, self.new_producer = committed, new_producer
        self.app, self.inbox, self.state, self.owner = app, inbox, state, owner
        self.topic_names = topic_names  # logical -> cluster name
        self.topic_partitions = topic_partitions  # cluster name -> partition count
        self.max_batch, self.linger_s, self.cache_size = max_batch, linger_s, cache_size
        self.source_name = inbox.topic
        self.producer: Any = None
        self._generation: int | None = None
        self._cursors: dict[TP, _Cursor] = {}
        self._cut: set[TP] = set()  # input partitions whose erase cut-over is known
        self.store = SessionStore(state.db, owner.dedupe_window, cache_size)
        self._partitions: list[int] = []  # the input partitions of this generation
        # exactly-once: per-partition state checkpoints for audit (core/checkpoint_format.py)
        self.checkpoints = checkpoints
        # exactly-once: each partition's position records (workers.stream.positions)
        self.positions = positions
        self.gap_watch: GapWatch | None = None  # set by the worker's assembly, with positions
        self.control_name = next(iter(inbox.topics - {inbox.topic}), None)
        self._stopping: asyncio.Future | None = None

    async def run(self) -> None:
        batch: asyncio.Future | None = None
        watch = None if self.gap_watch is None else asyncio.ensure_future(self.gap_watch.run())
        try:
            if self.transactions is None:
                self.producer = self.new_producer()
                await self.producer.start()
            else:
                await self.transactions.start()
            while not self.app.should_stop:
                messages = await self.inbox.take(self.max_batch, self.linger_s, self._quiet_s())
                # shielded: a stop (SIGTERM) lets the batch in flight finish (see below)
                batch = asyncio.ensure_future(self._batch(messages))
                await asyncio.shield(batch)
                batch = None
            if watch is not None:  # the app stops between batches (no cancellation came)
                watch.cancel()
            await asyncio.shield(self._stop_once(None))
        except asyncio.CancelledError:
            if watch is not None:
                watch.cancel()
            await asyncio.shield(self._stop_once(batch))
            raise
        except Exception:
            self.health.send(Fail())
            log.exception("fatal: the batch could not be processed or committed; exiting with "
                          "none of it applied locally (its offsets are not committed)")
            logging.shutdown()
            os._exit(EXIT_FATAL)

    def _stop_once(self, batch: asyncio.Future | None) -> asyncio.Future:
        """The stop (below), started once: a cancellation can come while the loop's own stop
        runs."""
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._stop(batch))
        return self._stopping

    async def _stop(self, batch: asyncio.Future | None) -> None:
        """The worker is stopping: the batch in flight commits (or, past the shutdown timeout,
        its transaction aborts), then the producer closes."""
        if batch is not None and not batch.done():
            log.info("stopping: finishing the batch in flight (at most %.0fs)",
                     self.batch_stop_s)
            try:
                await asyncio.wait_for(asyncio.shield(batch), self.batch_stop_s)
            except TimeoutError:
                batch.cancel()  # its transaction aborts: nothing of it is visible
                log.warning("stopping: the batch in flight did not finish within %.0fs; its "
                            "transaction is aborted and it is processed again after the "
                            "restart", self.batch_stop_s)
            except Exception:
                log.exception("fatal: the batch in flight failed while stopping")
                logging.shutdown()
                os._exit(EXIT_FATAL)
        log.info("stopped; outcomes: %s; inbox high-water %d",
                 dict(sorted(self.owner.counts.items())), self.inbox.high_water)
        if self.producer is not None:
            await self.producer.stop()
        if self.transactions is not None:
            await self.transactions.close()
        if self.gap_watch is not None:
            self.gap_watch.probe.close()

    def _quiet_s(self) -> float | None:
        """How long to wait for input: in a new generation, briefly (its partitions' starts
        are checked without input, and the worker is ready then); exactly-once, until
        checkpoints are due (a partition gets its checkpoint by time even when no input
        comes); else as long as it takes."""
        if self.app.consumer_generation_id != self._generation:
            return 0.1  # a new generation: check where its partitions start without input
        if self.checkpoints is None:
            return None
        now = time.time()
        wait = self.checkpoints.wait_s(now)
        if self.positions is not None:
            wait = min(wait, self.positions.wait_s(now))
        return wait + 0.01

    async def _batch(self, messages: list) -> None:
        live, skipped = await self._admit(messages)
        if live:
            began = time.monotonic()
            self.health.batch_started()
            dead, written = await self._process(live)
            self.metrics.committed(self.owner.counts, len(live), began, dead, written)
            self.health.batch_done()
        elif not messages and self.transactions is not None and self._cursors:
            self.health.batch_started()
            await self._quiet_commit()
            self.health.batch_done()
        ack = self.app.consumer.ack  # what Message.ack ends in, without its refcount
        for m in live:
            ack(m)
        for m in skipped:
            ack(m)
        if live:
            heap.after_batch()  # its survivors out of the collector's way (workers.stream.heap)

    async def _admit(self, messages: list) -> tuple[list, list]:
        """The messages this worker may process now, tracked so that a rebalance waits for them,
        and the offsets skipped between them (no record for us there) to ack with them."""
        app = self.app
        while True:
            if not await until_flowing(app):
                return [], []
            generation = app.consumer_generation_id
            if generation == self._generation:
                break
            cursors = await self._starts()
            if app.consumer_generation_id == generation and app.flow_control.is_active():
                self._generation, self._cursors = generation, cursors
                self.health.send(Checked(generation))
                self._cut = set()
                self._partitions = sorted({tp.partition for tp in cursors})
                self.store.forget_cache()  # another worker may have owned these sessions
                if self.positions is not None:
                    self.positions.start(generation, self._partitions)
                heap.settle()  # the restore's garbage gone, the survivors out of the GC's way
        # No await from here to track_message: a revocation cannot start in between.
        consumer = app.consumer
        live, skipped, seeks = [], self._advance(generation), {}
        last: dict[TP, ConsumerMessage] = {}
        for m in messages:
            if m.generation_id != generation:
                continue  # fetched before the rebalance: it will be fetched again
            cursor = self._cursors.get(m.tp)
            if cursor is None:
                continue
            if cursor.resync_below is not None:
                if m.offset > cursor.resync_below:
                    continue  # fetched before our seek back; it comes again in order
                cursor.resync_below = None
            if cursor.next is None:
                if m.offset > cursor.start and not cursor.sought:
                    log.warning("partition %s of %s started at offset %s, not %s: seeking back",
                                m.tp.partition, m.tp.topic, m.offset, cursor.start)
                    seeks[m.tp] = cursor.start
                    cursor.resync_below = m.offset
                    continue
                cursor.next = cursor.start
            if m.offset < cursor.next:
                continue  # committed already, or fetched twice around a seek
            if m.offset > cursor.next:
                skipped.extend(_skipped(m, cursor.next))
            cursor.next = m.offset + 1
            last[m.tp] = m
            live.append(m)
        # faust's revocation waits until every tracked message is acked; the batch is acked
        # as a whole, so tracking each partition's last message of it holds the revocation
        # as long as tracking all of them would (at a tenth of the cost per record)
        for m in last.values():
            consumer.track_message(m)
        if seeks:
            for tp in seeks:
                self._cursors[tp].sought = True
            # seek_wait runs the seek on the consumer's own thread (faust's Consumer.seek
            # does not, and a seek from this thread stalled all fetching in a test here)
            await consumer.seek_wait(seeks)
        return live, skipped

    def _advance(self, generation: int) -> list:
        """Move each partition the gap watch found to hold nothing to decide past that gap, if
        it still stands where the watch saw it; the stand-ins of the offsets passed, to ack
        with the batch (faust's acks would otherwise wait at the gap for good). A partition
        that has taken no message yet in this generation moves its start, so its first
        message is still checked against it."""
        if self.positions is None or not self.positions.advances:
            return []
        advances, self.positions.advances = self.positions.advances, {}
        passed: list[ConsumerMessage] = []
        for tp, (seen_in, first, end) in advances.items():
            cursor = self._cursors.get(tp)
            if (seen_in != generation or cursor is None or cursor.resync_below is not None
                    or cursor.position != first):
                continue
            if cursor.next is None:
                cursor.start = end
            else:
                cursor.next = end
            passed.extend(_stand_ins(tp, first, end, generation))
            self.positions.mark(tp.partition)
        return passed

    def standing(self) -> tuple[int | None, dict[TP, int]]:
        """For the gap watch: this generation, and where each of its partitions (input and
        control) stands that has no message waiting in the inbox and no seek pending."""
        generation = self._generation
        if generation is None or self.app.consumer_generation_id != generation:
            return None, {}
        held = self.inbox.held()
        return generation, {tp: c.position for tp, c in self._cursors.items()
                            if tp not in held and c.resync_below is None}

    async def _starts(self) -> dict[TP, _Cursor]:
        """Where each assigned input partition must start in this generation."""
        tps = [tp for tp in self.app.consumer.assignment() if tp.topic in self.inbox.topics]
        if not tps:
            return {}
        committed = await self.committed(tps)
        earliest = await self.committed.earliest(tps)
        if self.checkpoints is not None:
            await self._diagnostics_ends(sorted({tp.partition for tp in tps}))
        return {
            tp: _Cursor(start=c if (c := committed.get(tp)) is not None and c >= 0
                        else earliest.get(tp, 0))
            for tp in tps
        }

    async def _diagnostics_ends(self, partitions: list[int]) -> None:
        """Where each partition's diagnostics end, for its checkpoints: the transactions of the
        partitions' last owners have ended (takeover.on_assigned settles them), and only this
        worker writes there now."""
        self.checkpoints.forget()
        topic = self.topic_names[DIAGNOSTICS]
        try:
            ends = await self.committed.ends([TP(topic, p) for p in partitions])
        except Exception as exc:  # noqa: BLE001  (checkpoints then say "not known")
            log.warning("diagnostics end offsets not read (%s): checkpoints of this generation "
                        "leave them out until a diagnostic is written", type(exc).__name__)
            return
        for tp, end in ends.items():
            self.checkpoints.diagnostics_next[tp.partition] = end

    async def _process(self, messages: list) -> tuple[list[str | None], list[float]]:
        """Decide, commit and apply a batch; the dead letters' reasons and the broker timestamps
        of the records that wrote entries (for the metrics)."""
        handle: Callable = self.owner.handle
        store = self.store
        names, counts = self.topic_names, self.topic_partitions
        outputs: list[Record | None] = []  # the records' outputs, in input order
        # exactly-once, with checkpoints: input partition -> its last diagnostic in outputs
        diagnostics = names.get(DIAGNOSTICS) if self.checkpoints is not None else None
        last_diagnostic: dict[int, int] = {}
        # input partition -> the offsets to commit: of the input topic, and of transcript.control
        next_offset: dict[int, dict[str, int]] = {}
        self._cut_over(messages)
        dead: list[str | None] = []
        written: list[float] = []
        self.clock.tick()
        wall = self.clock.now
        wall_s = wall.timestamp()
        for m in messages:
            ts = m.timestamp
            store.partition = m.partition
            step = handle(Source(m.topic, m.partition, m.offset, m.key, m.value, m.headers),
                          store, record_clock(ts, wall, wall_s))
            offsets = next_offset.get(m.partition)
            if offsets is None:
                offsets = next_offset[m.partition] = {}
            offsets[m.topic] = m.offset + 1
            outcome = step.outcome
            if outcome == "written":
                if ts is not None:
                    written.append(ts)
            elif outcome == "dead_letter":
                dead.append(step.decided.error if step.decided else None)
            for o in step.sends:
                topic = names[o.topic]
                if o.partition is not None:
                    partition = o.partition
                elif o.key is not None:  # what the producer's default partitioner picks
                    partition = (murmur2(o.key) & 0x7FFFFFFF) % counts[topic]
                else:  # a dead letter without a key: beside its source
                    partition = m.partition % counts[topic]
                if topic == diagnostics and partition == m.partition:
                    last_diagnostic[partition] = len(outputs)
                outputs.append((topic, partition, o.key, o.value, o.headers))
            apply(store, step)
            m.key = m.value = m.headers = None  # decided: its payload is not needed again
        store.sweep(self._partitions, max(1, len(messages) // SWEEP_SHARE))
        writes = store.take_writes()
        changelog = self.state.changelog
        if self.transactions is not None:
            extra = None
            if self.checkpoints is not None and self.checkpoints.due(wall_s):
                extra = self._checkpoint(messages, wall_s)
            positions = self._positions(next_offset.keys(), wall_s)
            await self._commit_transactions(outputs, last_diagnostic, next_offset, writes,
                                            changelog, extra, positions)
            return dead, written
        await send_handed_over(self.producer, outputs)
        if writes:
            records = [(changelog, p, k, v, ()) for p, k, v in writes]
            self._apply(records, await send_all(self.producer, records))
        return dead, written

    async def _quiet_commit(self) -> None:
        """No input came for a while: the checkpoints and positions due, in a transaction of
        their own. It commits each partition's offsets as they are (the position it has
        processed to), so that, like every transaction of a batch, it is fenced by the group
        generation."""
        wall_s = time.time()
        extra = None
        if self.checkpoints is not None and self.checkpoints.due(wall_s):
            extra = self._checkpoint([], wall_s) or None
        positions = self._positions((), wall_s)
        if not extra and not positions:
            return
        offsets: dict[int, dict[str, int]] = {}
        if extra:
            for tp, cursor in self._cursors.items():
                offsets.setdefault(tp.partition, {})[tp.topic] = cursor.position
        self.clock.tick()
        try:
            await self._commit_transactions([], {}, offsets, [], self.state.changelog, extra,
                                            positions)
        except Overtaken as exc:
            # No input message holds a revocation back while this commits (as a batch's do),
            # so a rebalance may overtake it: nothing of it is visible, and its partitions'
            # next owner checkpoints them and writes their positions.
            if extra:
                self.checkpoints.abandon()
            log.info("a quiet partition's checkpoint or position was overtaken by a rebalance "
                     "(%s)", exc)

    def _positions(self, consumed: Any, wall_s: float) -> dict[int, tuple[int, int]]:
        """The partitions whose position this transaction writes (those it consumed, and
        those due), each with its input and control offsets as this transaction commits
        them: where the processor stands in each."""
        if self.positions is None:
            return {}
        source, control = self.source_name, self.control_name
        out: dict[int, tuple[int, int]] = {}
        for p in {*consumed, *self.positions.due(wall_s)}:
            inp = self._cursors.get(TP(source, p))
            ctl = self._cursors.get(TP(control, p)) if control is not None else None
            if inp is not None and (ctl is not None or control is None):
                out[p] = (inp.position, 0 if ctl is None else ctl.position)
        return out

    def _cut_over(self, messages: list) -> None:
        """The first batch that reads an input partition without an erase cut-over writes it:
        the offset this generation starts the partition at (workers/core/control.py). Read
        once per partition and generation."""
        for m in messages:
            tp = m.tp
            if tp in self._cut or m.topic != self.source_name:
                continue
            self._cut.add(tp)
            store = self.store
            store.partition = m.partition
            if store.cutover() is None:
                start = self._cursors[tp].start
                store.set_cutover(m.partition, start)
                log.info("partition %s: session-erase/1 on the input topic is obeyed below "
                         "offset %s only (the erase cut-over; later ones come through "
                         "transcript.control)", m.partition, start)

    async def _commit_transactions(self, outputs: list[Record | None],
                                   last_diagnostic: dict[int, int],
                                   next_offset: dict[int, dict[str, int]], writes: list,
                                   changelog: str, extra: dict[int, list[Record]] | None = None,
                                   positions: dict[int, tuple[int, int]] | None = None) -> None:
        """The batch in one transaction: every partition's outputs, then its position record
        (after its entries: a reader that sees the position has seen them), checkpoint parts,
        state and offsets; the local state is written only once it committed (a failure exits:
        see run). A partition with a position commits the offsets its record holds. `outputs`
        is handed over: the rest is appended to it, and the transaction empties each slot once
        its record is in a producer batch (`last_diagnostic`: a partition's last diagnostic's
        index in it, for the checkpoints)."""
        state: list[Record] = [(changelog, p, k, v, ()) for p, k, v in writes]
        wall = self.clock.now
        if positions:
            outputs.extend(self.positions.records(positions, wall))
        for parts in (extra or {}).values():
            outputs.extend(parts)
        outputs.extend(state)  # a session's state lives in its input partition's changelog
        offsets = {(topic, p): offset for p, by_topic in next_offset.items()
                   for topic, offset in by_topic.items()}
        for p, (inp, ctl) in (positions or {}).items():
            offsets[(self.source_name, p)] = inp
            if self.control_name is not None:
                offsets[(self.control_name, p)] = ctl
        written = await self.transactions.commit(outputs, offsets, self.member(self._generation))
        if positions:
            self.positions.written(positions, wall.timestamp())
        for p, i in last_diagnostic.items():
            self.checkpoints.note_sent(p, written[i])
        if state:
            self._apply(state, written[len(outputs) - len(state):])

    def _checkpoint(self, messages: list, wall_s: float) -> dict[int, list[Record]]:
        """This batch's share of the checkpoints due (at most `keys_per_batch` state keys in
        all), each partition's at the offset this batch starts it from (the state in its store
        is the state there: this batch's writes are still pending), or, for a copy begun in an
        earlier batch, its next part from that batch's snapshot."""
        positions: dict[int, int] = {}  # input partition -> its offset (not control's)
        source = self.source_name
        for m in messages:
            if m.topic == source:
                positions.setdefault(m.partition, m.offset)
        for tp, cursor in self._cursors.items():
            if tp.topic == source and tp.partition not in positions:
                positions[tp.partition] = cursor.position
        checkpoints = self.checkpoints
        extra = checkpoints.take(wall_s, positions, self.state.db)
        if done := checkpoints.finished:
            log.info("checkpoints of partitions %s at input offsets %s: %d state keys, %d bytes, "
                     "built in %.3fs", [c.partition for c in done], [c.input_offset for c in done],
                     sum(c.keys for c in done), sum(c.size for c in done),
                     sum(c.seconds for c in done))
        if (copy := checkpoints.copying) is not None:
            log.debug("checkpoint of partition %s at input offset %s: %d state keys copied so far",
                      copy.partition, copy.input_offset, copy.keys)
        return extra

    def _apply(self, records: list[Record], offsets: list[int]) -> None:
        """Write changelog records, as written at `offsets`, to the local RocksDB: one write
        batch per partition that carries the partition's last offset (local_state.OFFSET_KEY),
        so a store never claims an offset it has not applied."""
        import rocksdict

        batches: dict[int, Any] = {}
        last: dict[int, int] = {}
        for (_, partition, key, value, _), offset in zip(records, offsets, strict=True):
            batch = batches.get(partition)
            if batch is None:
                batch = batches[partition] = rocksdict.WriteBatch(raw_mode=True)
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
            last[partition] = max(offset, last.get(partition, offset))
        db = self.state.db
        for partition, batch in batches.items():
            batch.put(OFFSET_KEY, str(last[partition]).encode())
            db(partition).write(batch)
        self.state.relieve_memtables()  # and the memtables held to their bound


def _stand_ins(tp: TP, first: int, end: int, generation: int) -> list[ConsumerMessage]:
    """Stand-ins for offsets first..end-1 of `tp`, which hold no record for us."""
    return [ConsumerMessage(tp.topic, tp.partition, offset, None, 0, None, None, None, None, 0,
                            0, tp, generation_id=generation) for offset in range(first, end)]


def _skipped(m: ConsumerMessage, first: int) -> list[ConsumerMessage]:
    """Stand-ins for offsets first..m.offset-1 of m's partition, which hold no record for us."""
    if m.offset - first >= _LARGE_GAP:
        log.warning("offsets %s..%s of partition %s of %s hold no records (removed by "
                    "retention before they were processed?)", first, m.offset - 1,
                    m.partition, m.topic)
    return [ConsumerMessage(m.topic, m.partition, offset, None, 0, None, None, None, None, 0, 0,
                            m.tp, generation_id=m.generation_id)
            for offset in range(first, m.offset)]
