"""A journal's figures: histogram buckets as Prometheus counts them, commits and their latency."""

from __future__ import annotations

import pytest

from broker.messaging.journal_figures import Histogram, JournalFigures


@pytest.mark.parametrize(("observed", "expected"), [
    ([], [(1.0, 0), (5.0, 0), (float("inf"), 0)]),
    ([1.0], [(1.0, 1), (5.0, 1), (float("inf"), 1)]),          # le: a bound includes itself
    ([0.5, 1.5, 5.0, 7.0], [(1.0, 1), (5.0, 3), (float("inf"), 4)]),
])
def test_histogram_buckets_are_cumulative_by_upper_bound(observed: list[float],
                                                          expected: list[tuple[float, int]]
                                                          ) -> None:
    histogram = Histogram((1.0, 5.0))
    for value in observed:
        histogram.observe(value)
    assert histogram.cumulative() == expected
    assert histogram.count == len(observed) and histogram.sum == sum(observed)


def test_a_commit_records_its_latency_rows_and_bytes() -> None:
    figures = JournalFigures()
    figures.handed_off(rows=40, size=4096, now=100.0)
    assert figures.in_flight_seconds(100.25) == 0.25
    figures.committed(now=100.5, succeeded=True)
    assert figures.in_flight_seconds(101.0) == 0.0
    assert (figures.commit_seconds.count, figures.commit_seconds.sum) == (1, 0.5)
    assert (figures.group_rows.count, figures.group_rows.sum) == (1, 40)
    assert figures.written_bytes == 4096 and figures.failed_commits == 0


def test_a_failed_commit_is_counted_and_not_measured() -> None:
    figures = JournalFigures()
    figures.handed_off(rows=3, size=10, now=1.0)
    figures.committed(now=2.0, succeeded=False)
    assert figures.failed_commits == 1
    assert figures.commit_seconds.count == 0 and figures.group_rows.count == 0
    assert figures.in_flight_since is None
