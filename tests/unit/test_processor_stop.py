"""The processor's stop: the batch in flight finishes, the producer closes and the worker's
last line is logged, whether the app stops between two batches or cancels the loop."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from types import SimpleNamespace

from workers.stream.processor import Processor


class Producer:
    def __init__(self) -> None:
        self.started = self.stopped = 0

    async def start(self) -> None:
        self.started += 1

    async def stop(self) -> None:
        self.stopped += 1


class Inbox:
    """Hands out one empty batch, stopping the app as it does (as a SIGTERM between batches)."""

    topic = "input"
    topics = frozenset({"input", "control"})
    high_water = 7

    def __init__(self, app: SimpleNamespace, stop: bool) -> None:
        self.app, self.stop, self.takes = app, stop, 0

    async def take(self, max_items: int, linger_s: float, timeout_s: float | None) -> list:
        self.takes += 1
        if self.stop:
            self.app.should_stop = True
            return []
        await asyncio.Event().wait()  # no input: the loop waits here until cancelled
        return []


def processor(stop: bool) -> tuple[Processor, Producer, Inbox]:
    app = SimpleNamespace(should_stop=False, consumer_generation_id=1)
    inbox = Inbox(app, stop)
    producer = Producer()
    owner = SimpleNamespace(dedupe_window=timedelta(days=7), counts={"written": 3})
    p = Processor(app, inbox, SimpleNamespace(db=lambda p: None, changelog="changelog"), owner,
                  {}, {}, None, lambda: producer, None)

    async def batch(messages: list) -> None:
        pass

    p._batch = batch  # type: ignore[method-assign]
    return p, producer, inbox


def stopped_lines(caplog) -> list[str]:  # noqa: ANN001
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("stopped;")]


def test_an_app_that_stops_between_batches_stops_the_processor_once(caplog):
    p, producer, inbox = processor(stop=True)
    with caplog.at_level(logging.INFO, logger="transcript_owner"):
        asyncio.run(p.run())
    assert inbox.takes == 1 and (producer.started, producer.stopped) == (1, 1)
    assert stopped_lines(caplog) == ["stopped; outcomes: {'written': 3}; inbox high-water 7"]


def test_a_cancelled_loop_stops_the_processor_once(caplog):
    p, producer, inbox = processor(stop=False)

    async def cancelled() -> None:
        task = asyncio.ensure_future(p.run())
        while not inbox.takes:
            await asyncio.sleep(0)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass

    with caplog.at_level(logging.INFO, logger="transcript_owner"):
        asyncio.run(cancelled())
    assert (producer.started, producer.stopped) == (1, 1)
    assert len(stopped_lines(caplog)) == 1
