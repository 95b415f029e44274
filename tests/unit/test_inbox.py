"""The inbox's linger (workers.stream.ingest.Inbox.take): counted from the oldest message's
arrival, as a producer's linger.ms, so that messages which waited out the last batch's commit
are taken at once. The clock and the sleep are stand-ins: no wall-clock time is asserted."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from faust.types import TP

from workers.stream import ingest
from workers.stream.ingest import Inbox

TOPIC = "delivery.confirmations"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    c = Clock()
    monkeypatch.setattr(ingest.time, "monotonic", c.monotonic)
    monkeypatch.setattr(ingest.asyncio, "sleep", c.sleep)
    yield c


def inbox() -> Inbox:
    box = Inbox(TOPIC, maxsize=1000, poll=100)
    box.attach(SimpleNamespace(consumer_generation_id=1, consumer=None))
    return box


def fetched(*offsets: int, partition: int = 0) -> dict[TP, list]:
    return {TP(TOPIC, partition): [SimpleNamespace(
        topic=TOPIC, partition=partition, offset=o, timestamp=1_700_000_000_000,
        timestamp_type=0, headers=[], key=b"k", value=b"v", checksum=None,
        serialized_key_size=1, serialized_value_size=1) for o in offsets]}


def take(box: Inbox, max_items: int = 100, linger_s: float = 0.001) -> list:
    return asyncio.run(box.take(max_items, linger_s))


def test_a_message_that_just_arrived_lingers_the_whole_linger(clock: Clock) -> None:
    box = inbox()
    box.divert(fetched(0))
    assert [m.offset for m in take(box)] == [0]
    assert clock.slept == [pytest.approx(0.001)]


def test_messages_that_waited_out_a_commit_are_taken_at_once(clock: Clock) -> None:
    box = inbox()
    box.divert(fetched(0, 1))
    clock.now += 0.004  # the last batch's transaction commits meanwhile
    box.divert(fetched(2, partition=1))
    assert [m.offset for m in take(box)] == [0, 1, 2]
    assert clock.slept == []


def test_the_linger_counts_from_the_oldest_not_the_newest(clock: Clock) -> None:
    box = inbox()
    box.divert(fetched(0))
    clock.now += 0.0006
    box.divert(fetched(1))  # arriving later does not restart the linger
    take(box)
    assert clock.slept == [pytest.approx(0.0004)]


def test_the_next_message_after_an_empty_inbox_lingers_afresh(clock: Clock) -> None:
    box = inbox()
    box.divert(fetched(0))
    clock.now += 0.01
    take(box)
    clock.now += 0.01
    box.divert(fetched(1))  # the inbox was empty: this one's arrival is the oldest
    take(box)
    assert clock.slept == [pytest.approx(0.001)]


def test_what_a_full_batch_left_behind_has_waited_already(clock: Clock) -> None:
    box = inbox()
    box.divert(fetched(*range(5)))
    assert len(take(box, max_items=3)) == 3  # full: no linger
    clock.now += 0.002
    assert [m.offset for m in take(box, max_items=3)] == [3, 4]
    assert clock.slept == []


def test_no_linger_configured_never_sleeps(clock: Clock) -> None:
    box = inbox()
    box.divert(fetched(0))
    take(box, linger_s=0)
    assert clock.slept == []


class Consumer:
    """What the inbox reports to faust's consumer: the partitions it stops handing over."""

    def __init__(self, *partitions: int) -> None:
        self.tps = [TP(TOPIC, p) for p in partitions]
        self.full: set[TP] = set()

    def assignment(self) -> list[TP]:
        return self.tps

    def on_buffer_full(self, tp: TP) -> None:
        self.full.add(tp)

    def on_buffer_drop(self, tp: TP) -> None:
        self.full.discard(tp)


def bounded(maxsize: int, poll: int, consumer: Consumer) -> Inbox:
    box = Inbox(TOPIC, maxsize=maxsize, poll=poll)
    box.attach(SimpleNamespace(consumer_generation_id=1, consumer=consumer))
    return box


def test_the_inbox_stops_polls_while_one_more_could_pass_its_bound() -> None:
    consumer = Consumer(0, 1)
    box = bounded(maxsize=1000, poll=100, consumer=consumer)
    offset, polls = 0, 0
    while not consumer.full:  # full polls, as a drain of a backlog hands them over
        box.divert(fetched(*range(offset, offset + 100), partition=polls % 2))
        offset, polls = offset + 100, polls + 1
    assert len(box) == 1000 and polls == 10  # at 900 one more poll still fitted
    assert consumer.full == set(consumer.tps)
    assert box.high_water == 1000


def test_an_uneven_poll_never_takes_the_inbox_past_its_bound() -> None:
    consumer = Consumer(0)
    box = bounded(maxsize=1000, poll=100, consumer=consumer)
    box.divert(fetched(*range(899)))
    assert not consumer.full  # 899: a poll of up to 100 still fits
    box.divert(fetched(*range(899, 999)))
    assert consumer.full and len(box) == 999


def test_a_batch_taken_below_half_resumes_the_polls(clock: Clock) -> None:
    consumer = Consumer(0)
    box = bounded(maxsize=1000, poll=100, consumer=consumer)
    box.divert(fetched(*range(950)))
    assert consumer.full
    take(box, max_items=400)  # 550 left: above half, still full
    assert consumer.full
    take(box, max_items=100)  # 450 left
    assert not consumer.full


def test_a_poll_as_large_as_the_bound_stops_after_every_poll() -> None:
    consumer = Consumer(0)
    box = bounded(maxsize=1, poll=1, consumer=consumer)
    box.divert(fetched(0))
    assert consumer.full and len(box) == 1
