"""One input record through the core: parse, route, decide — no Kafka client calls here.

The one step of the worker, `audit`, `replay` and the tests: `Owner.handle(source, store,
record_clock(...))`, then `apply(store, step)`. What the worker sends and what it stores are
return values, so the routing rules (re-key, dead-letter) are tested without a broker, and the
shells differ only in the store behind `StateStore`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import NamedTuple, cast

from transcript_connector.partitioning import partition_for

from schemas import CONFIRMATION, ERASE, DeliveryConfirmation, Invalid, SessionErase, read_input
from workers.core import (
    Outcome,
    Seen,
    SessionHead,
    StateStore,
    StateView,
    StoreFailure,
    dead_letter,
    decide_in,
    failed,
    session_key_of,
)
from workers.core.control import (
    CONTROL_OFFSET_HEADER,
    CONTROL_TAKES_ERASES,
    NOT_ITS_PARTITION,
    Admit,
    admit_erase,
    clamped,
    control_offset,
    ticket,
)
from workers.core.outcomes import NULL_VALUE
from workers.core.outputs import CONFIRMATIONS, OutRecord, Source, encode


class Step(NamedTuple):
    """What handling one record asks the shell to do, in this order: send, then store.

    NamedTuples here and in the core's results: one of each is built per record, at a third
    of a frozen dataclass's cost (which sets every field through object.__setattr__)."""

    # an outcome kind; "rekeyed" when the record is forwarded to its own partition, and
    # "forwarded" for an erase of transcript.control forwarded into the input (core/control.py)
    outcome: str
    sends: list[OutRecord]
    session_key: str | None = None
    head: SessionHead | None = None  # the session's new head; None: leave it as it is
    seen: tuple[str, Seen] | None = None  # (send_id, what to remember of it); None: nothing
    decided: Outcome | None = None  # the core's outcome (None when re-keyed)
    # a session-erase: before storing `head`, tombstone the session's stored state (its head
    # and every remembered send_id; the shell's store finds them, e.g. by a prefix scan)
    erase: bool = False
    # a forwarded erase's ticket: (control offset, digest, True) to keep, (…, False) to spend;
    # None: nothing
    ticket: tuple[int, str, bool] | None = None


