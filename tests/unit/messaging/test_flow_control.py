"""Producer flow control in the messaging core: overfull queues block the publishers feeding them."""

from __future__ import annotations

import logging

import pytest

from broker.messaging.arguments import queue_settings
from broker.messaging.flow_control import (DEFAULT_RESUME_LIMIT, PRODUCER_FLOW_CONTROL, PublisherFlow,
                                           resume_limit)
from broker.messaging.message import Message
from broker.messaging.namespace import Namespace


class Recorder:
    """A publisher's flow whose changes are noted as (blocked, reason)."""

    def __init__(self) -> None:
        self.changes: list[tuple[bool, str]] = []
        self.flow = PublisherFlow(lambda: self.changes.append((self.flow.blocked, self.flow.reason)))


def _publish(ns: Namespace, publisher: Recorder, queue: str, body: bytes = b"x") -> None:
    message = Message(exchange="", routing_key=queue, body=body, arrival=ns.clock())
    queues = ns.route("", message)
    for q in queues:
        assert q.enqueue(message)
    ns.flow.published(publisher.flow, queues)


def _flow_queue(ns: Namespace, name: str, **limits: object) -> None:
    ns.declare_queue(name, arguments={"overflowPolicy": "PRODUCER_FLOW_CONTROL", **limits})


def test_broker_j_names_choose_the_policy() -> None:
    settings = queue_settings({"overflowPolicy": "PRODUCER_FLOW_CONTROL",
                               "maximumQueueDepthMessages": 10, "maximumQueueDepthBytes": -1})
    assert settings.overflow == PRODUCER_FLOW_CONTROL
    assert (settings.max_length, settings.max_length_bytes) == (10, None)
    assert queue_settings({"qpid.policy_type": "producer_flow_control",
                           "qpid.max_size": 500}).overflow == PRODUCER_FLOW_CONTROL


def test_a_flow_controlled_queue_keeps_every_message_past_its_maximum() -> None:
    ns = Namespace("v")
    _flow_queue(ns, "q", maximumQueueDepthMessages=2)
    publisher = Recorder()
    for n in range(5):
        _publish(ns, publisher, "q", bytes([n]))
    assert ns.queue("q").message_count == 5           # neither dropped nor refused


def test_only_the_publisher_feeding_the_overfull_queue_is_blocked(caplog: pytest.LogCaptureFixture) -> None:
    ns = Namespace("v")
    _flow_queue(ns, "slow", maximumQueueDepthMessages=3)
    ns.declare_queue("other")
    fast, other = Recorder(), Recorder()
    with caplog.at_level(logging.WARNING, "deltamq"):
        for _ in range(3):
            _publish(ns, fast, "slow")
        assert fast.changes == [] and not ns.flow.is_overfull(ns.queue("slow"))
        _publish(ns, fast, "slow")                       # 4 > 3: overfull
        for _ in range(10):
            _publish(ns, other, "other")
    assert fast.changes == [(True, "queue 'slow' overfull")]
    assert other.changes == []
    assert ns.flow.is_overfull(ns.queue("slow")) and ns.flow.blocked_publishers(ns.queue("slow")) == 1
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == ["queue 'slow' in vhost 'v' is overfull"]


def test_release_waits_for_the_resume_limit_then_comes_once(caplog: pytest.LogCaptureFixture) -> None:
    ns = Namespace("v")
    _flow_queue(ns, "q", maximumQueueDepthMessages=10)
    queue = ns.queue("q")
    publisher = Recorder()
    for _ in range(11):
        _publish(ns, publisher, "q")
    assert publisher.flow.blocked
    for _ in range(2):                                   # 9 left: below the maximum, above 80%
        assert queue.get(no_ack=True) is not None
    ns.flow.recheck()
    assert publisher.flow.blocked
    entry = queue.get()                                  # delivered but unsettled: still counted
    assert entry is not None
    ns.flow.recheck()
    assert publisher.flow.blocked
    queue.settle(entry)                                  # 8 = 80% of 10: underfull
    with caplog.at_level(logging.WARNING, "deltamq"):
        ns.flow.recheck()
        ns.flow.recheck()
    assert publisher.changes == [(True, "queue 'q' overfull"), (False, "")]
    assert len([r for r in caplog.records if "underfull" in r.getMessage()]) == 1
    assert ns.flow.next_recheck is None


