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

Within a batch, what the batch keeps (its outputs, its sessions' state, the next batch's input)
was traversed by a middle-generation collection every 7,000 survivors and, once ten of those
had run, by oldest-generation ones over all of it. `settle` sets the middle generation's
threshold to 100 young collections (70,000 survivors; CPython's is 10), so a batch's survivors
are traversed young once and then at `after_batch`. Time in collections, draining a million
records over a million sessions on 64 partitions: 4.0-5.8 s (mean 4.7) against 5.3-6.5 s
(5.8); 200,000 records over 2,000 sessions: 0.42-0.63 s against 0.61-0.82 s
(docs/performance.md). The young threshold stays CPython's, so no young collection grows; a
middle one took 9-13 ms there, against 1.2 ms.
"""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger("transcript_owner.heap")

YOUNG_COLLECTIONS_PER_MIDDLE = 100  # gc's second threshold (CPython's default: 10)


def settle() -> None:
    """Collect everything, then freeze what survived."""
    began = time.monotonic()
    young, _, old = gc.get_threshold()
    gc.set_threshold(young, YOUNG_COLLECTIONS_PER_MIDDLE, old)
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    log.debug("heap settled: %d objects frozen in %.1f ms", gc.get_freeze_count(),
              (time.monotonic() - began) * 1000)


def after_batch() -> None:
    """Collect what is not frozen (the batch's leftovers), then freeze the survivors."""
    gc.collect()
    gc.freeze()
