"""Whether the worker is live and ready, from faust's rebalance signals and the hot path's
progress (docs/operating.md, "Endpoints").

Ready: the group assigned this worker its partitions (possibly none) and their state is
recovered, so it processes input. A rebalance makes it unready from the revocation until the
recovery of the new assignment is complete. Live: the event loop answers (this runs on it) and
no batch has been in flight longer than the liveness timeout (a stuck transaction, a broker that
never answers): a supervisor that restarts an unlive worker loses nothing (exactly-once).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from workers.core.lifecycle import (
    Assigned,
    Event,
    Invalid,
    Lifecycle,
    Restored,
    Revoked,
    State,
    Stop,
)

log = logging.getLogger("transcript_owner.health")


class Health:
    """The worker's lifecycle (workers/core/lifecycle.py: the table) fed from faust's signals,
    the exactly-once takeover (takeover.on_assigned) and the processor, and the hot path's
    progress."""

    def __init__(self, liveness_timeout_s: float, *, settles: bool = False) -> None:
        self.liveness_timeout_s = liveness_timeout_s
        self.lifecycle = Lifecycle(settles=settles)
        self.assignments = 0
        self._batch_since: float | None = None  # monotonic start of the batch in flight
        self._app: Any = None

    @property
    def phase(self) -> str:
        return str(self.lifecycle.state)

    @property
    def generation(self) -> int | None:
        return self.lifecycle.generation

    def send(self, event: Event) -> None:
        result = self.lifecycle.send(event)
        if isinstance(result, Invalid):  # faust's order or this wiring changed: say so
            log.warning("lifecycle: %s", result.reason)

    def attach(self, app: Any) -> None:
        """Follow the app's rebalances (faust signals). Exactly-once, the assignment itself is
        sent by the takeover (it runs before faust's signal), at-least-once by the signal."""
        self._app = app

        @app.on_partitions_revoked.connect
        async def revoked(sender: Any, revoked: Any, **_: Any) -> None:  # noqa: ARG001
            self.send(Revoked())

        @app.on_partitions_assigned.connect
        async def assigned(sender: Any, assigned: Any, **_: Any) -> None:  # noqa: ARG001
            self.assignments += 1
            if not self.lifecycle.settles:
                self.send(Assigned(app.consumer_generation_id))

        @app.on_rebalance_complete.connect
        async def complete(sender: Any, **_: Any) -> None:  # noqa: ARG001
            # faust signals it before it checks whether a rebalance came meanwhile
            if app.consumer_generation_id == self.lifecycle.generation:
                self.send(Restored())

    # the hot path (Processor): one call at each end of a batch
    def batch_started(self) -> None:
        self._batch_since = time.monotonic()

    def batch_done(self) -> None:
        self._batch_since = None

    def readiness(self) -> tuple[bool, str]:
        app = self._app
        if app is not None and app.should_stop:
            self.send(Stop())
        ready, why = self.lifecycle.readiness()
        if ready and app is not None and (
                app.rebalancing or app.consumer_generation_id != self.generation):
            return False, "rebalancing"
        return ready, why

    @property
    def restoring(self) -> bool:
        return self.lifecycle.state in (State.SETTLING, State.RESTORING)

    def liveness(self) -> tuple[bool, str]:
        since = self._batch_since
        if since is not None:
            stuck = time.monotonic() - since
            if stuck > self.liveness_timeout_s:
                return False, (f"a batch has been in flight for {stuck:.0f}s "
                               f"(TRANSCRIPT_LIVENESS_TIMEOUT_S={self.liveness_timeout_s:g})")
        return True, "the event loop answers and batches complete"
