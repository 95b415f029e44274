"""Warm-up before a move (KIP-441's idea on faust's assignor): no partition moves cold.

faust's assignor (sticky, with standbys: adapter.warm_assignor) proposes each member's
active input partitions. A partition it moves from a member still in the group to one that
reports no warm standby of it (its standby's lag within WARM_LAG) stays where it is for this
generation; the member it was meant for keeps a standby of it instead, warms it up, and once
it has caught up asks for a new assignment (a probing rebalance), in which faust moves it and
the new owner restores only the tail. A partition whose owner left (a lost node) is not held
back: there is no one to hold it, and faust gives it to a standby when one can take it.
"""

from __future__ import annotations

from collections.abc import Mapping

WARM_LAG = 10_000  # changelog records: a standby this close is warm (about 50 ms to apply)


def hold_back(proposed: Mapping[str, set[int]], previous: Mapping[str, set[int]],
              warm: Mapping[str, set[int]]) -> tuple[dict[str, set[int]], dict[str, set[int]]]:
    """(actives, warming) per member: `proposed` actives less the cold moves, each given back
    to its previous owner; `warming[m]`: the partitions m was meant to take and must warm up
    first. `previous`: each member's actives before this rebalance (as it reported them);
    `warm`: each member's warm standbys (as it reported them)."""
    actives = {m: set(ps) for m, ps in proposed.items()}
    warming: dict[str, set[int]] = {m: set() for m in proposed}
    last_owner: dict[int, str] = {}
    for m in sorted(previous):
        if m in proposed:
            for p in previous[m]:
                last_owner.setdefault(p, m)
    for m in sorted(proposed):
        for p in sorted(proposed[m] - previous.get(m, set())):
            owner = last_owner.get(p)
            if owner is None or owner == m or p in warm.get(m, set()):
                continue
            actives[m].discard(p)
            actives[owner].add(p)
            warming[m].add(p)
    return actives, warming
