"""JMS message selectors from an unmodified pika client: Broker-J's ``x-filter-jms-selector``
on basic.consume and queue.bind (RabbitMQ has no selectors: skipped against it)."""

from __future__ import annotations

import os
import signal
from typing import Any

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.waiting import wait_until

from .conftest import DeltaMQProcess
from .support import unique

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30, func_only=True), pytest.mark.deltamq_only]

SELECTOR = "x-filter-jms-selector"


def _publish(ch: BlockingChannel, exchange: str, key: str, body: bytes, **headers: Any) -> None:
    ch.basic_publish(exchange, key, body, pika.BasicProperties(headers=headers))


def _collect(conn: pika.BlockingConnection, ch: BlockingChannel, queue: str, selector: str,
             into: list[bytes]) -> str:
    def on_message(channel: BlockingChannel, method: Any, _props: Any, body: bytes) -> None:
        into.append(body)
        channel.basic_ack(method.delivery_tag)
    return ch.basic_consume(queue, on_message, arguments={SELECTOR: selector})


def test_two_consumers_with_selectors_share_one_queue(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    queue = unique("q.selectors")
    ch.queue_declare(queue, auto_delete=False)
    red: list[bytes] = []
    blue: list[bytes] = []
    red_tag = _collect(conn, ch, queue, "color = 'red' AND size > 2", red)
    blue_tag = _collect(conn, ch, queue, "color IN ('blue', 'navy')", blue)
    _publish(ch, "", queue, b"red-big", color="red", size=5)
    _publish(ch, "", queue, b"blue", color="blue", size=1)
    _publish(ch, "", queue, b"red-small", color="red", size=1)   # matches nobody
    _publish(ch, "", queue, b"navy", color="navy", size=9)
    _publish(ch, "", queue, b"red-huge", color="red", size=50)
    wait_until(lambda: conn.process_data_events(0.05) or (len(red) == 2 and len(blue) == 2),
               what="two messages for each consumer")
    assert red == [b"red-big", b"red-huge"]
    assert blue == [b"blue", b"navy"]
    ch.basic_cancel(red_tag)
    ch.basic_cancel(blue_tag)
    # the message no selector matched is still queued, and a plain get takes it
    ok = wait_until(lambda: ch.queue_declare(queue, passive=True).method.message_count == 1,
                    what="the unmatched message to stay queued")
    assert ok
    method, _props, body = ch.basic_get(queue, auto_ack=True)
    assert method is not None and body == b"red-small"
    ch.queue_delete(queue)


def test_a_binding_with_a_selector_routes_only_matches(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    exchange, alerts, everything = unique("x.sel"), unique("q.alerts"), unique("q.all")
    ch.exchange_declare(exchange, "topic", auto_delete=True)
    ch.queue_declare(alerts, auto_delete=False)
    ch.queue_declare(everything, auto_delete=False)
    ch.queue_bind(alerts, exchange, "metrics.#", arguments={SELECTOR: "severity >= 3 OR host LIKE 'db-%'"})
    ch.queue_bind(everything, exchange, "metrics.#")
    samples = [(b"web-1", "web-1", 1), (b"web-4", "web-4", 4), (b"db-1", "db-1", 1), (b"web-2", "web-2", 2)]
    for body, host, severity in samples:
        _publish(ch, exchange, "metrics.cpu", body, host=host, severity=severity)
    wait_until(lambda: ch.queue_declare(everything, passive=True).method.message_count == 4,
               what="every sample in the unfiltered queue")
    got = []
    while (message := ch.basic_get(alerts, auto_ack=True))[0] is not None:
        got.append(message[2])
    assert got == [b"web-4", b"db-1"]
    ch.queue_delete(alerts)
    ch.queue_delete(everything)


def test_a_bad_selector_closes_the_channel_with_406(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    queue = unique("q.badsel")
    ch.queue_declare(queue)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.basic_consume(queue, lambda *a: None, arguments={SELECTOR: "color = 'red' AND"})
    assert info.value.reply_code == 406
    assert "position 17" in info.value.reply_text
    other = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        other.queue_bind(queue, "amq.fanout", arguments={SELECTOR: "size BETWEEN 1 OR 2"})
    assert info.value.reply_code == 406 and "expected AND" in info.value.reply_text
    conn.channel().queue_delete(queue)


@pytest.mark.timeout(120, func_only=True)
def test_a_durable_selective_binding_survives_a_restart() -> None:
    if os.environ.get("DELTAMQ_TEST_AMQP_URL"):
        pytest.skip("starts a broker of its own: DeltaMQ only")
    with DeltaMQProcess() as proc:
        def channel() -> BlockingChannel:
            return pika.BlockingConnection(
                pika.ConnectionParameters("127.0.0.1", proc.amqp_port)).channel()

        ch = channel()
        ch.exchange_declare("events", "fanout", durable=True)
        ch.queue_declare("big-events", durable=True)
        ch.queue_bind("big-events", "events", arguments={SELECTOR: "size > 10"})   # ok once stored
        assert proc.proc is not None
        os.killpg(proc.proc.pid, signal.SIGKILL)
        proc.proc.wait(timeout=30)
        proc.start()
        ch = channel()
        ch.confirm_delivery()
        for size in (5, 50):
            _publish(ch, "events", "", f"size-{size}".encode(), size=size)
        assert ch.queue_declare("big-events", passive=True).method.message_count == 1
        assert ch.basic_get("big-events", auto_ack=True)[2] == b"size-50"
