"""Whose open transaction a partition's new owner ends (workers.stream.fencing).

A transaction open under a transactional id of this group (`<group>-<worker>`) that is neither
this worker's nor any live member's belongs to a worker that left the group without ending it
(killed, or frozen past its session timeout): it owns no partition any more, and its
transaction only holds up the partitions' new owners (their changelog and committed offsets are
final only once it ends). Nobody else would end it before the transaction timeout, so a new
owner does, as that worker's own restart would (InitProducerId). A live member's transaction
is never ended: it ends by itself within a batch. While any member's name is not a
transactional id of this group (a worker of an older version), nothing is fenced: its name
says nothing of its transaction.
"""

from __future__ import annotations

from collections.abc import Iterable


def departed(ongoing: Iterable[str], members: Iterable[str], own: str, group: str
             ) -> list[str]:
    """The transactional ids whose open transaction this worker ends: of `ongoing` (the ids
    with a transaction open), those of this group that are neither `own` nor a live member's
    (`members`: the names of the group's members, in a stable generation)."""
    live = set(members)
    prefix = f"{group}-"
    if any(not name.startswith(prefix) for name in live):
        return []
    return sorted(tid for tid in set(ongoing)
                  if tid.startswith(prefix) and tid != own and tid not in live)
