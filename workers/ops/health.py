"""Whether the worker is live and ready, from faust's rebalance signals and the hot path's
progress (docs/operating.md, "Endpoints").

Ready: the group assigned this worker its partitions (possibly none) and their state is
recovered, so it processes input. A rebalance makes it unready from the revocation until the
recovery of the new assignment is complete. Live: the event loop answers (this runs on it) and
no batch has been in flight longer than the liveness timeout (a stuck transaction, a broker that
never answers): a supervisor that restarts an unlive worker loses nothing (exactly-once).
"""

from __future__ import annotations

import time
from typing import Any


class Health:
    def __init__(self, liveness_timeout_s: float) -> None:
        self.liveness_timeout_s = liveness_timeout_s
        self.phase = "starting"  # starting | rebalancing | restoring | ready | stopping
        self.generation: int | None = None
        self.assignments = 0
        self._batch_since: float | None = None  # monotonic start of the batch in flight
        self._app: Any = None

    def attach(self, app: Any) -> None:
        """Follow the app's rebalances (faust signals)."""
        self._app = app

        @app.on_partitions_revoked.connect
        async def revoked(sender: Any, revoked: Any, **_: Any) -> None:  # noqa: ARG001
            self.phase = "rebalancing"

        @app.on_partitions_assigned.connect
        async def assigned(sender: Any, assigned: Any, **_: Any) -> None:  # noqa: ARG001
            self.assignments += 1
            self.phase = "restoring"

        @app.on_rebalance_complete.connect
        async def complete(sender: Any, **_: Any) -> None:  # noqa: ARG001
            self.generation = app.consumer_generation_id
            self.phase = "ready"

    # the hot path (Processor): one call at each end of a batch
    def batch_started(self) -> None:
        self._batch_since = time.monotonic()

    def batch_done(self) -> None:
        self._batch_since = None

    def readiness(self) -> tuple[bool, str]:
        app = self._app
        if app is not None and app.should_stop:
            return False, "stopping"
        if self.phase == "starting":
            return False, "waiting for the group to assign partitions"
        if self.phase == "rebalancing":
            return False, "rebalancing: partitions revoked, waiting for the new assignment"
        if self.phase == "restoring":
            return False, "restoring the assigned partitions' state"
        if app is not None and (app.rebalancing or app.consumer_generation_id != self.generation):
            return False, "rebalancing"
        return True, "processing"

    def liveness(self) -> tuple[bool, str]:
        since = self._batch_since
        if since is not None:
            stuck = time.monotonic() - since
            if stuck > self.liveness_timeout_s:
                return False, (f"a batch has been in flight for {stuck:.0f}s "
                               f"(TRANSCRIPT_LIVENESS_TIMEOUT_S={self.liveness_timeout_s:g})")
        return True, "the event loop answers and batches complete"
