"""The dedupe memory of one session: send_id -> when it was first seen and what it said.

`SeenMap` is an immutable Mapping. Adding an entry or pruning old ones returns a new map
and leaves the old one untouched, as the core's "never mutate an input" rule requires,
without copying the whole map for every record (a busy session sees thousands of sends a
week, and the worker decides once per record).

How: entries live in a shared append-only store, and a map is a window [start, end) over
it. Entries are kept in order of `first_seen` (the session clock only moves forward), so
pruning entries older than a cutoff moves `start` forward, and adding an entry to the
newest map appends to the store. A map that is not the newest (someone kept an old state
and decided again from it), or an entry that breaks the order or re-uses a key the store
still holds, takes the slow path: a fresh store with just the live entries.

The store also keeps its entries' bytes as SessionState.to_bytes writes them (encoded on
first use, in order), so writing a session's state copies one slice instead of encoding
every entry again: the worker writes a changed session once per batch.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from itertools import islice, pairwise
from json.encoder import encode_basestring  # the string encoder json.dumps(ensure_ascii=False) uses
from typing import NamedTuple

_COMPACT_MIN = 256  # a store is compacted only once it holds this many dead entries
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


class Seen(NamedTuple):
    """When a send_id was first seen (session clock) and the fingerprint of its content.

    A NamedTuple, not a dataclass: a session holds thousands, and tuples of atoms are
    cheaper to build and are left alone by the garbage collector.
    """

    first_seen: datetime
    fingerprint: str


def micros(at: datetime) -> int:
    """`at` as integer microseconds since 1970 UTC, the state store's time format."""
    return (at - _EPOCH) // _MICROSECOND


class _Store:
    """Append-only entries shared by the maps built from one another.

    `json` holds entries [0, len(starts) - 1) encoded, each followed by a comma; entry i is
    json[starts[i]:starts[i + 1]]. Like the entries, it only grows, so no map sees it change.
    """

    __slots__ = ("index", "json", "keys", "starts", "values")

    def __init__(self, keys: list[str], values: list[Seen]) -> None:
        """A store of these entries, in this order (the index is short if a key repeats)."""
        self.keys, self.values = keys, values
        self.index = dict(zip(keys, range(len(keys)), strict=True))
        self.json = bytearray()
        self.starts = array("q", [0])

    def append(self, key: str, value: Seen) -> None:
        self.index[key] = len(self.keys)
        self.keys.append(key)
        self.values.append(value)

    def copy(self, start: int, end: int) -> _Store:
        """A fresh store of entries [start, end), with the bytes of those already encoded."""
        fresh = _Store(self.keys[start:end], self.values[start:end])
        encoded = min(len(self.starts) - 1, end)
        if encoded > start:
            base = self.starts[start]
            fresh.json[:] = self.json[base : self.starts[encoded]]
            fresh.starts = array("q", [at - base for at in self.starts[start : encoded + 1]])
        return fresh

    def json_items(self, start: int, end: int, head: bytes, tail: bytes) -> bytes:
        """`head`, entries [start, end) as comma-separated JSON arrays
        `[send_id,first_seen_us,fingerprint]` (what json.dumps(..., ensure_ascii=False) writes
        for them), `tail`: one copy of the memoized bytes; the missing ones are encoded first."""
        json, starts, keys, values = self.json, self.starts, self.keys, self.values
        for i in range(len(starts) - 1, end):
            seen = values[i]
            json += b"[%s,%d,%s]," % (
                encode_basestring(keys[i]).encode(),
                micros(seen.first_seen),
                encode_basestring(seen.fingerprint).encode(),
            )
            starts.append(len(json))
        if start == end:
            return head + tail
        with memoryview(json) as view:
            return b"".join((head, view[starts[start] : starts[end] - 1], tail))


