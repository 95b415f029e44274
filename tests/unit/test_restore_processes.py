"""When a restore is split over processes, and how its partitions are grouped."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from workers.stream.restore_processes import SPLIT_RECORDS, groups, worth_splitting


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
    assert 1 <= len(got) <= min(processes, len(due)) and all(got)
