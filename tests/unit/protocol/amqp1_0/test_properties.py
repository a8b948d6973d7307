"""Property tests: every value round-trips with its AMQP type; no input makes a decoder raise
anything but DecodeError (NeedMore included)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from broker.protocol.amqp1_0.framing import FrameReader, FramingError
from broker.protocol.amqp1_0.sections import MessageSections
from broker.protocol.amqp1_0.types import (Accepted, Attach, DecodeError, Disposition, Flow, Modified, Open,
                                           Performative, Rejected, Released, Source, Symbol, Target, Transfer,
                                           decode, encode)
from broker.protocol.amqp1_0.types import Error as AmqpError

from .strategies import same, values

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

uint = st.integers(0, 0xFFFFFFFF)
opt_uint = st.none() | uint
states = st.none() | st.sampled_from([Accepted(), Released(), Rejected(error=AmqpError(condition="amqp:x")),
                                      Modified(delivery_failed=True, message_annotations={"a": 1})])
transfers = st.builds(Transfer, handle=uint, delivery_id=opt_uint, delivery_tag=st.none() | st.binary(max_size=32),
                      message_format=opt_uint, settled=st.none() | st.booleans(), more=st.booleans(),
                      rcv_settle_mode=st.none() | st.integers(0, 1), state=states, resume=st.booleans(),
                      aborted=st.booleans(), batchable=st.booleans())
flows = st.builds(Flow, next_incoming_id=opt_uint, incoming_window=uint, next_outgoing_id=uint,
                  outgoing_window=uint, handle=opt_uint, delivery_count=opt_uint, link_credit=opt_uint,
                  available=opt_uint, drain=st.booleans(), echo=st.booleans(),
                  properties=st.none() | st.dictionaries(st.text(max_size=5), st.integers(-5, 5), max_size=3))
attaches = st.builds(Attach, name=st.text(max_size=20), handle=uint, role=st.booleans(),
                     snd_settle_mode=st.integers(0, 2), rcv_settle_mode=st.integers(0, 1),
                     source=st.none() | st.builds(Source, address=st.none() | st.text(max_size=10),
                                                  durable=st.integers(0, 2), dynamic=st.booleans(),
                                                  outcomes=st.none() | st.lists(st.text("abc:", max_size=5),
                                                                                max_size=3)),
                     target=st.none() | st.builds(Target, address=st.text(max_size=10)),
                     max_message_size=st.none() | st.integers(0, 2 ** 64 - 1),
                     offered_capabilities=st.none() | st.lists(st.text("xyz", max_size=4), max_size=3))
dispositions = st.builds(Disposition, role=st.booleans(), first=uint, last=opt_uint, settled=st.booleans(),
                         state=states, batchable=st.booleans())


@FUZZ
@given(values())
def test_every_value_round_trips_with_its_type(value: Any) -> None:
    data = encode(value)
    decoded, end = decode(data)
    assert end == len(data)
    assert same(decoded, value), (decoded, value)
    assert encode(decoded) == data                      # the smallest encoding is one encoding


@FUZZ
@given(st.one_of(transfers, flows, attaches, dispositions))
def test_performatives_round_trip(performative: Performative) -> None:
    decoded, end = Performative.decode_from(performative.encode())
    assert decoded == performative
    assert type(decoded) is type(performative)


def _only_decode_errors(call: Any, *args: Any) -> None:
    try:
        call(*args)
    except DecodeError:
        pass


@FUZZ
@given(st.binary(max_size=200))
@example(b"\x00\x53\x14\xc0\x02\x01")
@example(b"\xe0\x02\x03\x00")
@example(b"\x00\xa3\x05amqp:\x45")
def test_arbitrary_bytes_only_ever_raise_decode_errors(data: bytes) -> None:
    _only_decode_errors(decode, data)
    _only_decode_errors(Performative.decode_from, data)
    _only_decode_errors(MessageSections, data)
    reader = FrameReader(1024)
    _only_decode_errors(lambda: [f.performative() for f in reader.feed(data)])


@FUZZ
@given(st.one_of(transfers, attaches), st.data())
def test_mutated_performatives_only_ever_raise_decode_errors(performative: Performative, data: st.DataObject) -> None:
    encoded = bytearray(performative.encode())
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(encoded) - 1))
        encoded[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(encoded)))
    _only_decode_errors(Performative.decode_from, bytes(encoded[:cut]))
    _only_decode_errors(decode, bytes(encoded))


@FUZZ
@given(st.binary(min_size=8, max_size=64))
def test_the_frame_reader_only_raises_framing_or_decode_errors(data: bytes) -> None:
    reader = FrameReader(64)
    try:
        for frame in reader.feed(data):
            if frame.type == 0 and not frame.empty:
                frame.performative()
            elif frame.type == 1:
                frame.sasl_frame()
    except (FramingError, DecodeError):
        pass


def test_symbols_and_strings_stay_apart() -> None:
    assert decode(encode(Symbol("a")))[0].__class__ is Symbol
    assert decode(encode("a"))[0].__class__ is str
    assert decode(encode(Open(container_id="c", desired_capabilities=["x"])))[0].desired_capabilities == ["x"]
