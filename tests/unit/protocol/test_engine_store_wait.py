"""A channel whose declare waits for the configuration store keeps AMQP's order; others run on.

AMQP 0-9-1 spec 4.2.4: a peer processes a channel's methods in the order
they were sent.  With a store that commits in the background, declare-ok
is sent once the change is durable, and the channel's later frames are held
until then (:mod:`broker.protocol.amqp0_9_1.store_wait`).
"""

from __future__ import annotations

import pytest

from broker.messaging.message import MessageProperties
from broker.protocol.amqp0_9_1 import methods as m
from broker.protocol.amqp0_9_1.store_wait import HOLD_LIMIT

from ..messaging.store_fake import ManualStore
from .harness import Client, Delivery, FakeHost

FULL = OSError(28, "No space left on device")


@pytest.fixture
def store() -> ManualStore:
    return ManualStore()


@pytest.fixture
def client(store: ManualStore) -> Client:
    host = FakeHost()
    host.namespace.listeners.append(store)
    c = Client(host)
    c.handshake()
    c.open_channel(1)
    c.open_channel(2)
    return c


def test_a_publish_after_a_nowait_declare_finds_the_queue(client: Client, store: ManualStore) -> None:
    ns = client.host.namespace
    client.send(1, m.QueueDeclare(queue="orders", durable=True, nowait=True))
    client.publish(1, "", "orders", b"first")
    client.send(1, m.QueueDeclare(queue="orders", durable=True))
    assert "orders" not in ns.queues and client.take() == []      # nothing acted, nothing answered
    # another channel of the same connection runs meanwhile
    client.send(2, m.QueueDeclare(queue="scratch"))
    assert client.expect(m.QueueDeclareOk, 2).queue == "scratch"
    store.land()
    assert ns.queues["orders"].message_count == 1                  # the publish came after the declare
    ok = client.expect(m.QueueDeclareOk, 1)
    assert (ok.queue, ok.message_count) == ("orders", 1)


def test_declare_ok_and_bind_ok_come_once_stored_in_order(client: Client, store: ManualStore) -> None:
    client.send(1, m.ExchangeDeclare(exchange="events", type="topic", durable=True))
    client.send(1, m.QueueDeclare(queue="orders", durable=True))
    client.send(1, m.QueueBind(queue="orders", exchange="events", routing_key="a.#"))
    assert client.take() == []
    store.land()
    client.expect(m.ExchangeDeclareOk, 1)
    assert client.take() == []                    # the queue's declare was held behind: now in flight
    store.land()
    client.expect(m.QueueDeclareOk, 1)
    store.land()
    client.expect(m.QueueBindOk, 1)
    client.publish(1, "events", "a.b", b"routed")
    assert client.host.namespace.queues["orders"].message_count == 1


def test_a_failed_store_closes_the_channel_541_and_leaves_nothing(client: Client, store: ManualStore) -> None:
    ns = client.host.namespace
    client.send(1, m.QueueDeclare(queue="orders", durable=True))
    client.publish(1, "", "orders", b"lost")
    store.land(FULL)
    close = client.expect(m.ChannelClose, 1)
    assert close.reply_code == 541 and "configuration store failed" in close.reply_text
    assert (close.class_id, close.method_id) == (50, 10)          # queue.declare
    assert "orders" not in ns.queues and store.records == {}
    client.send(1, m.ChannelCloseOk())
    client.open_channel(1)
    client.send(1, m.QueueDeclare(queue="orders", passive=True))
    assert client.expect(m.ChannelClose, 1).reply_code == 404


def test_reading_stops_while_a_waiting_channel_holds_too_much(client: Client, store: ManualStore) -> None:
    client.send(1, m.QueueDeclare(queue="orders", durable=True, nowait=True))
    body = b"x" * 100_000
    while not client.server.reading_paused:
        client.publish(1, "", "orders", body)
    assert client.server.store_waits.held_bytes >= HOLD_LIMIT
    store.land()
    assert not client.server.reading_paused
    queue = client.host.namespace.queues["orders"]
    assert queue.message_count == HOLD_LIMIT // 100_000 + 1


def test_frames_held_behind_a_declare_wait_again_behind_the_next(client: Client, store: ManualStore) -> None:
    client.send(1, m.QueueDeclare(queue="a", durable=True, nowait=True))
    client.send(1, m.QueueDeclare(queue="b", durable=True, nowait=True))
    client.publish(1, "", "b", b"to b", MessageProperties())
    client.send(1, m.BasicGet(queue="b", no_ack=True))
    store.land()
    ns = client.host.namespace
    assert "a" in ns.queues and "b" not in ns.queues and client.take() == []
    store.land()
    delivery = client.expect(Delivery, 1)
    assert delivery.body == b"to b"


def test_a_delete_of_a_durable_queue_answers_once_stored(client: Client, store: ManualStore) -> None:
    client.host.namespace.declare_queue("orders", durable=True)
    client.send(1, m.QueueDelete(queue="orders"))
    assert "orders" in client.host.namespace.queues and client.take() == []
    store.land()
    client.expect(m.QueueDeleteOk, 1)
    assert "orders" not in client.host.namespace.queues
