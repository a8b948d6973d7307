"""A consumer whose own delivery code fails is closed, not the publisher that fed its queue
(in memory, both engines, one real namespace shared by the connections of a test).

Queues deliver within the turn of whoever made a message deliverable: a publish on one
connection runs the consumer's code of another.  The failure is injected into the consumer's
side only (its ``deliver``, or the 1.0 conversion of the message); the publisher must keep its
connection and its confirm, the consumer's connection gets the internal error, and the message
goes to another consumer, or stays queued, intact.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from broker.messaging.message import MessageProperties
from broker.messaging.queue_entry import QueueEntry
from broker.protocol.amqp0_9_1 import methods as m
from broker.protocol.amqp0_9_1.channel import Channel
from broker.protocol.amqp0_9_1.connection import State
from broker.protocol.amqp0_9_1.delivery import Subscription
from broker.protocol.amqp1_0 import links
from broker.protocol.amqp1_0.conditions import AmqpErrorCondition
from broker.protocol.amqp1_0.connection import State as State10
from broker.protocol.amqp1_0.definitions import Accepted, Attach, Close, Disposition, Transfer
from broker.protocol.amqp1_0.links import SendingLink
from broker.protocol.amqp1_0.sections import MessageSections

from .amqp1_0.engine_client import Client10, Host10, message_payload
from .harness import Client, Delivery

INTERNAL_ERROR = 541


class Bug(RuntimeError):
    """What the injected consumer code raises."""


def _bug_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR and r.exc_info is not None
            and isinstance(r.exc_info[1], Bug)]


def _opened(host: Host10, *, queue: str | None = "q", confirming: bool = False) -> Client:
    client = Client(host)
    client.handshake()
    client.open_channel(1)
    if queue is not None:
        client.send(1, m.QueueDeclare(queue=queue))
        client.expect(m.QueueDeclareOk, 1)
    if confirming:
        client.send(1, m.ConfirmSelect())
        client.expect(m.ConfirmSelectOk, 1)
    return client


def _consuming(host: Host10, tag: str, *, no_ack: bool = False) -> Client:
    client = _opened(host, queue=None if "q" in host.namespace.queues else "q")
    client.send(1, m.BasicConsume(queue="q", consumer_tag=tag, no_ack=no_ack))
    client.expect(m.BasicConsumeOk, 1)
    return client


def _receiving10(host: Host10, credit: int = 10) -> Client10:
    client = Client10(host)
    client.handshake()
    client.begin()
    client.attach_receiver("q")
    client.expect(Attach)
    client.credit(1, credit)
    client.take()
    return client


def _failing_for(tag: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Subscription ``tag``'s deliver raises once it recorded the delivery as unacked."""
    real = Subscription.deliver

    def deliver(self: Subscription, entry: QueueEntry) -> None:
        if self.tag != tag:
            real(self, entry)
            return
        channel = self.channel
        channel.unacked[channel._next_tag] = (entry, self)     # as far as the real one gets
        channel.unacked_bytes += entry.message.body_size
        self.unacked += 1
        raise Bug("injected")

    monkeypatch.setattr(Subscription, "deliver", deliver)


def _closed_541(client: Client) -> None:
    close = client.expect(m.ConnectionClose, 0)
    assert close.reply_code == INTERNAL_ERROR and "Bug('injected')" in close.reply_text
    assert client.server.state is State.CLOSING


def _closed_internal_error(client: Client10) -> None:
    client._read()                             # written in another connection's turn
    close = client.expect(Close)
    assert close.error is not None and close.error.condition == AmqpErrorCondition.INTERNAL_ERROR
    assert client.server.state is State10.CLOSE_SENT


# -- 0-9-1 consumers ------------------------------------------------------------------------

