"""The 0-8/0-9/0-9-1 engine in memory: a frame-level client against the server engine."""

from __future__ import annotations

import pytest

from broker.messaging.message import MessageProperties
from broker.protocol.amqp0_9_1 import methods as m
from broker.protocol.amqp0_9_1.codec import frame
from broker.protocol.amqp0_9_1.connection import State
from broker.protocol.detect import AmqpVersion

from .harness import Client, Delivery, FakeHost


@pytest.fixture
def host() -> FakeHost:
    return FakeHost()


@pytest.fixture
def client(host: FakeHost) -> Client:
    c = Client(host)
    c.handshake()
    c.open_channel(1)
    return c


@pytest.mark.parametrize("version,major_minor", [
    (AmqpVersion.V0_8, (8, 0)), (AmqpVersion.V0_9, (0, 9)), (AmqpVersion.V0_9_1, (0, 9))])
def test_handshake_in_every_version(host: FakeHost, version: AmqpVersion, major_minor: tuple[int, int]) -> None:
    c = Client(host, version)
    start = c.frames[0][2] if c.frames else None
    c.pump()
    start = c.frames[0][2]
    assert (start.version_major, start.version_minor) == major_minor
    caps = start.server_properties["capabilities"]
    for cap in ("publisher_confirms", "exchange_exchange_bindings", "basic.nack", "consumer_cancel_notify",
                "connection.blocked", "authentication_failure_close", "per_consumer_qos"):
        assert caps[cap] is True
    assert set(start.mechanisms.split()) == {b"PLAIN", b"AMQPLAIN"}
    c.handshake()
    c.open_channel(1)
    c.send(1, m.QueueDeclare(queue="q"))
    assert c.expect(m.QueueDeclareOk, 1).queue == "q"
    c.publish(1, "", "q", b"hello")
    c.send(1, m.BasicGet(queue="q", no_ack=True))
    got = c.expect(Delivery, 1)
    assert got.body == b"hello" and isinstance(got.method, m.BasicGetOk)
    # 0-8 numbers connection.close 60, the others 50: the engine must use the right table
    c.send(0, m.ConnectionClose(reply_code=200, reply_text="bye"))
    c.expect(m.ConnectionCloseOk, 0)
    assert c.server.closed


def test_amqplain_login(host: FakeHost) -> None:
    from broker.protocol.amqp0_9_1.codec import encode_table

    c = Client(host)
    c.expect(m.ConnectionStart)
    c.send(0, m.ConnectionStartOk(client_properties={}, mechanism="AMQPLAIN",
                                  response=encode_table({"LOGIN": "guest", "PASSWORD": "guest"})[4:]))
    c.expect(m.ConnectionTune)


def test_wrong_password_is_refused_with_403(host: FakeHost) -> None:
    c = Client(host)
    c.expect(m.ConnectionStart)
    c.send(0, m.ConnectionStartOk(client_properties={"capabilities": {"authentication_failure_close": True}},
                                  mechanism="PLAIN", response=b"\x00guest\x00nope"))
    close = c.expect(m.ConnectionClose, 0)
    assert close.reply_code == 403 and close.reply_text.startswith("ACCESS_REFUSED")
    assert c.server.closed


def test_unknown_virtual_host_is_refused(host: FakeHost) -> None:
    c = Client(host)
    with pytest.raises(AssertionError):
        c.handshake(vhost="nowhere")
    close = [obj for _ch, obj in c.take() if isinstance(obj, m.ConnectionClose)] or None
    assert c.server.state is State.CLOSING


def test_publish_consume_round_trip_with_properties(client: Client) -> None:
    client.send(1, m.QueueDeclare(queue="orders"))
    client.expect(m.QueueDeclareOk)
    client.send(1, m.BasicConsume(queue="orders", consumer_tag="c1"))
    client.expect(m.BasicConsumeOk)
    props = MessageProperties(content_type="application/json", headers={"k": "v"}, delivery_mode=2,
                              message_id="m-1")
    client.publish(1, "", "orders", b'{"a": 1}', props)
    d = client.expect(Delivery, 1)
    assert isinstance(d.method, m.BasicDeliver)
    assert d.method.consumer_tag == "c1" and d.method.delivery_tag == 1 and not d.method.redelivered
    assert d.method.routing_key == "orders"
    assert d.body == b'{"a": 1}' and d.properties == props


