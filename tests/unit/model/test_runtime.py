"""Connections, sessions and consumers registered by protocol engines.

A connection is a child of its port and associated with the virtual host it
opened; a consumer is a child of its queue and associated with its session
(Broker-J 7's model).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from broker.errors import ConfigurationError, NotAllowed
from broker.model import Connection, Port, PortProtocol, State, SystemConfig, VirtualHost, \
    load_system_config
from broker.model.runtime import CLOSED_BY_MANAGEMENT, virtual_host_of
from tests.unit.model.conftest import Loader, minimal_config


@pytest.fixture
def system(load: Loader) -> SystemConfig:
    return load()


@pytest.fixture
def vhost(system: SystemConfig) -> VirtualHost:
    found = system.broker.find_virtual_host("/node")
    assert found is not None
    return found


@pytest.fixture
def port(system: SystemConfig) -> Port:
    return system.broker.ports()[0]


@pytest.fixture
def live(tmp_path: Path) -> Any:
    """A broker whose virtual host has the real namespace, so queues are in the model."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(minimal_config()))
    system = load_system_config(str(path), {"deltamq.data_dir": str(tmp_path / "data")})
    yield system
    system.close()


def test_register_and_list(vhost: VirtualHost, port: Port) -> None:
    connection = vhost.register_connection(
        port, remote_address="10.1.2.3:40000", protocol=PortProtocol.AMQP_0_9_1,
        principal="guest", client_product="pika", client_version="1.3.2")
    session = connection.register_session(1)
    assert port.children("connections") == [connection]
    assert vhost.connections == [connection] and vhost.get_connections() == [connection]
    assert connection.sessions == [session]
    listed = connection.attributes()
    assert listed["remoteAddress"] == "10.1.2.3:40000"
    assert listed["protocol"] == "AMQP_0_9_1"
    assert listed["clientProduct"] == "pika"
    assert listed["sessionCount"] == 1
    assert listed["state"] == "ACTIVE"
    assert listed["port"] == "amqp" and listed["virtualHost"] == "node"
    assert listed["name"].endswith("10.1.2.3:40000")
    assert session.attributes()["channelId"] == 1
    assert vhost.attributes()["connectionCount"] == 1
    assert system_connection_count(vhost) == 1


def system_connection_count(vhost: VirtualHost) -> int:
    broker = vhost.node.parent
    assert broker is not None
    return int(broker.attributes()["connectionCount"])


def test_unregister_removes_without_calling_closer(vhost: VirtualHost, port: Port) -> None:
    closed: list[str] = []
    connection = vhost.register_connection(port, remote_address="h:1", protocol="AMQP_1_0",
                                           closer=closed.append)
    session = connection.register_session(0)
    connection.unregister()
    assert vhost.connections == [] and port.children("Connection") == []
    assert vhost.attributes()["connectionCount"] == 0
    assert session.state is State.DELETED
    assert closed == []
    connection.unregister()  # twice is harmless


def test_management_delete_asks_engine_to_close(vhost: VirtualHost, port: Port) -> None:
    closed: list[str] = []
    connection = vhost.register_connection(port, remote_address="h:1", protocol="AMQP_0_10",
                                           closer=closed.append)
    connection.register_session(3)
    connection.delete()
    assert closed == [CLOSED_BY_MANAGEMENT]
    assert vhost.connections == [] and port.children("Connection") == []


def test_deleting_the_virtual_host_closes_its_connections(system: SystemConfig,
                                                          vhost: VirtualHost,
                                                          port: Port) -> None:
    closed: list[str] = []
    connection = vhost.register_connection(port, remote_address="h:1", protocol="AMQP_0_9_1",
                                           closer=closed.append)
    vhost.delete()
    assert closed == [CLOSED_BY_MANAGEMENT]
    assert connection.state is State.DELETED
    assert port.children("Connection") == []
    assert system.broker.attributes()["connectionCount"] == 0


