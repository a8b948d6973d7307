"""Cross-check against a real implementation: Qpid Proton's codec and transport (python-qpid-proton).

Proton encodes, this codec decodes, and the reverse, for a table of values;
proton's message encoding is split into sections here and this module's
into proton messages; proton's transport writes performatives this reader
decodes and reads performatives this module writes.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

proton = pytest.importorskip("proton")

from broker.protocol.amqp1_0.framing import AMQP_HEADER, FrameReader, encode_frame  # noqa: E402
from broker.protocol.amqp1_0.sections import AMQP_VALUE, MessageSections, encode_sections  # noqa: E402
from broker.protocol.amqp1_0.types import (Array, Attach, Begin, Byte, Char, Decimal32, Described, Float32,  # noqa: E402
                                           Header, Int, Open, Properties, Short, Source, Symbol, Target,
                                           Timestamp, UByte, UInt, ULong, UShort, decode, encode)
from broker.protocol.amqp1_0.types import AmqpValue, ApplicationProperties  # noqa: E402

from .strategies import same  # noqa: E402

U = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")


def _table() -> list[tuple[Any, Any]]:
    p = proton
    return [
        (None, None),
        (True, True),
        (False, False),
        (p.ubyte(7), UByte(7)),
        (p.ushort(65000), UShort(65000)),
        (p.uint(0), UInt(0)),
        (p.uint(200), UInt(200)),
        (p.uint(70000), UInt(70000)),
        (p.ulong(0), ULong(0)),
        (p.ulong(2 ** 40), ULong(2 ** 40)),
        (p.byte(-3), Byte(-3)),
        (p.short(-300), Short(-300)),
        (p.int32(-70000), Int(-70000)),
        (p.int32(5), Int(5)),
        (2 ** 40, 2 ** 40),
        (-1, -1),
        (p.float32(1.5), Float32(1.5)),
        (2.25, 2.25),
        (p.char("x"), Char("x")),
        (p.timestamp(1_700_000_000_000), Timestamp(1_700_000_000_000)),
        (p.decimal32(0x22500001), Decimal32(bytes.fromhex("22500001"))),
        (U, U),
        (b"\x00bin", b"\x00bin"),
        (b"b" * 300, b"b" * 300),
        ("stré", "stré"),
        ("s" * 300, "s" * 300),
        (p.symbol("sym"), Symbol("sym")),
        ([1, "a", None], [1, "a", None]),
        ({"k": 1, p.symbol("s"): None}, {"k": 1, Symbol("s"): None}),
        ({"big": "v" * 300}, {"big": "v" * 300}),
        (p.Array(p.UNDESCRIBED, p.Data.SYMBOL, p.symbol("a"), p.symbol("b")),
         Array("symbol", [Symbol("a"), Symbol("b")])),
        (p.Array(p.UNDESCRIBED, p.Data.INT, p.int32(1), p.int32(-1000)), Array("int", [Int(1), Int(-1000)])),
        (p.Array(p.symbol("d"), p.Data.STRING, "x", "y"), Array("string", ["x", "y"], Symbol("d"))),
        (p.Described(p.symbol("x"), "v"), Described(Symbol("x"), "v")),
        (p.Described(p.ulong(0x0000_4567_0000_0001), [1]), Described(ULong(0x0000_4567_0000_0001), [1])),
    ]


def _proton_encode(value: Any) -> bytes:
    data = proton.Data()
    data.put_object(value)
    return bytes(data.encode())


def _proton_decode(encoded: bytes) -> Any:
    data = proton.Data()
    data.decode(encoded)
    data.rewind()
    assert data.next() is not None
    value = data.get_object()
    # proton hands a binary out as a view of its own buffer, gone with ``data``: copy it now
    return bytes(value) if isinstance(value, memoryview) else value


@pytest.mark.parametrize("theirs, ours", _table(), ids=[repr(row[1])[:30] for row in _table()])
def test_proton_encodes_what_we_decode(theirs: Any, ours: Any) -> None:
    decoded, end = decode(_proton_encode(theirs))
    assert same(decoded, ours), (decoded, ours)


@pytest.mark.parametrize("theirs, ours", _table(), ids=[repr(row[1])[:30] for row in _table()])
def test_we_encode_what_proton_decodes(theirs: Any, ours: Any) -> None:
    decoded = _proton_decode(encode(ours))
    assert decoded == theirs
    assert type(decoded) is type(theirs)


def test_a_proton_message_splits_into_its_sections() -> None:
    message = proton.Message(body="hello", durable=True, priority=7, ttl=5.0, id="m1", subject="s",
                             address="/queues/q", reply_to="r", correlation_id=42, content_type="text/plain",
                             group_id="g", properties={"colour": "red"},
                             annotations={proton.symbol("x-opt-a"): 1})
    m = MessageSections(message.encode())
    assert (m.durable, m.priority, m.ttl) == (True, 7, 5000)
    assert (m.message_id, m.subject, m.to, m.reply_to, m.content_type, m.group_id) == (
        "m1", "s", "/queues/q", "r", "text/plain", "g")
    assert m.correlation_id == 42
    assert m.application_properties == {"colour": "red"}
    assert m.message_annotations == {"x-opt-a": 1}
    assert m.body() == "hello"


def test_proton_reads_a_message_we_build() -> None:
    payload = encode_sections([Header(durable=True, priority=2), Properties(message_id=ULong(7), subject="s"),
                               ApplicationProperties({"n": 1}), AmqpValue({"k": [1, 2]})])
    message = proton.Message()
    message.decode(payload)
    assert (message.durable, message.priority, message.id, message.subject) == (True, 2, 7, "s")
    assert message.properties == {"n": 1} and message.body == {"k": [1, 2]}


def _proton_client(max_frame_size: int | None = None) -> tuple[Any, Any, Any]:
    """A proton client connection with one session opened: (connection, transport, session)."""
    connection = proton.Connection()
    connection.container = "proton-client"
    connection.hostname = "broker.example"
    transport = proton.Transport()
    if max_frame_size is not None:
        transport.max_frame_size = max_frame_size
    transport.bind(connection)
    connection.open()
    session = connection.session()
    session.open()
    return connection, transport, session


def _broker_side(*frames: bytes) -> bytes:
    """What the broker would answer a client with: header, open, begin (to the client's session 0), frames."""
    return (AMQP_HEADER + encode_frame(Open(container_id="deltamq", max_frame_size=512))
            + encode_frame(Begin(remote_channel=0, next_outgoing_id=0, incoming_window=100, outgoing_window=100))
            + b"".join(frames))


def test_proton_transport_frames_decode_here() -> None:
    connection, transport, session = _proton_client()
    sender = session.sender("the-link")
    sender.target.address = "q1"
    sender.open()
    out = transport.peek(transport.pending())
    assert out[:8] == AMQP_HEADER
    performatives = [f.performative()[0] for f in FrameReader().feed(out[8:]) if not f.empty]
    open_, begin, attach = performatives[:3]
    assert isinstance(open_, Open) and open_.container_id == "proton-client" and open_.hostname == "broker.example"
    assert isinstance(begin, Begin) and begin.remote_channel is None
    assert isinstance(attach, Attach) and attach.name == "the-link" and attach.role is False
    assert isinstance(attach.target, Target) and attach.target.address == "q1"


def test_proton_transport_reads_frames_written_here() -> None:
    connection = proton.Connection()
    transport = proton.Transport(proton.Transport.SERVER)
    transport.bind(connection)
    frames = (AMQP_HEADER + encode_frame(Open(container_id="deltamq", max_frame_size=65536, channel_max=9))
              + encode_frame(Begin(next_outgoing_id=0, incoming_window=100, outgoing_window=100), channel=0)
              + encode_frame(Attach(name="l1", handle=0, role=True, source=Source(address="q2"),
                                    target=Target()), channel=0))
    transport.push(frames)
    assert transport.condition is None
    assert connection.remote_container == "deltamq"
    assert (transport.remote_max_frame_size, transport.remote_channel_max) == (65536, 9)
    session = connection.session_head(0)
    assert session is not None
    link = connection.link_head(0)
    assert link is not None and link.name == "l1" and link.remote_source.address == "q2"


def test_a_proton_delivery_reads_as_transfers_and_sections_here() -> None:
    from broker.protocol.amqp1_0.types import Flow, Transfer
    connection, transport, session = _proton_client(512)        # a 2000-byte body takes several transfers
    sender = session.sender("out")
    sender.target.address = "q"
    sender.open()
    transport.pop(transport.pending())            # its header, open, begin, attach: read elsewhere
    # play the broker: open, begin, attach (receiver) and credit
    transport.push(_broker_side(encode_frame(Attach(name="out", handle=0, role=True, target=Target(address="q"))),
                                encode_frame(Flow(next_incoming_id=0, incoming_window=100, next_outgoing_id=0,
                                                  outgoing_window=100, handle=0, delivery_count=0,
                                                  link_credit=10))))
    assert sender.credit == 10
    sender.delivery(b"tag-1")
    sender.send(proton.Message(body=b"x" * 2000, durable=True, subject="big",
                               properties={"n": 7}).encode())
    sender.advance()
    out = transport.peek(transport.pending())
    frames = [f for f in FrameReader(512).feed(out) if not f.empty]
    assert all(len(f.body) + 8 <= 512 for f in frames)
    transfers = [f.performative() for f in frames if isinstance(f.performative()[0], Transfer)]
    assert len(transfers) >= 4 and transfers[0][0].delivery_tag == b"tag-1"  # type: ignore[attr-defined]
    assert [t.more for t, _ in transfers] == [True] * (len(transfers) - 1) + [False]  # type: ignore[attr-defined]
    m = MessageSections(b"".join(payload for _, payload in transfers))
    assert m.durable and m.subject == "big" and m.application_properties == {"n": 7}
    assert m.body_kind == AMQP_VALUE and m.body() == b"x" * 2000      # proton sends bytes as an amqp-value


def test_proton_receives_a_delivery_split_into_transfers_here() -> None:
    from broker.protocol.amqp1_0.framing import transfer_frames
    from broker.protocol.amqp1_0.types import Data, Transfer
    connection, transport, session = _proton_client(512)
    receiver = session.receiver("in")
    receiver.source.address = "q"
    receiver.open()
    receiver.flow(5)
    transport.pop(transport.pending())
    payload = encode_sections([Header(durable=True), Properties(subject="big"), Data(bytes(range(256)) * 8)])
    transport.push(_broker_side(encode_frame(Attach(name="in", handle=0, role=False, source=Source(address="q"),
                                                    initial_delivery_count=0)),
                                *transfer_frames(0, Transfer(handle=0, delivery_id=0, delivery_tag=b"d1",
                                                     message_format=0, settled=False), payload, 512)))
    assert transport.condition is None
    delivery = receiver.current
    assert delivery is not None and delivery.tag == "d1" and not delivery.partial       # proton: tags as str
    message = proton.Message()
    message.decode(receiver.recv(delivery.pending))
    assert message.durable and message.subject == "big" and message.body == bytes(range(256)) * 8