def test_large_body_is_split_into_frames_of_the_negotiated_size(client: Client) -> None:
    client.send(1, m.QueueDeclare(queue="big"))
    client.expect(m.QueueDeclareOk)
    body = bytes(range(256)) * 2000          # 512000 bytes: several 131072-byte frames
    client.publish(1, "", "big", body)
    client.send(1, m.BasicGet(queue="big", no_ack=True))
    assert client.expect(Delivery).body == body


def test_every_split_of_the_input_gives_the_same_result(host: FakeHost) -> None:
    reference = Client(host)
    reference.handshake()
    reference.open_channel(1)
    reference.send(1, m.QueueDeclare(queue="split"))
    reference.expect(m.QueueDeclareOk)
    data = reference.publish_bytes(1, "", "split", b"x" * 300, MessageProperties(headers={"h": 1}))
    data += reference.encode(1, m.BasicGet(queue="split", no_ack=True))
    for cut in range(1, len(data)):
        reference.raw(data[:cut])
        reference.raw(data[cut:])
        got = reference.expect(Delivery)
        assert got.body == b"x" * 300 and got.properties.headers == {"h": 1}, cut


def test_publisher_confirms_are_batched_into_one_multiple_ack(client: Client) -> None:
    client.send(1, m.ConfirmSelect())
    client.expect(m.ConfirmSelectOk)
    client.send(1, m.QueueDeclare(queue="c"))
    client.expect(m.QueueDeclareOk)
    data = b"".join(client.publish_bytes(1, "", "c", b"%d" % i) for i in range(5))
    client.raw(data)
    ack = client.expect(m.BasicAck, 1)
    assert ack.delivery_tag == 5 and ack.multiple
    client.publish(1, "", "c", b"six")
    ack = client.expect(m.BasicAck, 1)
    assert ack.delivery_tag == 6 and not ack.multiple


def test_reject_publish_overflow_nacks(client: Client) -> None:
    client.send(1, m.ConfirmSelect())
    client.expect(m.ConfirmSelectOk)
    client.send(1, m.QueueDeclare(queue="full", arguments={"x-max-length": 1, "x-overflow": "reject-publish"}))
    client.expect(m.QueueDeclareOk)
    client.raw(client.publish_bytes(1, "", "full", b"a") + client.publish_bytes(1, "", "full", b"b"))
    ack = client.expect(m.BasicAck)
    nack = client.expect(m.BasicNack)
    assert ack.delivery_tag == 1 and nack.delivery_tag == 2


def test_mandatory_unroutable_message_is_returned(client: Client) -> None:
    client.publish(1, "amq.direct", "nobody", b"lost", mandatory=True)
    returned = client.expect(Delivery, 1)
    assert isinstance(returned.method, m.BasicReturn)
    assert returned.method.reply_code == 312 and returned.method.reply_text == "NO_ROUTE"
    assert returned.body == b"lost"


def test_immediate_is_not_implemented(client: Client) -> None:
    client.send(1, m.BasicPublish(exchange="", routing_key="q", immediate=True))
    close = client.expect(m.ConnectionClose, 0)
    assert close.reply_code == 540 and "immediate" in close.reply_text
    assert (close.class_id, close.method_id) == (60, 40)


def test_soft_error_closes_only_the_channel(client: Client) -> None:
    client.open_channel(2)
    client.send(1, m.QueueDeclare(queue="missing", passive=True))
    close = client.expect(m.ChannelClose, 1)
    assert close.reply_code == 404 and "missing" in close.reply_text
    assert (close.class_id, close.method_id) == (50, 10)
    # frames on the closing channel are ignored until close-ok
    client.send(1, m.QueueDeclare(queue="ignored"))
    assert client.take() == []
    client.send(1, m.ChannelCloseOk())
    client.send(2, m.QueueDeclare(queue="fine"))
    client.expect(m.QueueDeclareOk, 2)
    client.open_channel(1)                   # the number can be reused


