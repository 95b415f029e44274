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
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from itertools import islice
from typing import NamedTuple

_COMPACT_MIN = 256  # a store is compacted only once it holds this many dead entries


class Seen(NamedTuple):
    """When a send_id was first seen (session clock) and the fingerprint of its content.

    A NamedTuple, not a dataclass: a session holds thousands, and tuples of atoms are
    cheaper to build and are left alone by the garbage collector.
    """

    first_seen: datetime
    fingerprint: str


class _Store:
    """Append-only entries shared by the maps built from one another."""

    __slots__ = ("index", "keys", "values")

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.values: list[Seen] = []
        self.index: dict[str, int] = {}

    def append(self, key: str, value: Seen) -> None:
        self.index[key] = len(self.keys)
        self.keys.append(key)
        self.values.append(value)


class SeenMap(Mapping[str, Seen]):
    """An immutable send_id -> Seen mapping, ordered by first_seen; see the module doc."""

    __slots__ = ("_end", "_start", "_store")

    def __init__(self, items: Iterable[tuple[str, Seen]] = ()) -> None:
        store = _Store()
        # Stable sort: ties keep their given order, so building is deterministic.
        for key, value in sorted(items, key=lambda kv: kv[1].first_seen):
            if key in store.index:
                raise ValueError(f"duplicate send_id {key!r}")
            store.append(key, value)
        self._store, self._start, self._end = store, 0, len(store.keys)

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
                store, start, end = self._compact(), 0, end - start
            store.append(key, value)  # tip of the store: other maps end before this entry
            return SeenMap._view(store, start, end + 1)
        return SeenMap([*self.items_in_order(), (key, value)])

    def _compact(self) -> _Store:
        fresh = _Store()
        for key, value in self.items_in_order():
            fresh.append(key, value)
        return fresh


EMPTY_SEEN = SeenMap()

__all__ = ["EMPTY_SEEN", "Seen", "SeenMap"]
