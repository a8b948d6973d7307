"""An unmodified rhea client manages queues through DeltaMQ's ``$management`` node.

The driver's ``management`` scenario (rhea_driver.js) uses Broker-J's conventions:
``index: object-path`` and ``key`` name the queue, the answers come on a receiver
attached with source ``$management`` whose target address is the request's reply-to.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.integration.conftest import DeltaMQProcess

from .drivers import rhea_fetched, run_rhea

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def broker() -> Iterator[DeltaMQProcess]:
    with DeltaMQProcess() as proc:
        yield proc


@pytest.mark.skipif(not rhea_fetched(), reason="rhea is not fetched (tools/ensure-amqp1-clients)")
def test_rhea_creates_reads_and_deletes_a_queue(broker: DeltaMQProcess) -> None:
    name = f"rhea-managed-{uuid.uuid4().hex[:8]}"
    out = run_rhea(broker.amqp_port, "management", name)
    assert out.ok, f"exit {out.returncode}: {out.result}\n{out.stderr[-3000:]}"
    result = out.result
    assert (result["create"], result["read"], result["read_name"], result["delete"], result["read_after_delete"]) \
        == (201, 200, name, 204, 404)
    assert result["correlated"] == "create,read,delete,read-again"
