"""The fast path of a whole delivery in one transfer (transfer_arrival.py) answers the client and
leaves the queues as the generic path does, for usual transfers and for every case it must hand
back: more, no credit, mode second, an unknown or sending handle, a closed window, a message too
large, a detached link, a session that is gone, a channel beyond channel-max."""

from __future__ import annotations

import struct
from typing import Any, Callable

import pytest
from hypothesis import given, settings, strategies as st

from broker.protocol.amqp1_0 import connection as connection_module
from broker.protocol.amqp1_0.definitions import Attach, Begin, Detach, Disposition, End, Source, Target, Transfer
from broker.protocol.amqp1_0.framing import encode_frame
from broker.protocol.amqp1_0.incoming_frames import usual_transfer_fields
from broker.protocol.amqp1_0.transfer_arrival import NO_SHAPE, whole_fields, whole_transfer

from .engine_client import Client10, message_payload

PAYLOAD = message_payload(b"x" * 64)


def _sender(client: Client10, handle: int = 0, rcv_settle_mode: int = 0, address: str = "q",
            channel: int = 0) -> None:
    client.send(Attach(name=f"out-{handle}", handle=handle, role=False, snd_settle_mode=2,
                       rcv_settle_mode=rcv_settle_mode, source=Source(address="c"), target=Target(address=address),
                       initial_delivery_count=0), channel)


def _transfers(handle: int, first: int, count: int, **fields: Any) -> bytes:
    return b"".join(encode_frame(Transfer(handle=handle, delivery_id=i, delivery_tag=struct.pack(">Q", i),
                                          message_format=0, settled=fields.get("settled", False),
                                          more=fields.get("more", False)), 0, fields.get("payload", PAYLOAD))
                    for i in range(first, first + count))


def _usual(client: Client10) -> None:
    _sender(client)
    client.raw(_transfers(0, 0, 3))
    client.raw(_transfers(0, 3, 2, settled=True))


def _beyond_credit(client: Client10) -> None:
    _sender(client)
    client.server.set_blocked(True, "low on disk")     # the credit is not renewed
    client.raw(_transfers(0, 0, 1001))        # the link granted 1000


def _more(client: Client10) -> None:
    _sender(client)
    half = len(PAYLOAD) // 2
    client.raw(encode_frame(Transfer(handle=0, delivery_id=0, delivery_tag=b"t0", message_format=0, more=True),
                            0, PAYLOAD[:half]))
    client.raw(_transfers(0, 0, 1, payload=PAYLOAD[half:]))     # the last frame of the delivery
    client.raw(_transfers(0, 1, 1))


def _mode_second(client: Client10) -> None:
    _sender(client, rcv_settle_mode=1)
    client.raw(_transfers(0, 0, 2))


def _unknown_handle(client: Client10) -> None:
    _sender(client)
    client.raw(_transfers(0, 0, 1) + _transfers(5, 1, 1))


def _to_a_sending_link(client: Client10) -> None:
    client.send(Attach(name="in", handle=1, role=True, source=Source(address="q"), target=Target(address="c")))
    client.raw(_transfers(1, 0, 1))


def _too_large(client: Client10) -> None:
    client.host.max_message_size = 100
    _sender(client)
    client.raw(_transfers(0, 0, 1) + _transfers(0, 1, 1, payload=message_payload(b"y" * 200)))


def _detached(client: Client10) -> None:
    _sender(client)
    client.send(Detach(handle=0, closed=True))
    client.raw(_transfers(0, 0, 1))


def _window(client: Client10) -> None:
    _sender(client)
    for first in range(0, 5000, 500):        # past the session's window of 4096, reopened at half
        client.raw(_transfers(0, first, 500))


def _ended_session(client: Client10) -> None:
    _sender(client)
    client.send(End())
    client.raw(_transfers(0, 0, 1))


def _beyond_channel_max(client: Client10) -> None:
    _sender(client)
    client.raw(encode_frame(Transfer(handle=0, delivery_id=0, delivery_tag=b"t", message_format=0), 9, PAYLOAD))


def _to_an_exchange_nobody_is_bound_to(client: Client10) -> None:
    _sender(client, address="/exchanges/amq.direct/nowhere")
    client.raw(_transfers(0, 0, 2))


SCENARIOS: list[Callable[[Client10], None]] = [
    _usual, _beyond_credit, _more, _mode_second, _unknown_handle, _to_a_sending_link, _too_large, _detached,
    _window, _ended_session, _beyond_channel_max, _to_an_exchange_nobody_is_bound_to]


