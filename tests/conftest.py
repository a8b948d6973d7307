"""Fixtures for the whole suite."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _no_configuration_writer_left_behind() -> Iterator[None]:
    """Each test starts without a configuration writer process another test left running.

    The broker's configuration stores share one writer child
    (:func:`lakehouse.config_writer.shared_writer_process`), which lives until
    the last store closes.  A test that builds a broker and drops it without
    closing its stores would otherwise hand the next test a child started
    with its environment (an object-storage test needs its own ``AWS_*``).
    """
    yield
    writer = sys.modules.get("lakehouse.config_writer")
    if writer is not None and writer._sharing:
        for location in list(writer._sharing):
            writer.release_writer_process(location)
