"""Connections, sessions and consumers registered by protocol engines."""

from __future__ import annotations

import pytest

from broker.errors import NotAllowed
from broker.model import Connection, PortProtocol, State, SystemConfig, VirtualHost
from broker.model.runtime import CLOSED_BY_MANAGEMENT
from tests.unit.model.conftest import Loader


@pytest.fixture
def system(load: Loader) -> SystemConfig:
    return load()


@pytest.fixture
def vhost(system: SystemConfig) -> VirtualHost:
    found = system.broker.find_virtual_host("/node")
    assert found is not None
    return found


def test_register_and_list(vhost: VirtualHost) -> None:
    connection = vhost.register_connection(
        remote_address="10.1.2.3:40000", protocol=PortProtocol.AMQP_0_9_1, principal="guest",
        port="amqp", client_product="pika", client_version="1.3.2")
    session = connection.register_session(1)
    consumer = session.register_consumer("ctag-1", queue="orders", no_ack=True)
    assert vhost.connections == [connection]
    assert vhost.children("connections") == [connection]
    assert connection.sessions == [session] and session.consumers == [consumer]
    listed = connection.attributes()
    assert listed["remoteAddress"] == "10.1.2.3:40000"
    assert listed["protocol"] == "AMQP_0_9_1"
    assert listed["clientProduct"] == "pika"
    assert listed["sessionCount"] == 1
    assert listed["state"] == "ACTIVE"
    assert listed["name"].endswith("10.1.2.3:40000")
    assert session.attributes()["channelId"] == 1
    assert consumer.attributes()["queue"] == "orders" and consumer.no_ack is True
    assert vhost.attributes()["connectionCount"] == 1


def test_unregister_removes_without_calling_closer(vhost: VirtualHost) -> None:
    closed: list[str] = []
    connection = vhost.register_connection(remote_address="h:1", protocol="AMQP_1_0",
                                           closer=closed.append)
    session = connection.register_session(0)
    consumer = session.register_consumer("link", queue="q")
    consumer.unregister()
    assert session.consumers == [] and consumer.state is State.DELETED
    connection.unregister()
    assert vhost.connections == []
    assert session.state is State.DELETED
    assert closed == []
    connection.unregister()  # twice is harmless


def test_management_delete_asks_engine_to_close(vhost: VirtualHost) -> None:
    closed: list[str] = []
    connection = vhost.register_connection(remote_address="h:1", protocol="AMQP_0_10",
                                           closer=closed.append)
    connection.register_session(3)
    connection.delete()
    assert closed == [CLOSED_BY_MANAGEMENT]
    assert vhost.connections == []


def test_client_strings_are_not_context_references(vhost: VirtualHost) -> None:
    connection = vhost.register_connection(remote_address="h:1", protocol="AMQP_0_9_1",
                                           client_product="${deltamq.data_dir}",
                                           client_id="${undefined.variable}")
    assert connection.client_product == "${deltamq.data_dir}"
    assert connection.client_id == "${undefined.variable}"
    session = connection.register_session(1)
    consumer = session.register_consumer("${undefined.tag}", queue="${q}")
    assert consumer.name == "${undefined.tag}" and consumer.queue == "${q}"
    assert session.consumers == [consumer]


def test_names_are_unique_per_parent(vhost: VirtualHost) -> None:
    first = vhost.register_connection(remote_address="h:1", protocol="AMQP_0_9_1")
    second = vhost.register_connection(remote_address="h:1", protocol="AMQP_0_9_1")
    assert first.name != second.name
    first.register_session(1)
    second.register_session(1)
    from broker.errors import ConfigurationError
    with pytest.raises(ConfigurationError, match="already has a Session named '1'"):
        first.register_session(1)


def test_virtual_host_connection_limit(vhost: VirtualHost) -> None:
    vhost.set_attributes({"maxConnections": 1})
    vhost.register_connection(remote_address="h:1", protocol="AMQP_0_9_1", principal="bob")
    with pytest.raises(NotAllowed, match="connection limit \\(1\\) is reached") as raised:
        vhost.register_connection(remote_address="h:2", protocol="AMQP_0_9_1", principal="bob")
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


def test_connection_is_a_model_child(vhost: VirtualHost) -> None:
    connection = vhost.register_connection(remote_address="h:1", protocol="AMQP_0_8")
    assert isinstance(connection, Connection)
    assert connection.parent is vhost
    assert connection.ancestor("Broker") is vhost.node.parent
    assert connection.protocol is PortProtocol.AMQP_0_8
