"""A produce request of the worker's producer holds at most its `max_request_size` of batches.

aiokafka's sender drains one batch of every ready partition led by a node into one request,
however large that makes it. A batch of 20,000 records at a million sessions (entries,
diagnostics, two changelog records each, over 64 partitions of each topic) went to the broker
in one request of about 16 MB, and on its way to the socket the request was copied some five
times (the batches, their bytes in the request, its encoding, the header and size joined to
it, the transport's buffer): the worker's peak RSS was set by that moment, not by its state
(docs/performance.md). Java's producer stops a node's request at `max.request.size`
(`RecordAccumulator.drain`); this does the same for the producers it is installed on. The
partitions held back keep their batches, in order, for the node's next request, which the
sender drains as soon as this one is answered (a node has one request in flight).

The choice is here; `adapter.cap_requests` installs it on aiokafka's drain (the one module that
names aiokafka's private parts).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable


def held_back(batches: Iterable[tuple[Hashable, Hashable, int]], cap: int) -> set[Hashable]:
    """The partitions whose batch would take its node's request past `cap` bytes, from
    (partition, node, bytes) in drain order. A node's first batch always goes: a request
    holds at least one batch (the producer keeps a batch within the request size)."""
    used: dict[Hashable, int] = {}
    held: set[Hashable] = set()
    for tp, node, size in batches:
        total = used.get(node, 0)
        if total and total + size > cap:
            held.add(tp)
        else:
            used[node] = total + size
    return held
