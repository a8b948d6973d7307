"""An unmodified rhea client in rcv-settle-mode second (exactly once) against DeltaMQ, both ways.

As the receiver the broker answers each delivery unsettled and keeps its tag in the link's
unsettled map until the sender settles; as the sender it settles a receiver's unsettled outcome
for it.  ``make test`` fetches rhea (tools/ensure-amqp1-clients); without it this skips.
"""

from __future__ import annotations

import uuid
from typing import Iterator

import httpx
import pytest

from tests.integration.conftest import DeltaMQProcess

from .drivers import rhea_fetched, run_rhea
from .test_drivers_deltamq import COUNT, _ok, durable_queue

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300),
              pytest.mark.skipif(not rhea_fetched(), reason="rhea is not fetched (tools/ensure-amqp1-clients)")]


@pytest.fixture(scope="module")
def broker() -> Iterator[DeltaMQProcess]:
    with DeltaMQProcess() as proc:
        yield proc


def test_rhea_exactly_once_both_ways(broker: DeltaMQProcess) -> None:
    container_id, link_name = f"rhea-eo-{uuid.uuid4().hex[:8]}", "rhea-exactly-once"
    result = _ok(run_rhea(broker.amqp_port, "exactly-once", durable_queue(broker, "rhea-eo"), "--count", str(COUNT),
                          "--durable", "--container-id", container_id, "--subscription", link_name))
    assert (result["sender_rcv_settle_mode"], result["receiver_rcv_settle_mode"]) == (1, 1)
    assert (result["sent"], result["accepted"], result["settled_by_broker_first"]) == (COUNT, COUNT, 0)
    assert (result["received"], result["settled_by_broker"]) == (COUNT, COUNT)
    with httpx.Client(base_url=f"http://127.0.0.1:{broker.http_port}/api/latest/", auth=("guest", "guest"),
                      timeout=20) as api:
        links = api.get("virtualhost/default/default/getLinks").json()
    # the sending link was detached, not closed: kept, every tag settled by rhea
    [link] = [item for item in links if item["remoteContainerId"] == container_id and item["linkName"] == link_name]
    assert (link["role"], link["durable"], link["unsettledCount"]) == ("receiving", "unsettled-state", 0)
