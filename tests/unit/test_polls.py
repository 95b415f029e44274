"""workers.kafka_io.polls, the one read loop: where it stops and when it gives up."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from kafka import TopicPartition

from workers.kafka_io import polls

TP = TopicPartition("t", 0)


class Log:
    """A consumer over one partition: `batches` are what successive polls return; positions
    advance past each batch, and past `markers` offsets (transaction markers) when empty."""

    def __init__(self, batches: list[list[int]], markers: int = 0) -> None:
        self.batches, self.markers, self.pos = list(batches), markers, 0

    def poll(self, **_):
        if not self.batches:
            self.pos += self.markers
            self.markers = 0
            return {}
        offsets = self.batches.pop(0)
        self.pos = offsets[-1] + 1
        return {TP: [SimpleNamespace(partition=0, offset=o) for o in offsets]}

    def position(self, tp):
        return self.pos

    def assignment(self):
        return {TP}


def offsets(batches) -> list[int]:
    return [r.offset for batch in batches for r in batch]


def test_it_stops_at_the_end_and_passes_trailing_markers() -> None:
    assert offsets(polls(Log([[0, 1], [2]], markers=2), {TP: 5}, poll_ms=1)) == [0, 1, 2]


def test_records_at_or_past_the_end_are_left_out() -> None:
    assert offsets(polls(Log([[0, 1, 2, 3]]), {TP: 2}, poll_ms=1)) == [0, 1]


def test_a_read_that_brings_nothing_gives_up_after_idle_seconds() -> None:
    with pytest.raises(TimeoutError, match=r"no record for 0s; t\[0\] not read to its end"):
        for _ in polls(Log([[0]]), {TP: 10}, idle=0.05, poll_ms=1):
            pass

