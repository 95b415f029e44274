"""One input record through the core: parse, route, decide — no Kafka client calls here.

The faust agent is a thin loop around `Owner.handle`; what the worker sends and what it stores
are return values, so the routing rules (re-key, dead-letter) are testable without a broker.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from schemas import Invalid, parse_input
from workers.core import SessionState, dead_letter, decide_keyed, session_key_of
from workers.outputs import CONFIRMATIONS, OutRecord, Source, encode
from workers.partitioning import partition_for


@dataclass(frozen=True, slots=True)
class Step:
    """What handling one record asks the shell to do, in this order: send, then store."""

    outcome: str  # an outcome kind, or "rekeyed" when the record is forwarded to its own partition
    sends: list[OutRecord]
    session_key: str | None = None
    new_state: SessionState | None = None  # None: leave the stored state as it is


@dataclass
class Owner:
    partitions: int
    dedupe_window: timedelta
    clock: Callable[[], datetime]
    counts: Counter = field(default_factory=Counter)

    def handle(self, source: Source, load: Callable[[str], SessionState]) -> Step:
        step = self._step(source, load)
        self.counts[step.outcome] += 1
        return step

    def _step(self, source: Source, load: Callable[[str], SessionState]) -> Step:
        record = parse_input(source.value)
        if isinstance(record, Invalid):
            return Step("dead_letter", encode(dead_letter(record.reason), source, self.partitions))
        key = session_key_of(record)
        if isinstance(key, Invalid):
            return Step("dead_letter", encode(dead_letter(key.reason), source, self.partitions))
        home = partition_for(key, self.partitions)
        if source.key != key.encode() or source.partition != home:
            return Step("rekeyed", [rekey(source, key, home)], key)
        state = load(key)
        new_state, outcome = decide_keyed(
            state, record, key, written_at=self.clock(), dedupe_window=self.dedupe_window
        )
        sends = encode(outcome, source, self.partitions)
        return Step(outcome.kind, sends, key, None if new_state is state else new_state)


def rekey(source: Source, key: str, partition: int) -> OutRecord:
    """Forward a record to the partition its canonical key owns; it is decided there."""
    return OutRecord(
        CONFIRMATIONS,
        key.encode(),
        source.value,
        partition,
        (("rekeyed.from", f"{source.partition}:{source.offset}".encode()),),
    )
