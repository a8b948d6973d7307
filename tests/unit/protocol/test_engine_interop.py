"""Interop defects found with real clients (issue 10, item 6), checked on the engine's bytes."""

from __future__ import annotations

import struct

import pytest

from broker.protocol.amqp0_9_1 import methods as m
from broker.protocol.amqp0_9_1.codec import encode_table, frame

from .harness import Client, Delivery, FakeHost
from .test_engine import client, host  # noqa: F401  (fixtures)
from .test_engine_journal import kinds

CAPABILITIES = {"capabilities": {"authentication_failure_close": True}}


# -- unbind of what is gone (RabbitMQ answers unbind-ok) ------------------------------------

def test_queue_unbind_of_a_deleted_queue_answers_unbind_ok(client: Client) -> None:
    # aio-pika's RPC.close(): unbind the reply queue after it went (auto-delete)
    client.send(1, m.QueueUnbind(queue="amq.gen-gone", exchange="amq.direct", routing_key="k"))
    client.expect(m.QueueUnbindOk, 1)
    client.send(1, m.QueueDeclare(queue="q"))
    client.expect(m.QueueDeclareOk, 1)
    client.send(1, m.QueueUnbind(queue="q", exchange="no-such-exchange", routing_key="k"))
    client.expect(m.QueueUnbindOk, 1)


def test_exchange_unbind_of_a_deleted_exchange_answers_unbind_ok(client: Client) -> None:
    client.send(1, m.ExchangeUnbind(destination="gone", source="amq.topic", routing_key="#"))
    client.expect(m.ExchangeUnbindOk, 1)
    client.send(1, m.ExchangeUnbind(destination="amq.fanout", source="gone", routing_key="#"))
    client.expect(m.ExchangeUnbindOk, 1)


def test_unbind_still_removes_an_existing_binding(client: Client) -> None:
    client.send(1, m.QueueDeclare(queue="q"))
    client.expect(m.QueueDeclareOk)
    client.send(1, m.QueueBind(queue="q", exchange="amq.direct", routing_key="k"))
    client.expect(m.QueueBindOk)
    client.send(1, m.QueueUnbind(queue="q", exchange="amq.direct", routing_key="k"))
    client.expect(m.QueueUnbindOk)
    client.publish(1, "amq.direct", "k", b"x", mandatory=True)
    assert isinstance(client.expect(Delivery, 1).method, m.BasicReturn)


def test_unbind_of_another_connections_exclusive_queue_is_still_405(host: FakeHost, client: Client) -> None:
    client.send(1, m.QueueDeclare(queue="mine", exclusive=True))
    client.expect(m.QueueDeclareOk)
    other = Client(host)
    other.handshake()
    other.open_channel(1)
    other.send(1, m.QueueUnbind(queue="mine", exchange="amq.direct", routing_key="k"))
    assert other.expect(m.ChannelClose, 1).reply_code == 405


# -- SASL --------------------------------------------------------------------------------------

def start_ok(client: Client, mechanism: str, response: bytes) -> None:
    client.expect(m.ConnectionStart)
    client.send(0, m.ConnectionStartOk(client_properties=CAPABILITIES, mechanism=mechanism,
                                       response=response, locale="en_US"))


@pytest.mark.parametrize("mechanism,response", [
    ("PLAIN", b"\x00guest\x00guest"),
    ("AMQPLAIN", encode_table({"LOGIN": "guest", "PASSWORD": "guest"})[4:]),
])
def test_an_empty_initial_response_gets_an_empty_challenge(host: FakeHost, mechanism: str, response: bytes) -> None:
    # Qpid's clients send start-ok with no response and answer connection.secure (RFC 4422 section 5)
    c = Client(host)
    start_ok(c, mechanism, b"")
    assert c.expect(m.ConnectionSecure, 0).challenge == b""
    c.send(0, m.ConnectionSecureOk(response=response))
    tune = c.expect(m.ConnectionTune, 0)
    c.send(0, m.ConnectionTuneOk(channel_max=tune.channel_max, frame_max=tune.frame_max, heartbeat=0))
    c.send(0, m.ConnectionOpen(virtual_host="/"))
    c.expect(m.ConnectionOpenOk)


def test_wrong_credentials_in_secure_ok_are_refused(host: FakeHost) -> None:
    c = Client(host)
    start_ok(c, "PLAIN", b"")
    c.expect(m.ConnectionSecure)
    c.send(0, m.ConnectionSecureOk(response=b"\x00guest\x00wrong"))
    assert c.expect(m.ConnectionClose, 0).reply_code == 403
    assert c.server.closed


