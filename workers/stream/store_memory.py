"""What the partition stores may hold in memory: one budget for all of a worker's RocksDB stores.

RocksDB's defaults are per store: a 64 MB memtable (two of them while one flushes) and a block
cache of its own. With one store per input partition, a worker's memory then grew with its
partitions, and, since a store's memtable only flushed at 64 MB, with its sessions too: at a
million sessions on 64 partitions every head and send_id sat in memtables (peak RSS 525-880 MB,
docs/performance.md). Kafka Streams bounds the same thing with a shared block cache and a
WriteBufferManager charged to it (its "BoundedMemoryRocksDBConfig"); this does that.

`StoreMemory` is one worker's budget (TRANSCRIPT_STATE_CACHE_MB): a block cache shared by every
store, with every memtable charged to it, so the stores together stay within it whatever the
partition and session counts. Each store's table also carries a bloom filter (10 bits a key):
most reads at scale look for a key that is not there (a session's first record in days, a
send_id not seen), and the filter answers those without reading a block.

The memtables' half is held by the worker too (`memtables_to_flush`). Left to RocksDB, at
2,000,000 sessions on 64 partitions they held 45-50 MB against their 16 MB (the write buffer
manager's usage; some 260,000 entries active over the stores): each store flushed about every
fifth write, some 5,000 entries (0.9 MB) at a time, every flush the write buffer manager's and
none for a memtable's own 256 KiB (why, not found); the cache, charged for them, then held
almost no blocks (docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MB = 1 << 20
BLOOM_BITS_PER_KEY = 10  # about 1% false positives
# a store's memtable: a share of the budget, within these. A store holds up to two (one
# filling, one flushing), so with the budget's half for memtables each gets a quarter of the
# budget over the stores; below MEMTABLE_MIN a store flushes too often to keep up
MEMTABLE_MAX = 8 * MB
MEMTABLE_MIN = 256 * 1024


@dataclass(frozen=True)
class StoreMemory:
    """The stores' memory budget: block cache and memtables together, in MB. It holds while
    `cache_mb` is at least the stores x 0.5 MB (their smallest memtables, two a store). From
    the stores x 1 MB the memtables are sized to half of it; below, they sit at their floor and
    the write buffer manager flushes them at half the budget (the default, 32 MB on 64
    partitions, is there), so fewer blocks stay cached."""

    cache_mb: int

    def memtable_bytes(self, stores: int) -> int:
        """One store's memtable size: the stores' two memtables each take half the budget at
        most (the rest caches blocks), within MEMTABLE_MIN..MEMTABLE_MAX."""
        share = self.cache_mb * MB // 4 // max(1, stores)
        return max(MEMTABLE_MIN, min(MEMTABLE_MAX, share))


class StoreOptions:
    """rocksdict Options for the stores of one worker, sharing one cache and write buffer
    manager (created once: two of them would each take the whole budget)."""

    def __init__(self, memory: StoreMemory, stores: int) -> None:
        import rocksdict

        self.memory = memory
        self.cache = rocksdict.Cache(memory.cache_mb * MB)
        # memtables charged to the cache: the stores' memory is the cache's capacity; no stall
        # (a write never waits on it: a flush is triggered instead)
        self.memtable_bound = memory.cache_mb * MB // 2  # the memtables' half of the budget
        self.buffers = rocksdict.WriteBufferManager.new_write_buffer_manager_with_cache(
            self.memtable_bound, False, self.cache)
        self.memtable = memory.memtable_bytes(stores)

    def memtable_usage(self) -> int:
        """What every store's memtables hold now (allocated, flushed or not yet freed)."""
        return int(self.buffers.get_usage())

    def options(self) -> Any:
        import rocksdict

        table = rocksdict.BlockBasedOptions()
        table.set_block_cache(self.cache)
        table.set_bloom_filter(BLOOM_BITS_PER_KEY, False)
        table.set_cache_index_and_filter_blocks(True)  # counted in the budget too
        table.set_pin_l0_filter_and_index_blocks_in_cache(True)
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        options.set_block_based_table_factory(table)
        options.set_write_buffer_manager(self.buffers)
        options.set_write_buffer_size(self.memtable)
        options.set_max_write_buffer_number(2)
        options.set_keep_log_file_num(2)  # RocksDB's own LOG files, not data
        return options

    def write_options(self) -> Any:
        """No write-ahead log: the changelog is the store's log (as Kafka Streams runs its
        stores). Each write batch carries the changelog offset it reaches (local_state), so a
        store a crash took back to its last flush says so, and the restore applies the rest
        from the changelog; a clean stop flushes (StateOwner.close)."""
        import rocksdict

        options = rocksdict.WriteOptions()
        options.disable_wal = True
        return options

    def usage_bytes(self) -> int:
        """What the cache holds now (blocks and the memtables charged to it)."""
        return int(self.cache.get_usage())


def memtables_to_flush(used: int, bound: int, entries: Mapping[int, int]) -> list[int]:
    """The stores whose memtables to flush, fullest first, when all of them (`used` bytes)
    hold more than `bound`: enough to bring them down to half of it, each store's share of
    `used` taken by its memtable's entries (`entries`, by partition). Half, not just under: a
    flush brings what the next batches write no closer to the bound, and flushing the same
    stores every batch would make an L0 file of a batch's writes each time."""
    if used <= bound:
        return []
    total = sum(entries.values())
    if total <= 0:
        return []
    chosen: list[int] = []
    freed, need = 0, used - bound // 2
    for partition, n in sorted(entries.items(), key=lambda e: (-e[1], e[0])):
        if freed >= need or n <= 0:
            break
        chosen.append(partition)
        freed += used * n // total
    return chosen
