"""The worker's long-lived objects out of the garbage collector's way.

CPython's oldest generation is traversed whole at each of its collections: in a worker that has
started (faust, aiokafka, pydantic, the restore) that is some 150,000 objects and 35 ms, long
enough to put every record that arrives meanwhile past the latency percentiles (measured in
docs/performance.md). `gc.freeze()` moves what is alive into a generation the collector never
visits, so its collections see only what came later.

After each batch (`after_batch`) the collector runs over what is not frozen, which is only
what the batch and the input fetched meanwhile left alive (some ms), and the survivors are frozen
too. Without that, at a million sessions each batch's records lived through enough young
collections to reach the oldest generation, which was then collected every second batch or so,
traversing the head cache, the key and partition caches and the fetched input each time: 19% of
the worker's main thread, measured with py-spy (docs/performance.md). Collecting before the
freeze leaves no cyclic garbage frozen; a frozen object that becomes cyclic garbage later is
freed at the next settle (a new generation of the group: the state restored, a quiet moment).
A frozen dict stays out of the way only while nothing tracks it again: a full collection
untracks a dict whose keys and values the collector cannot see into (strings, numbers, tuples
of them), and the next insertion of a tracked key (a new tuple) tracks it as a young object.
The per-record caches were such dicts, keyed by tuples, and cost every batch a traversal of
their 82,000 entries at a million sessions; they are keyed by strings (transcript_connector's
`partition_for` and `canonical_session_key`), which a dict never tracks.
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


def after_batch() -> None:
    """Collect what is not frozen (the batch's leftovers), then freeze the survivors."""
    gc.collect()
    gc.freeze()
