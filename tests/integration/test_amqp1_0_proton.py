"""AMQP 1.0 with an unmodified client: python-qpid-proton's blocking API against `deltamq serve`.

The default port serves 0-9-1 and 1.0 on one socket; queues are declared
over 0-9-1 (pika) and used over 1.0.
"""

from __future__ import annotations

import os
import signal
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import DeltaMQProcess

proton = pytest.importorskip("proton")
from proton import Delivery, Message  # noqa: E402
from proton.reactor import AtMostOnce, Container  # noqa: E402
from proton.utils import BlockingConnection, LinkDetached  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

if os.environ.get("DELTAMQ_TEST_AMQP_URL"):
    pytest.skip("AMQP 1.0 is DeltaMQ's here (an external 0-9-1 broker may not speak it)", allow_module_level=True)


def _url(port: int) -> str:
    return f"amqp://guest:guest@127.0.0.1:{port}"


def _connect(port: int, container_id: str | None = None) -> Any:
    container = Container()
    if container_id is not None:
        container.container_id = container_id
    return BlockingConnection(_url(port), timeout=20, container=container)


@pytest.fixture
def amqp10(broker: Any) -> Iterator[Any]:
    connection = _connect(broker.port)
    yield connection
    connection.close()


@pytest.fixture
def queue(ch: Any) -> Iterator[str]:
    name = f"amqp10-{uuid.uuid4().hex[:8]}"
    ch.queue_declare(name, durable=True)
    yield name
    ch.queue_delete(name)


def test_at_least_once_send_is_accepted_and_received_once(amqp10: Any, queue: str, ch: Any) -> None:
    sender = amqp10.create_sender(queue)
    delivery = sender.send(Message(body="hello", durable=True, properties={"colour": "red"}))
    assert delivery.remote_state == Delivery.ACCEPTED
    receiver = amqp10.create_receiver(queue, credit=10)
    message = receiver.receive(timeout=10)
    assert message.body == "hello"
    assert message.durable
    assert message.properties == {"colour": "red"}
    receiver.accept()
    receiver.close()
    method, _props, _body = ch.basic_get(queue)
    assert method is None                       # accepted: gone from the queue


def test_released_delivery_comes_back(amqp10: Any, queue: str) -> None:
    amqp10.create_sender(queue).send(Message(body="again"))
    receiver = amqp10.create_receiver(queue, credit=1)
    first = receiver.receive(timeout=10)
    assert first.delivery_count == 0
    receiver.release(delivered=True)            # modified, delivery-failed: counts
    second = receiver.receive(timeout=10)
    assert second.body == "again"
    assert second.delivery_count == 1
    receiver.accept()


def test_a_message_larger_than_a_frame_goes_both_ways(amqp10: Any, queue: str) -> None:
    body = bytes(range(256)) * 2000                          # 512000 bytes: many frames each way
    assert amqp10.create_sender(queue).send(Message(body=body)).remote_state == Delivery.ACCEPTED
    receiver = amqp10.create_receiver(queue, credit=1)
    assert bytes(receiver.receive(timeout=10).body) == body
    receiver.accept()


def test_a_suspended_link_attaches_again_without_a_steal(broker: Any, queue: str) -> None:
    container_id = f"resumer-{uuid.uuid4().hex[:8]}"
    connection = _connect(broker.port, container_id)
    try:
        sender = connection.create_sender(queue)
        receiver = connection.create_receiver(queue, name="kept", credit=0)
        receiver.link.detach()                                  # suspend, not close
        # proton writes a new link's attach before an old one's detach: a settled transfer
        # later, the broker has seen the detach (else the next attach would steal the link)
        sender.send(Message(body="waiting"))
        again = connection.create_receiver(queue, name="kept", credit=1)
        assert again.receive(timeout=10).body == "waiting"
        again.accept()
    finally:
        connection.close()


def test_pre_settled_both_ways(amqp10: Any, queue: str, ch: Any) -> None:
    sender = amqp10.create_sender(queue, options=AtMostOnce())
    for i in range(5):
        sender.send(Message(body=f"m{i}"))
    receiver = amqp10.create_receiver(queue, credit=5, options=AtMostOnce())
    bodies = [receiver.receive(timeout=10).body for _ in range(5)]
    assert bodies == [f"m{i}" for i in range(5)]
    receiver.close()
    method, _props, _body = ch.basic_get(queue)
    assert method is None                       # settled when sent: nothing to come back


