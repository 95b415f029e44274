"""Warm-up before a move (workers.core.warmup.hold_back): no partition moves to a member
without a warm standby of it while its last owner is in the group."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from workers.core.warmup import hold_back


def test_a_joining_member_gets_no_cold_partition_but_warms_them_up():
    previous = {"a": {0, 1, 2, 3}, "b": {4, 5, 6, 7}, "c": set()}
    proposed = {"a": {0, 1, 2}, "b": {4, 5, 6}, "c": {3, 7}}
    actives, warming = hold_back(proposed, previous, {"c": set()})
    assert actives == {"a": {0, 1, 2, 3}, "b": {4, 5, 6, 7}, "c": set()}
    assert warming == {"a": set(), "b": set(), "c": {3, 7}}


def test_once_warm_the_move_happens():
    previous = {"a": {0, 1, 2, 3}, "b": {4, 5, 6, 7}, "c": set()}
    proposed = {"a": {0, 1, 2}, "b": {4, 5, 6}, "c": {3, 7}}
    actives, warming = hold_back(proposed, previous, {"c": {3}})
    assert actives == {"a": {0, 1, 2}, "b": {4, 5, 6, 7}, "c": {3}}
    assert warming["c"] == {7}


def test_a_lost_members_partitions_are_not_held():
    """Its last owner is gone: nobody can keep them, so they move, warm or not."""
    previous = {"a": {0, 1, 2, 3}, "gone": {4, 5, 6, 7}}
    proposed = {"a": set(range(8))}
    actives, warming = hold_back(proposed, previous, {})
    assert actives == {"a": set(range(8))} and warming == {"a": set()}


def test_the_first_assignment_moves_nothing_back():
    proposed = {"a": {0, 1, 2, 3}, "b": {4, 5, 6, 7}}
    assert hold_back(proposed, {"a": set(), "b": set()}, {}) == (
        proposed, {"a": set(), "b": set()})


members = st.sampled_from(["a", "b", "c", "d"])


@given(owners=st.dictionaries(st.integers(0, 15), members),
       before=st.dictionaries(st.integers(0, 15), members),
       warm=st.dictionaries(members, st.sets(st.integers(0, 15))),
       present=st.sets(members, min_size=1))
def test_every_partition_keeps_exactly_one_owner_and_moves_only_warm(owners, before, warm,
                                                                     present):
    proposed = {m: {p for p, o in owners.items() if o == m} for m in present}
    orphans = {p for p, o in owners.items() if o not in present}
    for p in orphans:  # faust gives every partition to a present member
        proposed[min(present)].add(p)
    previous = {m: {p for p, o in before.items() if o == m} for m in "abcd"}
    actives, warming = hold_back(proposed, previous, warm)
    everything = set().union(*proposed.values())
    assert sorted(p for ps in actives.values() for p in ps) == sorted(everything)
    for m in present:
        for p in actives[m] - previous[m]:  # a move happened: warm, or nobody present to hold
            last = [o for o in present if p in previous[o]]
            assert p in warm.get(m, set()) or not last
        assert warming[m] <= proposed[m] and not warming[m] & actives[m]
