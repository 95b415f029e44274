"""The topic source of a session reader: `transcript.entries` read through one kafka-python
consumer kept for the reader's life (no group, read_committed, never committing, never creating
a topic).

Per partition it has read it keeps the furthest position seen and the sessions it was asked
for (a least-recently-read set of at most `sessions_per_partition`), each as compaction sees
it (HeldSession), current up to the consumer's position there: a later read of a held session
fetches only what was written since. A session not held is read from the partition's start:
the consumer goes back to the start, and records below where the partition had been read
apply to the new sessions only ("catching up"); from there on, to every held session. Only
the partitions asked for are assigned, and a read waits in the consumer's fetch, so it returns
as soon as the position it needs is written.

Record contents are never logged (keys and offsets at debug level only).
"""

from __future__ import annotations

import logging
import time
from collections import Counter, OrderedDict
from typing import Any

from kafka import KafkaConsumer, TopicPartition

from transcript_connector.entries_topic import (
    Position,
    Positioned,
    Skip,
    chain_header,
    classify,
    furthest,
    parse_entry_key,
    parse_position_key,
)
from transcript_connector.reader_kafka import kafka_errors
from transcript_connector.reader_options import ReaderOptions
from transcript_connector.reader_plan import HeldSession, ReadEntry, Unreadable

log = logging.getLogger("transcript_connector.reader")

# how long the broker holds a fetch with nothing new: the consumer sends the next one at once
# when something arrives, so this bounds only how long an idle fetch lasts
FETCH_MAX_WAIT_MS = 50
MAX_POLL_RECORDS = 5000

Snapshot = tuple[tuple[ReadEntry, ...], tuple[Unreadable, ...]]


class _Partition:
    """What the source holds of one entries partition."""

    __slots__ = ("catch_to", "catching", "held", "pins", "position", "records", "tp")

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.position = Position(tp.partition)
        self.held: OrderedDict[str, HeldSession] = OrderedDict()  # least recently read first
        self.pins: Counter[str] = Counter()  # sessions a read in progress needs: never dropped
        self.catching: set[str] = set()  # held sessions read again from the start
        self.catch_to: int | None = None  # ... up to here (where the others stand)
        self.records = 0  # records read from the partition (the reader's cost)