def test_publish_to_missing_exchange_closes_channel_with_404(client: Client) -> None:
    client.publish(1, "no-such-exchange", "rk", b"x")
    close = client.expect(m.ChannelClose, 1)
    assert close.reply_code == 404 and "no-such-exchange" in close.reply_text


def test_unknown_delivery_tag_is_406(client: Client) -> None:
    client.send(1, m.BasicAck(delivery_tag=42))
    close = client.expect(m.ChannelClose, 1)
    assert close.reply_code == 406 and "42" in close.reply_text


def test_frame_larger_than_frame_max_is_501(client: Client) -> None:
    client.raw(b"\x01\x00\x01\x00\x10\x00\x00")    # announces a 1 MiB frame
    close = client.expect(m.ConnectionClose, 0)
    assert close.reply_code == 501 and "frame_max" in close.reply_text


def test_bad_frame_end_is_501(client: Client) -> None:
    client.raw(frame(1, 1, b"\x00\x14\x00\x28")[:-1] + b"\x00")
    assert client.expect(m.ConnectionClose, 0).reply_code == 501


def test_unknown_method_is_540(client: Client) -> None:
    client.raw(frame(1, 1, b"\x00\x63\x00\x01"))
    close = client.expect(m.ConnectionClose, 0)
    assert close.reply_code == 540 and "class 99" in close.reply_text


def test_malformed_arguments_are_502(client: Client) -> None:
    client.raw(frame(1, 1, b"\x00\x32\x00\x0a\x00\x00\x09abc"))   # queue name runs past the frame
    assert client.expect(m.ConnectionClose, 0).reply_code == 502


def test_method_on_unopened_channel_is_504(client: Client) -> None:
    client.send(7, m.QueueDeclare(queue="q"))
    close = client.expect(m.ConnectionClose, 0)
    assert close.reply_code == 504 and "channel.open" in close.reply_text


def test_content_frame_without_publish_is_505(client: Client) -> None:
    client.raw(frame(3, 1, b"body"))
    assert client.expect(m.ConnectionClose, 0).reply_code == 505


def test_method_during_content_is_505(client: Client) -> None:
    client.send(1, m.BasicPublish(exchange="", routing_key="q"))
    client.send(1, m.QueueDeclare(queue="q"))
    assert client.expect(m.ConnectionClose, 0).reply_code == 505


def test_oversized_message_is_refused_with_406(host: FakeHost) -> None:
    host.max_message_size = 1000
    c = Client(host)
    c.handshake()
    c.open_channel(1)
    c.publish(1, "", "q", b"x" * 2000)
    close = c.expect(m.ChannelClose, 1)
    assert close.reply_code == 406 and "max size" in close.reply_text


def test_after_connection_close_frames_are_discarded(client: Client) -> None:
    client.send(7, m.QueueDeclare(queue="q"))
    client.expect(m.ConnectionClose)
    client.send(1, m.QueueDeclare(queue="q"))
    assert client.take() == []
    client.send(0, m.ConnectionCloseOk())
    assert client.server.closed


def test_prefetch_limits_unacked_deliveries(client: Client) -> None:
    client.send(1, m.QueueDeclare(queue="p"))
    client.expect(m.QueueDeclareOk)
    for i in range(5):
        client.publish(1, "", "p", b"%d" % i)
    client.send(1, m.BasicQos(prefetch_count=2))
    client.expect(m.BasicQosOk)
    client.send(1, m.BasicConsume(queue="p", consumer_tag="c"))
    client.expect(m.BasicConsumeOk)
    first = client.deliveries()
    assert [d.body for d in first] == [b"0", b"1"]
    client.send(1, m.BasicAck(delivery_tag=2, multiple=True))
    assert [d.body for d in client.deliveries()] == [b"2", b"3"]


