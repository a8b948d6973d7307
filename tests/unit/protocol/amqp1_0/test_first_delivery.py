"""A first delivery's frame in one step (first_delivery.py) is the frame the generic path writes
for it, byte for byte, and steps aside (None) wherever it does not apply."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from broker.messaging.message import Message, MessageProperties
from broker.protocol.amqp1_0.definitions import Transfer
from broker.protocol.amqp1_0.first_delivery import FirstTransfers
from broker.protocol.amqp1_0.framing import transfer_frames
from broker.protocol.amqp1_0.message_format import FORMAT, transfer_payload

from .test_delivery_frames import (APPS, BODIES, FOOTERS, HEADERS, MALFORMED, MAS, PROPS, _payload, kept,
                                   received)

PREFIX = b"\x9a\x01\xff\x10"


def generic(channel: int, handle: int, delivery_id: int, settled: bool, message: Message,
            max_frame_size: int) -> list[bytes]:
    """What SendingLink.deliver writes for a first delivery without the fast path."""
    transfer = Transfer(handle=handle, delivery_id=delivery_id,
                        delivery_tag=PREFIX + delivery_id.to_bytes(8, "big"), message_format=0, settled=settled)
    return transfer_frames(channel, transfer, transfer_payload(message, delivery_count=0, first_acquirer=True),
                           max_frame_size)


@settings(max_examples=300, deadline=None)
@given(header=st.sampled_from(HEADERS), ma=st.sampled_from(MAS), props=st.sampled_from(PROPS),
       app=st.sampled_from(APPS), body=st.sampled_from(BODIES), footer=st.sampled_from(FOOTERS),
       vbin32=st.booleans(), channel=st.integers(0, 0xFFFF), handle=st.sampled_from([0, 1, 255, 256, 0xFFFFFFFF]),
       delivery_id=st.sampled_from([256, 257, 65_536, 0xFFFFFFFF]), settled=st.booleans(),
       max_frame_size=st.sampled_from([512, 1024, 1 << 20]))
def test_a_first_delivery_frame_is_the_generic_one(header: Any, ma: Any, props: Any, app: Any, body: bytes,
                                                   footer: Any, vbin32: bool, channel: int, handle: int,
                                                   delivery_id: int, settled: bool, max_frame_size: int) -> None:
    message = received(_payload(header, False, ma, props, app, body, footer, vbin32))
    fast = FirstTransfers(channel, handle, PREFIX, settled).frame(delivery_id, message, max_frame_size)
    frames = generic(channel, handle, delivery_id, settled, message, max_frame_size)
    if fast is None:
        assert len(frames) > 1               # too large for one frame: the generic path splits it
    else:
        assert [fast] == frames


def test_the_same_link_writes_each_delivery_with_its_own_id() -> None:
    transfers = FirstTransfers(2, 7, PREFIX, False)
    small = received(_payload(HEADERS[2], False, None, None, None, b"a" * 256, None))
    other = received(_payload(HEADERS[3], False, MAS[1], None, None, b"b" * 10, FOOTERS[1]))
    for delivery_id, message in ((300, small), (301, other), (302, small), (0xFFFFFFFF, other)):
        assert [transfers.frame(delivery_id, message, 65_536)] == generic(2, 7, delivery_id, False, message, 65_536)


def test_a_frame_that_fills_the_frame_size_exactly_still_fits() -> None:
    message = received(_payload(HEADERS[1], False, None, None, None, b"x" * 300, None))
    size = len(FirstTransfers(0, 0, PREFIX, False).frame(256, message, 1 << 20) or b"")
    assert FirstTransfers(0, 0, PREFIX, False).frame(256, message, size) is not None
    assert FirstTransfers(0, 0, PREFIX, False).frame(256, message, size - 1) is None


@pytest.mark.parametrize("delivery_id", [0, 1, 255])
def test_an_id_below_256_takes_the_generic_path(delivery_id: int) -> None:
    message = received(_payload(HEADERS[2], False, None, None, None, b"body", None))
    assert FirstTransfers(0, 0, PREFIX, False).frame(delivery_id, message, 65_536) is None


def test_annotations_another_format_or_a_view_take_the_generic_path() -> None:
    message = received(_payload(HEADERS[2], False, MAS[1], None, None, b"body", None))
    annotated = Message.annotated({"x-first-death-reason": "rejected"}, exchange="", routing_key="q",
                                  body=message.body, native=message.received_native(), format=FORMAT, arrival=1.0)
    view = Message(exchange="", routing_key="q", body=b"body", properties=MessageProperties(), arrival=1.0)
    transfers = FirstTransfers(0, 0, PREFIX, False)
    assert transfers.frame(300, annotated, 65_536) is None
    assert transfers.frame(300, view, 65_536) is None


@pytest.mark.parametrize("native", list(MALFORMED.values()), ids=list(MALFORMED))
def test_metadata_it_does_not_recognise_takes_the_generic_path(native: bytes) -> None:
    assert FirstTransfers(0, 0, PREFIX, False).frame(300, kept(native), 65_536) is None


def test_many_body_sizes_of_one_layout_give_the_generic_frames() -> None:
    transfers = FirstTransfers(1, 3, PREFIX, True)
    for size in range(0, 400, 3):              # more sizes than a layout keeps: it starts afresh
        message = received(_payload(HEADERS[3], False, None, PROPS[1], None, b"s" * size, FOOTERS[1]))
        assert [transfers.frame(1000 + size, message, 65_536)] == generic(1, 3, 1000 + size, True, message, 65_536)
