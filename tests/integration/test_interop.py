"""Interop defects found with real clients (issue 10, item 6), against the broker as users start it.

aio-pika's RPC pattern (unbind after its auto-delete reply queue went), SASL
as Qpid's clients do it (no initial response), replies in request order on a
channel whose tx.commit waits for the journal, Broker-J's declare arguments
with pika, undecodable field values, and error texts naming the virtual host
as the client did.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import aio_pika
import aio_pika.patterns
import pika
import pika.exceptions
import pytest
from pamqp import commands
from pika.adapters.blocking_connection import BlockingChannel

from .conftest import DeltaMQProcess
from .support import FRAME_METHOD, PROTOCOL_HEADER_0_9_1, BrokerEndpoint, assert_closed_with, pika_reply, unique

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60, func_only=True)]
deltamq_only = pytest.mark.deltamq_only


# -- unbind of what is gone ---------------------------------------------------------------------

@pytest.mark.anyio
async def test_aio_pika_rpc_create_call_and_close(broker: BrokerEndpoint) -> None:
    connection = await aio_pika.connect(broker.url(), timeout=15)
    try:
        channel = await connection.channel()
        rpc = await aio_pika.patterns.RPC.create(channel)

        async def multiply(*, x: int, y: int) -> int:
            return x * y

        await rpc.register(unique("multiply"), multiply, auto_delete=True)
        assert await rpc.call(list(rpc.routes)[0], kwargs={"x": 6, "y": 7}) == 42
        # close() cancels the reply consumer (the auto-delete queue goes), then unbinds it
        await rpc.close()
        assert not channel.is_closed
        await channel.declare_queue(unique("still-usable"), auto_delete=True)
    finally:
        await connection.close()


def test_unbind_after_the_queue_and_exchange_went(ch: BlockingChannel) -> None:
    q, x = unique("q.gone"), unique("x.gone")
    ch.exchange_declare(x, "direct", auto_delete=True)
    ch.queue_declare(q)
    ch.queue_bind(q, x, "k")
    ch.queue_delete(q)
    ch.queue_unbind(q, x, "k")                       # queue gone (and with it the auto-delete exchange)
    ch.exchange_unbind(unique("x.never"), "amq.direct", "k")
    assert ch.is_open


# -- replies in request order -------------------------------------------------------------------

def test_rollback_right_behind_a_durable_commit_is_answered_after_it(broker: BrokerEndpoint) -> None:
    # Clients wait for each reply before the next request; the spec lets them
    # pipeline, and the broker must answer in order (spec 0-9-1 4.2.4).
    q = unique("q.tx-order")
    with broker.pika() as conn:
        conn.channel().queue_declare(q, durable=True)
    with broker.raw() as raw:
        raw.handshake(broker)
        raw.open_channel(1)
        raw.send_method(1, commands.Tx.Select())
        raw.expect(commands.Tx.SelectOk)
        raw.send_method(1, commands.Basic.Publish(exchange="", routing_key=q))
        raw.send_content(1, b"persistent", commands.Basic.Properties(delivery_mode=2))
        raw.send(b"".join(encoded(1, method) for method in (
            commands.Tx.Commit(), commands.Tx.Rollback(), commands.Queue.Declare(queue=q, passive=True))))
        assert isinstance(raw.expect(commands.Tx.CommitOk), commands.Tx.CommitOk)
        raw.expect(commands.Tx.RollbackOk)
        assert raw.expect(commands.Queue.DeclareOk).message_count == 1
    with broker.pika() as conn:
        conn.channel().queue_delete(q)


def encoded(channel: int, method: Any) -> bytes:
    from pamqp import frame as pframe
    return pframe.marshal(method, channel)


# -- SASL ---------------------------------------------------------------------------------------

def start_ok(raw: Any, mechanism: str, response: bytes | str, capabilities: bool = True) -> None:
    raw.send(PROTOCOL_HEADER_0_9_1)
    raw.expect(commands.Connection.Start)
    properties: dict[str, Any] = {"product": "deltamq-integration-raw"}
    if capabilities:
        properties["capabilities"] = {"authentication_failure_close": True}
    raw.send_method(0, commands.Connection.StartOk(client_properties=properties, mechanism=mechanism,
                                                   response=response))


def test_plain_without_an_initial_response_gets_an_empty_challenge(broker: BrokerEndpoint) -> None:
    with broker.raw() as raw:
        start_ok(raw, "PLAIN", "")
        assert raw.expect(commands.Connection.Secure).challenge in ("", b"")
        raw.send_method(0, commands.Connection.SecureOk(response=f"\0{broker.user}\0{broker.password}"))
        tune = raw.expect(commands.Connection.Tune)
        raw.send_method(0, commands.Connection.TuneOk(channel_max=tune.channel_max, frame_max=tune.frame_max))
        raw.send_method(0, commands.Connection.Open(virtual_host=broker.vhost))
        raw.expect(commands.Connection.OpenOk)


@deltamq_only          # RabbitMQ hangs up without a word (test_connection allows both)
def test_an_unknown_mechanism_gets_a_close_naming_it(broker: BrokerEndpoint) -> None:
    with broker.raw() as raw:
        start_ok(raw, "CRAM-MD5", "guest", capabilities=False)
        assert_closed_with(raw.wait_connection_close(), 403, "'CRAM-MD5' is not supported")


@deltamq_only
def test_a_plain_authzid_other_than_the_user_is_refused(broker: BrokerEndpoint) -> None:
    with broker.raw() as raw:
        start_ok(raw, "PLAIN", f"someone-else\0{broker.user}\0{broker.password}")
        assert_closed_with(raw.wait_connection_close(), 403, "may not act as 'someone-else'")


def test_pika_plain_login_still_works(broker: BrokerEndpoint) -> None:
    with broker.pika() as conn:
        assert conn.channel().is_open


# -- undecodable input ------------------------------------------------------------------------

def test_a_timestamp_out_of_range_is_502_and_others_are_served(broker: BrokerEndpoint) -> None:
    entries = b"\x01tT" + b"\xff" * 8                              # year ~5.8e11
    arguments = struct.pack(">I", len(entries)) + entries
    payload = b"\x00\x32\x00\x0a\x00\x00" + b"\x01q" + b"\x00" + arguments   # queue.declare
    with broker.raw() as raw:
        raw.handshake(broker)
        raw.open_channel(1)
        raw.send_frame(FRAME_METHOD, 1, payload)
        assert_closed_with(raw.wait_connection_close(), 502, "timestamp")
    with broker.pika() as conn:                                    # the broker kept serving
        conn.channel().queue_declare("", exclusive=True, arguments={"x-when": datetime(2030, 1, 1,
                                                                                          tzinfo=timezone.utc)})


# -- error texts ------------------------------------------------------------------------------

def test_not_found_names_the_vhost_as_the_client_did(broker: BrokerEndpoint, ch: BlockingChannel) -> None:
    missing = unique("q.missing")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(missing, passive=True)
    assert pika_reply(info.value) == (404, f"NOT_FOUND - no queue '{missing}' in vhost '{broker.vhost}'")


# -- Broker-J's declare arguments -------------------------------------------------------------

@deltamq_only
def test_qpid_alternate_exchange_with_pika(broker: BrokerEndpoint) -> None:
    ae, x, q = unique("x.ae"), unique("x.main"), unique("q.unrouted")
    with broker.pika() as conn:
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.exchange_declare(x, "direct", arguments={"alternateExchange": ae})
        assert pika_reply(info.value)[0] == 404 and f"'{ae}'" in pika_reply(info.value)[1]
        ch = conn.channel()
        ch.exchange_declare(ae, "fanout")
        ch.queue_declare(q, exclusive=True)
        ch.queue_bind(q, ae)
        ch.exchange_declare(x, "direct", arguments={"alternateExchange": ae})
        ch.basic_publish(x, "no-binding", b"to the alternate")
        method, _props, body = ch.basic_get(q, auto_ack=True)
        while method is None:
            conn.process_data_events(time_limit=0.05)
            method, _props, body = ch.basic_get(q, auto_ack=True)
        assert body == b"to the alternate"
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            ch.exchange_delete(ae)
        assert pika_reply(closed.value)[0] == 530
    with broker.pika() as conn:                                    # tidy up: the main exchange first
        ch = conn.channel()
        ch.exchange_delete(x)
        ch.exchange_delete(ae)


@pytest.fixture
def strict_broker() -> Iterator[DeltaMQProcess]:
    with DeltaMQProcess({"queue.behaviourOnUnknownDeclareArgument": "FAIL"}) as proc:
        yield proc


@deltamq_only
def test_unknown_arguments_are_refused_when_the_context_says_fail(broker: BrokerEndpoint,
                                                                  strict_broker: DeltaMQProcess) -> None:
    params = pika.ConnectionParameters("127.0.0.1", strict_broker.amqp_port, connection_attempts=1)
    with pika.BlockingConnection(params) as conn:
        ch = conn.channel()
        ch.queue_declare("known", arguments={"x-max-length": 3, "qpid.max_count": 3, "priorities": 3})
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.queue_declare("unknown", arguments={"x-not-a-thing": 1})
        assert pika_reply(info.value) == (
            406, "PRECONDITION_FAILED - unknown argument(s) 'x-not-a-thing' for queue 'unknown' in vhost '/'")
    # the shared broker keeps RabbitMQ's default: ignored
    with broker.pika() as conn:
        conn.channel().queue_declare(unique("q.lenient"), exclusive=True, arguments={"x-not-a-thing": 1})
