"""A bug inside one connection's code closes that connection with the protocol's internal error,
logged once with its traceback, and the broker goes on serving the others (in memory, both engines).

The bug is injected by making one method handler (or the work after a read) raise; everything
else is the real engine over one real namespace shared by the connections of a test.
"""

from __future__ import annotations

import logging

import pytest

from broker.messaging.queue import Queue
from broker.protocol import internal_errors
from broker.protocol.amqp0_9_1 import methods as m
from broker.protocol.amqp0_9_1.channel import Channel
from broker.protocol.amqp1_0.conditions import AmqpErrorCondition
from broker.protocol.amqp1_0.connection import AmqpConnection10, State as State10
from broker.protocol.amqp1_0.definitions import Close
from broker.protocol.amqp1_0.session import Session
from broker.protocol.amqp0_9_1.connection import State
from broker.protocol.engine import Finished

from .amqp1_0.engine_client import Client10, Host10, message_payload
from .harness import Client, Delivery, FakeHost

INTERNAL_ERROR = 541


class Bug(RuntimeError):
    """What the injected handler raises."""


def _raise(*args: object, **kwargs: object) -> None:
    raise Bug("injected")


def _opened(host: FakeHost) -> Client:
    client = Client(host)
    client.handshake()
    client.open_channel(1)
    return client


def _declared(client: Client, queue: str) -> Client:
    client.send(1, m.QueueDeclare(queue=queue))
    client.expect(m.QueueDeclareOk, 1)
    return client


def _confirming(client: Client) -> Client:
    client.send(1, m.ConfirmSelect())
    client.expect(m.ConfirmSelectOk, 1)
    return client


def _internal_error_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR and r.exc_info is not None
            and isinstance(r.exc_info[1], Bug)]


def _get_body(client: Client, queue: str) -> bytes:
    client.send(1, m.BasicGet(queue=queue, no_ack=True))
    delivery = client.expect(Delivery, 1)
    return bytes(delivery.body)


# -- AMQP 0-9-1 ---------------------------------------------------------------------------

