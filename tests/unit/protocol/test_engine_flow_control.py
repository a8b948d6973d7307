"""Producer flow control on the 0-9-1 engine: connection.blocked to the publishers of an overfull queue only."""

from __future__ import annotations

import pytest

from broker.protocol.amqp0_9_1 import methods as m
from broker.protocol.engine import PauseReading, ResumeReading

from .harness import Client, FakeHost

FLOW_CONTROLLED = {"overflowPolicy": "PRODUCER_FLOW_CONTROL", "maximumQueueDepthMessages": 3}


@pytest.fixture
def host() -> FakeHost:
    return FakeHost()


def _client(host: FakeHost) -> Client:
    c = Client(host)
    c.handshake()
    c.open_channel(1)
    return c


def _blocked_publisher(host: FakeHost) -> Client:
    """A client whose first publish overfilled queue 'slow' (a maximum of 0 messages)."""
    fast = _client(host)
    fast.send(1, m.QueueDeclare(queue="slow", arguments={**FLOW_CONTROLLED, "maximumQueueDepthMessages": 0}))
    fast.expect(m.QueueDeclareOk)
    fast.publish(1, "", "slow", b"x")
    fast.expect(m.ConnectionBlocked, 0)
    return fast


def test_the_publisher_of_an_overfull_queue_is_blocked_and_the_other_is_not(host: FakeHost) -> None:
    fast, other = _client(host), _client(host)
    fast.send(1, m.QueueDeclare(queue="slow", arguments=FLOW_CONTROLLED))
    fast.expect(m.QueueDeclareOk)
    other.send(1, m.QueueDeclare(queue="free"))
    other.expect(m.QueueDeclareOk)
    for n in range(4):
        fast.publish(1, "", "slow", bytes([n]))
    assert fast.expect(m.ConnectionBlocked, 0).reason == "queue 'slow' overfull"
    assert fast.server.blocked_reason == "queue 'slow' overfull"
    fast.publish(1, "", "slow", b"held")                 # held, not routed, while blocked
    assert host.namespace.queue("slow").message_count == 4
    for _ in range(10):
        other.publish(1, "", "free", b"goes on")
    assert other.take() == []
    assert host.namespace.queue("free").message_count == 10
    assert other.server.blocked_reason == ""


def test_draining_below_the_resume_limit_unblocks_and_lets_the_held_publish_in(host: FakeHost) -> None:
    fast = _client(host)
    fast.send(1, m.QueueDeclare(queue="slow", arguments=FLOW_CONTROLLED))
    fast.expect(m.QueueDeclareOk)
    for n in range(4):
        fast.publish(1, "", "slow", bytes([n]))
    fast.expect(m.ConnectionBlocked, 0)
    fast.publish(1, "", "slow", b"held")
    queue = host.namespace.queue("slow")
    queue.get(no_ack=True)                               # 3 left: 100%, not yet 80%
    host.namespace.flow.recheck()
    assert fast.take() == []
    queue.get(no_ack=True)                               # 2 left: at or below 80% of 3
    host.namespace.flow.recheck()
    fast.expect(m.ConnectionUnblocked, 0)
    bodies = []
    while (entry := queue.get(no_ack=True)) is not None:
        bodies.append(entry.message.body)
    assert bodies == [b"\x02", b"\x03", b"held"]        # nothing lost, in order


def test_a_confirmed_publish_is_acknowledged_once_released(host: FakeHost) -> None:
    fast = _client(host)
    fast.send(1, m.ConfirmSelect())
    fast.expect(m.ConfirmSelectOk)
    fast.send(1, m.QueueDeclare(queue="slow", arguments={**FLOW_CONTROLLED, "maximumQueueDepthMessages": 1}))
    fast.expect(m.QueueDeclareOk)
    fast.publish(1, "", "slow", b"first")
    fast.publish(1, "", "slow", b"second")              # accepted, and it overfills the queue
    answers = [(type(method).__name__, getattr(method, "delivery_tag", None)) for _, method in fast.take()]
    assert answers == [("BasicAck", 1), ("ConnectionBlocked", None), ("BasicAck", 2)]
    fast.publish(1, "", "slow", b"third")
    assert fast.take() == []                             # held: not confirmed yet
    host.namespace.queue("slow").purge()
    host.namespace.flow.recheck()
    fast.expect(m.ConnectionUnblocked, 0)
    assert fast.expect(m.BasicAck, 1).delivery_tag == 3