def test_nack_requeue_redelivers_in_original_position(client: Client) -> None:
    client.send(1, m.QueueDeclare(queue="r"))
    client.expect(m.QueueDeclareOk)
    for body in (b"a", b"b", b"c"):
        client.publish(1, "", "r", body)
    client.send(1, m.BasicGet(queue="r"))
    a = client.expect(Delivery)
    client.send(1, m.BasicNack(delivery_tag=a.method.delivery_tag, requeue=True))
    client.send(1, m.BasicGet(queue="r", no_ack=True))
    again = client.expect(Delivery)
    assert again.body == b"a" and again.method.redelivered


def test_closing_the_channel_requeues_unacked(client: Client) -> None:
    client.send(1, m.QueueDeclare(queue="u"))
    client.expect(m.QueueDeclareOk)
    client.publish(1, "", "u", b"one")
    client.send(1, m.BasicConsume(queue="u"))
    client.expect(m.BasicConsumeOk)
    assert [d.body for d in client.deliveries()] == [b"one"]
    client.send(1, m.ChannelClose(reply_code=200))
    client.expect(m.ChannelCloseOk)
    client.open_channel(2)
    client.send(2, m.BasicGet(queue="u", no_ack=True))
    d = client.expect(Delivery)
    assert d.body == b"one" and d.method.redelivered


def test_transactions_hide_publishes_until_commit(client: Client) -> None:
    client.send(1, m.QueueDeclare(queue="t"))
    client.expect(m.QueueDeclareOk)
    client.send(1, m.TxSelect())
    client.expect(m.TxSelectOk)
    client.publish(1, "", "t", b"tx")
    client.open_channel(2)
    client.send(2, m.BasicGet(queue="t", no_ack=True))
    client.expect(m.BasicGetEmpty)
    client.send(1, m.TxCommit())
    client.expect(m.TxCommitOk)
    client.send(2, m.BasicGet(queue="t", no_ack=True))
    assert client.expect(Delivery).body == b"tx"
    client.publish(1, "", "t", b"dropped")
    client.send(1, m.TxRollback())
    client.expect(m.TxRollbackOk)
    client.send(2, m.BasicGet(queue="t", no_ack=True))
    client.expect(m.BasicGetEmpty)


def test_confirm_after_tx_is_refused(client: Client) -> None:
    client.send(1, m.TxSelect())
    client.expect(m.TxSelectOk)
    client.send(1, m.ConfirmSelect())
    close = client.expect(m.ChannelClose)
    assert close.reply_code == 406 and "tx" in close.reply_text


def test_consumer_cancel_notify_when_queue_deleted(client: Client) -> None:
    client.send(1, m.QueueDeclare(queue="gone"))
    client.expect(m.QueueDeclareOk)
    client.send(1, m.BasicConsume(queue="gone", consumer_tag="watcher"))
    client.expect(m.BasicConsumeOk)
    client.open_channel(2)
    client.send(2, m.QueueDelete(queue="gone"))
    frames = client.take()
    cancels = [obj for ch, obj in frames if isinstance(obj, m.BasicCancel)]
    assert cancels and cancels[0].consumer_tag == "watcher"


def test_exclusive_queue_is_locked_to_its_connection(host: FakeHost, client: Client) -> None:
    client.send(1, m.QueueDeclare(queue="mine", exclusive=True))
    client.expect(m.QueueDeclareOk)
    other = Client(host)
    other.handshake()
    other.open_channel(1)
    other.send(1, m.BasicConsume(queue="mine"))
    assert other.expect(m.ChannelClose).reply_code == 405
    client.send(0, m.ConnectionClose(reply_code=200))
    client.expect(m.ConnectionCloseOk)
    other.open_channel(2)
    other.send(2, m.QueueDeclare(queue="mine", passive=True))
    assert other.expect(m.ChannelClose).reply_code == 404    # deleted with its owner


def test_connection_blocked_is_sent_to_clients_that_asked(client: Client) -> None:
    client.server.set_blocked(True)
    assert client.take() == []                 # RabbitMQ blocks publishers only ...
    client.publish(1, "", "nowhere", b"x")     # ... and tells them when they publish
    blocked = client.expect(m.ConnectionBlocked, 0)
    assert "memory" in blocked.reason
    client.server.set_blocked(False)
    client.expect(m.ConnectionUnblocked, 0)


