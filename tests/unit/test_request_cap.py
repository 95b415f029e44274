"""Which partitions a produce request leaves for the node's next one (workers.stream.request_cap):
a node's request stays within the bound, or holds a single batch; nothing is dropped."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from workers.stream.request_cap import held_back


def test_a_request_takes_batches_in_drain_order_up_to_its_bound():
    batches = [("a", 1, 3), ("b", 1, 2), ("c", 2, 5), ("d", 1, 1), ("e", 2, 9)]
    assert held_back(batches, 5) == {"d", "e"}


def test_a_nodes_first_batch_always_goes_even_above_the_bound():
    assert held_back([("a", 1, 9), ("b", 1, 1), ("c", 2, 7)], 5) == {"b"}


def test_nothing_is_held_within_the_bound():
    assert held_back([("a", 1, 1), ("b", 2, 1), ("c", 1, 1)], 4) == set()


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 100)), max_size=60),
       st.integers(1, 300))
def test_each_node_stays_within_the_bound_or_sends_one_batch(drain, cap):
    batches = [(i, node, size) for i, (node, size) in enumerate(drain)]
    held = held_back(batches, cap)
    assert held <= {tp for tp, _, _ in batches}
    for node in {node for _, node, _ in batches}:
        mine = [(tp, size) for tp, n, size in batches if n == node]
        kept = [size for tp, size in mine if tp not in held]
        assert kept, "a node with a ready batch sends one"
        assert kept[0] == mine[0][1], "its first batch goes first"
        assert sum(kept) <= cap or len(kept) == 1