def test_an_unknown_mechanism_gets_a_close_naming_it(host: FakeHost) -> None:
    c = Client(host)
    c.expect(m.ConnectionStart)
    # no authentication_failure_close capability: the close is sent all the same
    c.send(0, m.ConnectionStartOk(client_properties={}, mechanism="SCRAM-SHA-256", response=b"n,,n=guest"))
    close = c.expect(m.ConnectionClose, 0)
    assert close.reply_code == 403
    assert "'SCRAM-SHA-256'" in close.reply_text and "PLAIN" in close.reply_text
    assert c.server.closed


@pytest.mark.parametrize("mechanism,response,refusal", [
    ("PLAIN", b"admin\x00guest\x00guest", "may not act as 'admin'"),     # the authzid is not the user
    ("PLAIN", b"guest\x00guest\x00guest", None),                         # the authzid is the user
    ("AMQPLAIN", b"\x05LOGINS\x00\x00", "AMQPLAIN"),                     # truncated table
])
def test_the_engine_uses_the_sasl_module_rules(host: FakeHost, mechanism: str, response: bytes,
                                               refusal: str | None) -> None:
    c = Client(host)
    start_ok(c, mechanism, response)
    if refusal is None:
        c.expect(m.ConnectionTune)
        return
    close = c.expect(m.ConnectionClose, 0)
    assert close.reply_code == 403 and refusal in close.reply_text


# -- undecodable input is 502 with a precise text ---------------------------------------------

def queue_declare_with_table(entries: bytes) -> bytes:
    name = b"\x01q"
    table = struct.pack(">I", len(entries)) + entries
    return frame(1, 1, b"\x00\x32\x00\x0a" + b"\x00\x00" + name + b"\x00" + table)


def test_a_timestamp_out_of_range_is_502_not_541(client: Client) -> None:
    client.raw(queue_declare_with_table(b"\x01tT" + b"\xff" * 8))
    close = client.expect(m.ConnectionClose, 0)
    assert close.reply_code == 502
    assert "timestamp 18446744073709551615 is out of range" in close.reply_text
    assert "'queue.declare'" in close.reply_text


def test_a_timestamp_out_of_range_in_message_headers_is_refused_precisely(client: Client) -> None:
    headers = b"\x01tT" + b"\xff" * 8
    props = b"\x20\x00" + struct.pack(">I", len(headers)) + headers       # headers flag only
    client.raw(client.encode(1, m.BasicPublish(exchange="", routing_key="q"))
               + frame(2, 1, struct.pack(">HHQ", 60, 0, 0) + props))
    close = client.expect(m.ConnectionClose, 0)
    assert close.reply_code in (501, 502) and "timestamp" in close.reply_text


def test_a_truncated_argument_names_the_method(client: Client) -> None:
    client.raw(frame(1, 1, b"\x00\x32\x00\x0a\x00"))
    close = client.expect(m.ConnectionClose, 0)
    assert close.reply_code == 502
    assert close.reply_text == ("SYNTAX_ERROR - malformed arguments for method 'queue.declare' (50/10):"
                                " the frame ends inside a field")


def test_a_string_that_is_not_utf8_is_502(client: Client) -> None:
    client.raw(frame(1, 1, b"\x00\x32\x00\x0a\x00\x00\x02\xff\xfe\x00\x00\x00\x00\x00"))
    close = client.expect(m.ConnectionClose, 0)
    assert close.reply_code == 502 and "not valid UTF-8" in close.reply_text


# -- error texts name the virtual host as the client did ---------------------------------------

def test_not_found_names_the_vhost_as_the_client_opened_it(client: Client) -> None:
    client.send(1, m.QueueDeclare(queue="missing", passive=True))
    close = client.expect(m.ChannelClose, 1)
    assert close.reply_text == "NOT_FOUND - no queue 'missing' in vhost '/'"


def test_a_client_that_opened_the_vhost_by_its_own_name_sees_that_name(host: FakeHost) -> None:
    c = Client(host)
    c.handshake(vhost="default")
    c.open_channel(1)
    c.publish(1, "missing", "k", b"x")
    close = c.expect(m.ChannelClose, 1)
    assert close.reply_text == "NOT_FOUND - no exchange 'missing' in vhost 'default'"


# -- Broker-J's declare arguments next to RabbitMQ's -------------------------------------------

def declare_exchange(client: Client, name: str, kind: str = "direct", **arguments: object) -> None:
    client.send(1, m.ExchangeDeclare(exchange=name, type=kind, arguments=dict(arguments)))


def declare_queue(client: Client, name: str, **arguments: object) -> None:
    client.send(1, m.QueueDeclare(queue=name, arguments=dict(arguments)))


@pytest.mark.parametrize("spelling", ["alternateExchange", "x-qpid-alternate-exchange"])
def test_an_unknown_qpid_alternate_exchange_is_404(client: Client, spelling: str) -> None:
    declare_exchange(client, "x", **{spelling: "missing"})
    close = client.expect(m.ChannelClose, 1)
    assert close.reply_code == 404
    assert close.reply_text == "NOT_FOUND - unknown alternate exchange 'missing' for exchange 'x' in vhost '/'"


