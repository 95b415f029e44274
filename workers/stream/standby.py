"""Standby replicas: the state of partitions this worker does not own, kept near the changelog's
end, so that a failover restores only the tail (TRANSCRIPT_STANDBY_REPLICAS).

faust's assignor places them (adapter.warm_assignor: never on the owner, spread by count,
sticky, a standby promoted first when an active moves). After each assignment a thread of its
own has the state owner open this worker's standby stores and tails their changelog partitions
read_committed into them with the restore's own code (local_state.apply: each write batch
carries its offset), so a standby never holds state of an aborted batch or claims an offset it
has not applied. At the next assignment the takeover stops the thread first; a standby that
becomes owned is handed over open, and the restore reads it from where the tail stopped.

Warm-up: the standbys the leader gave this worker to warm up before a move (the assignor's
`#warm-up` marks) are tailed like the others; once every one of them is within WARM_LAG of
the changelog's end, the worker asks for a new assignment, in which the move happens.

A standby costs a store on disk, a share of the state's memory budget (the stores share one
cache), and a fetch stream of the changelog: as much as its owner writes. Its lag (the
changelog's last stable offset minus what it has applied) is on /metrics; /readyz does not
look at standbys.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from workers.core.warmup import WARM_LAG
from workers.settings import KafkaSettings
from workers.stream import local_state
from workers.stream.state_owner import StateOwner

log = logging.getLogger("transcript_owner.standby")

POLL_MS = 50  # the longest a stop (at each rebalance) waits for the tail's fetch
RETRY_S = 5.0  # the changelog could not be read: try again after this


class Standbys:
    """The standby stores of one worker, and the thread that keeps them warm."""

    def __init__(self, ks: KafkaSettings, state: StateOwner, group: str,
                 assigned: Callable[[], tuple[set[int], set[int]]],
                 rejoin: Callable[[], None]) -> None:
        """`assigned()`: this worker's standby partitions, and those of them it warms up for a
        move, as its last assignment gave them; `rejoin()`: ask the group for a new
        assignment."""
        self.ks, self.state, self.group = ks, state, group
        self.assigned, self.rejoin = assigned, rejoin
        self._tail_thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lag: dict[int, int] = {}  # standby partition -> changelog records not applied
        self.warm: set[int] = set()  # standbys within WARM_LAG (the assignor reports them)
        self.applied = 0  # changelog records applied to standbys, in all

    def lag(self) -> Mapping[int, int]:
        return dict(self._lag)

    def start(self) -> None:
        """After an assignment: open and tail this worker's standbys (in a thread)."""
        self.stop()
        standbys, warming = self.assigned()
        self.warm &= standbys  # kept through the assignment: the stores did not move
        if not standbys:
            self.state.stand_by(())
            return
        self._stop.clear()
        self._tail_thread = threading.Thread(target=self._run, args=(standbys, warming),
                                        name="transcript-owner-standby", daemon=True)
        self._tail_thread.start()

    def stop(self) -> None:
        """Before an assignment changes the stores: the tail ends (within a fetch's wait)."""
        thread, self._tail_thread = self._tail_thread, None
        if thread is not None:
            self._stop.set()
            thread.join()
        self._lag = {}

    # --- the thread -------------------------------------------------------------------------

    def _run(self, standbys: set[int], warming: set[int]) -> None:
        while not self._stop.is_set():
            try:
                dbs = self.state.stand_by(standbys)
                log.info("standby for partitions %s%s", sorted(dbs),
                         f" (warming up {sorted(warming)} to take them over)" if warming else "")
                asyncio.run(self._tail(dbs, warming))
                return
            except Exception as exc:  # noqa: BLE001  (a standby is an optimisation)
                log.warning("standbys: %s: %s; trying again in %.0fs", type(exc).__name__, exc,
                            RETRY_S)
                self._stop.wait(RETRY_S)

    async def _tail(self, dbs: Mapping[int, Any], warming: set[int]) -> None:
        """Read each standby's changelog partition from what it applied, until stopped."""
        from aiokafka import TopicPartition

        topic = self.state.changelog
        c = local_state.changelog_reader(self.ks, f"{self.group}-standby")
        try:
            await c.start()
            tps = [TopicPartition(topic, p) for p in sorted(dbs)]
            starts, ends = await c.beginning_offsets(tps), await c.end_offsets(tps)
            changelog = local_state.Changelog(topic, None, {tp.partition: starts[tp] for tp in tps},
                                              {tp.partition: ends[tp] for tp in tps})
            applied = {p: db.get(local_state.OFFSET_KEY) for p, db in dbs.items()}
            _, stale = local_state.due_ranges(changelog, applied)
            if stale:  # the changelog was recreated or truncated under it: start afresh
                log.warning("standby stores of partitions %s discarded: %s", sorted(stale),
                            "; ".join(stale.values()))
                self.state.discard(stale)
                dbs = {**dbs, **self.state.stand_by(set(dbs))}
                applied.update({p: None for p in stale})
            c.assign(tps)
            for tp in tps:
                raw = applied[tp.partition]
                c.seek(tp, starts[tp] if raw is None else max(int(raw) + 1, starts[tp]))
            never = 1 << 62
            began, behind, before = time.monotonic(), True, self.applied
            while not self._stop.is_set():
                batch = await c.getmany(timeout_ms=POLL_MS, max_records=20_000)
                for tp, rs in batch.items():
                    self.applied += local_state.apply(dbs[tp.partition], rs, never)
                lag = {}
                for tp in tps:
                    stable = c.last_stable_offset(tp)
                    if stable is not None:
                        lag[tp.partition] = max(0, stable - await c.position(tp))
                self._lag = lag  # replaced whole: the scrape reads it from another thread
                self.warm = {p for p, n in lag.items() if n <= WARM_LAG}
                if behind and len(lag) == len(tps) and not any(lag.values()):
                    behind = False
                    log.info("standbys of partitions %s caught up: %d changelog records applied "
                             "in %.2fs", sorted(dbs), self.applied - before,
                             time.monotonic() - began)
                if warming and warming <= self.warm:
                    log.info("warmed up partitions %s; asking the group for a new assignment",
                             sorted(warming))
                    warming = set()
                    self.rejoin()
        finally:
            await c.stop()
