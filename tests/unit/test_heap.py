"""workers.stream.heap.settle: the survivors frozen out of the collector's way, and what a
frozen object leaves as cyclic garbage freed at the next settle (never leaked for good)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest
from transcript_connector import partitioning, session_keys

from workers.stream import heap


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_settle_freezes_what_is_alive() -> None:
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    keep = Node()
    heap.settle()
    assert gc.get_freeze_count() > 0
    assert not any(o is keep for o in gc.get_objects())  # the collector no longer visits it


def test_cyclic_garbage_of_a_frozen_object_is_freed_at_the_next_settle() -> None:
    node = Node()
    alive = weakref.ref(node)
    heap.settle()
    del node
    gc.collect()
    assert alive() is not None  # frozen: no collection sees it
    heap.settle()
    assert alive() is None


def test_a_batch_frees_its_cyclic_garbage_and_freezes_its_survivors() -> None:
    gc.unfreeze()
    heap.settle()
    frozen = gc.get_freeze_count()
    survivors = [Node() for _ in range(100)]
    garbage = weakref.ref(Node())  # a cycle the batch dropped: only the collector frees it
    assert garbage() is not None
    heap.after_batch()
    assert garbage() is None  # collected before the freeze, not frozen for good
    assert gc.get_freeze_count() >= frozen + 100
    assert not any(o is survivors[0] for o in gc.get_objects())


def test_what_a_batch_keeps_is_not_traversed_by_middle_collections_after_settle() -> None:
    """30,000 objects a batch keeps alive: with CPython's thresholds they went through four
    middle-generation collections before the batch ended; after settle, none."""
    def middle_collections(survivors: int) -> int:
        counted: list[int] = []

        def count(phase: str, info: dict) -> None:
            if phase == "stop" and info["generation"] == 1:
                counted.append(1)

        gc.collect()
        gc.callbacks.append(count)
        try:
            kept = [[] for _ in range(survivors)]
        finally:
            gc.callbacks.remove(count)
        del kept
        return len(counted)

    gc.set_threshold(700, 10, 10)
    assert middle_collections(30_000) >= 3
    heap.settle()
    assert gc.get_threshold() == (700, heap.YOUNG_COLLECTIONS_PER_MIDDLE, 10)
    assert middle_collections(30_000) == 0


def _cache_dict(cached) -> dict:  # noqa: ANN001  (a functools.lru_cache wrapper)
    [cache] = [o for o in gc.get_referents(cached) if isinstance(o, dict) and len(o) >= 3000]
    return cache


def test_a_miss_of_the_per_record_caches_gives_the_collector_nothing_to_traverse() -> None:
    """Keyed by (key, partitions) and (raw, agent_id) tuples, the partitioner's and the session
    keys' caches were dicts a full collection untracked and the next miss tracked again: the
    collection after each batch then traversed all their entries (5-8 ms a batch at a million
    sessions, docs/performance.md). Keyed by one string, they are never tracked."""
    session_keys.canonical_session_key.cache_clear()  # type: ignore[attr-defined]
    for i in range(3000):
        partitioning.partition_for(f"agent:ops:direct:u{i}", 64)
        session_keys.canonical_session_key(f"agent:ops:direct:u{i}", "ops")
    heap.after_batch()
    new = "agent:ops:direct:new"
    assert partitioning.partition_for(new, 64) == partitioning.partition_for(new, 64)
    assert session_keys.canonical_session_key(new, "ops") == new
    assert not gc.is_tracked(_cache_dict(partitioning._key_hash_cached))
    assert len(session_keys._cache) >= 3000 and not gc.is_tracked(session_keys._cache)