def test_0_9_1_a_failing_consumer_is_closed_and_another_gets_the_message(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    host = Host10()
    publisher = _opened(host, confirming=True)
    victim = _consuming(host, "victim")          # first in the round-robin
    other = _consuming(host, "other")
    _failing_for("victim", monkeypatch)
    publisher.publish(1, "", "q", b"intact")
    ack = publisher.expect(m.BasicAck, 1)
    assert ack.delivery_tag == 1 and publisher.server.state is State.OPEN
    _closed_541(victim)
    assert len(_bug_records(caplog)) == 1
    delivery = other.expect(Delivery, 1)
    assert delivery.body == b"intact" and delivery.method.redelivered
    queue = host.namespace.queues["q"]
    assert queue.consumer_count == 1 and queue.unacked_count == 1 and queue.message_count == 0
    # the victim's close released nothing twice: the other's ack settles the one delivery
    victim.send(0, m.ConnectionCloseOk())
    other.send(1, m.BasicAck(delivery_tag=delivery.method.delivery_tag))
    assert queue.unacked_count == 0 and queue.message_count == 0
    publisher.publish(1, "", "q", b"next")       # the publisher goes on
    publisher.expect(m.BasicAck, 1)
    assert other.expect(Delivery, 1).body == b"next"


def test_0_9_1_an_auto_ack_consumer_that_fails_loses_nothing(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    host = Host10()
    publisher = _opened(host, confirming=True)
    victim = _consuming(host, "victim", no_ack=True)
    monkeypatch.setattr(Subscription, "deliver", lambda self, entry: (_ for _ in ()).throw(Bug("injected")))
    publisher.publish(1, "", "q", b"kept")
    publisher.expect(m.BasicAck, 1)
    _closed_541(victim)
    queue = host.namespace.queues["q"]
    assert queue.message_count == 1 and queue.consumer_count == 0 and queue.unacked_count == 0
    monkeypatch.undo()
    publisher.send(1, m.BasicGet(queue="q", no_ack=True))
    got = publisher.expect(Delivery, 1)
    assert got.body == b"kept" and got.method.redelivered
    assert len(_bug_records(caplog)) == 1


def test_0_9_1_a_poison_message_reaches_the_delivery_limit_instead_of_closing_every_consumer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    host = Host10()
    publisher = _opened(host, confirming=True, queue="dlq")
    publisher.send(1, m.QueueDeclare(queue="q", arguments={
        "x-delivery-limit": 1, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}))
    publisher.expect(m.QueueDeclareOk, 1)
    monkeypatch.setattr(Subscription, "deliver", lambda self, entry: (_ for _ in ()).throw(Bug("injected")))
    first, second = _consuming(host, "one"), _consuming(host, "two")
    publisher.publish(1, "", "q", b"poison")
    publisher.expect(m.BasicAck, 1)
    _closed_541(first)
    _closed_541(second)
    assert host.namespace.queues["q"].message_count == 0
    assert host.namespace.queues["dlq"].message_count == 1


def test_0_9_1_a_consumer_failing_on_queue_deletion_does_not_close_the_deleter(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    host = Host10()
    deleter = _opened(host)
    victim = _consuming(host, "victim")
    other = _consuming(host, "other")
    told: list[str] = []
    real = Subscription.queue_deleted

    def queue_deleted(self: Subscription, queue: Any) -> None:
        told.append(self.tag)
        if self.tag == "victim":
            raise Bug("injected")
        real(self, queue)

    monkeypatch.setattr(Subscription, "queue_deleted", queue_deleted)
    deleter.send(1, m.QueueDelete(queue="q"))
    deleter.expect(m.QueueDeleteOk, 1)
    assert deleter.server.state is State.OPEN and other.server.state is State.OPEN
    assert told == ["victim", "other"]
    _closed_541(victim)
    assert len(_bug_records(caplog)) == 1


# -- 1.0 sending links ----------------------------------------------------------------------

def test_1_0_a_link_whose_conversion_fails_is_closed_and_the_message_stays_queued(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    host = Host10()
    host.namespace.declare_queue("q")
    victim = _receiving10(host)
    publisher = Client10(host)
    publisher.handshake()
    publisher.begin()
    publisher.attach_sender("q", snd_settle_mode=0)
    publisher.take()
    monkeypatch.setattr(links, "transfer_payload_parts",
                        lambda *args, **kwargs: (_ for _ in ()).throw(Bug("injected")))
    publisher.transfer(0, 0, message_payload(b"intact"))       # unsettled: accepted once queued
    disposition = publisher.expect(Disposition)
    assert isinstance(disposition.state, Accepted) and publisher.server.state is State10.OPEN
    _closed_internal_error(victim)
    assert len(_bug_records(caplog)) == 1
    queue = host.namespace.queues["q"]
    assert queue.message_count == 1 and queue.consumer_count == 0 and queue.unacked_count == 0
    monkeypatch.undo()
    later = _receiving10(host, credit=0)
    later.credit(1, 1)
    transfers = [(v, p) for _c, v, p in later.take() if isinstance(v, Transfer)]
    assert publisher.server.state is State10.OPEN
    assert len(transfers) == 1
    sections = MessageSections(transfers[0][1])
    assert sections.body() == [b"intact"] and not sections.first_acquirer


def test_0_9_1_to_1_0_a_failing_link_is_closed_and_a_0_9_1_consumer_gets_the_message(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    host = Host10()
    publisher = _opened(host, confirming=True)
    victim = _receiving10(host)               # first in the round-robin
    other = _consuming(host, "other")
    real = SendingLink.deliver

    def deliver(self: SendingLink, entry: QueueEntry) -> None:
        real(self, entry)                      # recorded and written, then it fails
        raise Bug("injected")

    monkeypatch.setattr(SendingLink, "deliver", deliver)
    publisher.publish(1, "", "q", b"across")
    publisher.expect(m.BasicAck, 1)
    assert publisher.server.state is State.OPEN
    _closed_internal_error(victim)
    assert len(_bug_records(caplog)) == 1
    delivery = other.expect(Delivery, 1)
    assert delivery.body == b"across" and delivery.method.redelivered
    queue = host.namespace.queues["q"]
    assert queue.unacked_count == 1 and queue.consumer_count == 1
    other.send(1, m.BasicAck(delivery_tag=delivery.method.delivery_tag))
    assert queue.unacked_count == 0 and queue.message_count == 0


# -- producer flow control ------------------------------------------------------------------

def test_0_9_1_a_publisher_failing_on_its_release_does_not_close_the_deleter(
        caplog: pytest.LogCaptureFixture) -> None:
    host = Host10()
    victim = _opened(host, queue=None)
    victim.send(1, m.QueueDeclare(queue="slow", arguments={
        "overflowPolicy": "PRODUCER_FLOW_CONTROL", "maximumQueueDepthMessages": 0}))
    victim.expect(m.QueueDeclareOk, 1)
    victim.publish(1, "", "slow", b"x")
    victim.expect(m.ConnectionBlocked, 0)

    def on_change() -> None:
        raise Bug("injected")

    victim.server.publisher_flow._on_change = on_change     # its release runs in the deleter's turn
    deleter = _opened(host, queue=None)
    deleter.send(1, m.QueueDelete(queue="slow"))
    deleter.expect(m.QueueDeleteOk, 1)
    assert deleter.server.state is State.OPEN
    _closed_541(victim)
    assert len(_bug_records(caplog)) == 1


# -- 1.0 link stealing ----------------------------------------------------------------------

def test_1_0_a_link_failing_to_let_go_of_a_stolen_link_closes_its_connection_not_the_stealers(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    host = Host10()
    host.namespace.declare_queue("q")
    victim = _receiving10(host)                     # the same container and link name:
    monkeypatch.setattr(SendingLink, "link_stolen", lambda self, link: (_ for _ in ()).throw(Bug("injected")))
    stealer = Client10(host)
    stealer.handshake()
    stealer.begin()
    stealer.attach_receiver("q")                    # steals it
    _closed_internal_error(victim)
    assert stealer.server.state is State10.OPEN
    assert stealer.expect(Attach).source is not None    # the link is the stealer's
    assert len(_bug_records(caplog)) == 1


# -- 0-9-1 direct reply-to ------------------------------------------------------------------

def test_0_9_1_a_requester_failing_on_its_direct_reply_closes_its_connection_not_the_replier(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    host = Host10()
    requester = _opened(host, queue="rpc")
    requester.send(1, m.BasicConsume(queue="amq.rabbitmq.reply-to", consumer_tag="replies", no_ack=True))
    requester.expect(m.BasicConsumeOk, 1)
    requester.publish(1, "", "rpc", b"2+2?", MessageProperties(reply_to="amq.rabbitmq.reply-to"))
    replier = _opened(host, queue=None, confirming=True)
    replier.send(1, m.BasicGet(queue="rpc", no_ack=True))
    reply_to = replier.expect(Delivery, 1).properties.reply_to
    monkeypatch.setattr(Channel, "deliver_reply", lambda *args: (_ for _ in ()).throw(Bug("injected")))
    replier.publish(1, "", reply_to, b"4")
    replier.expect(m.BasicAck, 1)
    assert replier.server.state is State.OPEN
    _closed_541(requester)
    assert len(_bug_records(caplog)) == 1


# -- dead-lettering into a queue with a failing consumer ------------------------------------

def test_0_9_1_a_consumer_of_the_dead_letter_queue_failing_does_not_close_the_rejecter(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    host = Host10()
    rejecter = _opened(host, queue="dlq", confirming=True)
    rejecter.send(1, m.QueueDeclare(queue="work", arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}))
    rejecter.expect(m.QueueDeclareOk, 1)
    rejecter.publish(1, "", "work", b"rejected")
    rejecter.expect(m.BasicAck, 1)
    victim = _opened(host, queue=None)
    victim.send(1, m.BasicConsume(queue="dlq", consumer_tag="victim"))
    victim.expect(m.BasicConsumeOk, 1)
    _failing_for("victim", monkeypatch)
    rejecter.send(1, m.BasicGet(queue="work"))
    got = rejecter.expect(Delivery, 1)
    rejecter.send(1, m.BasicReject(delivery_tag=got.method.delivery_tag, requeue=False))
    _closed_541(victim)
    assert rejecter.server.state is State.OPEN
    dlq = host.namespace.queues["dlq"]
    assert dlq.message_count == 1 and dlq.consumer_count == 0 and dlq.unacked_count == 0
    assert len(_bug_records(caplog)) == 1