def _run(scenario: Callable[[Client10], None]) -> tuple[list[Any], tuple[int, int], bool]:
    client = Client10()
    client.host.namespace.declare_queue("q")
    client.handshake(channel_max=3)
    client.begin(incoming_window=1 << 20)
    client.take()
    scenario(client)
    said = [(channel, value, payload) for channel, value, payload in client.take()
            if not (isinstance(value, Transfer))]      # the broker's own tags are random
    queue = client.host.namespace.queue("q")
    return said, (queue.message_count, queue.unacked_count), client.server.is_open


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__.strip("_"))
def test_the_fast_path_answers_as_the_generic_path(scenario: Callable[[Client10], None],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    taken: list[bool] = []

    def counted(*args: Any) -> bool:
        took = whole_transfer(*args)
        taken.append(took)
        return took

    monkeypatch.setattr(connection_module, "whole_transfer", counted)
    fast = _run(scenario)
    monkeypatch.setattr(connection_module, "whole_transfer", lambda *args: False)
    generic = _run(scenario)
    assert fast == generic
    if scenario in (_usual, _beyond_credit, _window, _to_an_exchange_nobody_is_bound_to, _more):
        assert any(taken)                         # the fast path did take these
    if scenario in (_mode_second, _to_a_sending_link, _detached, _ended_session, _beyond_channel_max):
        assert not any(taken)


def test_usual_transfers_are_answered_with_one_ranged_disposition() -> None:
    client = Client10()
    client.host.namespace.declare_queue("q")
    client.handshake()
    client.begin()
    _sender(client)
    client.take()
    client.raw(_transfers(0, 0, 64))
    [disposition] = [v for v in client.values() if isinstance(v, Disposition)]
    assert (disposition.first, disposition.last, disposition.settled) == (0, 63, True)
    assert client.host.namespace.queue("q").message_count == 64


@pytest.mark.parametrize("transfer", [
    Transfer(handle=0, delivery_id=1, delivery_tag=b"t", message_format=0, settled=False),
    Transfer(handle=3, delivery_id=70000, delivery_tag=b"x" * 16, message_format=0, settled=True),
    Transfer(handle=1, delivery_id=2, delivery_tag=b"", message_format=None),
    Transfer(handle=1, delivery_id=2, delivery_tag=b"t", message_format=0, settled=False, more=True),
])
def test_the_fields_are_those_the_generic_decoder_reads(transfer: Transfer) -> None:
    frame = encode_frame(transfer, 0, PAYLOAD)
    body = frame[8:]
    fields = usual_transfer_fields(body)
    assert fields is not None
    handle, delivery_id, tag, message_format, settled, more, start = fields
    assert (handle, delivery_id, tag, message_format, settled, more) == (
        transfer.handle, transfer.delivery_id, transfer.delivery_tag, transfer.message_format, transfer.settled,
        transfer.more)
    assert body[start:] == PAYLOAD


def test_frames_other_than_usual_transfers_are_not_taken() -> None:
    client = Client10()
    client.handshake()
    client.begin()
    for performative in (Begin(next_outgoing_id=0, incoming_window=1, outgoing_window=1),
                         Disposition(role=True, first=0),
                         Transfer(handle=0, delivery_id=1, delivery_tag=b"t", rcv_settle_mode=0)):
        assert not whole_transfer(client.server, 0, encode_frame(performative, 0, PAYLOAD)[8:])


# -- a transfer laid out as the last one: read from its delivery-id alone ------------------------------

class _Holder:
    def __init__(self) -> None:
        self.transfer_shape = NO_SHAPE


def _expected(body: bytes) -> tuple[int, int, bool, int] | None:
    """What whole_fields must say: usual_transfer_fields' reading of a whole delivery, or None."""
    fields = usual_transfer_fields(body)
    if fields is None or fields[5]:
        return None
    return fields[0], fields[1], bool(fields[4]), fields[6]


def _list32(body: bytes) -> bytes:
    """A list8 performative's body as rhea writes it (a list32)."""
    return body[:3] + b"\xd0" + struct.pack(">II", body[4] + 3, body[5]) + body[6:]


ids = st.sampled_from([0, 1, 255, 256, 70_000, 0xFFFFFFFF]) | st.integers(0, 0xFFFFFFFF)
usual = st.builds(Transfer, handle=st.sampled_from([0, 1, 300]), delivery_id=ids,
                  delivery_tag=st.binary(max_size=9), message_format=st.sampled_from([0, None]),
                  settled=st.sampled_from([None, False, True]), more=st.booleans())


@settings(max_examples=300, deadline=None)
@given(first=usual, second=usual, list32=st.booleans(), payload=st.binary(max_size=12))
def test_a_transfer_after_another_is_read_as_usual_transfer_fields_reads_it(first: Transfer, second: Transfer,
                                                                            list32: bool, payload: bytes) -> None:
    holder = _Holder()
    bodies = [encode_frame(t, 0, payload)[8:] for t in (first, second)]
    if list32:
        bodies = [_list32(b) for b in bodies]
    for body in bodies + bodies[::-1]:          # each read after the other's shape, and after its own
        assert whole_fields(holder, body) == _expected(body), body.hex()


def test_a_body_cut_or_altered_anywhere_after_a_usual_one_is_read_as_usual_transfer_fields_reads_it() -> None:
    for transfer in (Transfer(handle=0, delivery_id=70_000, delivery_tag=b"\x00\x01\x11p", message_format=0,
                              settled=False),
                     Transfer(handle=2, delivery_id=7, delivery_tag=b"t", settled=True, more=False)):
        for body in (encode_frame(transfer, 0, PAYLOAD)[8:], _list32(encode_frame(transfer, 0, PAYLOAD)[8:])):
            for variant in [body[:cut] for cut in range(len(body))] + \
                    [body[:i] + bytes((flip,)) + body[i + 1:] for i in range(40) for flip in (0x00, 0x40, 0x52, 0xff)]:
                holder = _Holder()
                assert whole_fields(holder, body) == _expected(body)        # the shape of the usual one
                assert whole_fields(holder, variant) == _expected(variant), variant.hex()
