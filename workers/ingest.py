"""How input records reach the worker: faust's consumer and conductor, then our own batches.

faust's per-event Stream path is not used for the input. It costs 140-200 µs a record, and in
faust-streaming 0.15 it *acks* events it skips while flow control is suspended around a
rebalance, so the consumer commits past records nobody processed (seen here: a worker that joins
a group mid-stream skips and commits most of its partitions). Instead the input topic is a
`faust.Topic` subclass (an extension point the conductor delivers to) whose queue is an `Inbox`:
raw messages, no Event objects, taken in batches by `workers.processor`, which acks each message
itself once its outputs and state are durable.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Any

import faust
from faust.types import TP


class Inbox:
    """A bounded FIFO of consumer messages with the queue interface the conductor uses."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._items: deque[Any] = deque()
        self._not_empty = asyncio.Event()
        self._not_full = asyncio.Event()
        self._not_full.set()

    def __len__(self) -> int:
        return len(self._items)

    def full(self) -> bool:
        return len(self._items) >= self.maxsize

    def empty(self) -> bool:
        return not self._items

    def put_nowait_enhanced(self, value: Any, **_pressure_callbacks: Any) -> None:
        """Called by the conductor for each fetched message (after it checked `full()`)."""
        self._items.append(value)
        self._not_empty.set()
        if self.full():
            self._not_full.clear()

    async def put(self, message: Any) -> None:
        """Called by the conductor when the inbox was full: waits for room."""
        while self.full():
            await self._not_full.wait()
        self.put_nowait_enhanced(message)

    async def take(self, max_items: int, linger_s: float) -> list[Any]:
        """At least one message; more if they arrive within `linger_s`, up to `max_items`."""
        while not self._items:
            self._not_empty.clear()
            await self._not_empty.wait()
        if len(self._items) < max_items and linger_s > 0:
            await asyncio.sleep(linger_s)  # let a burst fill the batch (bounded latency)
        n = min(max_items, len(self._items))
        batch = [self._items.popleft() for _ in range(n)]
        if not self._items:
            self._not_empty.clear()
        if not self.full():
            self._not_full.set()
        return batch


class InboxTopic(faust.Topic):
    """The input topic as a channel whose buffer is an Inbox and whose 'events' are messages."""

    inbox: Inbox

    @property
    def queue(self) -> Inbox:  # type: ignore[override]
        return self.inbox

    def _compile_decode(self) -> None:
        # faust.Topic binds `self.decode` to a compiled schema decoder here; the conductor
        # calls it for every message. Ours hands the message itself over: no Event, no codec.
        self.decode = _pass_message  # type: ignore[method-assign]

    async def put(self, event: Any) -> None:  # type: ignore[override]
        await self.inbox.put(event)


async def _pass_message(message: Any, *, propagate: bool = False) -> Any:
    return message


def inbox_topic(app: faust.App, name: str, maxsize: int) -> InboxTopic:
    """Declare the input topic and subscribe the worker's consumer to it."""
    topic = InboxTopic(
        app, topics=[name], key_type=bytes, value_type=bytes,
        key_serializer="raw", value_serializer="raw", is_iterator=True, acks=True,
    )
    topic.inbox = Inbox(maxsize)
    app.topics.add(topic)
    return topic


@dataclass(frozen=True, slots=True)
class ChangelogMessage:
    """A changelog record we wrote, in the shape `Store.apply_changelog_batch` reads."""

    tp: TP
    offset: int
    key: bytes
    value: bytes

    @property
    def partition(self) -> int:
        return self.tp.partition


@dataclass(frozen=True, slots=True)
class ChangelogEvent:
    message: ChangelogMessage
