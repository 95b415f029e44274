"""What a read bound to a position needs (DESIGN 1.3, "Reading at a position"), decided without
I/O: the bound (LATEST, or a delivery's partition and offset), the session's home partition,
the steps to wait for, and what a held session looks like after each record of its partition.
The reader's shells (reader_topic, reader_sink) do the waiting; the TypeScript reader runs the
same algorithm.

A step is (partition, input offset the reader's position there must reach). The offset of a
step bound to LATEST is None: the shell takes input partition p's last stable offset when the
step starts, not before (a later LSO is what a reply turn must see).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import NamedTuple

from transcript_connector.entries_topic import Delete, Position, Skip, Upsert
from transcript_connector.errors import StaleReadError
from transcript_connector.partitioning import partition_for
from transcript_connector.records import TranscriptEntry

INPUT = "delivery.confirmations"
ENTRIES = "transcript.entries"
LAYOUT = "transcript.layout"
_MOVE_KEY = re.compile(rb"move/([1-9][0-9]{0,5})-([1-9][0-9]{0,5})")


def earlier_counts(layout_keys: list[bytes], input_partitions: int) -> tuple[int, ...]:
    """The counts the deployment had before each repartition that ended at or below
    `input_partitions` (the input's count now), oldest first, from transcript.layout's keys
    (`move/P-N`, one per move; a marker `move/P-N/p` or any other key is not one)."""
    moves = set()
    for key in layout_keys:
        m = _MOVE_KEY.fullmatch(key) if key is not None else None
        if m is not None and int(m[2]) <= input_partitions:
            moves.add(int(m[1]))
    return tuple(sorted(moves))


class Latest(Enum):
    """Bound to the input partition's last stable offset when the read starts."""

    LATEST = "latest"


LATEST = Latest.LATEST


class At(NamedTuple):
    """Bound to a delivery given by its numbers: the input partition and offset a publisher's
    acknowledgement names (`Delivery.partition`, `Delivery.offset`)."""

    partition: int
    offset: int


Bound = Latest | At

_AT = re.compile(r"(0|[1-9][0-9]{0,9}):(0|[1-9][0-9]{0,18})")


def parse_at(text: str) -> Bound:
    """`latest` or `P:O` (a delivery's partition and offset, decimal) as a bound; ValueError
    names what is wrong."""
    if text == "latest":
        return LATEST
    m = _AT.fullmatch(text)
    if m is None:
        raise ValueError(f"--at {text!r}: expected latest or PARTITION:OFFSET (decimal, "
                         "e.g. 3:1200)")
    partition, offset = int(m[1]), int(m[2])
    if partition > 2**31 - 1 or offset > 2**63 - 1:
        raise ValueError(f"--at {text!r}: partition or offset out of range")
    return At(partition, offset)


class Need(NamedTuple):
    """Wait until the reader's position for `partition` covers input offsets below `offset`
    (None: input partition `partition`'s last stable offset, taken when the step starts)."""

    partition: int
    offset: int | None


class Plan(NamedTuple):
    """The steps of a read, in order; `home` the session's partition (the last step's).
    `blocked`: why the read cannot complete now (a repartition in progress), else None."""

    home: int
    steps: tuple[Need, ...]
    blocked: str | None = None


class Refused(NamedTuple):
    """A bound no read can reach (ReadError)."""

    reason: str


def plan_read(session_key: str, bound: Bound, input_partitions: int,
              entries_partitions: int, earlier_counts: tuple[int, ...] = ()) -> Plan | Refused:
    """The steps of a read of `session_key` bound by `bound`, given both topics' counts and
    the counts the deployment had before each repartition (`earlier_counts`, oldest first:
    transcript.layout's moves).

    A delivery on another partition than home was published under an older partition count
    or keyed non-canonically: the worker re-keys such a record to its home in the
    transaction that moves the delivery partition's position past it, so the read first
    waits there, then for home's last stable offset at that moment. LATEST likewise first
    waits for the session's home under each earlier count (a publisher that has not yet seen
    a repartition still sends there, and the worker re-keys those records), each to its last
    stable offset, then for home's."""
    if input_partitions < 1 or entries_partitions < 1:
        return Refused(f"a topic without partitions ({INPUT} {input_partitions}, "
                       f"{ENTRIES} {entries_partitions})")
    home = partition_for(session_key, input_partitions)
    blocked = (None if input_partitions == entries_partitions
               else repartition_reason(input_partitions, entries_partitions))
    if isinstance(bound, Latest):
        earlier = dict.fromkeys(partition_for(session_key, n) for n in earlier_counts
                                if 0 < n < input_partitions)
        steps = [Need(q, None) for q in earlier if q != home]
        return Plan(home, (*steps, Need(home, None)), blocked)
    if bound.partition < 0 or bound.offset < 0:
        return Refused(f"delivery {bound.partition}:{bound.offset}: not a partition and offset")
    if bound.partition >= input_partitions:
        return Refused(f"delivery {bound.partition}:{bound.offset}: {INPUT} has "
                       f"{input_partitions} partitions, none numbered {bound.partition}")
    if bound.partition == home:
        return Plan(home, (Need(home, bound.offset + 1),), blocked)
    return Plan(home, (Need(bound.partition, bound.offset + 1), Need(home, None)), blocked)


def repartition_reason(input_partitions: int, entries_partitions: int) -> str:
    return (f"a repartition is in progress: {INPUT} has {input_partitions} partitions, "
            f"{ENTRIES} {entries_partitions}")


def reached(position: Position, needed: int) -> bool:
    """Whether `position` covers input offset `needed`: only a position record read does, even
    for 0. (After a repartition a new partition's entries are the move's copies, written before
    any position there: a reader that took "no record" for offset 0 could return without them.)"""
    return position.at is not None and position.input_offset >= needed


def stale(position: Position, needed: int, now: datetime,
          reason: str | None = None) -> StaleReadError:
    """The error of a read that did not reach `needed` at `position` by its deadline."""
    return StaleReadError(position.partition, position.input_offset, needed,
                          position.age_s(now), reason)


# --- what a read returns -------------------------------------------------------------------


class ReadEntry(NamedTuple):
    """One live entry of the session: `value` its bytes exactly as stored (the chain covers
    them), `chain` its `chain` header text (None: none)."""

    seq: int
    entry: TranscriptEntry
    value: bytes
    chain: str | None


class Unreadable(NamedTuple):
    """A live value under one of the session's entry keys that is no valid entry of that key
    (the sink skips it too): not in `entries`, but `show --verify` checks it (a finding).
    `reason` names the field, never the content."""

    seq: int
    value: bytes
    chain: str | None
    reason: str


@dataclass(frozen=True, slots=True)
class SessionRead:
    """A session read bound to a position: its live entries in seq order as of a point at or
    after `position` (the position reached in `partition`, the session's home), which covers
    every input record of that partition below `needed` and more."""

    session_key: str
    partition: int
    position: Position
    needed: int
    entries: tuple[ReadEntry, ...]
    unreadable: tuple[Unreadable, ...] = ()


class HeldSession:
    """Compaction's view of one session as its records are read in offset order: the latest
    value per seq; a tombstone removes it; a value that is no entry of its key is kept aside
    as Unreadable (it hides the older value, as in compaction). No I/O; mutable for speed (a
    gateway holds many)."""

    __slots__ = ("_live", "_snapshot")

    def __init__(self) -> None:
        self._live: dict[int, ReadEntry | Unreadable] = {}
        self._snapshot: tuple[tuple[ReadEntry, ...], tuple[Unreadable, ...]] | None = None

    def apply(self, seq: int, change: Upsert | Delete | Skip, value: bytes | None,
              chain: str | None) -> None:
        """One record under the key `<session>#<seq>`, as classify saw it."""
        self._snapshot = None
        if isinstance(change, Delete) or value is None:
            self._live.pop(seq, None)
        elif isinstance(change, Upsert):
            entry = TranscriptEntry.model_validate_json(value)  # valid: classify checked it
            self._live[seq] = ReadEntry(seq, entry, value, change.chain)
        else:
            self._live[seq] = Unreadable(seq, value, chain, change.reason)

    def clear(self) -> None:
        self._live.clear()
        self._snapshot = None

    def snapshot(self) -> tuple[tuple[ReadEntry, ...], tuple[Unreadable, ...]]:
        """(entries, unreadable), each in seq order; cached until the next record."""
        if self._snapshot is None:
            ordered = [self._live[s] for s in sorted(self._live)]
            self._snapshot = (tuple(e for e in ordered if isinstance(e, ReadEntry)),
                              tuple(e for e in ordered if isinstance(e, Unreadable)))
        return self._snapshot

    def __len__(self) -> int:
        return len(self._live)


__all__ = [
    "ENTRIES",
    "INPUT",
    "LATEST",
    "At",
    "Bound",
    "HeldSession",
    "Latest",
    "Need",
    "Plan",
    "ReadEntry",
    "Refused",
    "SessionRead",
    "Unreadable",
    "parse_at",
    "plan_read",
    "repartition_reason",
    "stale",
]