def test_deleting_the_port_closes_its_connections(vhost: VirtualHost, port: Port) -> None:
    closed: list[str] = []
    vhost.register_connection(port, remote_address="h:1", protocol="AMQP_0_9_1",
                              closer=closed.append)
    port.delete()
    assert closed == [CLOSED_BY_MANAGEMENT]
    assert vhost.connections == [] and vhost.attributes()["connectionCount"] == 0


def test_client_strings_are_not_context_references(vhost: VirtualHost, port: Port) -> None:
    connection = vhost.register_connection(port, remote_address="h:1", protocol="AMQP_0_9_1",
                                           client_product="${deltamq.data_dir}",
                                           client_id="${undefined.variable}")
    assert connection.client_product == "${deltamq.data_dir}"
    assert connection.client_id == "${undefined.variable}"


def test_names_are_unique_per_parent(vhost: VirtualHost, port: Port) -> None:
    first = vhost.register_connection(port, remote_address="h:1", protocol="AMQP_0_9_1")
    second = vhost.register_connection(port, remote_address="h:1", protocol="AMQP_0_9_1")
    assert first.name != second.name
    assert first.name.startswith("[") and first.name.endswith("] h:1")
    first.register_session(1)
    second.register_session(1)
    with pytest.raises(ConfigurationError, match="already has a Session named '1'"):
        first.register_session(1)


def test_virtual_host_connection_limit(vhost: VirtualHost, port: Port) -> None:
    vhost.set_attributes({"maxConnections": 1})
    vhost.register_connection(port, remote_address="h:1", protocol="AMQP_0_9_1",
                              principal="bob")
    with pytest.raises(NotAllowed, match="connection limit \\(1\\) is reached") as raised:
        vhost.register_connection(port, remote_address="h:2", protocol="AMQP_0_9_1",
                                  principal="bob")
    assert raised.value.reply_code == 530


def test_port_admission_counts_connections(system: SystemConfig) -> None:
    port = system.broker.ports()[0]
    port.set_attributes({"maxOpenConnections": 2})
    assert port.admit_connection() and port.admit_connection()
    assert not port.admit_connection()
    assert port.attributes()["connectionCount"] == 2
    port.connection_closed()
    assert port.admit_connection()


def test_unlimited_port_admits(system: SystemConfig) -> None:
    port = system.broker.ports()[0]
    assert all(port.admit_connection() for _ in range(100))


def test_connection_is_a_child_of_its_port(vhost: VirtualHost, port: Port) -> None:
    connection = vhost.register_connection(port, remote_address="h:1", protocol="AMQP_0_8")
    assert isinstance(connection, Connection)
    assert connection.parent is port
    assert connection.vhost is vhost and virtual_host_of(connection) is vhost
    assert virtual_host_of(connection.register_session(1)) is vhost
    assert connection.ancestor("VirtualHost") is None
    assert connection.protocol is PortProtocol.AMQP_0_8


def test_management_cannot_create_runtime_objects(vhost: VirtualHost, port: Port) -> None:
    with pytest.raises(ConfigurationError, match="made by a client"):
        port.create_child("Connection", {"name": "fake", "protocol": "AMQP_0_9_1"})
    assert port.children("Connection") == []


# -- consumers: children of their queue --------------------------------------------------

def test_consumer_is_a_child_of_its_queue_and_known_to_its_session(live: SystemConfig) -> None:
    vhost = live.broker.find_virtual_host("node")
    assert vhost is not None and vhost.namespace is not None
    vhost.namespace.declare_queue("orders")
    queue = vhost.child("Queue", "orders")
    assert queue is not None
    connection = vhost.register_connection(live.broker.ports()[0], remote_address="h:1",
                                           protocol="AMQP_0_9_1")
    session = connection.register_session(1)
    consumer = session.register_consumer("ctag-1", queue="orders", no_ack=True)
    assert consumer is not None
    assert consumer.parent is queue and queue.children("Consumer") == [consumer]
    assert session.consumers == [consumer]
    shown = consumer.attributes()
    assert shown["queue"] == "orders" and shown["noAck"] is True
    assert shown["selector"] == ""
    assert shown["session"] == "1" and shown["connection"] == connection.name
    assert shown["port"] == "amqp"
    assert session.attributes()["consumerCount"] == 1
    assert virtual_host_of(consumer) is vhost
    consumer.unregister()
    assert session.consumers == [] and queue.children("Consumer") == []
    assert consumer.state is State.DELETED


