"""A large restore split over processes (TRANSCRIPT_RESTORE_PROCESSES).

A restore is Python for each changelog record (aiokafka's record objects, the write batch), so
in one process it runs on one core, at about 250,000 records a second here: a worker that
lost its disk, or restarts after `repartition`, waits for it before its first decision. When
many records are due, the state owner closes the stores that are due, and each of a few spawned
processes opens some of them, reads them to the changelog's end (the same `top_up`, its own
consumer, the same check for stale stores) and closes them; then the owner opens them again,
at the changelog's end. A store is in one process at a time (RocksDB's lock says so), and
each of its write batches carries its offset, so a child killed halfway leaves a store that
says how far it got, as a worker killed during its restore does.

Measured here (2 cores, the broker on them), 2,720,000 changelog records over 16 partitions
(bench/restore_processes.py): 5.6-6.0 s in one process, 4.4-4.7 s in two, 4.6-5.0 s in
three; each child peaks at 220-250 MB. In the worker, whose event loop and client threads
share its core with a restore, the restart after `repartition` at a million sessions restored
the same in 10.3-11.1 s alone and 5.5-5.7 s in two (docs/operating.md, "Growth: repartition").
Below SPLIT_RECORDS a restore stays in the worker: spawning costs about half a second.

The split only makes a restore faster, never a condition of it: when the children cannot
start (no /dev/shm for the pool's semaphores, a process limit) or one fails or dies, the state
owner logs why and restores the rest in the worker (SplitFailed), each store from the offset it
reached. A stale store is the restore's own verdict, in the worker or a child: StaleState.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

from workers import child_processes
from workers.settings import KafkaSettings
from workers.stream import local_state
from workers.stream.store_memory import StoreMemory

SPLIT_RECORDS = 500_000  # changelog offsets due, over the stores, at least, to split


class SplitFailed(local_state.LocalStateError):
    """The restore in processes did not finish: the worker restores the rest itself."""


@dataclass(frozen=True)
class Stores:
    """How a child opens the stores it restores: as the worker's state owner does."""

    tabledir: Path
    table: str
    changelog: str
    memory: StoreMemory
    stores: int  # the partition count: it sizes each store's memtable


def worth_splitting(due: Mapping[int, tuple[int, int]], processes: int) -> bool:
    """Are the offsets `due` (partition -> [first, end)) many enough to restore in processes?"""
    return (processes > 1 and len(due) > 1
            and sum(end - first for first, end in due.values()) >= SPLIT_RECORDS)


def groups(due: Mapping[int, tuple[int, int]], processes: int) -> list[list[int]]:
    """The due partitions in at most `processes` groups of about as many offsets each: the
    largest first, each to the group with the fewest so far."""
    bins: list[tuple[int, list[int]]] = [(0, []) for _ in range(min(processes, len(due)))]
    for p, (first, end) in sorted(due.items(), key=lambda item: (item[1][0] - item[1][1],
                                                                 item[0])):
        i = min(range(len(bins)), key=lambda b: bins[b][0])
        total, members = bins[i]
        bins[i] = (total + end - first, [*members, p])
    return [sorted(members) for _, members in bins if members]


def restore(ks: KafkaSettings, stores: Stores, due: Mapping[int, tuple[int, int]],
            processes: int) -> int:
    """Restore the (closed) stores of the partitions in `due` in at most `processes` children;
    returns the records applied. Raises StaleState as the restore in the worker would, and
    SplitFailed when the children could not start or did not all finish: every store a child
    left is consistent (its offset says how far it got), so the worker goes on from there."""
    parts = groups(due, processes)
    applied = 0
    failures: list[str] = []
    stale: list[tuple[list[int], str]] = []
    pool = None
    try:  # the pool's semaphores and pipes, then each child, spawned as it is submitted
        pool = child_processes.pool(len(parts))
        futures = [(group, pool.submit(restore_group, ks, stores, group)) for group in parts]
    except OSError as exc:
        if pool is not None:
            pool.shutdown(cancel_futures=True)  # a child that started finishes its stores
        raise SplitFailed(f"the restore's processes cannot start: {exc}") from None
    with pool:
        for group, future in futures:
            try:
                outcome = future.result()
            except BrokenProcessPool:
                failures.append(f"partitions {group}: the restoring process died (out of "
                                "memory, or killed)")
                continue
            if outcome[0] == "ok":
                applied += outcome[1]
            elif outcome[0] == "stale":
                stale.append((outcome[1], outcome[2]))
            else:
                failures.append(f"partitions {group}: {outcome[1]}")
    if stale:
        raise local_state.StaleState(sorted(p for ps, _ in stale for p in ps),
                                     "; ".join(why for _, why in stale))
    if failures:
        raise SplitFailed("the restore in processes failed: " + "; ".join(failures))
    return applied


def restore_group(ks: KafkaSettings, stores: Stores, partitions: list[int]
                  ) -> tuple[str, int] | tuple[str, list[int], str] | tuple[str, str]:
    """In a child: open these partitions' stores, read them to the changelog's end, close them.
    The outcome is a value ("ok", applied), ("stale", partitions, why) or ("error", why): an
    exception of this project's would not survive the way back whole."""
    from workers.stream.state_owner import StateOwner

    owner = StateOwner(stores.tabledir, stores.table, stores.changelog, stores.memory,
                       stores.stores, restore_processes=1)
    try:
        owner.assign(partitions)
        return "ok", owner.restore(ks)
    except local_state.StaleState as exc:
        return "stale", exc.partitions, str(exc)
    except Exception as exc:  # noqa: BLE001  (it goes back as the reason)
        return "error", f"{type(exc).__name__}: {exc}"
    finally:
        owner.close()
