"""The worker's long-lived objects out of the garbage collector's way.

CPython's oldest generation is traversed whole at each of its collections: in a worker that has
started (faust, aiokafka, pydantic, the restore) that is some 150,000 objects and 35 ms, long
enough to put every record that arrives meanwhile past the latency percentiles (measured in
docs/performance.md). `gc.freeze()` moves what is alive into a generation the collector never
visits, so its collections see only what came later.

A frozen object that becomes cyclic garbage is never freed, so each new generation of the group
(the state restored, a quiet moment) first unfreezes and collects everything, then freezes the
survivors: what leaked between two rebalances is freed at the next, and it never exceeds
what the last settle froze.
"""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger("transcript_owner.heap")


def settle() -> None:
    """Collect everything, then freeze what survived."""
    began = time.monotonic()
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    log.debug("heap settled: %d objects frozen in %.1f ms", gc.get_freeze_count(),
              (time.monotonic() - began) * 1000)
