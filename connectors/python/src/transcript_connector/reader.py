"""A gateway's reader of one session bound to a position (DESIGN 1.3, "Reading at a position"):
what a reply turn calls before it builds its history, so that the history holds every send
confirmed before it, or the turn is told it cannot (StaleReadError) — never a session that
silently lacks an entry.

    with BlockingSessionReader(options) as reader:                  # the topic
        read = reader.read(session_key, at=delivery, timeout_s=5)   # or at=LATEST, At(p, o)
    async with SessionReader(options, database="var/sink.db") as reader:   # reader_async
        read = await reader.read(session_key, at=LATEST)

A read: the metadata (both topics' partition counts: while they differ a repartition is in
progress and no read completes), the steps its bound needs (reader_plan.plan_read: LATEST
takes the input partition's last stable offset when the step starts), then a wait until the
source's position covers each step's offset, or the deadline (StaleReadError naming the
partition, the offset reached, the one needed and the position's age). It returns the
session's live entries as of a point at or after that position.

Sources: the topic (reader_topic: one consumer, sessions held per partition) or a sink
database (reader_sink, read-only); metadata and last stable offsets come from Kafka either way
(reader_kafka: one admin client). Clients are made once, at connect.

`BlockingSessionReader` runs in the caller's thread (one call at a time). `SessionReader`
(asyncio, reader_async) runs one on a thread of its own, serving every awaiting read in one
loop: a read waiting for a stalled partition does not hold up the others. Record contents are
never logged above debug; errors are ReadError (a source or Kafka refused: the message names
what, and for an authorization who and which ACL) or StaleReadError.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, NamedTuple, Protocol, Self

from kafka.errors import SaslAuthenticationFailedError, UnsupportedSaslMechanismError

from transcript_connector.connection import check_sasl, check_tls
from transcript_connector.entries_topic import Position
from transcript_connector.errors import ConnectorError, ReadError, StaleReadError
from transcript_connector.publisher import Delivery
from transcript_connector.reader_kafka import Cluster, KafkaUnavailable, read_error
from transcript_connector.reader_options import (
    ReaderOptions,
    reader_options_from_env,
)
from transcript_connector.reader_plan import (
    LATEST,
    At,
    Bound,
    Latest,
    Plan,
    ReadEntry,
    Refused,
    SessionRead,
    Unreadable,
    plan_read,
    reached,
    stale,
)
from transcript_connector.reader_sink import DatabaseSource
from transcript_connector.reader_topic import TopicSource

log = logging.getLogger("transcript_connector.reader")

METADATA_EVERY_S = 1.0  # while a repartition is in progress: the counts looked at again
BLOCKING_SLICE_S = 0.2  # the longest one wait of a blocking read (it returns on news)

Snapshot = tuple[tuple[ReadEntry, ...], tuple[Unreadable, ...]]


class Source(Protocol):
    def begin(self, partition: int, session_key: str | None) -> None: ...
    def end(self, partition: int, session_key: str | None) -> None: ...
    def look(self, partition: int, session_key: str | None,
             needed: int) -> tuple[Position, Snapshot | None]: ...
    def wait(self, seconds: float) -> None: ...
    def held(self) -> dict[int, tuple[int, int, Position]]: ...
    def close(self) -> None: ...


class PartitionHeld(NamedTuple):
    """What the topic source holds of one partition: the sessions it keeps, the records it
    has read from the partition so far, and the furthest position read."""

    sessions: int
    records_read: int
    position: Position


@dataclass(eq=False)
class _Read:
    """One read in progress."""

    session_key: str
    bound: Bound
    deadline: float  # time.monotonic()
    plan: Plan | None = None
    step: int = 0
    needed: int = 0
    begun: tuple[int, str | None] | None = None  # what the source was asked to read
    recheck_at: float = 0.0  # blocked, or Kafka unavailable: when to look at the counts again
    unavailable: str | None = None  # why the last lookup failed (Kafka did not answer)
    home: int | None = None  # the session's partition, once a plan was made
    waiting: bool = False  # the wait of this step was logged
    outcome: SessionRead | ConnectorError | None = field(default=None)


def _bound(at: object, options: ReaderOptions) -> Bound:
    if isinstance(at, Latest | At):
        return at
    if isinstance(at, Delivery):
        if at.topic != options.input_topic:
            raise ReadError(f"a delivery to topic {at.topic}: this reader's input topic is "
                            f"{options.input_topic} (TRANSCRIPT_TOPIC_PREFIX)")
        return At(at.partition, at.offset)
    raise TypeError(f"at: LATEST, a Delivery or At(partition, offset), not {type(at).__name__}")


class BlockingSessionReader:
    """`with BlockingSessionReader(options) as r: r.read(key, at=...)`: the topic source, or
    with `database=PATH` a sink database. Connects on entry (every client, once), closes on
    exit. One call at a time."""

    def __init__(self, options: ReaderOptions, *, database: str | os.PathLike[str] | None = None
                 ) -> None:
        self.options = options
        self.database = None if database is None else os.fspath(database)
        self._cluster: Cluster | None = None
        self._source: Source | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str], **overrides: Any) -> Self:
        """A reader configured from the worker's variables (reader_options_from_env); the
        `database` keyword chooses the sink database source."""
        database = overrides.pop("database", None)
        return cls(reader_options_from_env(environ, **overrides), database=database)

    def __enter__(self) -> Self:
        try:
            self.connect()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def connect(self) -> None:
        """The database checked (when given), TLS and SASL tried once (their refusals named
        at once), then the admin client and, for the topic, the consumer."""
        if self._source is not None:
            return
        o = self.options
        source: Source | None = (None if self.database is None
                                 else DatabaseSource(o, self.database))
        try:
            kwargs = o.kafka_kwargs()
            check_tls(o, kwargs, ReadError)
            try:
                check_sasl(o, kwargs)
            except (SaslAuthenticationFailedError, UnsupportedSaslMechanismError) as exc:
                raise read_error("cannot connect", o, exc, o.input_topic) from exc
            self._cluster = Cluster(o, kwargs)
            self._source = source or TopicSource(o, kwargs)
        except BaseException:
            if source is not None:
                source.close()
            self.close()
            raise

    def close(self) -> None:
        """Closes the clients (or the database). Safe to call twice."""
        source, self._source = self._source, None
        cluster, self._cluster = self._cluster, None
        if source is not None:
            source.close()
        if cluster is not None:
            cluster.close()

    def read(self, session_key: str, *, at: Bound | Delivery = LATEST,
             timeout_s: float | None = None) -> SessionRead:
        """The session (its canonical key, as `Delivery.key` holds it) bound by `at`:
        LATEST (the input partition's last stable offset now: every send confirmed before
        the call), a Delivery the publisher returned, or At(partition, offset). Waits at
        most `timeout_s` (None: the options' timeout_ms); StaleReadError when the bound is
        not reached by then, ReadError when it cannot read at all."""
        read = self._new(session_key, at, timeout_s)
        try:
            self._start(read)
            while not self._advance(read):
                self._wait([read], BLOCKING_SLICE_S)
        finally:
            self._release(read)  # also when interrupted: the session is not kept pinned
        return _result(read)

    def partitions(self) -> dict[int, PartitionHeld]:
        """What the topic source holds, per partition it has read (none: the database)."""
        return {p: PartitionHeld(*held) for p, held in self._connected()[1].held().items()}

    # --- the steps of a read (the async reader runs the same) -----------------------------

    def _connected(self) -> tuple[Cluster, Source]:
        if self._cluster is None or self._source is None:
            raise ReadError("not connected: call connect() first (or use `with`)")
        return self._cluster, self._source

    def _new(self, session_key: str, at: object, timeout_s: float | None) -> _Read:
        if not isinstance(session_key, str) or not session_key:
            raise ValueError("session_key: a canonical session key (what Delivery.key holds)")
        timeout = self.options.timeout_ms / 1000 if timeout_s is None else timeout_s
        if not timeout >= 0:
            raise ValueError("timeout_s: seconds, 0 or more")
        return _Read(session_key, _bound(at, self.options), time.monotonic() + timeout)

    def _start(self, read: _Read) -> None:
        """The metadata and the plan; the first step begun. Kafka not answering now is waited
        out (`unavailable`: asked again each METADATA_EVERY_S until the deadline)."""
        cluster, _ = self._connected()
        try:
            counts = cluster.counts()
            plan = plan_read(read.session_key, read.bound, *counts,
                             cluster.earlier_counts(counts[0]))
            if isinstance(plan, Refused):
                raise ReadError(plan.reason)
            read.plan, read.step, read.unavailable = plan, 0, None
            read.home = plan.home
            self._enter_step(read)
        except KafkaUnavailable as exc:
            self._unavailable(read, exc)
        except ConnectorError as exc:
            self._finish(read, exc)

    def _unavailable(self, read: _Read, exc: KafkaUnavailable) -> None:
        """Kafka did not answer a lookup: the read starts again at its next look, or, past its
        deadline, is stale, naming why."""
        read.plan, read.unavailable = None, str(exc)
        read.recheck_at = time.monotonic() + METADATA_EVERY_S
        log.debug("waiting for Kafka: %s", exc)

    def _enter_step(self, read: _Read) -> None:
        cluster, source = self._connected()
        assert read.plan is not None
        need = read.plan.steps[read.step]
        read.waiting = False
        read.needed = (cluster.last_stable_offset(need.partition) if need.offset is None
                       else need.offset)
        if read.plan.blocked is not None:
            read.recheck_at = time.monotonic() + METADATA_EVERY_S
            log.debug("blocked: partition %d: %s", need.partition, read.plan.blocked)
            return
        last = read.step == len(read.plan.steps) - 1
        read.begun = (need.partition, read.session_key if last else None)
        source.begin(*read.begun)

    def _advance(self, read: _Read) -> bool:
        """Whether the read is done (its outcome set): reached, stale or failed."""
        if read.outcome is not None:
            return True
        cluster, source = self._connected()
        try:
            while True:
                now = time.monotonic()
                if read.plan is None:  # Kafka did not answer the last lookup
                    if now >= read.deadline:
                        raise self._stale_unavailable(read)
                    if now >= read.recheck_at:
                        self._start(read)
                        if read.plan is None or read.outcome is not None:
                            return read.outcome is not None
                        continue
                    return False
                need = read.plan.steps[read.step]
                if read.plan.blocked is not None:
                    if now >= read.deadline:
                        position, _ = source.look(need.partition, None, read.needed)
                        raise stale(position, read.needed, datetime.now(UTC),
                                    read.plan.blocked)
                    if now >= read.recheck_at:
                        self._start(read)  # the counts again (and a new plan)
                        return read.outcome is not None
                    return False
                last = read.step == len(read.plan.steps) - 1
                position, snapshot = source.look(
                    need.partition, read.session_key if last else None, read.needed)
                if reached(position, read.needed) and (snapshot is not None or not last):
                    if not last:
                        self._release(read)
                        read.step += 1
                        try:
                            self._enter_step(read)
                        except KafkaUnavailable as exc:
                            self._unavailable(read, exc)  # the read starts again
                        continue
                    assert snapshot is not None
                    self._finish(read, SessionRead(read.session_key, need.partition, position,
                                                   read.needed, *snapshot))
                    return True
                if now >= read.deadline:
                    raise stale(position, read.needed, datetime.now(UTC))
                if not read.waiting:
                    read.waiting = True
                    log.debug("waiting: partition %d reached input offset %d, needs %d",
                              need.partition, position.input_offset, read.needed)
                return False
        except ConnectorError as exc:
            self._finish(read, exc)
            return True

    def _stale_unavailable(self, read: _Read) -> StaleReadError:
        """The stale read of a read whose deadline came while Kafka did not answer: at the
        home partition of its last plan (or of the counts it last had), where it stood."""
        _, source = self._connected()
        home = read.home if read.home is not None else 0
        position, _ = source.look(home, None, read.needed)
        return stale(position, read.needed, datetime.now(UTC),
                     read.unavailable or "Kafka did not answer")

    def _wait(self, reads: list[_Read], longest: float) -> None:
        """The source reads what arrives, until the first deadline or metadata look at most."""
        _, source = self._connected()
        now = time.monotonic()
        until = min([r.deadline for r in reads]
                    + [r.recheck_at for r in reads if r.plan is None or r.plan.blocked])
        source.wait(max(0.0, min(longest, until - now)))

    def _finish(self, read: _Read, outcome: SessionRead | ConnectorError) -> None:
        read.outcome = outcome
        self._release(read)

    def _release(self, read: _Read) -> None:
        begun, read.begun = read.begun, None
        if begun is not None and self._source is not None:
            self._source.end(*begun)


def _result(read: _Read) -> SessionRead:
    if isinstance(read.outcome, SessionRead):
        return read.outcome
    assert read.outcome is not None
    raise read.outcome


__all__ = [
    "LATEST",
    "At",
    "BlockingSessionReader",
    "PartitionHeld",
    "ReadEntry",
    "ReaderOptions",
    "SessionRead",
    "Unreadable",
    "reader_options_from_env",
]
