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
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

_installed = False


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


def cap_requests(producer: Any) -> Any:
    """Bound `producer`'s produce requests by its max_request_size; returns it."""
    producer._message_accumulator._request_cap = producer._max_request_size
    _install()
    return producer


def _install() -> None:
    global _installed
    if _installed:
        return
    from aiokafka.producer.message_accumulator import MessageAccumulator

    MessageAccumulator.drain_by_nodes = _capped(MessageAccumulator.drain_by_nodes)
    _installed = True


def _capped(drain: Any) -> Any:
    def drain_by_nodes(self: Any, ignore_nodes: Any, muted_partitions: Any = frozenset()) -> Any:
        cap = getattr(self, "_request_cap", None)
        if cap is not None:
            held = held_back(_ready(self, ignore_nodes, muted_partitions), cap)
            if held:  # the original drain leaves a muted partition's batches where they are
                muted_partitions = frozenset(muted_partitions) | held
        return drain(self, ignore_nodes, muted_partitions)

    return drain_by_nodes


def _ready(acc: Any, ignore_nodes: Any, muted: Any) -> Iterable[tuple[Hashable, Hashable, int]]:
    """(partition, leader, bytes) of each first batch the drain would take, in its order."""
    for tp, queue in acc._batches.items():
        if not queue or tp in muted:
            continue
        leader = acc._cluster.leader_for_partition(tp)
        if leader is None or leader == -1 or (ignore_nodes and leader in ignore_nodes):
            continue
        batch = queue[0]
        if batch.remaining_linger():
            continue
        yield tp, leader, batch._builder.size()
