"""workers.stream.store_memory: the partition stores share one memory budget, whatever their
number and their data, write no log of their own, and keep what a clean stop flushed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import rocksdict

from workers.stream.state_owner import StateOwner
from workers.stream.store_memory import MB, MEMTABLE_MAX, MEMTABLE_MIN, StoreMemory


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