@dataclass
class Owner:
    partitions: int | None  # None: no re-keying (replay: a file has no partitions)
    dedupe_window: timedelta
    clock: Callable[[], datetime]  # the entries' written_at
    counts: Counter = field(default_factory=Counter)
    control: str | None = None  # the cluster name of transcript.control (None: none read)

    def handle(self, source: Source, view: StateView, now: datetime | None = None) -> Step:
        """`now`: the worker's clock for this record (default: the written_at clock)."""
        try:
            step = self._step(source, view, now)
        except StoreFailure:
            raise
        except Exception as exc:  # noqa: BLE001  (no record may stop the worker: Rule 1)
            outcome = failed(exc)
            step = Step("dead_letter", encode(outcome, source, self.partitions or 1),
                        decided=outcome)
        self.counts[step.outcome] += 1
        return step

    def _step(self, source: Source, view: StateView, now: datetime | None) -> Step:
        partitions = self.partitions
        value = source.value
        if value is None:
            return self._dead(dead_letter(NULL_VALUE), source)
        record = read_input(value)
        if isinstance(record, Invalid):
            return self._dead(dead_letter(record.reason), source)
        if source.topic == self.control:
            return self._forward(record, source, value)
        send_id = cast(DeliveryConfirmation, record).send_id if record.schema_ == CONFIRMATION \
            else None
        key = session_key_of(record)
        if isinstance(key, Invalid):
            return self._dead(dead_letter(key.reason, send_id=send_id), source)
        spend = None
        if record.schema_ == ERASE:  # the trust boundary: workers/core/control.py
            at = control_offset(source.headers)
            if partitions is not None and at is not None and at >= 0 and \
                    source.partition != (home := partition_for(key, partitions)):
                # forwarded under an earlier partition count (a repartition): its ticket went
                # with the session's state, so it is admitted there
                return Step("rekeyed", [rekey(source, key, home)], key)
            held = view.ticket(key, at) if at is not None and at >= 0 else None
            admitted = admit_erase(source.offset, value, at, held, view.cutover())
            if not isinstance(admitted, Admit):
                return self._dead(dead_letter(admitted, key), source)
            if admitted.ticket is not None:
                spend = (admitted.ticket, ticket(value), False)
                erase = cast(SessionErase, record)
                record = _erased_at(erase, clamped(erase.erased_at, now or self.clock()))
        if partitions is not None:
            home = partition_for(key, partitions)
            if source.key != key.encode() or source.partition != home:
                return Step("rekeyed", [rekey(source, key, home)], key)
        written_at = self.clock()
        head, decision = decide_in(
            view, record, key, now=now or written_at, written_at=written_at,
            dedupe_window=self.dedupe_window,
        )
        outcome = decision.outcome
        sends = encode(outcome, source, partitions or 1)
        new_head = None if decision.head is head else decision.head
        seen = None if decision.seen is None else (send_id, decision.seen)
        return Step(outcome.kind, sends, key, new_head, seen, outcome,  # type: ignore[arg-type]
                    erase=outcome.kind == "erased", ticket=spend)

    def _forward(self, record: object, source: Source, value: bytes) -> Step:
        """A record of transcript.control: an erase is forwarded into its input partition,
        where it is decided in the session's order; the session holds its ticket meanwhile."""
        if getattr(record, "schema_", None) != ERASE:
            return self._dead(dead_letter(CONTROL_TAKES_ERASES), source)
        key = session_key_of(record)  # type: ignore[arg-type]
        if isinstance(key, Invalid):
            return self._dead(dead_letter(key.reason), source)
        if self.partitions is not None and (
                source.key != key.encode() or source.partition != partition_for(
                    key, self.partitions)):
            return self._dead(dead_letter(NOT_ITS_PARTITION, key), source)
        copy = OutRecord(CONFIRMATIONS, key.encode(), value, source.partition,
                         ((CONTROL_OFFSET_HEADER, str(source.offset).encode()),))
        return Step("forwarded", [copy], key, ticket=(source.offset, ticket(value), True))

    def _dead(self, outcome: Outcome, source: Source) -> Step:
        return Step("dead_letter", encode(outcome, source, self.partitions or 1),
                    decided=outcome)


def apply(store: StateStore, step: Step) -> None:
    """Store what a step changed, in the one order every shell uses: a session-erase forgets the
    session's state first, then the new head and send_id, then the erase ticket."""
    key = step.session_key
    if key is None:
        return
    if step.erase:
        store.erase(key)
    if step.head is not None or step.seen is not None:
        store.remember(key, step.head, step.seen)
    if step.ticket is not None:
        store.hold(key, *step.ticket)


def record_clock(timestamp_s: float | None, wall: datetime, wall_s: float) -> datetime:
    """The clock a record is decided at: when the broker appended it (LogAppendTime on the
    input topic), never ahead of the shell's wall clock (`wall`, `wall_s` its POSIX seconds);
    the wall clock for a record without one (None, or Kafka's -1 as a negative). The worker
    and `audit` read the same timestamp, so they decide alike."""
    if timestamp_s is None or timestamp_s < 0 or timestamp_s >= wall_s:
        return wall
    return datetime.fromtimestamp(timestamp_s, UTC)


def _erased_at(record: SessionErase, at: datetime) -> SessionErase:
    """`record` (a pydantic model or a msgspec Struct of schemas) with another `erased_at`."""
    if at == record.erased_at:
        return record
    if hasattr(record, "model_copy"):
        return record.model_copy(update={"erased_at": at})
    import msgspec

    return msgspec.structs.replace(record, erased_at=at)  # type: ignore[type-var]


def rekey(source: Source, key: str, partition: int) -> OutRecord:
    """Forward a record to the partition its canonical key owns; it is decided there. An
    erase keeps its control offset (the ticket it is admitted by, held by the session): one
    forwarded before a repartition and decided after it is re-keyed to the session's new
    partition, where its state went."""
    kept = tuple(h for h in source.headers or () if h[0] == CONTROL_OFFSET_HEADER)
    return OutRecord(
        CONFIRMATIONS,
        key.encode(),
        source.value,
        partition,
        (("rekeyed.from", f"{source.partition}:{source.offset}".encode()), *kept),
    )