def test_the_byte_maximum_counts_bodies() -> None:
    ns = Namespace("v")
    _flow_queue(ns, "q", maximumQueueDepthBytes=1000)
    publisher = Recorder()
    _publish(ns, publisher, "q", b"x" * 1000)
    assert not publisher.flow.blocked                   # at the maximum is not past it
    _publish(ns, publisher, "q", b"x")
    assert publisher.flow.blocked
    ns.queue("q").purge()
    ns.flow.recheck()
    assert not publisher.flow.blocked


def test_a_publisher_blocked_by_two_queues_is_released_by_the_second() -> None:
    ns = Namespace("v")
    _flow_queue(ns, "a", maximumQueueDepthMessages=0)
    _flow_queue(ns, "b", maximumQueueDepthMessages=0)
    publisher = Recorder()
    _publish(ns, publisher, "a")
    _publish(ns, publisher, "b")
    assert publisher.flow.reason == "queues 'a', 'b' overfull"
    ns.queue("a").purge()
    ns.flow.recheck()
    assert publisher.flow.blocked and publisher.flow.reason == "queue 'b' overfull"
    ns.delete_queue("b")                                  # a deleted queue blocks no one
    assert not publisher.flow.blocked


def test_the_alarm_and_the_queues_block_together() -> None:
    ns = Namespace("v")
    _flow_queue(ns, "q", maximumQueueDepthMessages=0)
    publisher = Recorder()
    publisher.flow.set_alarm("low on memory")
    _publish(ns, publisher, "q")
    assert publisher.flow.reason == "low on memory; queue 'q' overfull"
    publisher.flow.set_alarm("")
    assert publisher.flow.blocked                        # the queue still blocks it
    ns.queue("q").purge()
    ns.flow.recheck()
    assert not publisher.flow.blocked


def test_a_closed_publisher_is_forgotten_by_its_queues() -> None:
    ns = Namespace("v")
    _flow_queue(ns, "q", maximumQueueDepthMessages=0)
    publisher = Recorder()
    _publish(ns, publisher, "q")
    publisher.flow.close()
    assert ns.flow.blocked_publishers(ns.queue("q")) == 0


def test_queues_without_the_policy_are_not_watched() -> None:
    ns = Namespace("v")
    ns.declare_queue("ring", arguments={"x-max-length": 1})
    ns.declare_queue("unlimited", arguments={"overflowPolicy": "PRODUCER_FLOW_CONTROL"})
    assert not ns.flow.watched


def test_recheck_runs_with_the_virtual_host_timers() -> None:
    now = [100.0]
    ns = Namespace("v", clock=lambda: now[0])
    _flow_queue(ns, "q", maximumQueueDepthMessages=0)
    publisher = Recorder()
    assert ns.next_deadline() is None
    _publish(ns, publisher, "q")
    deadline = ns.next_deadline()
    assert deadline is not None and deadline <= now[0]
    ns.queue("q").purge()
    ns.run_due(now[0])
    assert not publisher.flow.blocked and ns.next_deadline() is None


@pytest.mark.parametrize("text,value", [(None, DEFAULT_RESUME_LIMIT), ("50", 50.0), (" 0 ", 0.0)])
def test_resume_limit_reads_a_percentage(text: str | None, value: float) -> None:
    assert resume_limit(text) == value


@pytest.mark.parametrize("text", ["x", "101", "-1"])
def test_resume_limit_refuses_what_is_no_percentage(text: str) -> None:
    with pytest.raises(ValueError, match="queue.queueFlowResumeLimit"):
        resume_limit(text)
