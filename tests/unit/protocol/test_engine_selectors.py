"""Broker-J's x-filter-jms-selector on basic.consume and queue.bind, through the 0-9-1 engine in memory."""

from __future__ import annotations

import pytest

from broker.messaging.message import MessageProperties
from broker.protocol.amqp0_9_1 import methods as m
from broker.protocol.detect import AmqpVersion

from .harness import Client, Delivery, FakeHost

SELECTOR = "x-filter-jms-selector"


@pytest.fixture
def host() -> FakeHost:
    return FakeHost()


@pytest.fixture
def client(host: FakeHost) -> Client:
    c = Client(host)
    c.handshake()
    c.open_channel(1)
    c.send(1, m.QueueDeclare(queue="orders"))
    c.expect(m.QueueDeclareOk)
    return c


def _publish(client: Client, body: bytes, **headers: object) -> None:
    client.publish(1, "", "orders", body, MessageProperties(headers=dict(headers)))


def _consume(client: Client, tag: str, selector: str, channel: int = 1) -> None:
    client.send(channel, m.BasicConsume(queue="orders", consumer_tag=tag, arguments={SELECTOR: selector}))
    client.expect(m.BasicConsumeOk, channel)


def test_consumers_receive_only_what_their_selectors_match(client: Client, host: FakeHost) -> None:
    _consume(client, "big", "amount > 100")
    _consume(client, "eu", "region = 'eu' AND amount <= 100")
    _publish(client, b"big-us", amount=500, region="us")
    _publish(client, b"small-eu", amount=10, region="eu")
    _publish(client, b"small-us", amount=10, region="us")
    _publish(client, b"big-eu", amount=200, region="eu")
    got = {(d.method.consumer_tag, d.body) for d in client.deliveries()}
    assert got == {("big", b"big-us"), ("eu", b"small-eu"), ("big", b"big-eu")}
    queue = host.namespace.queue("orders")
    assert queue.message_count == 1                 # small-us matches nobody and waits
    client.send(1, m.BasicGet(queue="orders", no_ack=True))
    assert client.expect(Delivery, 1).body == b"small-us"


def test_a_bad_consume_selector_closes_the_channel_with_406_naming_the_position(client: Client,
                                                                                host: FakeHost) -> None:
    client.send(1, m.BasicConsume(queue="orders", consumer_tag="bad", arguments={SELECTOR: "amount >"}))
    close = client.expect(m.ChannelClose, 1)
    assert close.reply_code == 406
    assert "PRECONDITION_FAILED" in close.reply_text and "position 8" in close.reply_text
    assert host.namespace.queue("orders").consumer_count == 0


def test_a_selector_that_is_not_a_string_is_refused(client: Client) -> None:
    client.send(1, m.BasicConsume(queue="orders", arguments={SELECTOR: 42}))
    close = client.expect(m.ChannelClose, 1)
    assert close.reply_code == 406 and SELECTOR in close.reply_text


def test_an_empty_selector_selects_everything(client: Client) -> None:
    _consume(client, "all", "")
    _publish(client, b"m", amount=1)
    assert [d.body for d in client.deliveries()] == [b"m"]


def test_acks_let_a_selective_consumer_past_unmatched_messages(client: Client) -> None:
    client.send(1, m.BasicQos(prefetch_count=1))
    client.expect(m.BasicQosOk)
    _publish(client, b"other-1", kind="other")
    _publish(client, b"mine-1", kind="mine")
    _publish(client, b"other-2", kind="other")
    _publish(client, b"mine-2", kind="mine")
    _consume(client, "mine", "kind = 'mine'")
    first = client.deliveries()
    assert [d.body for d in first] == [b"mine-1"]
    client.send(1, m.BasicAck(delivery_tag=first[0].method.delivery_tag))
    assert [d.body for d in client.deliveries()] == [b"mine-2"]


