"""Producer flow control on the AMQP 1.0 engine: the link that fed an overfull queue has its
credit taken back (a flow with link-credit 0); other links keep theirs; credit comes back once
the queue is underfull."""

from __future__ import annotations

from broker.protocol.amqp1_0.definitions import Accepted, Detach, Disposition, Flow
from broker.protocol.amqp1_0.links import LINK_CREDIT

from .engine_client import Client10, message_payload


def _client() -> Client10:
    client = Client10()
    client.host.namespace.declare_queue("slow", arguments={
        "overflowPolicy": "PRODUCER_FLOW_CONTROL", "maximumQueueDepthMessages": 2})
    client.host.namespace.declare_queue("free")
    client.open_senders(("slow", "to-slow"), ("free", "to-free"))
    return client


def _flows(client: Client10, handle: int) -> list[Flow]:
    return [v for v in client.values() if isinstance(v, Flow) and v.handle == handle]


def test_the_link_feeding_an_overfull_queue_loses_its_credit_and_the_other_keeps_it() -> None:
    client = _client()
    for i in range(3):
        client.transfer(0, i, message_payload(bytes([i])), settled=True)
    [revoked] = _flows(client, 0)
    assert (revoked.link_credit, revoked.delivery_count) == (0, 3)
    assert client.server.blocked_reason == "queue 'slow' overfull"
    for i in range(3, 13):
        client.transfer(1, i, message_payload(), settled=True)     # the other link goes on
    assert client.host.namespace.queue("free").message_count == 10
    assert not client.server.blocked


def test_transfers_sent_before_the_revocation_arrived_are_taken() -> None:
    client = _client()
    for i in range(3):
        client.transfer(0, i, message_payload(), settled=True)
    client.take()
    for i in range(3, 6):                    # in flight when the broker's flow went out
        client.transfer(0, i, message_payload(), settled=True)
    assert not [v for v in client.values() if isinstance(v, Detach)]
    assert client.host.namespace.queue("slow").message_count == 6


def test_a_transfer_beyond_the_revoked_credit_is_refused() -> None:
    client = _client()
    for i in range(LINK_CREDIT + 1):
        client.transfer(0, i, message_payload(), settled=True)
    detach = client.expect(Detach)
    assert detach.error.condition == "amqp:link:transfer-limit-exceeded"


def test_credit_comes_back_once_the_queue_is_underfull() -> None:
    client = _client()
    for i in range(3):
        client.transfer(0, i, message_payload(), settled=False)
    client.take()
    queue = client.host.namespace.queue("slow")
    queue.get(no_ack=True)
    client.host.namespace.flow.recheck()                # 2 left: above 80% of 2
    client._read()
    assert _flows(client, 0) == []
    queue.get(no_ack=True)
    client.host.namespace.flow.recheck()                # 1 left: underfull
    client._read()
    [granted] = _flows(client, 0)
    assert (granted.link_credit, granted.delivery_count) == (LINK_CREDIT, 3)
    assert client.server.blocked_reason == ""
    client.transfer(0, 3, message_payload(), settled=False)
    disposition = client.expect(Disposition)
    assert isinstance(disposition.state, Accepted)


def test_detaching_a_blocked_link_releases_it() -> None:
    client = _client()
    for i in range(3):
        client.transfer(0, i, message_payload(), settled=True)
    queue = client.host.namespace.queue("slow")
    assert client.host.namespace.flow.blocked_publishers(queue) == 1
    client.send(Detach(handle=0, closed=True))
    assert client.host.namespace.flow.blocked_publishers(queue) == 0


def test_a_link_over_its_rate_limit_loses_its_credit_until_its_time_comes() -> None:
    client = _client()
    namespace = client.host.namespace
    namespace.flow.rates.set_limits(2, None)
    for i in range(3):
        client.transfer(1, i, message_payload(), settled=True)
    [revoked] = _flows(client, 1)
    assert revoked.link_credit == 0
    assert client.server.blocked_reason == "publish rate limit"
    deadline = namespace.next_deadline()
    assert deadline is not None
    client.host.clock.now = deadline
    namespace.run_due(client.host.clock.now)
    client._read()
    [granted] = _flows(client, 1)
    assert granted.link_credit == LINK_CREDIT
