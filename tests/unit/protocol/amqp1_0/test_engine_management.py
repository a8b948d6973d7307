"""The ``$management`` node in memory: the AMQP 1.0 engine over a real model and the broker's host.

A model tree with a password-file provider (``guest`` its administrator,
``alice`` a user of virtual host ``default``), a memory node, and the
broker's own :class:`~broker.server.BrokerHost`; the engine is driven frame
by frame (:class:`Client10`) while the event loop runs the requests.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from broker.model.system_config import SystemConfig, load_system_config
from broker.protocol.amqp1_0.definitions import (AmqpValue, ApplicationProperties, Attach, Data, Disposition,
                                                 Open, Properties, SaslInit, Source, Target, Transfer)
from broker.protocol.amqp1_0.framing import AMQP_HEADER
from broker.protocol.amqp1_0.sections import MessageSections, encode_sections
from broker.server import BrokerHost
from tests.waiting import wait_until_async

from .engine_client import Client10

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

QUEUE = "org.apache.qpid.Queue"
REQUESTS, REPLIES = 0, 1


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def system(tmp_path: Path) -> Iterator[SystemConfig]:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "name": "mgmt",
        "authenticationproviders": [{"name": "passwordFile", "type": "PasswordFile"}],
        "ports": [{"name": "amqp", "port": 0, "authenticationProvider": "passwordFile"}],
        "virtualhostnodes": [{"name": "default", "type": "memory"}]}))
    system = load_system_config(str(config), {"deltamq.data_dir": str(tmp_path / "data")})
    provider = system.broker.child("AuthenticationProvider", "passwordFile")
    assert provider is not None
    provider.create_child("User", {"name": "alice", "password": "pw", "virtualHosts": ["default"]})
    yield system
    system.close()


class Manager:
    """A client with a request link to ``$management`` and a reply link reading ``reply_to``."""

    def __init__(self, system: SystemConfig, *, user: str = "guest", password: str = "guest",
                 hostname: str = "default", reply_to: str = "replies") -> None:
        port = system.broker.child("Port", "amqp")
        self.client = Client10(BrokerHost(system.broker, port, SimpleNamespace(reason="")))
        self.client.sasl(SaslInit(mechanism="PLAIN", initial_response=f"\0{user}\0{password}".encode()))
        self.client.raw(AMQP_HEADER)
        self.client.send(Open(container_id="manager", hostname=hostname))
        self.client.expect(Open)
        self.client.begin()
        self.client.attach_sender("$management", handle=REQUESTS, name="requests")
        self.client.send(Attach(name="replies", handle=REPLIES, role=True, snd_settle_mode=2,
                                source=Source(address="$management"), target=Target(address=reply_to)))
        self.client.credit(REPLIES, 100)
        self.delivery = 0
        self.client.take()

    async def request(self, operation: str, body: Any = None, *, reply_to: str | None = "replies",
                      **properties: Any) -> tuple[dict[str, Any], Any, Properties]:
        """Send one request; (application properties, body, properties) of its response."""
        message_id = f"m{self.delivery}"
        payload = encode_sections([Properties(message_id=message_id, reply_to=reply_to),
                                   ApplicationProperties(value={"operation": operation, **properties}),
                                   AmqpValue(value=body)])
        self.client.transfer(REQUESTS, self.delivery, payload)
        self.delivery += 1
        if reply_to != "replies":
            return {}, None, Properties()
        response = await self.response()
        assert response.properties is not None and response.properties.correlation_id == message_id
        return response.application_properties or {}, response.body(), response.properties

    async def response(self) -> MessageSections:
        def transfer() -> Any:
            self.client.raw(b"")
            for index, (_channel, value, payload) in enumerate(self.client.received):
                if isinstance(value, Transfer) and value.handle == REPLIES:
                    del self.client.received[index]
                    return MessageSections(payload)
            return None
        found: MessageSections = await wait_until_async(transfer, what="a management response")
        return found


async def test_queue_lifecycle_create_read_query_update_invoke_delete(system: SystemConfig) -> None:
    manager = Manager(system)
    status, body, _ = await manager.request("CREATE", {"name": "orders", "durable": False}, type=QUEUE)
    assert status["statusCode"] == 201
    assert (body["name"], body["type"], body["qpid-type"], body["object-path"]) == \
        ("orders", "org.apache.qpid.StandardQueue", "standard", "orders")
    vhost = system.broker.find_virtual_host("default")
    assert "orders" in vhost.namespace.queues
    identity = body["identity"]

    status, body, _ = await manager.request("READ", type=QUEUE, name="orders")
    assert status["statusCode"] == 200 and body["identity"] == identity and body["queueDepthMessages"] == 0
    status, body, _ = await manager.request("READ", type=QUEUE, identity=identity)
    assert body["name"] == "orders"
    status, body, _ = await manager.request("READ", type=QUEUE, index="object-path", key="orders")
    assert body["identity"] == identity

    status, body, _ = await manager.request("QUERY", {"attributeNames": ["name", "durable"]},
                                            type="org.amqp.management", name="self", entityType=QUEUE)
    assert status["statusCode"] == 200
    assert body["attributeNames"] == ["name", "durable"] and ["orders", False] in body["results"]

    status, body, _ = await manager.request("UPDATE", {"description": "kept for a day"}, type=QUEUE,
                                            name="orders")
    assert status["statusCode"] == 200 and body["description"] == "kept for a day"

    # a READ answer sent back whole changes nothing it holds
    _, shown, _ = await manager.request("READ", type=QUEUE, name="orders")
    status, body, _ = await manager.request("UPDATE", shown, type=QUEUE, name="orders")
    assert status["statusCode"] == 200, status

    manager.client.attach_sender("orders", handle=2, name="publisher")
    manager.client.transfer(2, manager.delivery, encode_sections([Data(value=b"one")]), settled=True)
    manager.client.transfer(2, manager.delivery + 1, encode_sections([Data(value=b"two")]), settled=True)
    manager.delivery += 2
    assert vhost.namespace.queues["orders"].message_count == 2
    status, body, _ = await manager.request("clearQueue", type=QUEUE, name="orders")
    assert (status["statusCode"], body) == (200, 2)

    status, body, _ = await manager.request("DELETE", type=QUEUE, name="orders")
    assert status["statusCode"] == 204
    assert "orders" not in vhost.namespace.queues


async def test_errors_have_their_status(system: SystemConfig) -> None:
    manager = Manager(system)
    status, body, _ = await manager.request("READ", type=QUEUE, name="nowhere")
    assert status["statusCode"] == 404 and "nowhere" in status["statusDescription"]
    status, _, _ = await manager.request("READ", type="org.apache.qpid.Nothing", name="x")
    assert status["statusCode"] == 404
    status, _, _ = await manager.request("CREATE", "not a map", type=QUEUE)
    assert status["statusCode"] == 400
    status, _, _ = await manager.request("CREATE", {"name": "q", "arguments": "not a map"}, type=QUEUE)
    assert status["statusCode"] == 400
    status, _, _ = await manager.request("READ", type=QUEUE)
    assert status["statusCode"] == 400                              # no name, identity or key
    status, _, _ = await manager.request("REBOOT", type=QUEUE, name="x")
    assert status["statusCode"] == 404                             # the queue is looked up first
    await manager.request("CREATE", {"name": "twice"}, type=QUEUE)
    status, _, _ = await manager.request("CREATE", {"name": "twice"}, type=QUEUE)
    assert status["statusCode"] == 409
    status, _, _ = await manager.request("REBOOT", type=QUEUE, name="twice")
    assert status["statusCode"] == 501
    status, _, _ = await manager.request("FROB", type="org.amqp.management", name="self")
    assert status["statusCode"] == 501


async def test_a_user_without_the_right_gets_403(system: SystemConfig) -> None:
    manager = Manager(system, user="alice", password="pw")
    status, _, _ = await manager.request("UPDATE", {"description": "mine"}, type="org.apache.qpid.VirtualHost",
                                         name="default")
    assert status["statusCode"] == 403 and "alice" in status["statusDescription"]
    # inside her virtual host she manages queues
    status, _, _ = await manager.request("CREATE", {"name": "hers"}, type=QUEUE)
    assert status["statusCode"] == 201


async def test_node_operations_describe_types_attributes_and_operations(system: SystemConfig) -> None:
    manager = Manager(system)
    status, types, _ = await manager.request("GET-TYPES", type="org.amqp.management", name="self")
    assert status["statusCode"] == 200
    assert types[QUEUE] == [] and types["org.apache.qpid.LastValueQueue"] == [QUEUE]
    assert "org.apache.qpid.DirectExchange" in types and "org.amqp.management" in types
    _, attributes, _ = await manager.request("GET-ATTRIBUTES", type="org.amqp.management", entityType=QUEUE)
    assert "name" in attributes[QUEUE] and "queueDepthMessages" in attributes[QUEUE]
    _, operations, _ = await manager.request("GET-OPERATIONS", type="org.amqp.management", entityType=QUEUE)
    assert {"CREATE", "READ", "UPDATE", "DELETE", "clearQueue"} <= set(operations[QUEUE])
    assert "destination" in operations[QUEUE]["moveMessages"]
    _, nodes, _ = await manager.request("GET-MGMT-NODES", type="org.amqp.management")
    assert nodes == []


async def test_the_request_is_accepted_and_a_queue_can_take_the_answer(system: SystemConfig) -> None:
    manager = Manager(system)
    await manager.request("CREATE", {"name": "my-replies"}, type=QUEUE)
    manager.client.take()
    await manager.request("CREATE", {"name": "made-for-me"}, type=QUEUE, reply_to="my-replies")
    vhost = system.broker.find_virtual_host("default")
    queue = vhost.namespace.queues["my-replies"]
    await wait_until_async(lambda: queue.message_count == 1, what="the answer in my-replies")
    accepted = [v for _c, v, _p in manager.client.received if isinstance(v, Disposition)]
    assert accepted and accepted[0].settled and accepted[0].first <= 1
    manager.client.attach_receiver("my-replies", handle=3, name="reader")
    manager.client.credit(3, 1)
    answer = next(MessageSections(p) for _c, v, p in manager.client.take()
                  if isinstance(v, Transfer) and v.handle == 3)
    assert answer.application_properties["statusCode"] == 201
    assert answer.body()["name"] == "made-for-me"


async def test_the_broker_node_manages_every_virtual_host(system: SystemConfig) -> None:
    manager = Manager(system, hostname="$management")
    status, body, _ = await manager.request("QUERY", {"attributeNames": ["name"]}, type="org.amqp.management",
                                            entityType="org.apache.qpid.VirtualHostNode")
    assert status["statusCode"] == 200 and body["results"] == [["default"]]
    status, body, _ = await manager.request("CREATE", {"object-path": "default/default/deep"}, type=QUEUE)
    assert status["statusCode"] == 201 and body["object-path"] == "default/default/deep"
    status, body, _ = await manager.request("READ", type=QUEUE, name="default/default/deep")
    assert body["name"] == "deep"
    status, _, _ = await manager.request("READ", type=QUEUE, name="deep")
    assert status["statusCode"] == 404


async def test_answers_wait_for_the_reply_links_credit(system: SystemConfig) -> None:
    manager = Manager(system)
    manager.client.credit(REPLIES, 0)                       # the credit given at attach taken back
    payload = encode_sections([Properties(message_id="late", reply_to="replies"),
                               ApplicationProperties(value={"operation": "GET-MGMT-NODES",
                                                            "type": "org.amqp.management"})])
    manager.client.transfer(REQUESTS, 0, payload)
    reply_link = next(session.links[REPLIES] for session in manager.client.server.sessions.values())
    await wait_until_async(lambda: len(reply_link.pending) == 1, what="the answer waiting for credit")
    manager.client.raw(b"")
    assert not [v for _c, v, _p in manager.client.received if isinstance(v, Transfer)]
    manager.client.credit(REPLIES, 5)
    response = await manager.response()
    assert response.properties is not None and response.properties.correlation_id == "late"
    assert response.application_properties == {"statusCode": 200} and response.body() == []


async def test_query_pages_filters_by_kind_and_read_shows_actuals(system: SystemConfig) -> None:
    manager = Manager(system)
    for name in ("q-a", "q-b", "q-c"):
        await manager.request("CREATE", {"name": name, "durable": False}, type=QUEUE)
    await manager.request("CREATE", {"name": "q-lvq", "durable": False,
                                     "arguments": {"x-last-value-key": "k"}}, type=QUEUE)
    query = {"attributeNames": ["name"]}
    node = {"type": "org.amqp.management", "entityType": QUEUE}
    _, all_queues, _ = await manager.request("QUERY", query, **node)
    assert all_queues["results"] == [["q-a"], ["q-b"], ["q-c"], ["q-lvq"]]     # sorted by name
    _, page, _ = await manager.request("QUERY", query, offset=1, count=2, **node)
    assert page["results"] == [["q-b"], ["q-c"]]
    _, tail, _ = await manager.request("QUERY", query, offset=-1, **node)
    assert tail["results"] == [["q-lvq"]]
    _, lvq, _ = await manager.request("QUERY", query, type="org.amqp.management",
                                      entityType="org.apache.qpid.LastValueQueue")
    assert lvq["results"] == [["q-lvq"]]
    _, everything, _ = await manager.request("QUERY", {}, type="org.amqp.management")
    names = everything["attributeNames"]
    assert names[:4] == ["identity", "type", "qpid-type", "object-path"]
    types = {row[names.index("type")] for row in everything["results"]}
    assert {"org.apache.qpid.VirtualHost", "org.apache.qpid.DirectExchange",
            "org.apache.qpid.StandardQueue", "org.apache.qpid.LastValueQueue"} <= types
    status, _, _ = await manager.request("QUERY", {"attributeNames": "name"}, **node)
    assert status["statusCode"] == 400

    await manager.request("UPDATE", {"description": "described"}, type=QUEUE, name="q-a")
    _, effective, _ = await manager.request("READ", type=QUEUE, name="q-a")
    _, actual, _ = await manager.request("READ", {"actuals": True}, type=QUEUE, name="q-a")
    assert "queueDepthMessages" in effective and "queueDepthMessages" not in actual
    assert actual["description"] == effective["description"] == "described" and actual["name"] == "q-a"

    status, _, _ = await manager.request("READ", type=QUEUE, identity="00000000-0000-0000-0000-000000000000")
    assert status["statusCode"] == 404
    status, body, _ = await manager.request("CREATE", {"name": "a/b"}, type=QUEUE)
    assert status["statusCode"] == 201 and body["object-path"] == "a\\/b"
    status, body, _ = await manager.request("READ", type=QUEUE, name="a\\/b")
    assert body["name"] == "a/b"


async def test_a_request_without_reply_to_is_performed_and_json_data_is_a_body(system: SystemConfig) -> None:
    manager = Manager(system)
    await manager.request("CREATE", {"name": "unanswered"}, type=QUEUE, reply_to=None)
    vhost = system.broker.find_virtual_host("default")
    await wait_until_async(lambda: "unanswered" in vhost.namespace.queues, what="the queue created")

    def send(content_type: str, data: bytes) -> None:
        manager.client.transfer(REQUESTS, manager.delivery, encode_sections([
            Properties(message_id=f"json{manager.delivery}", reply_to="replies", content_type=content_type),
            ApplicationProperties(value={"operation": "UPDATE", "type": QUEUE, "name": "unanswered"}),
            Data(value=data)]))
        manager.delivery += 1

    send("application/json", json.dumps({"description": "from JSON"}).encode())
    answer = await manager.response()
    assert answer.application_properties["statusCode"] == 200
    assert answer.body()["description"] == "from JSON"
    manager.client.take()
    send("application/json", b"{not json")
    rejected = [v for _c, v, _p in manager.client.take() if isinstance(v, Disposition)]
    assert rejected and rejected[0].state.error.condition == "amqp:decode-error"