def test_a_consumer_shows_its_message_selector(live: SystemConfig) -> None:
    vhost = live.broker.find_virtual_host("node")
    assert vhost is not None and vhost.namespace is not None
    vhost.namespace.declare_queue("orders")
    connection = vhost.register_connection(live.broker.ports()[0], remote_address="h:1",
                                           protocol="AMQP_0_9_1")
    session = connection.register_session(1)
    consumer = session.register_consumer("ctag-1", queue="orders",
                                         arguments={"x-filter-jms-selector": "amount > 100"})
    assert consumer is not None and consumer.attributes()["selector"] == "amount > 100"


def test_consumers_go_with_their_session_and_with_their_queue(live: SystemConfig) -> None:
    vhost = live.broker.find_virtual_host("node")
    assert vhost is not None and vhost.namespace is not None
    for name in ("a", "b"):
        vhost.namespace.declare_queue(name)
    connection = vhost.register_connection(live.broker.ports()[0], remote_address="h:1",
                                           protocol="AMQP_0_9_1")
    first, second = connection.register_session(1), connection.register_session(2)
    on_a = first.register_consumer("t1", queue="a")
    on_b = second.register_consumer("t2", queue="b")
    assert on_a is not None and on_b is not None
    first.unregister()
    assert on_a.state is State.DELETED
    queue_a = vhost.child("Queue", "a")
    assert queue_a is not None and queue_a.children("Consumer") == []
    vhost.namespace.delete_queue("b")
    assert on_b.state is State.DELETED and second.consumers == []
    connection.unregister()


def test_a_tag_used_on_the_queue_by_another_session_gets_a_longer_name(
        live: SystemConfig) -> None:
    vhost = live.broker.find_virtual_host("node")
    assert vhost is not None and vhost.namespace is not None
    vhost.namespace.declare_queue("shared")
    port = live.broker.ports()[0]
    one = vhost.register_connection(port, remote_address="h:1", protocol="AMQP_0_9_1")
    two = vhost.register_connection(port, remote_address="h:2", protocol="AMQP_0_9_1")
    first = one.register_session(1).register_consumer("1", queue="shared")
    second = two.register_session(1).register_consumer("1", queue="shared")
    assert first is not None and second is not None
    assert first.name == "1" and second.name == f"1|{two.name}|1"


def test_no_queue_in_the_model_means_no_consumer_object(vhost: VirtualHost,
                                                        port: Port) -> None:
    session = vhost.register_connection(port, remote_address="h:1",
                                        protocol="AMQP_0_9_1").register_session(1)
    assert session.register_consumer("t", queue="not-mirrored") is None
    assert session.consumers == []


def test_a_live_virtual_host_is_deleted_with_its_standard_exchanges(live: SystemConfig) -> None:
    vhost = live.broker.find_virtual_host("node")
    assert vhost is not None and vhost.namespace is not None
    vhost.namespace.declare_queue("q")
    closed: list[str] = []
    vhost.register_connection(live.broker.ports()[0], remote_address="h:1",
                              protocol="AMQP_0_9_1", closer=closed.append)
    vhost.delete()                    # amq.* and the default exchange: views only
    assert vhost.state is State.DELETED and closed == [CLOSED_BY_MANAGEMENT]
    assert live.broker.find_virtual_host("node") is None
