"""Sets of message ids as ranges (broker.messaging.id_ranges), checked against Python sets."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from broker.messaging.id_ranges import contains, count, expand, id_ranges, merge, overlaps, subtract

id_sets = st.sets(st.integers(min_value=1, max_value=60), max_size=40)


def test_ids_become_merged_sorted_ranges() -> None:
    assert id_ranges([]) == []
    assert id_ranges([7, 8, 9, 10]) == [(7, 10)]
    assert id_ranges([5, 1, 2, 3, 9, 10, 2]) == [(1, 3), (5, 5), (9, 10)]
    assert merge([[4, 6], (1, 2), (3, 3), (9, 9), (5, 8)]) == [(1, 9)]


@given(id_sets)
def test_id_ranges_hold_exactly_the_ids(ids: set[int]) -> None:
    ranges = id_ranges(list(ids))
    assert expand(ranges) == sorted(ids) and count(ranges) == len(ids)
    assert all(a[1] + 1 < b[0] for a, b in zip(ranges, ranges[1:]))      # normal: neither touching nor overlapping


@given(id_sets, id_sets)
def test_set_operations_agree_with_python_sets(one: set[int], other: set[int]) -> None:
    a, b = id_ranges(list(one)), id_ranges(list(other))
    assert expand(subtract(a, b)) == sorted(one - other)
    assert contains(a, b) == (other <= one)
    assert overlaps(a, b) == bool(one & other)
    assert expand(merge([*a, *b])) == sorted(one | other)