def test_exchange_and_routing_key_addresses(amqp10: Any, queue: str, ch: Any) -> None:
    ch.queue_bind(queue, "amq.direct", routing_key="rk")
    amqp10.create_sender("/exchanges/amq.direct/rk").send(Message(body="v2"))
    amqp10.create_sender("amq.direct/rk").send(Message(body="broker-j"))
    amqp10.create_sender(f"/queues/{queue}").send(Message(body="queue"))
    receiver = amqp10.create_receiver(f"/queues/{queue}", credit=3)
    assert sorted(receiver.receive(timeout=10).body for _ in range(3)) == ["broker-j", "queue", "v2"]
    receiver.accept()


def test_receiving_from_an_exchange_subscribes(amqp10: Any) -> None:
    receiver = amqp10.create_receiver("amq.topic/news.#", credit=5)
    sender = amqp10.create_sender("/exchanges/amq.topic/news.today")
    assert sender.send(Message(body="headline")).remote_state == Delivery.ACCEPTED
    assert receiver.receive(timeout=10).body == "headline"
    receiver.accept()


def test_unroutable_message_is_rejected(amqp10: Any, ch: Any) -> None:
    sender = amqp10.create_sender("/exchanges/amq.direct/nobody-binds-this")
    delivery = sender.send(Message(body="lost"), timeout=10, error_states=[])
    assert delivery.remote_state == Delivery.REJECTED
    assert delivery.remote.condition.name == "amqp:not-found"


def test_bad_address_is_refused(amqp10: Any) -> None:
    with pytest.raises(LinkDetached) as raised:
        amqp10.create_sender("no-such-queue-or-exchange")
    assert "amqp:not-found" in str(raised.value)
    with pytest.raises(LinkDetached) as raised:
        amqp10.create_receiver("/queues/no-such-queue")
    assert "amqp:not-found" in str(raised.value)


def test_link_stolen_by_a_second_connection(broker: Any, queue: str) -> None:
    container_id = f"thief-{uuid.uuid4().hex[:8]}"
    first = _connect(broker.port, container_id)
    second = _connect(broker.port, container_id)
    try:
        victim = first.create_receiver(queue, name="shared-link", credit=1)
        second.create_receiver(queue, name="shared-link", credit=1)
        with pytest.raises(LinkDetached) as raised:
            victim.receive(timeout=10)
        assert "amqp:link:stolen" in str(raised.value)
    finally:
        second.close()
        first.close()


def test_management_lists_the_connection_its_consumer_and_its_link(
        broker_process: DeltaMQProcess, queue: str) -> None:
    import httpx

    api = httpx.Client(base_url=f"http://127.0.0.1:{broker_process.http_port}/api/latest/",
                       auth=("guest", "guest"), timeout=20)
    container_id = f"listed-{uuid.uuid4().hex[:8]}"
    connection = _connect(broker_process.amqp_port, container_id)
    try:
        connection.create_receiver(queue, name="watched", credit=1)
        protocols = [c["protocol"] for c in api.get("connection").json()]
        assert "AMQP_1_0" in protocols
        assert api.get(f"queue/default/default/{queue}").json()["statistics"]["consumerCount"] == 1
        links = api.get("virtualhost/default/default/getLinks").json()
        [link] = [item for item in links if item["remoteContainerId"] == container_id]
        assert (link["linkName"], link["role"], link["state"], link["address"]) == (
            "watched", "sending", "attached", queue)
    finally:
        connection.close()
        api.close()


def test_plain_header_where_sasl_is_required(broker: Any) -> None:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        sock.sendall(b"AMQP\x00\x01\x00\x00")
        answer = b""
        while len(answer) < 8:
            chunk = sock.recv(8 - len(answer))
            if not chunk:
                break
            answer += chunk
        assert answer == b"AMQP\x03\x01\x00\x00"
        assert sock.recv(1) == b""               # and closed


def test_wrong_password_is_refused(broker: Any) -> None:
    with pytest.raises(Exception) as raised:
        BlockingConnection(f"amqp://guest:wrong@127.0.0.1:{broker.port}", timeout=10)
    assert "auth" in str(raised.value).lower()


def test_durable_message_survives_a_restart() -> None:
    with DeltaMQProcess() as proc:
        import pika

        with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", proc.amqp_port)) as conn:
            conn.channel().queue_declare("survivor", durable=True)
        connection = _connect(proc.amqp_port)
        delivery = connection.create_sender("survivor").send(Message(body="kept", durable=True))
        assert delivery.remote_state == Delivery.ACCEPTED      # only once the journal committed it
        connection.close()
        assert proc.proc is not None
        os.killpg(proc.proc.pid, signal.SIGKILL)
        proc.proc.wait(timeout=30)
        proc.start()
        connection = _connect(proc.amqp_port)
        receiver = connection.create_receiver("survivor", credit=1)
        message = receiver.receive(timeout=20)
        assert message.body == "kept"
        assert message.durable
        receiver.accept()
        connection.close()
