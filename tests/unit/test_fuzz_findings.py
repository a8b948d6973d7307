"""What fuzzing found in the decoders and engines (fuzz/, docs/fuzzing.md), each pinned by behaviour.

Every input that broke a contract is also kept in ``fuzz/regressions/<harness>/``
and replayed by tests/unit/test_fuzzing.py; these tests say what the right
behaviour is, in the protocol's terms.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.messaging.selector_syntax import MAX_DIGITS
from broker.messaging.selectors import SelectorError, compile_selector
from broker.protocol.amqp0_9_1 import methods as m
from broker.protocol.amqp0_9_1.codec import HEARTBEAT_FRAME
from broker.protocol.amqp0_9_1.connection import State
from broker.protocol.amqp1_0.decoding import MAX_ZERO_WIDTH
from broker.protocol.amqp1_0.types import (Array, Attach, DecodeError, Described, Detach, Target, ULong, decode,
                                           encode)
from broker.protocol.detect import AmqpVersion
from broker.security.acl_file import AclSyntaxError, parse
from broker.security.scram import SCRAM_SHA_256, MalformedScram, ScramServer, derive_credential
from broker.transport.websocket import WebSocketLayer

from .messaging.support import message

from .protocol.amqp1_0.engine_client import Client10, Host10
from .protocol.harness import Client, Delivery, FakeHost


def test_0_9_basic_recover_is_asynchronous_and_recover_sync_is_answered() -> None:
    # AMQP 0-9 (Qpid's XML): basic.recover has no response; basic.recover-sync, Qpid's
    # addition, is answered with recover-sync-ok.  Both requeue what is unacknowledged.
    c = Client(FakeHost(), AmqpVersion.V0_9)
    c.handshake()
    c.open_channel(1)
    c.send(1, m.QueueDeclare(queue="q"))
    c.publish(1, "", "q", b"m")
    c.send(1, m.BasicGet(queue="q"))
    c.take()
    c.send(1, m.BasicRecover(requeue=True))
    assert c.take() == []
    c.send(1, m.BasicGet(queue="q"))
    [(_, again)] = c.take()
    assert isinstance(again, Delivery) and isinstance(again.method, m.BasicGetOk) and again.method.redelivered
    c.send(1, m.BasicRecoverSync(requeue=True))
    assert c.take() == [(1, m.BasicRecoverSyncOk())]
    assert c.server.channels[1].unacked == {}


def test_basic_recover_is_answered_in_0_8_and_0_9_1() -> None:
    for version in (AmqpVersion.V0_8, AmqpVersion.V0_9_1):
        c = Client(FakeHost(), version)
        c.handshake()
        c.open_channel(1)
        c.send(1, m.BasicRecover(requeue=True))
        assert c.take() == [(1, m.BasicRecoverOk())]


def test_a_client_sending_recover_sync_ok_is_refused_as_a_server_method() -> None:
    c = Client(FakeHost(), AmqpVersion.V0_9)
    c.handshake()
    c.open_channel(1)
    c.send(1, m.BasicRecoverSyncOk())
    [(_, close)] = c.take()
    assert isinstance(close, m.ConnectionClose) and close.reply_code == 503


@pytest.mark.parametrize("literal", ["1" * 4301, "0x" + "f" * 4000, "0" + "7" * 5000])
def test_an_exact_literal_too_long_for_a_python_int_is_a_selector_error(literal: str) -> None:
    # Python refuses to convert (or show) decimal integers of more than 4300 digits:
    # int() raised ValueError, and an error message showing a long hex literal did too
    with pytest.raises(SelectorError, match=f"exact numeric literal of [0-9]+ digits is longer than {MAX_DIGITS}"):
        compile_selector(f"a = {literal}")
    with pytest.raises(SelectorError) as caught:
        compile_selector(f"a IS {literal}")            # named in "expected NULL, found ..." before
    assert caught.value.position == 5


def test_exact_literals_up_to_the_limit_keep_their_exact_value() -> None:
    literal = "9" * MAX_DIGITS
    selector = compile_selector(f"a = {literal} AND b = 0x{'f' * MAX_DIGITS}")
    assert selector.matches(message(b"x", headers={"a": int(literal), "b": 16 ** MAX_DIGITS - 1}))


def test_a_close_ok_behind_a_faulty_frame_in_the_same_read_ends_the_connection() -> None:
    # the frames behind a faulty one used to stay unparsed until more bytes came: a close-ok
    # there went unseen, and a large read was held whole, past frame-max
    c = Client(FakeHost(frame_max=4096))
    c.handshake()
    c.open_channel(1)
    declare = bytearray(c.encode(1, m.QueueDeclare(queue="q")))
    declare[-5:-1] = b"\x00\x00\x10\x00"                 # the arguments table claims 4096 bytes
    c.raw(bytes(declare) + HEARTBEAT_FRAME * 600 + c.encode(0, m.ConnectionCloseOk()))
    [(_, close)] = c.take()
    assert isinstance(close, m.ConnectionClose) and close.reply_code == 502
    assert c.server.state is State.CLOSED and c.server._rest == b""


def test_a_1_0_message_with_malformed_properties_reaches_a_0_9_1_consumer_without_them() -> None:
    # kept as received (only its header is decoded on arrival), it failed the 0-9-1 consumer's
    # delivery: the exception left the engine and the consumer's connection was dropped
    payload = (Path(__file__).parents[2] / "fuzz" / "regressions" / "amqp1_0_sections"
               / "properties-with-a-bad-timestamp-constructor-failed-the-0-9-1-view").read_bytes()
    host = Host10()
    host.namespace.declare_queue("q")
    producer = Client10(host)
    producer.handshake()
    producer.begin()
    producer.attach_sender("q")
    producer.transfer(0, 0, payload)
    consumer = Client(host)
    consumer.handshake()
    consumer.open_channel(1)
    consumer.send(1, m.BasicConsume(queue="q", consumer_tag="t", no_ack=True))
    [_, (_, delivery)] = consumer.take()
    assert isinstance(delivery, Delivery) and delivery.body == b"ab"
    assert delivery.properties.delivery_mode == 2 and delivery.properties.message_id is None
    assert consumer.server.state is State.OPEN


def test_an_attach_whose_source_is_not_a_source_refuses_the_link() -> None:
    # the attach's source and target are "*" (any described value): one of another type reached
    # the terminus code as if it were a source, an internal error that closed the connection
    client = Client10(Host10())
    client.handshake()
    client.begin()
    client.send(Attach(name="l", handle=0, role=True, source=Described(ULong(0xa8), ["q"]),
                       target=Target(address="c")))
    detach = client.expect(Detach)
    assert detach.error.condition == "amqp:invalid-field" and "a value described by" in detach.error.description
    assert client.server.is_open


@pytest.mark.parametrize("count", [1, MAX_ZERO_WIDTH])
def test_an_array_of_zero_width_elements_decodes_alone_as_in_a_larger_buffer(count: int) -> None:
    # bounded by the buffer's length, such an array decoded only with enough bytes after it
    value = Array("null", [None] * count)
    assert decode(encode(value))[0] == value
    assert decode(encode(value) + b"\x40" * 300)[0] == value


def test_an_array_claiming_more_zero_width_elements_than_the_bound_is_refused_whatever_follows() -> None:
    wire = b"\xf0\x00\x00\x00\x05\x00\x00\x01\x00\x40"              # array32 of 256 nulls
    for tail in (b"", b"\x40" * 1000):
        with pytest.raises(DecodeError, match="at most 255 take no bytes"):
            decode(wire + tail)


@pytest.mark.parametrize("line", [b"Host: caf\xc3\xa9.example", b"Host: \xff\xff",
                                  b"Host: h\r\nSec-WebSocket-Protocol: amqp, \xc3\xa9"])
def test_an_upgrade_request_with_a_header_that_is_not_ascii_gets_400(line: bytes) -> None:
    # wsproto decodes Host as IDNA and token lists as ASCII: the UnicodeError left the layer
    request = (b"GET /amqp HTTP/1.1\r\n" + line + b"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
    layer = WebSocketLayer()
    assert layer.receive_data(request) == b""
    assert layer.data_to_send().startswith(b"HTTP/1.1 400 ") and layer.closed
    assert "not ASCII" in layer.close_reason


@pytest.mark.parametrize("final", [b"c=biws,r=abcdef,p=v0X8v3Bz2T0\xc3\xa9", b"c=bi\xc3\xa9ws,r=abcdef,p=AAAA"])
def test_a_scram_client_final_with_a_character_that_is_not_ascii_is_malformed(final: bytes) -> None:
    # base64.b64decode raises a plain ValueError (not binascii.Error) for a str that is not ASCII
    credential = derive_credential(SCRAM_SHA_256, "pencil", iterations=1)
    server = ScramServer(SCRAM_SHA_256, {"user": credential}.get, lambda name: credential, nonce="def")
    server.server_first(b"n,,n=user,r=abc")
    with pytest.raises(MalformedScram, match="not base64"):
        server.server_final(final)


@pytest.mark.parametrize("number", ["\u00b2", "\u0663", "1" * 5000, "1234567890"])
def test_an_acl_rule_number_must_be_at_most_nine_ascii_digits(number: str) -> None:
    # str.isdigit() takes superscripts and other scripts' digits, which int() refuses or reads,
    # and int() refuses more than 4300 digits: both were a ValueError out of the parser
    with pytest.raises(AclSyntaxError, match="Invalid rule number") as raised:
        parse(f"ACL DENY x ALL ALL\n{number} ACL ALLOW a ALL ALL\n")
    assert raised.value.line == 2
    assert parse("123456789 ACL ALLOW a ALL ALL").rules[0].identity == "a"