def test_a_rejected_message_is_redelivered_to_a_consumer_that_selects_redeliveries(client: Client) -> None:
    _consume(client, "fresh", "NOT JMSRedelivered")
    _publish(client, b"m", kind="any")
    [delivery] = client.deliveries()
    client.send(1, m.BasicCancel(consumer_tag="fresh"))
    client.expect(m.BasicCancelOk)
    _consume(client, "retry", "JMSRedelivered")
    client.send(1, m.BasicReject(delivery_tag=delivery.method.delivery_tag, requeue=True))
    [again] = client.deliveries()
    assert again.method.consumer_tag == "retry" and again.method.redelivered


def test_a_selective_binding_routes_only_matching_messages(client: Client, host: FakeHost) -> None:
    client.send(1, m.ExchangeDeclare(exchange="events", type="topic"))
    client.expect(m.ExchangeDeclareOk)
    client.send(1, m.QueueDeclare(queue="alerts"))
    client.expect(m.QueueDeclareOk)
    client.send(1, m.QueueBind(queue="alerts", exchange="events", routing_key="#",
                               arguments={SELECTOR: "severity >= 3"}))
    client.expect(m.QueueBindOk)
    for severity in (1, 3, 5):
        client.publish(1, "events", "host.cpu", f"s{severity}".encode(),
                       MessageProperties(headers={"severity": severity}))
    alerts = host.namespace.queue("alerts")
    assert alerts.message_count == 2
    client.send(1, m.BasicGet(queue="alerts", no_ack=True))
    assert client.expect(Delivery, 1).body == b"s3"


def test_a_bad_binding_selector_closes_the_channel_and_binds_nothing(client: Client, host: FakeHost) -> None:
    client.send(1, m.ExchangeDeclare(exchange="events", type="fanout"))
    client.expect(m.ExchangeDeclareOk)
    client.send(1, m.QueueBind(queue="orders", exchange="events", routing_key="",
                               arguments={SELECTOR: "severity >= 'high'"}))
    close = client.expect(m.ChannelClose, 1)
    assert close.reply_code == 406 and "position 12" in close.reply_text
    assert host.namespace.queue("orders").bindings == set()


def test_a_binding_is_identified_by_its_selector_for_unbind(client: Client, host: FakeHost) -> None:
    client.send(1, m.ExchangeDeclare(exchange="events", type="fanout"))
    client.expect(m.ExchangeDeclareOk)
    for selector in ("n = 1", "n = 2"):
        client.send(1, m.QueueBind(queue="orders", exchange="events", arguments={SELECTOR: selector}))
        client.expect(m.QueueBindOk)
    client.send(1, m.QueueUnbind(queue="orders", exchange="events", arguments={SELECTOR: "n = 1"}))
    client.expect(m.QueueUnbindOk)
    for n in (1, 2):
        client.publish(1, "events", "", f"n{n}".encode(), MessageProperties(headers={"n": n}))
    client.send(1, m.BasicGet(queue="orders", no_ack=True))
    assert client.expect(Delivery, 1).body == b"n2"
    assert host.namespace.queue("orders").message_count == 0


@pytest.mark.parametrize("version", [AmqpVersion.V0_8, AmqpVersion.V0_9])
def test_qpid_clients_of_0_8_and_0_9_filter_the_same_way(host: FakeHost, version: AmqpVersion) -> None:
    old = Client(host, version)
    old.handshake()
    old.open_channel(1)
    old.send(1, m.QueueDeclare(queue="legacy"))
    old.expect(m.QueueDeclareOk)
    old.send(1, m.BasicConsume(queue="legacy", consumer_tag="c", no_ack=True,
                               arguments={SELECTOR: "JMSType = 'wanted'"}))
    old.expect(m.BasicConsumeOk)
    for kind in ("other", "wanted"):
        old.publish(1, "", "legacy", kind.encode(), MessageProperties(type=kind))
    assert [d.body for d in old.deliveries()] == [b"wanted"]
    assert host.namespace.queue("legacy").message_count == 1
