"""The AMQP 1.0 type system decoder (``amqp1_0/decoding.py`` and the generated composite decoders).

One value is decoded from the input: a primitive, a compound, or a described
value -- a performative, a section, a delivery state, any composite of the
spec.  Malformed input is a ``DecodeError`` (``NeedMore`` when the input ends
inside the value).  What decodes must agree with ``skip`` on where the value
ends, encode again, and decode from that encoding to the same value of the
same AMQP types.
"""

from __future__ import annotations

import uuid

from broker.protocol.amqp1_0.types import (Accepted, Array, Attach, Begin, Close, Data, DecodeError, Described,
                                           Detach, Disposition, Error, Flow, Header, Modified, Open, Properties,
                                           Rejected, SaslInit, Source, Symbol, Target, Transfer, UInt, ULong,
                                           decode, encode, skip)
from fuzz.contract import agree
from tests.unit.protocol.amqp1_0.strategies import same
from tests.unit.protocol.amqp1_0.test_codec_tables import DECODE_TABLE


def one_input(data: bytes) -> None:
    try:
        value, end = decode(data)
    except DecodeError:
        return
    agree("where skip says the value ends", skip(data, 0, len(data)), end)
    encoded = encode(value)
    again, stop = decode(encoded)
    agree("decoded, encoded and decoded again", value, again, same)
    agree("the re-encoded value's length", stop, len(encoded))


def seeds() -> list[bytes]:
    error = Error(condition=Symbol("amqp:not-found"), description="no such node", info={Symbol("k"): UInt(1)})
    source = Source(address="q", durable=UInt(2), dynamic=False,
                    filter={Symbol("jms-selector"): Described(Symbol("apache.org:selector-filter:string"),
                                                              "a = 1")},
                    default_outcome=Modified(delivery_failed=True), outcomes=[Symbol("amqp:accepted:list")])
    composites = [
        Open(container_id="c", hostname="vhost:default", max_frame_size=UInt(4096), channel_max=9,
             idle_time_out=UInt(30000), properties={Symbol("product"): "fuzz"},
             offered_capabilities=[Symbol("ANONYMOUS-RELAY")]),
        Begin(next_outgoing_id=0, incoming_window=100, outgoing_window=100, handle_max=UInt(7)),
        Attach(name="l", handle=0, role=True, source=source, target=Target(address="t"),
               unsettled={b"tag": Accepted()}, initial_delivery_count=0),
        Flow(next_incoming_id=1, incoming_window=10, next_outgoing_id=1, outgoing_window=10, handle=0,
             delivery_count=0, link_credit=100, drain=True, properties={Symbol("x"): [1, 2]}),
        Transfer(handle=0, delivery_id=7, delivery_tag=b"\x00\x07", message_format=0, settled=False, more=True,
                 state=Rejected(error=error)),
        Disposition(role=True, first=1, last=5, settled=True, state=Accepted()),
        Detach(handle=0, closed=True, error=error), Close(error=error),
        SaslInit(mechanism=Symbol("PLAIN"), initial_response=b"\x00guest\x00guest", hostname="h"),
        Header(durable=True, priority=9, ttl=UInt(1000), first_acquirer=True, delivery_count=UInt(2)),
        Properties(message_id=ULong(5), user_id=b"guest", to="/queues/q", correlation_id=uuid.UUID(int=7),
                   absolute_expiry_time=None, group_sequence=UInt(3)),
        Data(value=b"body"),
    ]
    return [bytes.fromhex(wire.replace(" ", "")) for wire, _value in DECODE_TABLE] \
        + [encode(value) for value in composites] + [encode(Array("list", [[1, "a"], [Symbol("s")]]))]
