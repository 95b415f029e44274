"""The worker's positions (DESIGN 1.3, "Reading at a position"): how a reader of
`transcript.entries` knows how far the transcript reflects the input.

Every transaction that consumed input partition p also writes `position/<p>` to entries
partition p, after p's entries, holding the input and control offsets the same transaction
commits for the group (workers.stream.processor). Besides those, the keeper makes a partition
*due* for a position record of its own when
  - the generation is new (its last position may be another worker's, or trimmed by a move);
  - its last position is HEARTBEAT_S old (a reader tells a quiet partition from a dead worker
    by the age of its position; a sink migrated to positions learns one within that);
  - the partition's tail holds nothing to decide: transaction markers (connectors publishing in
    transactions, the worker's own re-keyed records), records of an aborted transaction. The
    consumer steps over such offsets without handing anything over, so the processor's offsets
    would stay below the input's last stable offset, and a read bound to it would wait forever.
    Once a second (POSITION_TICK_S) the gap watch asks each owned partition's last stable
    offset L; where the processor stands at c < L with no record of that partition in the
    inbox, a probe (a read_committed consumer of its own, no group) reads [c, L) (a gap of more
    than SMALL_GAP offsets only once c stood still for a look: a drain is not probed): when it
    holds no record, the processor moves its offset to L (its acks cover the gap) and commits
    L with a position record, in the next transaction.

Only exactly-once workers write positions: an at-least-once worker commits its offsets outside
any transaction, so no record could say what the group committed (docs/guarantees.md).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from faust.types import TP
from transcript_connector.entries_topic import position_key, position_value

from workers.settings import KafkaSettings
from workers.stream.batch_send import Record

log = logging.getLogger("transcript_owner.positions")

POSITION_TICK_S = 0.5  # how often the gap watch looks at quiet partitions
HEARTBEAT_S = 30.0  # the oldest an owned partition's position gets
PROBE_S = 0.5  # the longest a probe reads one look's gaps
PROBE_MAX_BYTES = 64 * 1024  # what a probe fetches per partition: it stops at the first record
# a gap of at most this many offsets is probed at once (markers, a small aborted transaction);
# a larger one only once its partition stood still for a look: a partition the worker is
# draining always has a record there, and a probe's fetch would only take the drain's time
SMALL_GAP = 100


class PositionKeeper:
    """Which owned partitions need a position record, and what each one last said."""

    def __init__(self, entries_topic: str, heartbeat_s: float = HEARTBEAT_S) -> None:
        self.topic = entries_topic
        self.heartbeat_s = heartbeat_s
        self.generation: int | None = None
        self.partitions: list[int] = []
        # partition -> (input offset, control offset, the wall clock's seconds) last written
        self.last: dict[int, tuple[int, int, float]] = {}
        self._due: set[int] = set()  # partitions whose position is due now
        # tp -> (generation, first, end): offsets [first, end) of tp hold nothing to decide
        self.advances: dict[TP, tuple[int, int, int]] = {}
        self.ends: dict[int, int] = {}  # input partition -> its last stable offset, last seen
        self.ends_at = 0.0  # when (time.time())

    def start(self, generation: int, partitions: Iterable[int]) -> None:
        """A new generation: every partition it owns is due (a position written by another
        owner since ours says nothing of what we did)."""
        self.generation = generation
        self.partitions = sorted(set(partitions))
        self._due = set(self.partitions)
        self.last = {p: v for p, v in self.last.items() if p in self._due}
        self.advances.clear()

    def due(self, now_s: float) -> set[int]:
        """The owned partitions whose position record is due now."""
        old = now_s - self.heartbeat_s
        return self._due | {p for p in self.partitions
                            if (last := self.last.get(p)) is not None and last[2] <= old}

    def mark(self, partition: int) -> None:
        self._due.add(partition)

    def wait_s(self, now_s: float) -> float:
        """How long a quiet worker may wait for input before a position is due."""
        if self._due:
            return 0.0
        if not self.partitions:
            return self.heartbeat_s
        oldest = min((v[2] for p, v in self.last.items() if p in self.partitions), default=now_s)
        return max(0.0, oldest + self.heartbeat_s - now_s)

    def records(self, offsets: dict[int, tuple[int, int]], wall: datetime) -> list[Record]:
        """The position records of `offsets` (partition -> (input, control) next offsets)."""
        return [(self.topic, p, position_key(p), position_value(p, inp, ctl, wall), ())
                for p, (inp, ctl) in offsets.items()]

    def written(self, offsets: dict[int, tuple[int, int]], wall_s: float) -> None:
        """Their transaction committed."""
        for p, (inp, ctl) in offsets.items():
            self.last[p] = (inp, ctl, wall_s)
            self._due.discard(p)

    def lag(self) -> dict[int, tuple[int, float]]:
        """Per owned partition: how far its last position is behind the input's last stable
        offset (at the last look), and its age in seconds (the metrics)."""
        now = time.time()
        out = {}
        for p in self.partitions:
            last = self.last.get(p)
            end = self.ends.get(p)
            if last is not None:
                out[p] = (max(0, end - last[0]) if end is not None else 0, now - last[2])
        return out


class GapProbe:
    """Whether offsets [first, end) of a partition hold any record a read_committed reader
    gets, read with a consumer of its own (no group, nothing committed) off the event loop."""

    def __init__(self, ks: KafkaSettings, client_id: str) -> None:
        self._ks, self._client_id = ks, client_id
        self._consumer: Any = None
        self._lock = threading.Lock()

    def _connect(self) -> Any:
        if self._consumer is None:
            from kafka import KafkaConsumer

            self._consumer = KafkaConsumer(
                **self._ks.kafka_python_kwargs(), client_id=self._client_id, group_id=None,
                isolation_level="read_committed", enable_auto_commit=False,
                auto_offset_reset="earliest", fetch_max_wait_ms=20,
                max_partition_fetch_bytes=PROBE_MAX_BYTES)
        return self._consumer

    def empty(self, gaps: dict[TP, tuple[int, int]], budget_s: float = PROBE_S) -> set[TP]:
        """The partitions of `gaps` whose [first, end) held no record (blocking): read to its
        end within `budget_s`, stopping at a partition's first record."""
        from kafka import TopicPartition

        from workers.kafka_io import ranges_with_records

        with self._lock:
            consumer = self._connect()
            mine = {TopicPartition(tp.topic, tp.partition): tp for tp in gaps}
            try:
                holding = ranges_with_records(
                    consumer, {k: gaps[tp] for k, tp in mine.items()}, budget_s)
            finally:
                consumer.assign([])
            return {tp for k, tp in mine.items() if k not in holding}

    def close(self) -> None:
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None