def test_a_qpid_alternate_exchange_takes_unroutable_messages_and_cannot_be_deleted(client: Client) -> None:
    declare_exchange(client, "ae", "fanout")
    declare_queue(client, "unrouted")
    client.send(1, m.QueueBind(queue="unrouted", exchange="ae"))
    declare_exchange(client, "x", alternateExchange="ae")
    assert kinds(client) == [m.ExchangeDeclareOk, m.QueueDeclareOk, m.QueueBindOk, m.ExchangeDeclareOk]
    client.publish(1, "x", "nowhere", b"m")
    client.send(1, m.BasicGet(queue="unrouted", no_ack=True))
    assert client.expect(Delivery, 1).body == b"m"
    client.send(1, m.ExchangeDelete(exchange="ae"))
    close = client.expect(m.ConnectionClose, 0)
    assert close.reply_code == 530
    assert close.reply_text == ("NOT_ALLOWED - exchange 'ae' in vhost '/' is the alternate exchange"
                                " of exchange 'x'")


def test_rabbitmq_alternate_exchange_keeps_rabbitmq_lenience(client: Client) -> None:
    declare_exchange(client, "x", **{"alternate-exchange": "later"})    # may be declared later
    declare_exchange(client, "later", "fanout")
    client.send(1, m.ExchangeDelete(exchange="later"))                   # and deleted while named
    assert kinds(client) == [m.ExchangeDeclareOk, m.ExchangeDeclareOk, m.ExchangeDeleteOk]


def test_a_queue_alternate_exchange_takes_rejected_messages(client: Client) -> None:
    declare_queue(client, "q", alternateExchange="missing")
    close = client.expect(m.ChannelClose, 1)
    assert close.reply_code == 404 and "unknown alternate exchange 'missing' for queue 'q'" in close.reply_text
    client.send(1, m.ChannelCloseOk())
    client.open_channel(1)
    declare_exchange(client, "ae", "fanout")
    declare_queue(client, "rejected")
    client.send(1, m.QueueBind(queue="rejected", exchange="ae"))
    declare_queue(client, "q", alternateExchange="ae")
    client.take()
    client.publish(1, "", "q", b"bad")
    client.send(1, m.BasicGet(queue="q"))
    tag = client.expect(Delivery, 1).method.delivery_tag
    client.send(1, m.BasicReject(delivery_tag=tag, requeue=False))
    client.send(1, m.BasicGet(queue="rejected", no_ack=True))
    assert client.expect(Delivery, 1).body == b"bad"
    client.send(1, m.ExchangeDelete(exchange="ae"))
    close = client.expect(m.ConnectionClose, 0)
    assert close.reply_code == 530 and "alternate exchange of queue 'q'" in close.reply_text


def test_unknown_arguments_are_ignored_by_default(client: Client) -> None:
    declare_queue(client, "q", **{"x-no-such-argument": 1})
    declare_exchange(client, "x", **{"x-no-such-argument": 1})
    assert kinds(client) == [m.QueueDeclareOk, m.ExchangeDeclareOk]


def test_unknown_arguments_are_refused_when_the_vhost_says_fail(host: FakeHost, client: Client) -> None:
    host.namespace.unknown_arguments = "FAIL"
    declare_queue(client, "q", **{"x-max-length": 5, "maximumQueueDepthBytes": -1, "x-no-such": 1, "bogus": 2})
    close = client.expect(m.ChannelClose, 1)
    assert close.reply_code == 406
    assert close.reply_text == ("PRECONDITION_FAILED - unknown argument(s) 'bogus', 'x-no-such' for queue 'q'"
                                " in vhost '/'")
    client.send(1, m.ChannelCloseOk())
    client.open_channel(1)
    declare_queue(client, "q", **{"x-max-length": 5, "priorities": 3, "x-qpid-maximum-delivery-count": 2})
    declare_exchange(client, "x", **{"alternate-exchange": "ae", "x-unknown": 1})
    client.expect(m.QueueDeclareOk, 1)
    close = client.expect(m.ChannelClose, 1)
    assert close.reply_code == 406 and "'x-unknown' for exchange 'x'" in close.reply_text


def test_unknown_arguments_are_logged_once_per_name_when_the_vhost_says_log(
        host: FakeHost, client: Client, caplog: pytest.LogCaptureFixture) -> None:
    host.namespace.unknown_arguments = "LOG"
    with caplog.at_level("WARNING", logger="broker.messaging.namespace"):
        declare_queue(client, "q1", **{"x-no-such": 1})
        declare_queue(client, "q2", **{"x-no-such": 1})
        declare_exchange(client, "x", **{"x-other": 1})
    assert kinds(client) == [m.QueueDeclareOk, m.QueueDeclareOk, m.ExchangeDeclareOk]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2 and "x-no-such" in warnings[0] and "x-other" in warnings[1]
