"""The session state's one owner: the partition stores on local RocksDB and their restore.

Kafka Streams gives a task's stores one restore owner (StoreChangelogReader); so does this
worker. At each assignment the takeover (workers.stream.takeover) hands `StateOwner` the input
partitions it owns now: stores of partitions it no longer owns are closed, the others are
opened (REGISTERED), read from the changelog to its end, read_committed (RESTORING), and then
serve the batches (READY). No faust table is involved: faust assigns partitions, and this
module alone opens, restores and closes the stores. Standby stores (STANDBY) are opened here too,
for workers.stream.standby to keep near the changelog's end; one that becomes owned is handed
over open.

Layout (unchanged from the faust-table era, so local state written then is used as it is):
TRANSCRIPT_STATE_DIR/<prefix><app id>/v1/tables/sessions-<partition>.db, one RocksDB per input
partition, holding the session keys (workers/core/state.py) and, under `OFFSET_KEY`, the offset
of the last changelog record it applied. The changelog keeps its name and records
(`<prefix><app id>-sessions-changelog`). workers.stream.local_state checks the stores against
the changelog at start and holds the restore's copy loop.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

from workers.settings import WorkerSettings
from workers.stream import local_state, restore_processes
from workers.stream.store_memory import StoreMemory, StoreOptions, memtables_to_flush

log = logging.getLogger("transcript_owner.state")

DEFAULT_MEMORY = StoreMemory(cache_mb=WorkerSettings.model_fields["state_cache_mb"].default)
OPEN_TIMEOUT_S = 30.0  # a store still locked by an exiting process of this state dir


class StoreState(StrEnum):
    REGISTERED = "registered"  # open, not yet read to the changelog's end
    RESTORING = "restoring"  # the changelog is being applied
    READY = "ready"  # at the changelog's end: batches read and write it
    STANDBY = "standby"  # not owned: kept near the changelog's end (workers.stream.standby)


class StateOwner:
    """The open partition stores of one table, by input partition, and where each one stands."""

    def __init__(self, tabledir: Path, table: str, changelog: str,
                 memory: StoreMemory = DEFAULT_MEMORY, stores: int = 8,
                 restore_processes: int = 1) -> None:
        """`memory`: the budget every store of this owner shares; `stores`: how many it may
        open at most (the partition count), which sizes each store's memtable;
        `restore_processes`: how many processes a large restore is split over
        (workers.stream.restore_processes)."""
        self.tabledir, self.table, self.changelog = tabledir, table, changelog
        self.memory, self._max_stores = memory, stores
        self.restore_processes = restore_processes
        self._options: StoreOptions | None = None  # made at the first open
        self._stores: dict[int, Any] = {}
        self._standbys: dict[int, Any] = {}  # open stores of partitions kept warm, not owned
        self.states: dict[int, StoreState] = {}

    # --- what the batches use ---------------------------------------------------------------

    def db(self, partition: int) -> Any:
        """The partition's store (a rocksdict.Rdict). Only partitions of this assignment are
        open; any other is a wiring error, raised as one (the session store reports it)."""
        db = self._stores.get(partition)
        if db is None:
            raise LookupError(f"the store of partition {partition} is not open (not assigned)")
        return db

    def memory_bytes(self) -> int | None:
        """What the stores' shared cache holds now (blocks and memtables); None before any
        store opened."""
        return None if self._options is None else self._options.usage_bytes()

    def relieve_memtables(self, bound: int | None = None, wait: bool = False) -> list[int]:
        """Flush the fullest memtables (in the background; `wait`: before returning) while all
        of them hold more than `bound` (the write buffer manager's, by default): the partitions
        asked, fullest first. After each batch's writes (Processor): store_memory says why
        RocksDB's own triggers are not enough here. Under the bound it reads one figure."""
        if self._options is None:
            return []
        used = self._options.memtable_usage()
        limit = self._options.memtable_bound if bound is None else bound
        if used <= limit:
            return []
        stores = {**self._standbys, **self._stores}
        entries = {p: db.property_int_value("rocksdb.num-entries-active-mem-table") or 0
                   for p, db in stores.items()}
        chosen = memtables_to_flush(used, limit, entries)
        for p in chosen:
            try:
                stores[p].flush(wait=wait)
            except Exception as exc:  # noqa: BLE001  (rocksdict raises plain Exception)
                # not this batch's failure: a store that cannot flush fails its next write
                log.warning("partition %s: its store's memtable did not flush: %s", p, exc)
        return chosen

    def open_stores(self) -> Mapping[int, Any]:
        """The stores open now, for the gauges (read only)."""
        return self._stores

    # --- the lifecycle: assign, restore, close ------------------------------------------------

    def assign(self, partitions: Iterable[int]) -> None:
        """Own exactly `partitions` now: close the others, open these; every one is REGISTERED,
        those it kept too: between two assignments this worker saw, another may have owned a
        partition and written its changelog (a static member can be reassigned without a
        revocation it saw), so each is read to the changelog's end again (cheap when nothing
        is due: one offset lookup)."""
        wanted = set(partitions)
        for p in sorted(set(self._stores) - wanted):
            self._close(p)
        for p in sorted(wanted):
            if p in self._standbys:  # warm: only the tail is left to restore
                self._stores[p] = self._standbys.pop(p)
            elif p not in self._stores:
                self._stores[p] = self._open(p)
            self.states[p] = StoreState.REGISTERED

    def stand_by(self, partitions: Iterable[int]) -> dict[int, Any]:
        """Keep exactly `partitions` (none of them owned) as standbys: close the other standby
        stores, open these; returns them. Only the standbys' tail (workers.stream.standby)
        calls it, and never while an assignment changes the stores (it is stopped first)."""
        wanted = set(partitions) - set(self._stores)
        for p in sorted(set(self._standbys) - wanted):
            self._close_standby(p)
        for p in sorted(wanted - set(self._standbys)):
            self._standbys[p] = self._open(p)
            self.states[p] = StoreState.STANDBY
        return dict(self._standbys)

    def restore(self, ks: Any) -> int:
        """Read every store that is not READY from its applied offset to the changelog's end as
        it is now (read_committed: an aborted batch's state is never applied); returns the
        records applied. Blocking (the caller runs it off the event loop). Raises
        local_state.StaleState when a store cannot be topped up, LocalStateError when the
        changelog cannot be read."""
        due = {p: db for p, db in self._stores.items() if self.states[p] != StoreState.READY}
        if not due:
            return 0
        for p in due:
            self.states[p] = StoreState.RESTORING
        try:
            applied = local_state.top_up(ks, self.changelog, due,
                                         elsewhere=lambda offsets: self._split(ks, offsets))
        except restore_processes.SplitFailed as exc:  # the stores are open again, consistent
            log.warning("%s; restoring partitions %s in the worker", exc, sorted(due))
            applied = local_state.top_up(ks, self.changelog,
                                         {p: self._stores[p] for p in due})
        for p in due:
            self.states[p] = StoreState.READY
        return applied

    def _split(self, ks: Any, due: Mapping[int, tuple[int, int]]) -> int | None:
        """Restore the offsets `due` in processes when they are many (None: here): their
        stores are closed for it and opened again after, whatever the outcome."""
        if not restore_processes.worth_splitting(due, self.restore_processes):
            return None
        for p in due:  # closed, not forgotten: they stay RESTORING
            _shut(self._stores.pop(p))
        began = time.monotonic()
        try:
            applied = restore_processes.restore(
                ks, restore_processes.Stores(self.tabledir, self.table, self.changelog,
                                             self.memory, self._max_stores),
                due, self.restore_processes)
        finally:
            for p in sorted(due):
                self._stores[p] = self._open(p)
        log.info("restored partitions %s in %d processes in %.2fs", sorted(due),
                 min(self.restore_processes, len(due)), time.monotonic() - began)
        return applied

    def discard(self, partitions: Iterable[int]) -> list[int]:
        """Close and remove these stores: the next start restores them from the changelog."""
        gone = []
        for p in sorted(partitions):
            if p in self._stores:
                self._close(p)
            if p in self._standbys:
                self._close_standby(p)
            path = self._path(p)
            if path.exists():
                shutil.rmtree(path, ignore_errors=True)
                gone.append(p)
        return gone

    def close(self) -> None:
        """Flush and close every store (a clean stop)."""
        for p in sorted(self._stores):
            self._close(p)
        for p in sorted(self._standbys):
            self._close_standby(p)

    # --- the disk -----------------------------------------------------------------------------

    def _path(self, partition: int) -> Path:
        return self.tabledir / f"{self.table}-{partition}.db"

    def _open(self, partition: int) -> Any:
        """Open (or create) the partition's store; while another process of this state dir
        still holds its lock (it is exiting), retry for a while: two live workers on one state
        dir are a misconfiguration (prepare warns of it), and then this fails."""
        import rocksdict

        if self._options is None:
            self._options = StoreOptions(self.memory, self._max_stores)
        options = self._options.options()
        self.tabledir.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + OPEN_TIMEOUT_S
        while True:
            try:
                db = rocksdict.Rdict(str(self._path(partition)), options=options)
                db.set_write_options(self._options.write_options())
                return db
            except Exception as exc:  # noqa: BLE001  (rocksdict raises plain Exception)
                if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                    raise local_state.LocalStateError(
                        f"cannot open {self._path(partition)}: {exc}") from None
                time.sleep(0.1)

    def _close_standby(self, partition: int) -> None:
        self._close(partition, self._standbys)

    def _close(self, partition: int, stores: dict[int, Any] | None = None) -> None:
        db = (self._stores if stores is None else stores).pop(partition)
        self.states.pop(partition, None)
        _shut(db)


def _shut(db: Any) -> None:
    """Flush a store and close it (its memtables hold writes no write-ahead log has)."""
    try:
        db.flush(True)
    finally:
        db.close()
