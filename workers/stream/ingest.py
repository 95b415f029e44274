"""How input records reach the worker: fetched by faust's consumer, handed over a fetch at a time.

faust's per-record path is not used for the input topic. Its drain loop costs about 100 µs a
record before any of our logic (two tasks and an `asyncio.wait` per record, then the conductor,
then a Stream and an Event), and in faust-streaming 0.15 the Stream *acks* events it skips while
flow control is suspended around a rebalance, so the consumer commits past records nobody
processed (seen here: a worker that joins a group mid-stream skipped most of its partitions).

Instead the input records are taken at the one documented extension point that sees a whole
fetch: the consumer's scheduling strategy (`ConsumerScheduler` setting), which orders each
fetch's records before the drain loop. Ours moves the input topic's records into an `Inbox`
as faust messages stamped with the consumer generation, and passes any other topic's records
on to faust's own strategy untouched (there are none: the worker declares no faust table, so
faust reads no changelog).
`workers.stream.processor` takes the inbox in batches and acks each message itself once its outputs
and state are durable; faust tracks those acks and commits them as usual.

Back-pressure: a poll hands over at most `poll` records (`broker_max_poll_records`), and once
one more poll could take the inbox past its bound, the input partitions are reported to the
consumer as full (`Consumer.on_buffer_full`, the hook faust's own channels use), so it stops
handing them over until the processor has taken the inbox below half (`on_buffer_drop`). The
inbox so never holds more than its bound (a batch) of decoded messages; what is fetched beyond
it waits in aiokafka as the fetch response's bytes, less than half their size decoded (at
most one response: TRANSCRIPT_FETCH_BUFFER_MB).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, deque
from collections.abc import Iterator, Mapping
from typing import Any

import faust
from faust.transport.utils import DefaultSchedulingStrategy
from faust.types import TP, ConsumerMessage

from workers.stream.adapter import read_committed_consumer, use_consumer


class Inbox:
    """The fetched records of the topics the processor reads, as faust messages, oldest first:
    the input topic, and transcript.control (read with the input partition of its number)."""

    def __init__(self, topic: str, maxsize: int, poll: int, control: str | None = None) -> None:
        self.topic = topic  # the input topic
        self.topics = frozenset({topic} if control is None else {topic, control})
        self.maxsize = maxsize  # the most messages it holds
        # the most one poll hands over (broker_max_poll_records): full above maxsize - poll
        self.full_above = max(0, maxsize - poll)
        self.app: Any = None  # set by attach(), before the consumer starts fetching
        self._items: deque[ConsumerMessage] = deque()
        self._not_empty = asyncio.Event()
        self._nudged = False  # wake a waiting take with no messages (nudge)
        self._since = 0.0  # when the oldest message held arrived (time.monotonic)
        self._full: set[TP] = set()  # partitions reported full to the consumer
        self.high_water = 0  # most messages held at once (reported in the worker's log)

    def attach(self, app: Any) -> None:
        self.app = app

    def __len__(self) -> int:
        return len(self._items)

    def divert(self, records: Mapping[TP, list]) -> dict[TP, list]:
        """Take the input topic's records of one fetch; return the other topics' records."""
        rest: dict[TP, list] = {}
        mine: dict[TP, list] = {}
        for tp, batch in records.items():
            (mine if tp.topic in self.topics else rest)[tp] = batch
        if not mine:
            return rest
        generation = self.app.consumer_generation_id
        items = self._items
        if not items:
            self._since = time.monotonic()
        for fetched_tp, batch in mine.items():
            tp = TP(fetched_tp.topic, fetched_tp.partition)  # faust's TP, not the client's
            for r in batch:
                ts = r.timestamp
                items.append(ConsumerMessage(
                    r.topic, r.partition, r.offset, None if ts is None else ts / 1000.0,
                    r.timestamp_type, r.headers, r.key, r.value, r.checksum,
                    r.serialized_key_size, r.serialized_value_size, tp,
                    generation_id=generation,
                ))
        self._not_empty.set()
        size = len(items)
        self.high_water = max(self.high_water, size)
        if size > self.full_above:  # pause every input partition, or each adds one more poll
            consumer = self.app.consumer
            for tp in consumer.assignment():
                if tp.topic in self.topics and tp not in self._full:
                    consumer.on_buffer_full(tp)
                    self._full.add(tp)
        return rest

    def pending(self) -> Counter[int]:
        """Input messages held per partition (the lag gauge; read at a scrape, not per record)."""
        topic = self.topic
        return Counter(m.partition for m in self._items if m.topic == topic)

    def held(self) -> set[TP]:
        """The partitions (of any topic it takes) with messages held (read once a second)."""
        return {m.tp for m in self._items}

    def nudge(self) -> None:
        """Wake the waiting `take` even without messages: a rebalance completed, and the
        processor checks where the new generation's partitions start without waiting for
        input (the worker is ready only then)."""
        self._nudged = True
        self._not_empty.set()

    async def take(self, max_items: int, linger_s: float,
                   timeout_s: float | None = None) -> list[ConsumerMessage]:
        """At least one message; more if they arrive within `linger_s` of the oldest one's
        arrival (a producer's linger.ms), up to `max_items`. Messages that waited that long
        already (for the last batch's commit) are taken at once. With `timeout_s`: none (an
        empty list) if nothing arrives within it; none, too, once `nudge` was called."""
        while not self._items:
            if self._nudged:
                self._nudged = False
                return []
            self._not_empty.clear()
            if timeout_s is None:
                await self._not_empty.wait()
                continue
            try:
                await asyncio.wait_for(self._not_empty.wait(), timeout_s)
            except TimeoutError:
                return []
        if len(self._items) < max_items and linger_s > 0:
            left = self._since + linger_s - time.monotonic()
            if left > 0:
                await asyncio.sleep(left)  # let a burst fill the batch (bounded latency)
        items = self._items
        n = min(max_items, len(items))
        batch = [items.popleft() for _ in range(n)]
        if not items:
            self._not_empty.clear()
        if self._full and len(items) <= self.maxsize // 2:
            consumer = self.app.consumer
            for tp in self._full:
                consumer.on_buffer_drop(tp)
            self._full.clear()
        return batch


def scheduler_for(inbox: Inbox) -> type[DefaultSchedulingStrategy]:
    """A ConsumerScheduler class (faust instantiates it without arguments) bound to `inbox`."""

    class InboxScheduler(DefaultSchedulingStrategy):
        def iterate(self, records: Mapping[TP, list]) -> Iterator[tuple[TP, Any]]:
            rest = inbox.divert(records)
            return super().iterate(rest) if rest else iter(())

    return InboxScheduler


FETCH_MAX_WAIT_MS = 100


def read_committed(app: faust.App, *, fetch_max_bytes: int,
                   offsets_in_transactions: bool = False) -> None:
    """Make the worker's consumer read `read_committed` (DESIGN, "Delivery guarantee").

    Connectors may publish in transactions, and an aborted confirmation was never confirmed:
    it must get no outcome. faust 0.15 reads `read_uncommitted` unless its own
    `processing_guarantee="exactly_once"` is on (which this worker does not use:
    docs/guarantees.md, "Processing guarantee"). aiokafka's consumer hands its isolation level
    to the Fetcher it builds at start, so setting it between construction and start is enough.
    The aborted records' offsets then never arrive; the processor acks such gaps with the next
    batch.

    A fetch response holds at most `fetch_max_bytes`, over all partitions
    (TRANSCRIPT_FETCH_BUFFER_MB; faust has no setting for it either).

    With `offsets_in_transactions` (exactly-once), the input offsets are committed by the
    batch's transactions (workers.stream.transactions), never by the consumer: faust's commit keeps
    its bookkeeping (acks, revocation) and sends nothing. A commit of its own, outside the
    transaction, could commit an offset whose outputs were never committed.
    """
    use_consumer(app, read_committed_consumer(  # before the app creates its consumer
        fetch_max_wait_ms=FETCH_MAX_WAIT_MS, offsets_in_transactions=offsets_in_transactions,
        fetch_max_bytes=fetch_max_bytes))


def input_topic(app: faust.App, inbox: Inbox) -> faust.TopicT:
    """Subscribe the worker's consumer to the inbox's topics, with acks (offsets we ack commit).
    They have one partition count, so faust's assignor gives partition p of each to one
    worker (a co-partitioned group; partition p's state is changelog partition p)."""
    topic = app.topic(*sorted(inbox.topics), key_type=bytes, value_type=bytes,
                      key_serializer="raw", value_serializer="raw", acks=True)
    app.topics.add(topic)
    inbox.attach(app)
    return topic