class TopicSource:
    """Entries partitions read on demand (see the module's docstring). One thread at a time."""

    def __init__(self, options: ReaderOptions, kwargs: dict[str, Any]) -> None:
        self.options = options
        self.topic = options.entries_topic
        with self._errors("cannot connect"):
            self._consumer = KafkaConsumer(
                **kwargs, group_id=None, enable_auto_commit=False,
                isolation_level="read_committed", auto_offset_reset="earliest",
                allow_auto_create_topics=False, fetch_min_bytes=1,
                fetch_max_wait_ms=FETCH_MAX_WAIT_MS, max_poll_records=MAX_POLL_RECORDS,
                max_partition_fetch_bytes=4 << 20, fetch_max_bytes=16 << 20)
            # the topic's metadata now, not at the first read's first fetch
            self._consumer.partitions_for_topic(self.topic)
        self._parts: dict[int, _Partition] = {}

    # --- what the reader asks ----------------------------------------------------------------

    def begin(self, partition: int, session_key: str | None) -> None:
        """A read needs `partition` (and `session_key` held there) until `end`."""
        part = self._parts.get(partition)
        if part is None:
            part = self._parts[partition] = _Partition(TopicPartition(self.topic, partition))
            with self._errors("cannot read"):
                self._consumer.assign([p.tp for p in self._parts.values()])
                self._consumer.seek(part.tp, 0)  # before the start: from the start
        if session_key is None:
            return
        part.pins[session_key] += 1
        if session_key in part.held:
            part.held.move_to_end(session_key)
            return
        part.held[session_key] = HeldSession()
        self._start_catching_up(part, session_key)
        self._drop_least_recent(part)

    def end(self, partition: int, session_key: str | None) -> None:
        part = self._parts.get(partition)
        if part is not None and session_key is not None:
            part.pins[session_key] -= 1
            if part.pins[session_key] <= 0:
                del part.pins[session_key]
            self._drop_least_recent(part)

    def look(self, partition: int, session_key: str | None,
             needed: int) -> tuple[Position, Snapshot | None]:
        """The furthest position read in `partition`; with `session_key`, once that position
        covers `needed`, the session as held (current up to at least that position)."""
        part = self._parts.get(partition)
        if part is None:
            return Position(partition), None
        if (session_key is None or part.position.input_offset < needed
                or session_key in part.catching or session_key not in part.held):
            return part.position, None
        return part.position, part.held[session_key].snapshot()

    def wait(self, seconds: float) -> None:
        """Reads what arrives within `seconds` (returns as soon as something did)."""
        if not self._parts:  # nothing assigned (a read waits for a repartition's end)
            time.sleep(seconds)
            return
        with self._errors("cannot read"):
            batches = self._consumer.poll(timeout_ms=max(0, int(seconds * 1000)))
        for tp, records in batches.items():
            part = self._parts.get(tp.partition)
            if part is None:
                continue
            part.records += len(records)
            for r in records:
                self._apply(part, r.key, r.value, r.headers, r.offset)
        for part in self._parts.values():
            if part.catch_to is not None and self._read_to(part) >= part.catch_to:
                log.debug("%s[%d]: %d sessions caught up at offset %d", self.topic,
                          part.tp.partition, len(part.catching), part.catch_to)
                part.catching.clear()
                part.catch_to = None

    def held(self) -> dict[int, tuple[int, int, Position]]:
        """Per partition read: (sessions held, records read, furthest position)."""
        return {p: (len(part.held), part.records, part.position)
                for p, part in sorted(self._parts.items())}

    def close(self) -> None:
        self._consumer.close(autocommit=False)

    # --- inside ---------------------------------------------------------------------------

    def _apply(self, part: _Partition, key: bytes | None, value: bytes | None, headers: Any,
               offset: int) -> None:
        """One record: a position moves the partition's position forward; an entry key's
        record changes the held session it belongs to (while catching up, below `catch_to`,
        only the sessions read again)."""
        p = part.tp.partition
        if parse_position_key(key) is not None:
            found = classify(key, value, headers, p, offset)
            if isinstance(found, Positioned):
                part.position = furthest(part.position, found.position)
            else:
                log.debug("%s[%d]@%d: skipped a position record: %s", self.topic, p, offset,
                          found.reason if isinstance(found, Skip) else found)
            return
        parsed = parse_entry_key(key)
        if parsed is None:
            return
        session_key, seq = parsed
        held = part.held.get(session_key)
        if held is None:
            return
        if part.catch_to is not None and offset < part.catch_to \
                and session_key not in part.catching:
            return  # read before: this session has it
        change = classify(key, value, headers, p, offset)
        if isinstance(change, Positioned):  # an entry key is never a position's: unreachable
            return
        if isinstance(change, Skip):
            log.debug("%s[%d]@%d: a value of session %r is no entry of its key: %s",
                      self.topic, p, offset, session_key, change.reason)
        held.apply(seq, change, value, chain_header(headers))

    def _start_catching_up(self, part: _Partition, session_key: str) -> None:
        """`session_key` is new: read it from the partition's start up to where the partition
        has been read (or, already catching up, start again with it: every session caught up
        so far is read again from the start)."""
        read_to = part.catch_to if part.catch_to is not None else self._read_to(part)
        if read_to <= 0:
            return  # nothing read yet: it is read with the others
        for key in part.catching:
            part.held[key].clear()
        part.catching.add(session_key)
        part.catch_to = read_to
        with self._errors("cannot read"):
            self._consumer.seek(part.tp, 0)
        log.debug("%s[%d]: reading %d sessions from the start up to offset %d", self.topic,
                  part.tp.partition, len(part.catching), read_to)

    def _drop_least_recent(self, part: _Partition) -> None:
        """At most `sessions_per_partition` held, least recently read dropped first; a
        session a read in progress needs is kept (for the time being over the bound)."""
        excess = len(part.held) - self.options.sessions_per_partition
        if excess <= 0:
            return
        for key in [k for k in part.held if k not in part.pins][:excess]:
            del part.held[key]
            part.catching.discard(key)  # catch_to stays: the others have read below it

    def _read_to(self, part: _Partition) -> int:
        with self._errors("cannot read"):
            return int(self._consumer.position(part.tp) or 0)

    def _errors(self, what: str) -> Any:
        return kafka_errors(f"{what} {self.topic}", self.options, self.topic)


__all__ = ["TopicSource"]
