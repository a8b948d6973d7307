"""In-process checks of the path and attribute mapping, rates, and queue browsing.

No broker process: a model tree from a small configuration (memory node,
anonymous provider) with the real messaging namespace, and the REST API
called directly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import pytest

from broker.messaging import Message, MessageProperties, Namespace
from broker.model import load_system_config, registry
from broker.model.attributes import derived
from broker.model.configured_object import ConfiguredObject
from broker.model.messaging_objects import Queue as ModelQueue
from broker.model.runtime import CLOSED_BY_MANAGEMENT
from broker.security.principal import Principal
from mgmt import openapi, paths
from mgmt.errors import ApiError
from mgmt.rates import RateBook
from mgmt.rest import RestApi

pytestmark = pytest.mark.timeout(30)

ANONYMOUS = Principal("anonymous", "anon", anonymous=True)


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    config = {"name": "unit", "authenticationproviders": [{"name": "anon", "type": "Anonymous"}],
              "ports": [{"name": "amqp", "port": 0, "authenticationProvider": "anon"}],
              "virtualhostnodes": [{"name": "node", "type": "memory"}]}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    system = load_system_config(str(path), {"deltamq.data_dir": str(tmp_path)})
    yield system.broker
    system.close()


def call(api: RestApi, method: str, path: str, body: Any = None,
         query: dict[str, list[str]] | None = None) -> Any:
    raw = json.dumps(body).encode() if body is not None else b""
    reply = anyio.run(api.handle, method, path, query or {}, raw, ANONYMOUS)
    return reply


# -- paths -----------------------------------------------------------------------------------

def test_every_category_below_the_broker_has_a_path_from_the_tree() -> None:
    found = paths.category_paths()
    assert found["queue"].chain == ("VirtualHostNode", "VirtualHost", "Queue")
    assert found["user"].chain == ("AuthenticationProvider", "User")
    # runtime objects where Broker-J 7 has them
    assert found["connection"].chain == ("Port", "Connection")
    assert found["session"].chain == ("Port", "Connection", "Session")
    assert found["consumer"].chain == ("VirtualHostNode", "VirtualHost", "Queue", "Consumer")
    assert found["broker"].chain == ()
    assert "systemconfig" not in found


@pytest.mark.parametrize(("raw", "names", "operation"), [
    ("/api/latest/queue", (), None),
    ("/api/latest/queue/n/v/", ("n", "v"), None),
    ("/api/v1/queue/n/v/a%2Fb", ("n", "v", "a/b"), None),
    ("/api/latest/queue/n/v/q/clearQueue", ("n", "v", "q"), "clearQueue"),
    ("/api/latest/queue/n/v/q%20x?depth=1", ("n", "v", "q x"), None),
])
def test_parse(raw: str, names: tuple[str, ...], operation: str | None) -> None:
    parsed = paths.parse(raw)
    assert parsed.target.category == "Queue"
    assert parsed.names == names and parsed.operation == operation


@pytest.mark.parametrize("raw", ["/api/v7/queue", "/api/latest/thing", "/apix/latest/queue",
                                 "/api/latest/port/a/b/c"])
def test_parse_refuses(raw: str) -> None:
    with pytest.raises(paths.PathNotFound):
        paths.parse(raw)


def test_select_and_url_round_trip(broker: Any) -> None:
    namespace = broker.find_virtual_host("node").namespace
    namespace.declare_queue("a/b")
    chain = paths.category_paths()["queue"].chain
    (queue,) = paths.select(broker, chain, ("node", "*", "a/b"), frozenset({1}))
    assert paths.url_of(queue) == "/api/latest/queue/node/node/a%2Fb"
    assert paths.parse(paths.url_of(queue)).names == ("node", "node", "a/b")
    # a star is a wildcard only where the path says so: sent as %2A it is a name
    assert paths.select(broker, chain, ("node", "*", "a/b")) == []
    assert paths.parse("/api/latest/queue/node/*/a%2Fb").wildcards == frozenset({1})
    assert paths.parse("/api/latest/queue/node/node/%2A").wildcards == frozenset()


# -- runtime objects ----------------------------------------------------------------------------

def test_connections_sessions_and_consumers_by_their_broker_j_paths(broker: Any) -> None:
    vhost = broker.find_virtual_host("node")
    vhost.namespace.declare_queue("orders")
    closed: list[str] = []
    connection = vhost.register_connection(broker.ports()[0], remote_address="10.0.0.7:51234",
                                           protocol="AMQP_0_9_1", principal="bob",
                                           closer=closed.append)
    session = connection.register_session(1)
    consumer = session.register_consumer("ctag-1", queue="orders")
    assert consumer is not None
    name = quote(connection.name, safe="")
    assert paths.url_of(connection) == f"/api/latest/connection/amqp/{name}"
    assert paths.url_of(session) == f"/api/latest/session/amqp/{name}/1"
    assert paths.url_of(consumer) == "/api/latest/consumer/node/node/orders/ctag-1"
    api = RestApi(broker)
    shown = call(api, "GET", paths.url_of(connection)).body
    assert shown["virtualHost"] == "node" and shown["port"] == "amqp"
    assert shown["statistics"]["sessionCount"] == 1
    assert [c["name"] for c in call(api, "GET", "/api/latest/connection/amqp").body] == \
        [connection.name]
    assert call(api, "GET", "/api/latest/connection?virtualHost=node").body[0]["id"] == \
        connection.id
    assert call(api, "GET", "/api/latest/session/amqp/*").body[0]["statistics"] == \
        {"consumerCount": 1}
    listed = call(api, "GET", "/api/latest/consumer/node/node/orders").body
    assert [(c["name"], c["session"], c["connection"], c["queue"]) for c in listed] == \
        [("ctag-1", "1", connection.name, "orders")]
    nested = call(api, "GET", "/api/latest/queue/node/node/orders", query={"depth": ["1"]}).body
    assert [c["name"] for c in nested["consumers"]] == ["ctag-1"]
    # the virtual host's association: connectionCount and getConnections (GET or POST)
    shown_vhost = call(api, "GET", "/api/latest/virtualhost/node/node").body
    assert shown_vhost["statistics"]["connectionCount"] == 1
    for method in ("GET", "POST"):
        found = call(api, method, "/api/latest/virtualhost/node/node/getConnections").body
        assert [(c["name"], c["remoteAddress"], c["virtualHost"]) for c in found] == \
            [(connection.name, "10.0.0.7:51234", "node")]
        assert "sessionCount" in found[0]["statistics"]
    # DELETE closes it (the engine's closer), sessions and consumers go with it
    assert call(api, "DELETE", paths.url_of(connection)).status == 200
    assert closed == [CLOSED_BY_MANAGEMENT]
    assert call(api, "GET", "/api/latest/virtualhost/node/node/getConnections").body == []
    assert call(api, "GET", "/api/latest/consumer/node/node/orders").body == []
    assert call(api, "GET", "/api/latest/virtualhost/node/node").body["statistics"][
        "connectionCount"] == 0


def test_connections_cannot_be_created_over_rest(broker: Any) -> None:
    with pytest.raises(ApiError) as raised:
        call(RestApi(broker), "POST", "/api/latest/connection/amqp",
             {"name": "fake", "protocol": "AMQP_0_9_1"})
    assert raised.value.status == 422 and "made by a client" in raised.value.message


def test_old_connection_paths_are_gone(broker: Any) -> None:
    with pytest.raises(ApiError) as raised:
        call(RestApi(broker), "GET", "/api/latest/connection/node/node/x")
    assert raised.value.status == 404


# -- generated, not hand-written --------------------------------------------------------------

def test_a_new_category_appears_in_paths_api_and_openapi(broker: Any,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.TREE, "Widget", ())
    monkeypatch.setitem(registry.TREE, "VirtualHost", (*registry.TREE["VirtualHost"], "Widget"))
    monkeypatch.setitem(registry._BASES, "Widget", ConfiguredObject)

    class Widget(ConfiguredObject):
        category = "Widget"
        durable = False

        @derived(int, statistic=True, description="How many sprockets")
        def sprockets(self) -> int:
            return 7

    vhost = broker.find_virtual_host("node")
    vhost._children["Widget"] = {}
    created = Widget(vhost, {"name": "w1"})
    created.create()
    api = RestApi(broker)
    shown = call(api, "GET", "/api/latest/widget/node/node/w1")
    assert shown.status == 200
    assert shown.body["name"] == "w1" and shown.body["statistics"] == {"sprockets": 7}
    items, schemas, _ = openapi.api_description()
    assert "/api/latest/widget/{virtualhostnode}/{virtualhost}/{widget}" in items
    assert "sprockets" in schemas["Widget"].properties["statistics"].properties  # type: ignore[index,union-attr]


def test_a_new_attribute_appears_without_route_changes(broker: Any,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    colour = derived(str, description="Paint")(lambda self: "blue")
    colour.__set_name__(ModelQueue, "colour")
    monkeypatch.setattr(ModelQueue, "colour", colour, raising=False)
    broker.find_virtual_host("node").namespace.declare_queue("painted")
    shown = call(RestApi(broker), "GET", "/api/latest/queue/node/node/painted")
    assert shown.body["colour"] == "blue"


def test_errors_are_api_errors_with_statuses(broker: Any) -> None:
    api = RestApi(broker)
    for method, path, body, status in [
        ("GET", "/api/latest/queue/node/node/none", None, 404),
        ("POST", "/api/latest/queue/node/node", {"name": "x", "durable": "no way"}, 422),
        ("DELETE", "/api/latest/broker", None, 405),
        ("POST", "/api/latest/queue/node/node/none/clearQueue", {}, 404),
    ]:
        with pytest.raises(ApiError) as raised:
            call(api, method, path, body)
        assert raised.value.status == status, (path, raised.value.message)


# -- rates ----------------------------------------------------------------------------------

def test_rates_between_reads() -> None:
    book = RateBook(interval=1.0)
    assert book.rates("q", 0.0, {"messagesIn": 0}) == {"messagesInRate": 0.0}
    assert book.rates("q", 2.0, {"messagesIn": 100}) == {"messagesInRate": 50.0}
    # a read soon after measures from the reading at least a second old
    assert book.rates("q", 2.5, {"messagesIn": 110}) == {"messagesInRate": 44.0}
    assert book.rates("q", 3.5, {"messagesIn": 110}) == {"messagesInRate": 6.667}
    assert book.rates("other", 3.5, {"messagesIn": 5}) == {"messagesInRate": 0.0}


def test_rate_book_forgets_objects_no_longer_read() -> None:
    book = RateBook(interval=1.0, horizon=10.0)
    book.rates("gone", 0.0, {"n": 1})
    book.rates("kept", 15.0, {"n": 1})
    book.rates("kept", 26.0, {"n": 1})
    assert len(book) == 1


# -- browsing and removing on every queue kind -------------------------------------------------

@pytest.mark.parametrize("arguments", [
    {}, {"x-max-priority": 5}, {"x-last-value-key": "k"}, {"qpid.queue_sort_key": "s"}])
def test_browse_and_remove_keep_delivery_order(arguments: dict[str, Any]) -> None:
    namespace = Namespace("v")
    queue, _, _ = namespace.declare_queue("q", arguments=arguments)
    for index in range(6):
        props = MessageProperties(headers={"k": index, "s": index}, priority=index % 3)
        queue.enqueue(Message(exchange="", routing_key="q", body=bytes([index]),
                              properties=props, arrival=0.0))
    order = [entry.message.body for entry in queue.browse()]
    assert len(order) == 6
    assert [entry.message.body for entry in queue.browse(limit=2)] == order[:2]
    removed = queue.remove_ready(lambda entry: entry.message.body in (order[1], order[4]))
    assert [entry.message.body for entry in removed] == [order[1], order[4]]
    assert queue.message_count == 4
    taken = []
    while (entry := queue.get(no_ack=True)) is not None:
        taken.append(entry.message.body)
    assert taken == [body for body in order if body not in (order[1], order[4])]


def test_the_port_schema_offers_only_implemented_protocols() -> None:
    _, schemas, _ = openapi.api_description()
    offered = {name: schema.properties["protocols"].items.enum   # type: ignore[index,union-attr]
               for name, schema in schemas.items()
               if name.endswith("Port") and schema.properties and "protocols" in schema.properties}
    assert offered == {"Port": ["AMQP_0_8", "AMQP_0_9", "AMQP_0_9_1", "AMQP_1_0", "HTTP"]}   # never AMQP_0_10
