"""The worker's side of checkpoints: when one is due, and the records that make it.

The format, and how `audit` reads it back, is workers/core/checkpoint_format.py.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

from workers.core.checkpoint_format import KEYS_PER_BATCH, Copy

__all__ = ["Checkpointer"]


class Checkpointer:
    """The worker's side: when a checkpoint is due, and the records that make it.

    `due(now)` once per batch (one division); when a new time bucket has begun, every partition
    of the generation whose position moved since its last checkpoint gets one, spread over the
    next batches, the partition checkpointed longest ago first: `take` copies at most
    `keys_per_batch` state keys per batch, whole partitions or part of one. A partition with
    more keys than that is copied over several batches (so over several of its transactions)
    from a RocksDB snapshot taken at the input offset where its copy began, so the copy is
    still exactly the state there; its manifest is written with its last chunk. So neither a
    batch nor a transaction ever carries more than `keys_per_batch` keys of checkpoint,
    whatever the size of a partition's state.
    A rebalance abandons a copy in progress (`abandon`: the snapshot would hold the partition's
    store open); it begins again, at the partition's new position, if the partition is still
    ours. The first bucket of a process is not checkpointed at once (a restart does not copy
    the state again); the next bucket boundary is."""

    def __init__(self, topic: str, interval_s: float, keep: int,
                 keys_per_batch: int = KEYS_PER_BATCH) -> None:
        self.topic, self.interval_s, self.keep = topic, interval_s, keep
        self.keys_per_batch = keys_per_batch
        self._bucket: int | None = None
        self._fresh = False  # a new bucket began: every partition is due
        self._pending: set[int] = set()  # partitions still due in this bucket
        self._copy: Copy | None = None  # the checkpoint being written, if one is unfinished
        self._at: dict[int, int] = {}  # partition -> input offset of its last checkpoint
        self._order: dict[int, int] = {}  # partition -> when its last checkpoint ended (taken)
        self.diagnostics_next: dict[int, int | None] = {}  # partition -> diagnostics end
        self.taken = 0  # checkpoints written (for the log and the bench)
        self.seconds = 0.0  # time spent building them
        self.last = (0, 0, 0.0)  # the last take's state keys, bytes and seconds
        self.finished: list[Copy] = []  # the checkpoints the last take completed
        self.copying: Copy | None = None  # the one it left unfinished

    def due(self, wall_s: float) -> bool:
        bucket = int(wall_s // self.interval_s)
        if self._bucket is None:
            self._bucket = bucket
            return False
        if bucket != self._bucket:
            self._bucket, self._fresh = bucket, True
            return True
        return bool(self._pending) or self._copy is not None

    def take(self, wall_s: float, positions: dict[int, int], db_for) -> dict[int, list]:  # noqa: ANN001
        """This batch's checkpoint records per partition, as the processor's Records: at most
        `keys_per_batch` state keys in all. `positions`: each partition's input offset X at
        the batch's start (the state in its store is the state at X); a copy begun now is of
        the state at X, one begun in an earlier batch goes on from its snapshot."""
        import time

        began = time.monotonic()
        bucket = self._bucket
        if self._fresh:  # a copy still in progress finishes first (into its own slot)
            self._pending, self._fresh = set(positions), False
        taken_at = datetime.fromtimestamp(wall_s, UTC)
        out: dict[int, list] = {}
        self.finished, budget, keys, size = [], self.keys_per_batch, 0, 0
        if self._copy is not None and self._copy.partition not in positions:
            self.abandon()  # not ours any more (a rebalance the processor saw first)
        while budget > 0:
            copy = self._copy
            if copy is None:
                copy = self._copy = self._begin(bucket, positions, db_for, taken_at)
                if copy is None:
                    break
            t0 = time.monotonic()
            records, copied = copy.step(budget)
            copy.seconds += time.monotonic() - t0
            budget -= copied
            keys += copied
            size += sum(len(k) + len(v) for k, v in records)
            out.setdefault(copy.partition, []).extend(
                (self.topic, copy.partition, k, v, ()) for k, v in records)
            if copy.done:
                self._copy = None
                self._at[copy.partition] = copy.input_offset
                self.taken += 1
                self._order[copy.partition] = self.taken
                self.finished.append(copy)
        self.copying = self._copy
        spent = time.monotonic() - began
        self.seconds += spent
        self.last = (keys, size, spent)
        return out

    def _begin(self, bucket: int, positions: dict[int, int], db_for,  # noqa: ANN001
               taken_at: datetime) -> Copy | None:
        """The next due partition's copy, from a snapshot of its store now; None: none due."""
        while self._pending:
            # the partition checkpointed longest ago first: when copying all of them takes
            # longer than the interval, the first ones must not be copied again and again
            p = min(self._pending, key=lambda q: (self._order.get(q, -1), q))
            self._pending.discard(p)
            x = positions.get(p)
            if x is None or self._at.get(p) == x:
                continue  # not ours now, or nothing processed since its last checkpoint
            snapshot = _snapshot(db_for(p))
            return Copy(p, bucket % self.keep, bucket, x, self.diagnostics_next.get(p),
                        taken_at, iter(snapshot.items()), source=snapshot,
                        token=secrets.token_hex(8))
        return None

    def wait_s(self, wall_s: float) -> float:
        """How long the worker may wait for input before a checkpoint is due: until the next
        interval begins, or at once while a bucket's checkpoints are still being copied."""
        if self._pending or self._copy is not None or self._fresh:
            return 0.0
        return self.interval_s - wall_s % self.interval_s

    def abandon(self) -> None:
        """Drop the copy in progress (and its snapshot, which holds the partition's store
        open): a rebalance, or a new bucket. Its partition is due again in this bucket; its
        chunks written so far are named by no manifest, and the next copy into the slot
        overwrites them."""
        if self._copy is not None:
            self._pending.add(self._copy.partition)
            self._copy = self.copying = None

    def note_sent(self, partition: int, last_diagnostic: int) -> None:
        """After a partition's transaction committed: its last diagnostic was written at
        offset `last_diagnostic` of its diagnostics partition, which ends after it."""
        self.diagnostics_next[partition] = last_diagnostic + 1

    def forget(self) -> None:
        """A new generation: positions and diagnostics ends are read again."""
        self.abandon()
        self._at.clear()
        self.diagnostics_next.clear()


def _snapshot(db):  # noqa: ANN001, ANN202
    """A consistent view of a partition store as it is now (RocksDB's snapshot: later writes
    are not seen through it)."""
    return db.snapshot()
