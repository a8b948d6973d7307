"""The journal writer's row encoder: timestamps as the Arrow kernels computed them before."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from lakehouse.journal_schema import TIMESTAMP
from lakehouse.journal_writer import _timestamps


def _by_kernels(seconds: list[float | None]) -> pa.Array:
    micros = pc.multiply(pa.array(seconds, pa.float64()), 1_000_000.0)
    return pc.cast(micros, pa.int64(), safe=False).cast(TIMESTAMP)


@settings(deadline=None)
@given(st.lists(st.none() | st.floats(min_value=0, max_value=4_102_444_800, allow_nan=False)))
def test_timestamps_are_the_microseconds_the_kernels_truncated_to(seconds: list[float | None]) -> None:
    assert _timestamps(seconds).equals(_by_kernels(seconds))


def test_a_group_timestamp_keeps_its_microseconds() -> None:
    assert _timestamps([1_764_000_000.123456, None]).to_pylist()[1] is None
    assert _timestamps([1_764_000_000.5]).cast(pa.int64()).to_pylist() == [1_764_000_000_500_000]