def test_a_connection_opened_during_an_alarm_is_blocked_with_its_reason(host: FakeHost) -> None:
    host.alarm = "low on disk"
    c = Client(host)
    c.handshake()
    c.open_channel(1)
    assert c.take() == []
    c.publish(1, "", "nowhere", b"x")
    assert c.expect(m.ConnectionBlocked, 0).reason == "low on disk"
    c.server.set_blocked(False)
    c.expect(m.ConnectionUnblocked, 0)


def test_buffered_bytes_are_unsent_output_and_unparsed_input(client: Client) -> None:
    assert client.server.buffered_bytes == 0
    client.server.receive_data(b"\x01\x00\x01")        # the start of a frame
    assert client.server.buffered_bytes == 3
    client.server.send_heartbeat()
    assert client.server.buffered_bytes == 3 + 8
    client.server.data_to_send()
    assert client.server.buffered_bytes == 3


class _Recorder:
    """Stands in for the model's runtime objects: records what the engine registers."""

    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name

    def register_session(self, channel: int) -> _Recorder:
        self.log.append(f"+session {channel}")
        return _Recorder(self.log, f"session {channel}")

    def register_consumer(self, tag: str, **kwargs: object) -> _Recorder:
        self.log.append(f"+consumer {tag} on {kwargs['queue']}")
        return _Recorder(self.log, f"consumer {tag}")

    def unregister(self) -> None:
        self.log.append(f"-{self.name}")


def test_sessions_and_consumers_are_registered_in_the_model(host: FakeHost) -> None:
    log: list[str] = []
    c = Client(host)
    c.handshake()
    c.server.model = _Recorder(log, "connection")
    c.open_channel(1)
    c.send(1, m.QueueDeclare(queue="seen"))
    c.send(1, m.BasicConsume(queue="seen", consumer_tag="t1"))
    c.send(1, m.BasicCancel(consumer_tag="t1"))
    c.send(1, m.BasicConsume(queue="seen", consumer_tag="t2"))
    c.send(1, m.ChannelClose(reply_code=200))
    assert log == ["+session 1", "+consumer t1 on seen", "-consumer t1", "+consumer t2 on seen",
                   "-consumer t2", "-session 1"]


def test_blocked_publisher_is_held_but_can_still_close(host: FakeHost, client: Client) -> None:
    client.send(1, m.QueueDeclare(queue="held"))
    client.expect(m.QueueDeclareOk)
    client.server.set_blocked(True)
    client.publish(1, "", "held", b"first")
    client.expect(m.ConnectionBlocked, 0)
    client.publish(1, "", "held", b"second")          # held, not routed, while blocked
    assert host.namespace.queue("held").message_count <= 1
    client.server.set_blocked(False)
    client.expect(m.ConnectionUnblocked, 0)
    assert host.namespace.queue("held").message_count == 2
    client.server.set_blocked(True)                    # it has published: blocked at once
    client.expect(m.ConnectionBlocked, 0)
    client.publish(1, "", "held", b"third")            # held
    client.open_channel(2)                              # other channels flow on
    client.send(1, m.ChannelClose(reply_code=200))     # discards channel 1's held publish
    client.expect(m.ChannelCloseOk, 1)
    assert host.namespace.queue("held").message_count == 2
    client.send(0, m.ConnectionClose(reply_code=200))  # channel 0 is never held
    client.expect(m.ConnectionCloseOk, 0)
    assert client.server.closed


def test_sender_selected_distribution_cc_and_bcc(client: Client) -> None:
    for q in ("main", "copy", "blind"):
        client.send(1, m.QueueDeclare(queue=q))
        client.expect(m.QueueDeclareOk)
    client.publish(1, "", "main", b"memo", MessageProperties(headers={"CC": ["copy"], "BCC": ["blind"], "k": 1}))
    seen = {}
    for q in ("main", "copy", "blind"):
        client.send(1, m.BasicGet(queue=q, no_ack=True))
        d = client.expect(Delivery)
        seen[q] = d
        assert d.body == b"memo" and d.method.routing_key == "main"
    # CC stays visible, BCC never reaches a consumer
    assert seen["copy"].properties.headers == {"CC": ["copy"], "k": 1}
    assert "BCC" not in seen["blind"].properties.headers


