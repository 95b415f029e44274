"""workers.stream.store_memory: the partition stores share one memory budget, whatever their
number and their data, write no log of their own, and keep what a clean stop flushed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import rocksdict

from workers.stream.state_owner import StateOwner
from workers.stream.store_memory import (
    MB,
    MEMTABLE_MAX,
    MEMTABLE_MIN,
    StoreMemory,
    memtables_to_flush,
)


@pytest.mark.parametrize(("cache_mb", "stores", "memtable"), [
    (64, 8, 2 * MB), (64, 64, MEMTABLE_MIN), (64, 1000, MEMTABLE_MIN), (4096, 8, MEMTABLE_MAX),
    (8, 1, 2 * MB)])
def test_a_stores_memtable_is_its_share_of_a_quarter_of_the_budget(cache_mb: int, stores: int,
                                                                  memtable: int) -> None:
    assert StoreMemory(cache_mb).memtable_bytes(stores) == memtable


def _fill(state: StateOwner, partitions: range, mb: int) -> None:
    """`mb` MB of values (1 KiB each) over the stores, in write batches as the worker writes."""
    value = os.urandom(512).hex().encode()
    for n in range(mb):
        for p in partitions:
            batch = rocksdict.WriteBatch(raw_mode=True)
            for i in range(1024 // len(partitions) + 1):
                batch.put(b"k%d-%d" % (n, i), value)
            state.db(p).write(batch)


def test_many_stores_full_of_data_stay_within_one_budget(tmp_path: Path) -> None:
    budget = StoreMemory(cache_mb=32)  # the stores x 1 MB: the smallest it holds for
    state = StateOwner(tmp_path, "sessions", "changelog", budget, stores=32)
    state.assign(range(32))
    _fill(state, range(32), 128)  # 128 MB written: four times the budget
    for p in range(0, 32, 4):  # and read back, through the block cache
        assert state.db(p).get(b"k0-0") is not None
    used = state.memory_bytes()
    assert used is not None and 0 < used <= budget.cache_mb * MB * 1.1
    state.close()


def test_the_stores_write_no_log_and_keep_what_a_clean_stop_flushed(tmp_path: Path) -> None:
    state = StateOwner(tmp_path, "sessions", "changelog", StoreMemory(cache_mb=8), stores=2)
    state.assign([0, 1])
    _fill(state, range(2), 1)
    logs = list(tmp_path.glob("sessions-*.db/*.log"))
    assert logs and all(f.stat().st_size == 0 for f in logs)  # no write-ahead log
    state.close()
    again = StateOwner(tmp_path, "sessions", "changelog", StoreMemory(cache_mb=8), stores=2)
    again.assign([0, 1])
    assert again.db(1).get(b"k0-0") is not None
    again.close()


@pytest.mark.parametrize(("used", "entries", "chosen"), [
    (16 * MB, {0: 10, 1: 20}, []),  # at the bound: nothing
    (40 * MB, {}, []),  # no store open
    (40 * MB, {0: 0, 1: 0}, []),  # nothing in the active memtables (all being flushed)
    # over: fullest first, until their share of what is used covers what is over half the bound
    (40 * MB, {0: 100, 1: 400, 2: 300, 3: 200}, [1, 2, 3]),
    (20 * MB, {0: 100, 1: 400, 2: 300, 3: 200}, [1, 2]),
    (17 * MB, {5: 1, 3: 1, 4: 1, 9: 0}, [3, 4]),  # ties by partition; an empty one never
])
def test_the_fullest_memtables_are_flushed_down_to_half_their_bound(
        used: int, entries: dict[int, int], chosen: list[int]) -> None:
    assert memtables_to_flush(used, 16 * MB, entries) == chosen


def _active_entries(state: StateOwner, p: int) -> int:
    return state.db(p).property_int_value("rocksdb.num-entries-active-mem-table") or 0


def test_memtables_over_their_bound_are_flushed_fullest_first(tmp_path: Path) -> None:
    state = StateOwner(tmp_path, "sessions", "changelog", StoreMemory(cache_mb=64), stores=4)
    state.assign(range(4))
    assert state.relieve_memtables() == []  # nothing written
    _fill(state, range(4), 2)  # some 0.5 MB a store: below RocksDB's own triggers
    _fill(state, range(2, 3), 2)  # partition 2 the fullest
    assert state.relieve_memtables() == []  # within the write buffer manager's 32 MB
    assert all(_active_entries(state, p) > 0 for p in range(4))
    chosen = state.relieve_memtables(bound=MB, wait=True)  # the worker's run in the background
    assert chosen[0] == 2 and len(chosen) >= 2
    assert [_active_entries(state, p) for p in chosen] == [0] * len(chosen)
    assert state.db(2).get(b"k0-0") is not None  # flushed, not lost
    state.close()
