"""What REST creates is usable over AMQP at once, and what AMQP does shows in REST."""

from __future__ import annotations

import time
import uuid

import pika
import pika.exceptions
import pytest

from tests.integration.support import BrokerEndpoint, pika_reply
from tests.waiting import wait_until

from .conftest import Api

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def unique(kind: str) -> str:
    return f"mgmt.{kind}.{uuid.uuid4().hex[:12]}"


def test_rest_exchange_queue_and_binding_carry_pika_messages(api: Api,
                                                             amqp: BrokerEndpoint) -> None:
    exchange, queue = unique("x"), unique("q")
    api.ok(api.post("exchange/default/default", {"name": exchange, "type": "topic"}), 201)
    api.ok(api.post("queue/default/default", {"name": queue}), 201)
    api.ok(api.post(f"exchange/default/default/{exchange}/bind",
                    {"destination": queue, "bindingKey": "orders.*"}))
    with amqp.pika() as connection:
        channel = connection.channel()
        channel.exchange_declare(exchange, "topic", passive=True)
        ok = channel.queue_declare(queue, passive=True)
        assert ok.method.message_count == 0
        channel.confirm_delivery()
        channel.basic_publish(exchange, "orders.created", b"order 1")
        channel.basic_publish(exchange, "payments.created", b"not for us")
        method, _, body = channel.basic_get(queue, auto_ack=True)
        assert body == b"order 1"
        assert channel.basic_get(queue, auto_ack=True)[0] is None
        # the REST queue's arguments are the real queue's: redeclaring differently is refused
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            channel.queue_declare(queue, durable=False)
        assert pika_reply(refused.value)[0] == 406


def test_queue_declared_by_pika_shows_depth_consumers_and_unacked(api: Api,
                                                                  amqp: BrokerEndpoint) -> None:
    queue = unique("pika")
    with amqp.pika() as connection:
        channel = connection.channel()
        channel.queue_declare(queue, arguments={"x-max-length": 100})
        channel.confirm_delivery()
        for body in (b"aa", b"bbb", b"c"):
            channel.basic_publish("", queue, body)
        shown = api.ok(api.get(f"queue/default/default/{queue}"))
        assert shown["durable"] is False and shown["arguments"] == {"x-max-length": 100}
        stats = shown["statistics"]
        assert stats["queueDepthMessages"] == 3 and stats["queueDepthBytes"] == 6
        assert stats["messagesIn"] == 3 and stats["bytesIn"] == 6
        channel.basic_qos(prefetch_count=1)
        channel.basic_consume(queue, lambda *args: None)
        connection.process_data_events(time_limit=0.5)
        stats = api.ok(api.get(f"queue/default/default/{queue}"))["statistics"]
        assert stats["consumerCount"] == 1
        assert stats["unacknowledgedMessages"] == 1 and stats["queueDepthMessages"] == 2
        assert stats["messagesOut"] == 1 and stats["bytesOut"] == 2


def test_rest_delete_is_seen_by_clients(api: Api, amqp: BrokerEndpoint) -> None:
    queue = unique("gone")
    with amqp.pika() as connection:
        channel = connection.channel()
        channel.queue_declare(queue)
        api.ok(api.delete(f"queue/default/default/{queue}"))
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            channel.queue_declare(queue, passive=True)
        assert pika_reply(closed.value)[0] == 404


def test_rates_follow_what_clients_publish(api: Api, amqp: BrokerEndpoint) -> None:
    queue = unique("rate")
    api.ok(api.post("queue/default/default", {"name": queue}), 201)
    before = api.ok(api.get(f"queue/default/default/{queue}"))["statistics"]
    assert before["messagesInRate"] == 0.0
    with amqp.pika() as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        for _ in range(20):
            channel.basic_publish("", queue, b"x" * 10)
    # a rate is over the last one to two seconds: let one pass (time is what is tested)
    time.sleep(1.0)
    after = api.ok(api.get(f"queue/default/default/{queue}"))["statistics"]
    assert after["messagesIn"] == 20
    assert 5 < after["messagesInRate"] <= 20 / 1.0 + 1
    assert after["bytesInRate"] == pytest.approx(after["messagesInRate"] * 10, rel=0.01)
    vhost = api.ok(api.get("virtualhost/default/default"))["statistics"]
    assert vhost["messagesIn"] >= 20 and vhost["totalDepthOfQueuesMessages"] >= 20


def test_a_node_created_over_rest_serves_its_virtual_host_with_journal_and_ttl(
        api: Api, amqp: BrokerEndpoint) -> None:
    node, queue = unique("node").replace(".", "-"), unique("q")
    api.ok(api.put(f"virtualhostnode/{node}", {"type": "delta"}), 201)
    try:
        vhost = api.ok(api.get(f"virtualhost/{node}/{node}"))      # made from its blueprint
        assert vhost["state"] == "ACTIVE" and vhost["name"] == node
        with amqp.pika(virtual_host=node) as connection:
            channel = connection.channel()
            channel.confirm_delivery()
            channel.queue_declare(queue, durable=True)
            # confirmed only once the journal commit is durable: its writer must be running
            # (per-message TTL expires messages at the head, as in RabbitMQ: the short-lived first)
            channel.basic_publish("", queue, b"gone", pika.BasicProperties(delivery_mode=2,
                                                                           expiration="200"))
            channel.basic_publish("", queue, b"kept", pika.BasicProperties(delivery_mode=2),
                                  mandatory=True)
            wait_until(lambda: channel.queue_declare(queue, passive=True).method.message_count == 1,
                       10, what="the short-lived message expired (the virtual host's timers run too)")
            method, _, body = channel.basic_get(queue, auto_ack=True)
            assert body == b"kept"
    finally:
        api.delete(f"virtualhostnode/{node}")


def test_selectors_of_pika_consumers_and_bindings_show_in_rest(api: Api, amqp: BrokerEndpoint) -> None:
    queue = unique("sel")
    selector = "region = 'eu' AND amount > 100"
    with amqp.pika() as connection:
        channel = connection.channel()
        channel.queue_declare(queue, auto_delete=True)
        channel.queue_bind(queue, "amq.topic", "orders.#", arguments={"x-filter-jms-selector": "amount > 0"})
        channel.basic_consume(queue, lambda *args: None, consumer_tag="eu-big",
                              arguments={"x-filter-jms-selector": selector})
        connection.process_data_events(time_limit=0.2)
        [consumer] = wait_until(lambda: api.ok(api.get(f"consumer/default/default/{queue}")),
                                what="the consumer in REST")
        assert consumer["selector"] == selector
        assert consumer["arguments"] == {"x-filter-jms-selector": selector}
        bindings = api.ok(api.get("exchange/default/default/amq.topic"))["bindings"]
        assert {"destination": queue, "bindingKey": "orders.#",
                "arguments": {"x-filter-jms-selector": "amount > 0"}} in bindings
