"""AMQP 1.0 nodes with an unmodified python-qpid-proton against `deltamq serve`: dynamic reply-to
queues, selectors, browsing, consumer priority, and a durable subscription across a restart
(docs/amqp-1-0-nodes.md)."""

from __future__ import annotations

import os
import signal
import uuid
from typing import Any

import pytest

from tests.waiting import wait_until
from .conftest import DeltaMQProcess
from .test_amqp1_0_proton import _connect, amqp10, queue  # noqa: F401 (fixtures)

proton = pytest.importorskip("proton")
from proton import Message, symbol  # noqa: E402
from proton.reactor import Copy, DurableSubscription, ReceiverOption, Selector  # noqa: E402
from proton.utils import LinkDetached  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

if os.environ.get("DELTAMQ_TEST_AMQP_URL"):
    pytest.skip("AMQP 1.0 is DeltaMQ's here (an external 0-9-1 broker may not speak it)", allow_module_level=True)


class Priority(ReceiverOption):
    """The link property rabbitmq:priority."""

    def __init__(self, priority: int) -> None:
        self.priority = priority

    def apply(self, receiver: Any) -> None:
        receiver.properties = {symbol("rabbitmq:priority"): self.priority}


def _drain(receiver: Any, count: int) -> list[Any]:
    bodies = []
    for _ in range(count):
        bodies.append(receiver.receive(timeout=10).body)
        receiver.accept()
    return bodies


def test_a_dynamic_receiver_gets_replies_sent_to_its_address(broker: Any, amqp10: Any) -> None:
    replies = amqp10.create_receiver(None, dynamic=True, credit=5)
    address = replies.link.remote_source.address
    assert address.startswith("TempQueue") and replies.link.remote_source.dynamic
    responder = _connect(broker.port)
    try:
        responder.create_sender(address).send(Message(body="pong", correlation_id="r1"))
    finally:
        responder.close()
    reply = replies.receive(timeout=10)
    assert (reply.body, reply.correlation_id) == ("pong", "r1")
    replies.accept()
    replies.close()
    wait_until(lambda: not _queue_exists(broker.port, address), timeout=20, interval=0.5,
               what=f"{address} deleted with its link")


def test_a_selector_filters_a_queue_and_a_bad_one_is_refused(amqp10: Any, queue: str) -> None:
    sender = amqp10.create_sender(queue)
    for i in range(6):
        sender.send(Message(body=f"m{i}", properties={"color": "red" if i % 2 == 0 else "blue"}))
    red = amqp10.create_receiver(queue, credit=10, options=Selector("color = 'red'"))
    echoed = red.link.remote_source.filter                      # echoed: it was applied
    echoed.rewind()
    echoed.next()
    assert "color = 'red'" in str(echoed.get_object())
    assert _drain(red, 3) == ["m0", "m2", "m4"]
    red.close()
    assert _drain(amqp10.create_receiver(queue, name="rest", credit=10), 3) == ["m1", "m3", "m5"]
    with pytest.raises(LinkDetached) as raised:
        amqp10.create_receiver(queue, name="bad", options=Selector("color = = 'red'"))
    assert "amqp:invalid-field" in str(raised.value)


def test_a_browser_sees_the_messages_and_leaves_them(amqp10: Any, queue: str) -> None:
    sender = amqp10.create_sender(queue)
    for i in range(4):
        sender.send(Message(body=f"m{i}"))
    browser = amqp10.create_receiver(queue, credit=10, options=Copy())
    assert _drain(browser, 4) == ["m0", "m1", "m2", "m3"]
    browser.close()
    assert _drain(amqp10.create_receiver(queue, name="consumer", credit=10), 4) == ["m0", "m1", "m2", "m3"]


def test_a_receiver_of_higher_priority_is_served_first(amqp10: Any, queue: str) -> None:
    amqp10.create_receiver(queue, name="low", credit=10)
    # proton tops a receiver's credit up as deliveries arrive: the high one never runs out, so it
    # gets every message (round-robin would give it every other one)
    high = amqp10.create_receiver(queue, name="high", credit=2, options=Priority(5))
    sender = amqp10.create_sender(queue)
    for i in range(4):
        sender.send(Message(body=f"m{i}"))
    assert _drain(high, 4) == ["m0", "m1", "m2", "m3"]


def _queue_exists(port: int, name: str) -> bool:
    import pika

    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port)) as conn:
        try:
            conn.channel().queue_declare(name, passive=True)
        except pika.exceptions.ChannelClosedByBroker:
            return False
    return True


def test_a_durable_subscription_survives_a_broker_restart_until_it_is_closed() -> None:
    container_id = f"subscriber-{uuid.uuid4().hex[:8]}"
    with DeltaMQProcess() as proc:
        connection = _connect(proc.amqp_port, container_id)
        subscription = connection.create_receiver("amq.topic/news.#", name="news", credit=0,
                                                  options=DurableSubscription())
        subscription.link.detach()                             # suspended, not closed
        connection.close()
        publisher = _connect(proc.amqp_port)
        sender = publisher.create_sender("/exchanges/amq.topic/news.today")
        for i in range(3):
            sender.send(Message(body=f"n{i}", durable=True))
        publisher.close()
        assert proc.proc is not None
        os.killpg(proc.proc.pid, signal.SIGKILL)
        proc.proc.wait(timeout=30)
        proc.start()
        connection = _connect(proc.amqp_port, container_id)
        subscription = connection.create_receiver("amq.topic/news.#", name="news", credit=10,
                                                  options=DurableSubscription())
        assert _drain(subscription, 3) == ["n0", "n1", "n2"]
        subscription.close()                                   # unsubscribe
        connection.close()
        name = f"qpidsub_/{container_id}_/news_/durable"
        wait_until(lambda: not _queue_exists(proc.amqp_port, name), timeout=20, interval=0.5, what=f"{name} deleted")
