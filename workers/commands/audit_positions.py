"""`audit`'s check of the worker's position records (DESIGN 1.3, "Reading at a position").

A position record `position/<p>` at entries offset X with input offset o tells a reader that
every input record of partition p below o has its outcome before X. The audit replays the
input, so it knows each expected entry's input record; it checks, per entries partition:
  claims     the first position past an input record comes after that record's entry (an entry
             that is missing, or written only after a position claimed its input, is a
             finding: a read bound to that position would have returned without it);
  order      positions never move back, in either topic's offsets;
  range      no position claims input the topic does not hold (past its last stable offset,
             read after the entries): a read at latest would return before the record's
             outcome exists.
An entry erased since (tombstoned) or moved to another partition by a repartition is not
claimed by this partition's positions and is not checked. A position record the worker would
not write (another partition in its key, value or place; not an input-position/1) is
`malformed`, named by topic, partition and offset, never by what it holds. Compaction keeps
each partition's last position: the older ones are checked while they are still there.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable

from transcript_connector.entries_topic import Position, Skip, decode_position, parse_position_key


class PositionCheck:
    """Fed the entries topic's records and the replay's expectations; `findings()` at the
    end."""

    def __init__(self) -> None:
        # entries partition -> its position records, in offset order as read
        self.positions: dict[int, list[Position]] = {}
        self.located: dict[bytes, tuple[int, int]] = {}  # entry key -> first (partition, offset)
        self.origins: dict[bytes, tuple[int, int]] = {}  # entry key -> (input partition, offset)

    def read(self, r: object, malformed: Callable[[int, int, str], None]) -> bool:
        """Take `r` if it is a position record (True; a malformed one is reported)."""
        key = getattr(r, "key", None)
        p = parse_position_key(key)
        if p is None:
            return False
        partition, offset = r.partition, r.offset  # type: ignore[attr-defined]
        found = decode_position(p, r.value, partition, offset)  # type: ignore[attr-defined]
        if isinstance(found, Skip):
            malformed(partition, offset, found.reason)
        else:
            self.positions.setdefault(partition, []).append(found)
        return True

    def entry(self, key: bytes, partition: int, offset: int) -> None:
        """A live value of entry `key` at (partition, offset): its first is where it was."""
        self.located.setdefault(key, (partition, offset))

    def expect(self, key: bytes, partition: int, input_offset: int) -> None:
        """The replay says input record (partition, input_offset) writes entry `key`."""
        self.origins[key] = (partition, input_offset)

    def findings(self, erased: set[bytes], input_ends: dict[int, int]) -> Iterable[tuple[str, str]]:
        """(kind, what) of every broken claim; `erased`: entry keys tombstoned since;
        `input_ends`: each input partition's last stable offset, read after the entries."""
        claims: dict[int, tuple[list[int], list[int]]] = {}  # p -> (offsets, running max)
        for p, found in sorted(self.positions.items()):
            found.sort(key=lambda pos: pos.offset or 0)
            offsets, most = [], []
            top = -1
            previous: Position | None = None
            for pos in found:
                if previous is not None and (pos.input_offset < previous.input_offset
                                             or pos.control_offset < previous.control_offset):
                    yield ("position", f"partition {p} offset {pos.offset}: the position moved "
                           f"back, from input offset {previous.input_offset} and control "
                           f"offset {previous.control_offset} to {pos.input_offset} and "
                           f"{pos.control_offset}")
                end = input_ends.get(p)
                if end is not None and pos.input_offset > end:
                    yield ("position", f"partition {p} offset {pos.offset}: claims input offset "
                           f"{pos.input_offset}, past the input's last stable offset {end}")
                previous = pos
                top = max(top, pos.input_offset)
                offsets.append(pos.offset or 0)
                most.append(top)
            claims[p] = (offsets, most)
        for key, (p, io) in self.origins.items():
            if key in erased or p not in claims:
                continue
            at = self.located.get(key)
            if at is not None and at[0] != p:
                continue  # moved by a repartition: not this partition's to claim
            offsets, most = claims[p]
            first = bisect_right(most, io)  # the first position past input offset io
            if first == len(most):
                continue
            if at is None or at[1] >= offsets[first]:
                where = "missing" if at is None else f"at offset {at[1]}"
                yield ("position", f"partition {p} offset {offsets[first]}: claims input offset "
                       f"{io}, whose entry {key.decode(errors='replace')} is {where}")