def test_a_blocked_publisher_stops_being_read_past_the_hold_limit(host: FakeHost) -> None:
    events: list[object] = []
    fast = _client(host)
    fast.server.on_event = events.append
    fast.send(1, m.QueueDeclare(queue="slow", arguments={**FLOW_CONTROLLED, "maximumQueueDepthMessages": 25}))
    fast.expect(m.QueueDeclareOk)
    fast.raw(b"".join(fast.publish_bytes(1, "", "slow", b"x") for _ in range(26)))
    fast.expect(m.ConnectionBlocked, 0)
    fast.raw(b"".join(fast.publish_bytes(1, "", "slow", b"y" * 60_000) for _ in range(20)))
    assert events == [PauseReading()]                    # 1.2 MB held: no more is read
    queue = host.namespace.queue("slow")
    queue.purge()
    host.namespace.flow.recheck()
    fast.expect(m.ConnectionUnblocked, 0)
    assert events == [PauseReading(), ResumeReading()]
    assert queue.message_count == 20


def test_what_a_release_lets_in_may_overfill_the_queue_again(host: FakeHost) -> None:
    fast = _blocked_publisher(host)
    fast.raw(b"".join(fast.publish_bytes(1, "", "slow", bytes([n])) for n in range(5)))
    queue = host.namespace.queue("slow")
    queue.purge()
    host.namespace.flow.recheck()
    fast.expect(m.ConnectionUnblocked, 0)
    fast.expect(m.ConnectionBlocked, 0)                  # the first held publish overfilled it
    assert [e.message.body for e in queue.browse()] == [b"\x00"]
    queue.purge()
    host.namespace.flow.recheck()
    fast.expect(m.ConnectionUnblocked, 0)
    fast.expect(m.ConnectionBlocked, 0)
    assert [e.message.body for e in queue.browse()] == [b"\x01"]


def test_the_alarm_clearing_leaves_a_queue_blocked_publisher_blocked(host: FakeHost) -> None:
    fast = _client(host)
    fast.send(1, m.QueueDeclare(queue="slow", arguments={**FLOW_CONTROLLED, "maximumQueueDepthMessages": 0}))
    fast.expect(m.QueueDeclareOk)
    fast.server.set_blocked(True, "low on memory")
    fast.publish(1, "", "slow", b"x")                   # told at its publish, which overfills the queue
    assert fast.expect(m.ConnectionBlocked, 0).reason == "low on memory"
    assert fast.server.blocked_reason == "low on memory; queue 'slow' overfull"
    fast.server.set_blocked(False, "")
    assert fast.take() == []                             # the queue still blocks it
    assert fast.server.blocked_reason == "queue 'slow' overfull"
    host.namespace.queue("slow").purge()
    host.namespace.flow.recheck()
    fast.expect(m.ConnectionUnblocked, 0)
    assert fast.server.blocked_reason == ""


def test_closing_the_connection_releases_its_place_in_the_queue(host: FakeHost) -> None:
    fast = _blocked_publisher(host)
    queue = host.namespace.queue("slow")
    assert host.namespace.flow.blocked_publishers(queue) == 1
    fast.send(0, m.ConnectionClose(reply_code=200))
    fast.expect(m.ConnectionCloseOk, 0)
    assert host.namespace.flow.blocked_publishers(queue) == 0


def test_a_publisher_over_its_rate_limit_is_blocked_then_released_in_time(host: FakeHost) -> None:
    host.namespace.flow.rates.set_limits(3, None)
    fast = _client(host)
    fast.send(1, m.QueueDeclare(queue="q"))
    fast.expect(m.QueueDeclareOk)
    for n in range(4):
        fast.publish(1, "", "q", bytes([n]))
    assert fast.expect(m.ConnectionBlocked, 0).reason == "publish rate limit"
    fast.publish(1, "", "q", b"held")
    deadline = host.namespace.next_deadline()
    assert deadline is not None
    host.clock.now = deadline
    host.namespace.run_due(host.clock.now)
    fast.expect(m.ConnectionUnblocked, 0)
    assert host.namespace.queue("q").message_count == 5 and fast.take() == []
