"""Sets of message ids as ranges: sorted, merged ``(first, last)`` pairs, both ends included.

Lease consumers (:mod:`broker.messaging.leases`) are granted and settle
messages by the hundred thousand; their ids travel, are held and are
journaled as ranges, so that the work per call follows the number of
ranges, not of messages.  Every function here takes and returns *normal*
ranges: sorted by ``first``, not overlapping, not adjacent (``[1, 3]`` and
``[4, 5]`` are one range, ``[1, 5]``).
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Iterable

__all__ = ["Range", "id_ranges", "merge", "expand", "count", "contains", "overlaps", "subtract"]

#: ``(first, last)``, both included
Range = tuple[int, int]


def id_ranges(ids: Iterable[int]) -> list[Range]:
    """``ids`` (any order, repeats allowed) as normal ranges."""
    ordered = ids if isinstance(ids, list) else list(ids)
    if not ordered:
        return []
    first = ordered[0]
    if ordered == list(range(first, first + len(ordered))):   # the common case, at C speed
        return [(first, first + len(ordered) - 1)]
    ranges: list[Range] = []
    start = previous = None
    for message_id in sorted(set(ordered)):
        if previous is not None and message_id == previous + 1:
            previous = message_id
            continue
        if start is not None and previous is not None:
            ranges.append((start, previous))
        start = previous = message_id
    if start is not None and previous is not None:
        ranges.append((start, previous))
    return ranges


def merge(ranges: Iterable[tuple[int, int] | list[int]]) -> list[Range]:
    """Any ``(first, last)`` pairs (first <= last) as normal ranges."""
    merged: list[Range] = []
    for first, last in sorted((int(a), int(b)) for a, b in ranges):
        if merged and first <= merged[-1][1] + 1:
            if last > merged[-1][1]:
                merged[-1] = (merged[-1][0], last)
        else:
            merged.append((first, last))
    return merged


def expand(ranges: Iterable[Range]) -> list[int]:
    """Every id of ``ranges``, ascending."""
    ids: list[int] = []
    for first, last in ranges:
        ids.extend(range(first, last + 1))
    return ids


def count(ranges: Iterable[Range]) -> int:
    return sum(last - first + 1 for first, last in ranges)


def _around(ranges: list[Range], firsts: list[int], message_id: int) -> Range | None:
    """The range of ``ranges`` holding ``message_id`` (``firsts``: their first ids), or None."""
    at = bisect_right(firsts, message_id) - 1
    if at >= 0 and ranges[at][1] >= message_id:
        return ranges[at]
    return None


def contains(outer: list[Range], inner: list[Range]) -> bool:
    """Whether every id of ``inner`` is in ``outer``."""
    firsts = [first for first, _ in outer]
    for first, last in inner:
        around = _around(outer, firsts, first)
        if around is None or around[1] < last:
            return False
    return True


def overlaps(one: list[Range], other: list[Range]) -> bool:
    """Whether ``one`` and ``other`` share an id."""
    i = j = 0
    while i < len(one) and j < len(other):
        (a, b), (c, d) = one[i], other[j]
        if a <= d and c <= b:
            return True
        if b < d:
            i += 1
        else:
            j += 1
    return False


def subtract(ranges: list[Range], removed: list[Range]) -> list[Range]:
    """The ids of ``ranges`` not in ``removed``."""
    result: list[Range] = []
    j = 0
    for first, last in ranges:
        while j < len(removed) and removed[j][1] < first:
            j += 1
        k = j
        start = first
        while k < len(removed) and removed[k][0] <= last:
            if removed[k][0] > start:
                result.append((start, removed[k][0] - 1))
            start = max(start, removed[k][1] + 1)
            k += 1
        if start <= last:
            result.append((start, last))
    return result
