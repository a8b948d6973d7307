"""Producer flow control and connection limits, as unmodified clients meet them.

A queue with overflow policy PRODUCER_FLOW_CONTROL blocks only the publishers
feeding it once it is past its maximum: pika hears connection.blocked and
connection.unblocked, python-qpid-proton sees its link credit go to 0 and come
back; a publisher to another queue goes on meanwhile, and nothing is lost.
maxOpenConnections and the per-user limit refuse the next connection with the
protocol's own error.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pika
import pika.exceptions
import pytest
from pamqp import commands

from tests.mgmt.conftest import start_broker
from tests.waiting import wait_until

from .conftest import DeltaMQProcess
from .support import BrokerEndpoint, Publisher, RawAMQP, assert_closed_with, pika_reply

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

if os.environ.get("DELTAMQ_TEST_AMQP_URL"):
    pytest.skip("starts brokers of its own: DeltaMQ only", allow_module_level=True)

MAXIMUM = 50
FLOW_CONTROLLED = {"overflowPolicy": "PRODUCER_FLOW_CONTROL", "maximumQueueDepthMessages": MAXIMUM}
API = "/api/latest"


@pytest.fixture
def proc() -> Iterator[DeltaMQProcess]:
    process = start_broker({"deltamq.connection_limit_per_user": "4"})
    yield process
    process.stop()


def _get(proc: DeltaMQProcess, path: str) -> Any:
    answer = httpx.get(f"http://127.0.0.1:{proc.http_port}{API}/{path}", auth=("guest", "guest"),
                       timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _queue(proc: DeltaMQProcess, name: str) -> dict[str, Any]:
    found: dict[str, Any] = _get(proc, f"queue/default/default/{name}")
    return found


def _connections(proc: DeltaMQProcess) -> dict[str, dict[str, Any]]:
    """The open connections by client-given name (connection_name)."""
    return {c.get("clientId", ""): c for c in _get(proc, "connection")}


def test_only_the_publisher_of_the_overfull_queue_is_blocked_until_a_consumer_drains_it(
        proc: DeltaMQProcess) -> None:
    fast = Publisher(proc, "fast")
    fast.channel.queue_declare("slow", arguments=FLOW_CONTROLLED)
    sent = [f"m{n}".encode() for n in range(MAXIMUM + 20)]
    for body in sent:
        fast.channel.basic_publish("", "slow", body)
    fast.wait_for("blocked: queue 'slow' overfull")

    other = Publisher(proc, "other")                    # another queue, another connection
    other.channel.queue_declare("free")
    other.channel.confirm_delivery()
    for n in range(100):
        other.channel.basic_publish("", "free", f"o{n}".encode())   # confirmed, one by one
    assert other.events == []
    assert _queue(proc, "free")["statistics"]["queueDepthMessages"] == 100

    slow = _queue(proc, "slow")
    assert slow["overflowPolicy"] == "PRODUCER_FLOW_CONTROL"
    assert slow["maximumQueueDepthMessages"] == MAXIMUM
    assert slow["statistics"]["queueFlowStopped"] is True
    assert slow["statistics"]["blockedPublishers"] == 1
    held = slow["statistics"]["queueDepthMessages"]
    assert MAXIMUM < held < len(sent)                   # the rest is held at the broker
    connections = _connections(proc)
    assert connections["fast"]["statistics"]["blocked"] is True
    assert connections["fast"]["blockedReason"] == "queue 'slow' overfull"
    assert connections["other"]["statistics"]["blocked"] is False

    consumer = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", proc.amqp_port))
    cch = consumer.channel()
    received: list[bytes] = []

    def drain() -> bool:
        while (got := cch.basic_get("slow", auto_ack=True))[0] is not None:
            received.append(got[2])
        return len(received) == len(sent)
    # released at 80% of the maximum, the held publishes may overfill it again: each time
    # the consumer goes on draining, until everything has come and the publisher is free
    fast.wait_for("unblocked", timeout=30, meanwhile=lambda: drain() and fast.events[-1] == "unblocked")
    assert received == sent                              # nothing lost, in order
    transitions = len(fast.events) // 2
    assert fast.events == ["blocked: queue 'slow' overfull", "unblocked"] * transitions
    assert _queue(proc, "slow")["statistics"]["queueFlowStopped"] is False
    log = proc.log_tail(100_000)
    assert log.count("queue 'slow' in vhost 'default' is overfull") == transitions
    assert log.count("queue 'slow' in vhost 'default' is underfull again") == transitions
    for connection in (consumer, fast.connection, other.connection):
        connection.close()


def test_an_amqp_1_0_sender_loses_its_credit_and_gets_it_back(proc: DeltaMQProcess) -> None:
    proton = pytest.importorskip("proton")
    from proton.utils import BlockingConnection

    setup = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", proc.amqp_port))
    channel = setup.channel()
    channel.queue_declare("slow10", arguments={**FLOW_CONTROLLED, "maximumQueueDepthMessages": 5})
    channel.queue_declare("free10")
    connection = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{proc.amqp_port}", timeout=20)
    sender = connection.create_sender("slow10")
    other = connection.create_sender("free10")
    for n in range(6):
        sender.send(proton.Message(body=f"s{n}".encode(), inferred=True))   # the sixth overfills
    wait_until(lambda: sender.link.credit == 0, 10, what="credit taken back")
    for n in range(20):
        other.send(proton.Message(body=f"f{n}".encode(), inferred=True))    # keeps its credit
    with pytest.raises(proton.Timeout):
        sender.send(proton.Message(body=b"waits", inferred=True), timeout=1)   # no credit: kept back
    assert _queue(proc, "slow10")["statistics"]["queueFlowStopped"] is True
    assert _queue(proc, "free10")["statistics"]["queueDepthMessages"] == 20

    received = []
    while (got := channel.basic_get("slow10", auto_ack=True))[0] is not None:
        received.append(got[2])
    sender.send(proton.Message(body=b"after", inferred=True))   # credit came back: both go now
    assert sender.link.credit > 0
    while (got := channel.basic_get("slow10", auto_ack=True))[0] is not None:
        received.append(got[2])
    assert received == [f"s{n}".encode() for n in range(6)] + [b"waits", b"after"]
    connection.close()
    setup.close()


def test_max_open_connections_refuses_the_next_connection_with_530(proc: DeltaMQProcess) -> None:
    answer = httpx.put(f"http://127.0.0.1:{proc.http_port}{API}/port/AMQP", json={"maxOpenConnections": 2},
                       auth=("guest", "guest"), timeout=30)
    assert answer.status_code in (200, 201), answer.text
    params = pika.ConnectionParameters("127.0.0.1", proc.amqp_port)
    first, second = pika.BlockingConnection(params), pika.BlockingConnection(params)
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as refused:   # pika's name for it
        pika.BlockingConnection(params)
    code, text = pika_reply(refused.value)
    assert code == 530
    assert text.startswith("NOT_ALLOWED - connection refused: port 'AMQP' has reached its maxOpenConnections of 2")
    assert _get(proc, "broker")["statistics"]["connectionsRefused"] == 1
    assert _get(proc, "port/AMQP")["statistics"]["connectionsRefused"] == 1
    first.close()
    third = pika.BlockingConnection(params)              # a place came free
    third.close()
    second.close()


def test_the_connection_limit_per_user_refuses_the_fifth_connection(proc: DeltaMQProcess) -> None:
    params = pika.ConnectionParameters("127.0.0.1", proc.amqp_port)
    opened = [pika.BlockingConnection(params) for _ in range(4)]
    assert _get(proc, "broker")["connectionsPerUser"] == {"guest": 4}
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as refused:
        pika.BlockingConnection(params)
    code, text = pika_reply(refused.value)
    assert code == 530 and "user 'guest' has reached the connection limit per user of 4" in text
    for connection in opened:
        connection.close()


def test_an_amqp_1_0_client_over_the_limit_hears_resource_limit_exceeded(proc: DeltaMQProcess) -> None:
    pytest.importorskip("proton")
    from proton import ConnectionException
    from proton.utils import BlockingConnection

    params = pika.ConnectionParameters("127.0.0.1", proc.amqp_port)
    opened = [pika.BlockingConnection(params) for _ in range(4)]
    with pytest.raises(ConnectionException) as refused:
        connection = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{proc.amqp_port}", timeout=20)
        connection.create_sender("anything")
    assert "amqp:resource-limit-exceeded" in str(refused.value)
    for c in opened:
        c.close()


def test_channel_max_and_frame_max_come_from_context_and_bound_every_protocol() -> None:
    process = DeltaMQProcess({"deltamq.channel_max": "8", "deltamq.frame_max": "8192"})
    with process:
        with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", process.amqp_port)) as conn:
            assert (conn._impl.params.channel_max, conn._impl.params.frame_max) == (8, 8192)
        raw = RawAMQP("127.0.0.1", process.amqp_port)
        tune = raw.handshake(BrokerEndpoint("127.0.0.1", process.amqp_port))
        assert (tune.channel_max, tune.frame_max) == (8, 8192)
        raw.send_method(9, commands.Channel.Open())
        assert_closed_with(raw.wait_connection_close(), 530, "channel 9 exceeds the negotiated channel_max of 8")
        proton_utils = pytest.importorskip("proton.utils")
        connection = proton_utils.BlockingConnection(f"amqp://guest:guest@127.0.0.1:{process.amqp_port}",
                                                     timeout=20)
        transport = connection.conn.transport
        assert (transport.remote_channel_max, transport.remote_max_frame_size) == (8, 8192)
        connection.close()


def test_a_publisher_over_the_rate_limit_is_held_back_and_loses_nothing() -> None:
    process = DeltaMQProcess({"deltamq.publish_rate_limit_per_connection": "50"})
    with process:
        publisher = Publisher(process)
        publisher.channel.queue_declare("paced")
        sent = [f"p{n}".encode() for n in range(150)]       # a second's burst, then 50 a second
        started = time.monotonic()
        for body in sent:
            publisher.channel.basic_publish("", "paced", body)
        publisher.wait_for("blocked: publish rate limit")
        channel = publisher.connection.channel()

        def arrived() -> bool:
            return channel.queue_declare("paced", passive=True).method.message_count == len(sent)
        publisher.wait_for("unblocked", timeout=20, meanwhile=arrived)
        assert time.monotonic() - started >= 1.5           # 100 past the burst, at 50 a second
        received = [channel.basic_get("paced", auto_ack=True)[2] for _ in sent]
        assert received == sent
        publisher.connection.close()
