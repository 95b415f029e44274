"""Which departed workers' open transactions a new owner ends (workers.core.fencing)."""

from __future__ import annotations

from workers.core.fencing import departed

G = "t.transcript-owner"


def test_departed_are_the_groups_ids_no_live_member_has():
    a, b, gone = f"{G}-wa", f"{G}-wb", f"{G}-wdead"
    ongoing = [a, b, gone, "other.group-wx", "unrelated"]
    assert departed(ongoing, [a, b], own=a, group=G) == [gone]


def test_never_its_own_nor_a_live_members():
    a, b = f"{G}-wa", f"{G}-wb"
    assert departed([a, b], [b], own=a, group=G) == []


def test_nothing_is_fenced_while_a_member_does_not_name_its_transactional_id():
    a, gone = f"{G}-wa", f"{G}-wdead"
    assert departed([gone], [a, "faust-0.15.3"], own=a, group=G) == []


def test_a_prefix_of_another_group_is_not_this_groups():
    a = f"{G}-wa"
    assert departed([f"{G}x-w1", f"{G}-w1", f"{G}-w1"], [a], own=a, group=G) == [f"{G}-w1"]


def test_the_connectors_transactional_ids_are_not_the_groups():
    """Connectors' ids are `<prefix><app_id>.connector-*` (docs/connectors.md): a dot, not the
    group's dash, follows the app id, so a connector's open transaction is never ended."""
    a = f"{G}-wa"
    assert departed([f"{G}.connector-telegram-1"], [a], own=a, group=G) == []