class SeenMap(Mapping[str, Seen]):
    """An immutable send_id -> Seen mapping, ordered by first_seen; see the module doc."""

    __slots__ = ("_end", "_start", "_store")

    def __init__(self, items: Iterable[tuple[str, Seen]] = ()) -> None:
        pairs = list(items)
        if any(a[1].first_seen > b[1].first_seen for a, b in pairwise(pairs)):
            pairs.sort(key=lambda kv: kv[1].first_seen)  # stable: ties keep their given order
        store = _Store([key for key, _ in pairs], [value for _, value in pairs])
        if len(store.index) != len(pairs):
            raise ValueError(f"duplicate send_id {_first_repeat(store.keys)!r}")
        self._store, self._start, self._end = store, 0, len(pairs)

    @classmethod
    def _view(cls, store: _Store, start: int, end: int) -> SeenMap:
        view = object.__new__(cls)
        view._store, view._start, view._end = store, start, end
        return view

    # --- Mapping ------------------------------------------------------------------------

    def __getitem__(self, key: str) -> Seen:
        i = self._store.index.get(key)
        if i is None or not self._start <= i < self._end:
            raise KeyError(key)
        return self._store.values[i]

    def get(self, key: str, default: Seen | None = None) -> Seen | None:  # type: ignore[override]
        i = self._store.index.get(key)
        if i is None or not self._start <= i < self._end:
            return default
        return self._store.values[i]

    def __contains__(self, key: object) -> bool:
        i = self._store.index.get(key)  # type: ignore[call-overload]
        return i is not None and self._start <= i < self._end

    def __iter__(self) -> Iterator[str]:
        return islice(self._store.keys, self._start, self._end)

    def __len__(self) -> int:
        return self._end - self._start

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        return len(self) == len(other) and dict(self.items()) == dict(other.items())

    def __hash__(self) -> int:  # immutable, so hashable (and a valid dataclass default)
        return hash(frozenset(self.items()))

    def __repr__(self) -> str:
        return f"SeenMap({dict(self.items())!r})"

    def json_items(self, head: bytes, tail: bytes) -> bytes:
        """`head`, the entries oldest first as SessionState.to_bytes writes them, `tail`
        (see _Store.json_items)."""
        return self._store.json_items(self._start, self._end, head, tail)

    def items_in_order(self) -> list[tuple[str, Seen]]:
        """Entries oldest first (the order to_bytes writes and the constructor restores)."""
        s = self._store
        keys, values = s.keys[self._start : self._end], s.values[self._start : self._end]
        return list(zip(keys, values, strict=True))

    # --- persistent updates -------------------------------------------------------------

    def pruned(self, cutoff: datetime) -> SeenMap:
        """This map without entries first seen before `cutoff` (self if none are)."""
        values, start, end = self._store.values, self._start, self._end
        while start < end and values[start].first_seen < cutoff:
            start += 1
        return self if start == self._start else SeenMap._view(self._store, start, end)

    def with_entry(self, key: str, value: Seen) -> SeenMap:
        """This map plus `key` (which must not be in it)."""
        store, start, end = self._store, self._start, self._end
        if key in self:
            raise ValueError(f"send_id {key!r} is already seen")
        if start == end:  # a fresh store: never grow one that other maps (EMPTY_SEEN) share
            return SeenMap([(key, value)])
        in_order = store.values[end - 1].first_seen <= value.first_seen
        if end == len(store.keys) and key not in store.index and in_order:
            if start >= _COMPACT_MIN and start > end - start:
                store, start, end = store.copy(start, end), 0, end - start
            store.append(key, value)  # tip of the store: other maps end before this entry
            return SeenMap._view(store, start, end + 1)
        return SeenMap([*self.items_in_order(), (key, value)])


def _first_repeat(keys: list[str]) -> str:
    """The first key to occur a second time (the one a duplicate error names)."""
    firsts: dict[str, int] = {}
    return next(k for i, k in enumerate(keys) if firsts.setdefault(k, i) != i)


EMPTY_SEEN = SeenMap()

__all__ = ["EMPTY_SEEN", "Seen", "SeenMap", "micros"]