def test_confirms_go_out_before_close_ok_in_the_same_read(client: Client) -> None:
    client.send(1, m.ConfirmSelect())
    client.expect(m.ConfirmSelectOk)
    client.send(1, m.QueueDeclare(queue="cc"))
    client.expect(m.QueueDeclareOk)
    client.raw(client.publish_bytes(1, "", "cc", b"a") + client.publish_bytes(1, "", "cc", b"b")
               + client.encode(1, m.ChannelClose(reply_code=200)))
    ack = client.expect(m.BasicAck, 1)
    assert ack.delivery_tag == 2 and ack.multiple
    client.expect(m.ChannelCloseOk, 1)
    assert client.take() == []


def test_qpid_exchange_bound(client: Client) -> None:
    client.send(1, m.QueueDeclare(queue="bq"))
    client.expect(m.QueueDeclareOk)
    client.send(1, m.QueueBind(queue="bq", exchange="amq.direct", routing_key="k"))
    client.expect(m.QueueBindOk)
    # Qpid's codes: 0 ok, 1 exchange not found, 2 queue not found, 6 queue not bound with that key
    for exchange, queue, key, code in (("amq.direct", "bq", "k", 0), ("nope", "bq", "k", 1),
                                       ("amq.direct", "nope", "k", 2), ("amq.direct", "bq", "other", 6)):
        client.send(1, m.ExchangeBound(exchange=exchange, queue=queue, routing_key=key))
        assert client.expect(m.ExchangeBoundOk, 1).reply_code == code, (exchange, queue, key)


def test_x_priority_must_be_an_integer(client: Client) -> None:
    client.send(1, m.QueueDeclare(queue="prio"))
    client.expect(m.QueueDeclareOk)
    client.send(1, m.BasicConsume(queue="prio", arguments={"x-priority": "high"}))
    close = client.expect(m.ChannelClose, 1)
    assert close.reply_code == 406 and "x-priority" in close.reply_text


def test_direct_reply_to_round_trip(host: FakeHost, client: Client) -> None:
    client.send(1, m.BasicConsume(queue="amq.rabbitmq.reply-to", consumer_tag="replies", no_ack=True))
    client.expect(m.BasicConsumeOk)
    client.send(1, m.QueueDeclare(queue="rpc"))
    client.expect(m.QueueDeclareOk)
    client.publish(1, "", "rpc", b"2+2?", MessageProperties(reply_to="amq.rabbitmq.reply-to"))
    server = Client(host)
    server.handshake()
    server.open_channel(1)
    server.send(1, m.BasicGet(queue="rpc", no_ack=True))
    request = server.expect(Delivery)
    reply_to = request.properties.reply_to
    assert reply_to.startswith("amq.rabbitmq.reply-to.") and len(reply_to) > len("amq.rabbitmq.reply-to.")
    server.publish(1, "", reply_to, b"4")
    reply = client.expect(Delivery, 1)
    assert isinstance(reply.method, m.BasicDeliver)
    assert reply.method.consumer_tag == "replies" and reply.body == b"4"
    # the token dies with the channel: a late reply is returned when mandatory
    client.send(1, m.ChannelClose(reply_code=200))
    client.expect(m.ChannelCloseOk)
    server.publish(1, "", reply_to, b"late", mandatory=True)
    returned = server.expect(Delivery, 1)
    assert isinstance(returned.method, m.BasicReturn) and returned.method.reply_code == 312


def test_direct_reply_to_needs_no_ack_and_a_consumer(client: Client) -> None:
    client.send(1, m.BasicConsume(queue="amq.rabbitmq.reply-to", no_ack=False))
    close = client.expect(m.ChannelClose, 1)
    assert close.reply_code == 406 and "acknowledge" in close.reply_text
    client.send(1, m.ChannelCloseOk())
    client.open_channel(2)
    client.publish(2, "", "anything", b"x", MessageProperties(reply_to="amq.rabbitmq.reply-to"))
    close = client.expect(m.ChannelClose, 2)
    assert close.reply_code == 406 and "reply consumer does not exist" in close.reply_text