def test_0_9_1_a_failing_method_handler_closes_only_its_connection(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    host = FakeHost()
    other = _declared(_opened(host), "q")
    victim = _confirming(_opened(host))     # a publish confirmed before the bug stays confirmed
    victim.publish(1, "", "q", b"confirmed")
    victim.expect(m.BasicAck, 1)
    monkeypatch.setattr(Channel, "_basic_qos", _raise)
    victim.open_channel(2)                  # handlers are bound when a channel opens
    victim.send(2, m.BasicQos(prefetch_count=1))
    close = victim.expect(m.ConnectionClose, 0)
    assert close.reply_code == INTERNAL_ERROR and "Bug('injected')" in close.reply_text
    assert (close.class_id, close.method_id) == (0, 0)
    assert victim.server.state is State.CLOSING
    assert len(_internal_error_records(caplog)) == 1
    victim.send(0, m.ConnectionCloseOk())
    assert victim.server.state is State.CLOSED
    # the other connection is served as before, and has what was confirmed
    assert _get_body(other, "q") == b"confirmed"
    other.publish(1, "", "q", b"after")
    assert _get_body(other, "q") == b"after"


def test_0_9_1_a_failure_after_the_read_confirms_is_an_internal_error(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    host = FakeHost()
    victim = _confirming(_declared(_opened(host), "q"))
    monkeypatch.setattr(Channel, "flush_confirms", _raise)     # runs in _after_input
    victim.publish(1, "", "q", b"m")
    close = victim.expect(m.ConnectionClose, 0)
    assert close.reply_code == INTERNAL_ERROR
    assert len(_internal_error_records(caplog)) == 1
    monkeypatch.undo()
    other = _opened(host)
    assert _get_body(other, "q") == b"m"     # routed before the failure: not lost


def test_0_9_1_a_queue_whose_dispatch_fails_does_not_stop_the_others(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    host = FakeHost()
    publisher = _opened(host)
    for name in ("broken", "fine"):
        _declared(publisher, name).publish(1, "", name, name.encode())
    real_dispatch = Queue.dispatch

    def dispatch(queue: Queue) -> None:
        if queue.name == "broken":
            raise Bug("injected")
        real_dispatch(queue)

    monkeypatch.setattr(Queue, "dispatch", dispatch)
    consumer = _opened(host)
    # both consumes in one read: both queues wait for the dispatch after it
    consumer.raw(consumer.encode(1, m.BasicConsume(queue="broken", consumer_tag="b", no_ack=True))
                 + consumer.encode(1, m.BasicConsume(queue="fine", consumer_tag="f", no_ack=True)))
    received = [obj for _channel, obj in consumer.take()]
    deliveries = [obj for obj in received if isinstance(obj, Delivery)]
    assert [(d.method.consumer_tag, d.body) for d in deliveries] == [("f", b"fine")]
    assert isinstance(received[-1], m.ConnectionClose) and received[-1].reply_code == INTERNAL_ERROR
    assert len(_internal_error_records(caplog)) == 1
    monkeypatch.undo()
    assert _get_body(publisher, "broken") == b"broken"      # still there for the others


def test_0_9_1_closing_that_fails_as_well_drops_the_connection(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    host = FakeHost()
    victim = _opened(host)
    events: list[object] = []
    victim.server.on_event = events.append
    monkeypatch.setattr(Channel, "_basic_qos", _raise)
    monkeypatch.setattr(Channel, "release_all", _raise)        # the teardown fails too
    victim.open_channel(2)
    victim.send(2, m.BasicQos(prefetch_count=1))
    assert victim.server.state is State.CLOSED and victim.server.closed
    assert any(isinstance(event, Finished) for event in events)
    assert len(_internal_error_records(caplog)) == 1


def test_dispatch_pending_raises_the_first_failure_after_every_queue_ran() -> None:
    ran: list[str] = []

    class Marked:
        def __init__(self, name: str, fails: bool) -> None:
            self.name, self.fails = name, fails

        def dispatch(self) -> None:
            ran.append(self.name)
            if self.fails:
                raise Bug(self.name)

    class Engine:
        def __init__(self) -> None:
            self._dispatch_pending = {Marked("a", True), Marked("b", False), Marked("c", True)}

    engine = Engine()
    with pytest.raises(Bug):
        internal_errors.dispatch_pending(engine)
    assert sorted(ran) == ["a", "b", "c"] and not engine._dispatch_pending


# -- AMQP 1.0 ---------------------------------------------------------------------------

def _opened10(host: Host10) -> Client10:
    client = Client10(host)
    client.handshake()
    client.begin()
    client.take()
    return client


def _closed_with(client: Client10) -> Close:
    close = client.expect(Close)
    assert close.error is not None
    return close


def test_1_0_a_failing_performative_handler_closes_only_its_connection(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    host = Host10()
    host.namespace.declare_queue("q")
    other = _opened10(host)
    victim = _opened10(host)
    monkeypatch.setattr(Session, "_attach", _raise)
    victim.attach_sender("q")
    close = _closed_with(victim)
    assert close.error.condition == AmqpErrorCondition.INTERNAL_ERROR
    assert "Bug('injected')" in close.error.description
    assert victim.server.state is State10.CLOSE_SENT
    assert len(_internal_error_records(caplog)) == 1
    monkeypatch.undo()
    # the other connection sends a message and the queue has it
    other.attach_sender("q")
    other.take()
    other.transfer(0, 0, message_payload(b"still served"), settled=True)
    assert host.namespace.queues["q"].message_count == 1


def test_1_0_a_failure_in_the_dispositions_after_the_read_is_an_internal_error(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    host = Host10()
    host.namespace.declare_queue("q")
    victim = _opened10(host)
    victim.attach_sender("q")
    victim.take()
    monkeypatch.setattr(Session, "flush_dispositions", _raise)
    victim.transfer(0, 0, message_payload(b"m"))          # unsettled: accepted after the read
    assert _closed_with(victim).error.condition == AmqpErrorCondition.INTERNAL_ERROR
    assert len(_internal_error_records(caplog)) == 1
    assert host.namespace.queues["q"].message_count == 1


def test_1_0_closing_that_fails_as_well_drops_the_connection(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    host = Host10()
    victim = _opened10(host)
    monkeypatch.setattr(Session, "_attach", _raise)
    monkeypatch.setattr(AmqpConnection10, "_teardown", _raise)
    victim.attach_sender("q")
    assert victim.server.state is State10.CLOSED and victim.server.closed
    assert any(isinstance(event, Finished) for event in victim.events)
    assert len(_internal_error_records(caplog)) == 1