class GapWatch:
    """Once a second: the owned partitions whose tail holds nothing to decide (see the module's
    docstring), handed to the keeper as advances; `wake` then tells the processor."""

    def __init__(self, keeper: PositionKeeper, probe: GapProbe, input_topic: str,
                 candidates: Callable[[], tuple[int | None, dict[TP, int]]],
                 ends: Callable[[list], Any], wake: Callable[[], None]) -> None:
        # candidates(): the generation and, per input or control TP whose inbox share is
        # empty, where the processor stands; ends(tps): their last stable offsets (awaitable)
        self.keeper, self.probe, self.input_topic = keeper, probe, input_topic
        self.candidates, self.ends, self.wake = candidates, ends, wake
        self._stood: dict[TP, int] = {}  # where each partition stood at the last look

    async def run(self) -> None:
        while True:
            await asyncio.sleep(POSITION_TICK_S)
            try:
                await self.look()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001  (the next look asks again)
                log.debug("position gap watch: %s: %s", type(exc).__name__, exc)

    async def look(self) -> None:
        generation, standing = self.candidates()
        if generation is None or not standing:
            return
        ends = await self.ends(list(standing))
        self.keeper.ends.update({tp.partition: end for tp, end in ends.items()
                                 if tp.topic == self.input_topic})
        self.keeper.ends_at = time.time()
        generation_now, standing = self.candidates()  # where it stands now, after the ask
        if generation_now != generation:
            return
        stood, self._stood = self._stood, dict(standing)
        gaps = {tp: (at, ends[tp]) for tp, at in standing.items()
                if tp in ends and at < ends[tp]
                and (ends[tp] - at <= SMALL_GAP or stood.get(tp) == at)}
        if not gaps:
            return
        empty = await asyncio.get_running_loop().run_in_executor(None, self.probe.empty, gaps)
        if not empty or self.candidates()[0] != generation:
            return
        for tp in empty:
            self.keeper.advances[tp] = (generation, *gaps[tp])
        log.debug("offsets hold nothing to decide: %s",
                  {f"{tp.topic}/{tp.partition}": gaps[tp] for tp in empty})
        self.wake()
