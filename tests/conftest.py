"""Fixtures for the whole suite."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

# The default configuration's WebSocket port (5673) would be bound by every broker the
# tests start, in this process or as a child: let each take a free number instead.
# A test that needs the port sets deltamq.ws_port itself (-D wins over the environment).
os.environ.setdefault("DELTAMQ_WS_PORT", "0")


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
