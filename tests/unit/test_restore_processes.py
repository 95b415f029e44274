"""When a restore is split over processes, and how its partitions are grouped."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workers.stream import restore_processes
from workers.stream.restore_processes import SPLIT_RECORDS, SplitFailed, groups, worth_splitting


def test_only_a_large_restore_of_two_or_more_partitions_is_split():
    half = SPLIT_RECORDS // 2
    assert worth_splitting({0: (0, half), 1: (10, 10 + half)}, 2)
    assert not worth_splitting({0: (0, half), 1: (10, 9 + half)}, 2)  # one offset short
    assert not worth_splitting({0: (0, 10 * SPLIT_RECORDS)}, 2)  # one partition: one process
    assert not worth_splitting({0: (0, half), 1: (0, half)}, 1)  # TRANSCRIPT_RESTORE_PROCESSES=1


def test_groups_balance_the_offsets_due_largest_first():
    due = {0: (0, 100), 1: (0, 60), 2: (0, 50), 3: (0, 40), 4: (500, 510)}
    assert groups(due, 2) == [[0, 3], [1, 2, 4]]  # 100+40 and 60+50+10: each to the lighter
    assert groups(due, 9) == [[0], [1], [2], [3], [4]]  # never an empty group
    assert groups(due, 1) == [[0, 1, 2, 3, 4]]


@given(st.dictionaries(st.integers(0, 63), st.tuples(st.integers(0, 10**6),
                                                    st.integers(1, 10**6)), min_size=1),
       st.integers(1, 8))
def test_every_due_partition_is_in_exactly_one_group(spans, processes):
    due = {p: (first, first + n) for p, (first, n) in spans.items()}
    got = groups(due, processes)
    assert sorted(p for group in got for p in group) == sorted(due)
    assert 1 <= len(got) <= min(processes, len(due))
    assert all(got)  # no empty group: a child with nothing to do


class _NoSpawn:
    """A pool whose second child cannot be spawned (a process limit): submit raises."""

    def __init__(self) -> None:
        self.submitted = 0
        self.shut = False

    def submit(self, *args: object) -> None:
        self.submitted += 1
        if self.submitted == 2:
            raise OSError(11, "Resource temporarily unavailable")

    def shutdown(self, cancel_futures: bool = False) -> None:
        self.shut = cancel_futures


def test_a_child_that_cannot_be_spawned_leaves_the_restore_to_the_worker(monkeypatch):
    pool = _NoSpawn()
    monkeypatch.setattr(restore_processes.child_processes, "pool", lambda n: pool)
    with pytest.raises(SplitFailed, match="the restore's processes cannot start: .*Resource "
                                          "temporarily unavailable"):
        restore_processes.restore(None, None, {0: (0, 10), 1: (0, 10)}, 2)  # type: ignore[arg-type]
    assert pool.submitted == 2 and pool.shut  # the one that started is let finish
