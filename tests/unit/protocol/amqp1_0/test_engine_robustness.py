"""The AMQP 1.0 engine never lets malformed input escape as an exception, in any phase."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.protocol.amqp1_0.definitions import Close, Detach, SaslInit
from broker.protocol.amqp1_0.framing import AMQP_HEADER
from broker.protocol.amqp1_0.connection import State

from .engine_client import Client10, message_payload


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_during_sasl_never_raise(data: bytes) -> None:
    client = Client10()
    client.raw(data)
    assert client.server.state in (State.AWAITING_SASL_INIT, State.CLOSED, State.AWAITING_HEADER,
                                   State.AWAITING_OPEN, State.OPEN, State.CLOSE_SENT)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=300))
def test_random_frames_when_open_never_raise(body: bytes) -> None:
    client = Client10()
    client.handshake()
    client.begin()
    client.take()
    frame = (8 + len(body)).to_bytes(4, "big") + b"\x02\x00\x00\x00" + body
    client.raw(frame)
    taken = client.values()
    closes = [v for v in taken if isinstance(v, Close)]
    if closes:
        assert closes[0].error is not None


def test_a_garbled_message_is_rejected_not_fatal() -> None:
    client = Client10()
    client.host.namespace.declare_queue("q")
    client.handshake()
    client.begin()
    client.attach_sender("q")
    client.take()
    client.transfer(0, 0, b"\x00\x53\x70\xc0\x05")          # a header section cut short
    assert client.server.state is State.OPEN
    from broker.protocol.amqp1_0.definitions import Disposition, Rejected
    [disposition] = [v for v in client.values() if isinstance(v, Disposition)]
    assert isinstance(disposition.state, Rejected)
    assert disposition.state.error.condition == "amqp:decode-error"


def test_anonymous_relay_routes_by_the_to_field() -> None:
    from broker.protocol.amqp1_0.definitions import Accepted, Data, Disposition, Properties, Rejected
    from broker.protocol.amqp1_0.encoding import encode

    client = Client10()
    client.host.namespace.declare_queue("q")
    client.handshake()
    client.begin()
    client.attach_sender(None)
    client.take()
    client.transfer(0, 0, encode(Properties(to="/queues/q")) + encode(Data(value=b"b")))
    client.transfer(0, 1, message_payload())
    states = {v.first: v.state for v in client.values() if isinstance(v, Disposition)}
    assert isinstance(states[0], Accepted) and isinstance(states[1], Rejected)
    assert client.host.namespace.queue("q").message_count == 1


def test_sasl_init_with_a_header_that_is_not_amqp_ends_the_connection() -> None:
    client = Client10()
    client.sasl(SaslInit(mechanism="PLAIN", initial_response=b"\x00guest\x00guest"))
    client.raw(b"AMQP\x01\x01\x00\x0a")
    assert client.server.closed
    assert client.values()[-1] == AMQP_HEADER


def test_detach_of_a_suspended_link_keeps_it_for_resuming() -> None:
    client = Client10()
    client.host.namespace.declare_queue("q")
    client.handshake()
    client.begin()
    client.attach_receiver("q", name="durable-link")
    client.take()
    client.send(Detach(handle=1, closed=False))
    answer = client.expect(Detach)
    assert answer.closed is False
    links = list(client.host.namespace.links)
    assert [(link.key.link_name, link.state) for link in links] == [("durable-link", "suspended")]
