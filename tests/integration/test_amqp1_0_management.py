"""The ``$management`` node with an unmodified python-qpid-proton against `deltamq serve`.

Requests go to ``$management`` with ``operation``, ``type`` and
``name``/``identity`` in the application properties; responses come back on
a receiver attached with source ``$management`` (its target address, or its
name, is the request's reply-to) or in a queue the reply-to names.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from .conftest import DeltaMQProcess

proton = pytest.importorskip("proton")
from proton import Message  # noqa: E402
from proton.reactor import Container, LinkOption  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

if os.environ.get("DELTAMQ_TEST_AMQP_URL") or os.environ.get("DELTAMQ_TEST_START_RABBITMQ"):
    pytest.skip("the management node is DeltaMQ's", allow_module_level=True)

QUEUE = "org.apache.qpid.Queue"


class ReplyAddress(LinkOption):
    """Set the receiver's target address: what requests name as their reply-to."""

    def __init__(self, address: str) -> None:
        self.address = address

    def apply(self, link: Any) -> None:
        link.target.address = self.address


class Management:
    """A request sender and a reply receiver on one proton connection."""

    def __init__(self, port: int, user: str = "guest", password: str = "guest",
                 hostname: str | None = None) -> None:
        url = f"amqp://{user}:{password}@127.0.0.1:{port}"
        kwargs = {"virtual_host": hostname} if hostname else {}
        self.connection = BlockingConnection(url, timeout=20, container=Container(), **kwargs)
        self.reply_to = f"reply-{uuid.uuid4().hex[:8]}"
        self.sender = self.connection.create_sender("$management")
        self.receiver = self.connection.create_receiver("$management", credit=10,
                                                        options=ReplyAddress(self.reply_to))

    def request(self, operation: str, body: Any = None, **properties: Any) -> tuple[dict[str, Any], Any]:
        message_id = uuid.uuid4().hex
        self.sender.send(Message(id=message_id, reply_to=self.reply_to, body=body,
                                 properties={"operation": operation, **properties}))
        response = self.receiver.receive(timeout=20)      # sent settled: nothing to accept
        assert response.correlation_id == message_id
        return dict(response.properties), response.body

    def close(self) -> None:
        self.connection.close()


@pytest.fixture
def management(broker: Any) -> Iterator[Management]:
    client = Management(broker.port)
    yield client
    client.close()


def test_a_queue_created_read_queried_updated_purged_and_deleted(management: Management) -> None:
    name = f"mgmt-{uuid.uuid4().hex[:8]}"
    status, body = management.request("CREATE", {"name": name, "durable": True}, type=QUEUE)
    assert status["statusCode"] == 201, status
    assert body["name"] == name and body["durable"] is True
    identity = body["identity"]

    status, body = management.request("READ", type=QUEUE, identity=identity)
    assert (status["statusCode"], body["name"], body["queueDepthMessages"]) == (200, name, 0)

    status, body = management.request("QUERY", {"attributeNames": ["name", "identity"]},
                                      type="org.amqp.management", name="self", entityType=QUEUE)
    assert status["statusCode"] == 200 and [name, identity] in body["results"]

    status, body = management.request("UPDATE", {"description": "from proton"}, type=QUEUE, name=name)
    assert (status["statusCode"], body["description"]) == (200, "from proton")

    sender = management.connection.create_sender(name)
    for text in ("a", "b", "c"):
        sender.send(Message(body=text))
    status, body = management.request("clearQueue", type=QUEUE, name=name)
    assert (status["statusCode"], body) == (200, 3)

    status, _ = management.request("DELETE", type=QUEUE, name=name)
    assert status["statusCode"] == 204
    status, _ = management.request("READ", type=QUEUE, name=name)
    assert status["statusCode"] == 404


def test_bad_requests_are_400_and_unknown_names_404(management: Management) -> None:
    status, _ = management.request("CREATE", "a string, not a map", type=QUEUE)
    assert status["statusCode"] == 400 and status["statusDescription"]
    status, _ = management.request("DELETE", type=QUEUE, name="no-such-queue")
    assert status["statusCode"] == 404
    status, _ = management.request("GET-TYPES", type="org.amqp.management", name="self")
    assert status["statusCode"] == 200
    assert "org.apache.qpid.SortedQueue" in _


def test_the_answer_goes_to_a_queue_named_by_reply_to(management: Management) -> None:
    replies = f"replies-{uuid.uuid4().hex[:8]}"
    management.request("CREATE", {"name": replies, "durable": False}, type=QUEUE)
    made = f"made-{uuid.uuid4().hex[:8]}"
    management.sender.send(Message(id="by-queue", reply_to=replies, body={"name": made},
                                   properties={"operation": "CREATE", "type": QUEUE}))
    receiver = management.connection.create_receiver(replies, credit=1)
    answer = receiver.receive(timeout=20)
    receiver.accept()
    assert (answer.correlation_id, answer.properties["statusCode"], answer.body["name"]) == \
        ("by-queue", 201, made)


def test_a_user_without_the_right_gets_403(broker: Any, broker_process: DeltaMQProcess) -> None:
    user = f"user-{uuid.uuid4().hex[:8]}"
    http = httpx.Client(base_url=f"http://127.0.0.1:{broker_process.http_port}", auth=("guest", "guest"),
                        timeout=30)
    try:
        created = http.put(f"/api/latest/user/passwordFile/{user}", json={"password": "pw"})
        assert created.status_code == 201, created.text
        client = Management(broker.port, user, "pw")
        try:
            status, _ = client.request("UPDATE", {"description": "not hers"}, type="org.apache.qpid.VirtualHost",
                                       name="default")
            assert status["statusCode"] == 403, status
        finally:
            client.close()
    finally:
        http.delete(f"/api/latest/user/passwordFile/{user}")
        http.close()


def test_the_broker_node_is_reached_with_hostname_management(broker: Any) -> None:
    client = Management(broker.port, hostname="$management")
    try:
        status, body = client.request("QUERY", {"attributeNames": ["name"]}, type="org.amqp.management",
                                      entityType="org.apache.qpid.VirtualHost")
        assert status["statusCode"] == 200 and ["default"] in body["results"]
    finally:
        client.close()
