"""The 0-9-1 publish path's shortcuts: what is decoded once serves only what it was decoded from."""

from __future__ import annotations

from broker.messaging.message import MessageProperties
from broker.protocol.amqp0_9_1 import methods as m
from broker.protocol.amqp0_9_1.method_decoding import PUBLISH_CACHE_SIZE

from .harness import Client, FakeHost


def _client(host: FakeHost) -> Client:
    client = Client(host)
    client.handshake()
    client.open_channel(1)
    return client


def test_every_publish_goes_where_its_own_frame_says_after_the_cache_fills() -> None:
    host = FakeHost()
    client = _client(host)
    count = PUBLISH_CACHE_SIZE + 6
    for i in range(count):
        client.send(1, m.QueueDeclare(queue=f"q{i}"))
    client.take()
    data = b"".join(client.publish_bytes(1, "", f"q{i}", str(i).encode(), mandatory=i % 2 == 0)
                    for i in (*range(count), *range(count)))
    client.raw(data)
    for i in range(count):
        queue = host.namespace.queues[f"q{i}"]
        assert queue.message_count == 2, (i, queue.message_count)
    # a mandatory publish to nowhere is returned, a plain one dropped: the flags are the frame's
    client.raw(client.publish_bytes(1, "", "nowhere", b"a", mandatory=True)
               + client.publish_bytes(1, "", "nowhere", b"b", mandatory=False)
               + client.publish_bytes(1, "", "nowhere", b"c", mandatory=True))
    returned = [d.body for d in client.deliveries() if isinstance(d.method, m.BasicReturn)]
    assert returned == [b"a", b"c"]


def test_each_message_keeps_its_own_properties() -> None:
    host = FakeHost()
    client = _client(host)
    client.send(1, m.QueueDeclare(queue="q"))
    client.send(1, m.BasicConsume(queue="q", consumer_tag="c", no_ack=True))
    client.take()
    plain = MessageProperties(content_type="text/plain", delivery_mode=1)
    json = MessageProperties(content_type="application/json", priority=3, expiration="60000")
    tagged = MessageProperties(content_type="text/plain", headers={"n": 1})
    sent = [plain, plain, json, plain, tagged, tagged, json, json]
    client.raw(b"".join(client.publish_bytes(1, "", "q", str(i).encode(), props)
                        for i, props in enumerate(sent)))
    got = client.deliveries()
    assert [d.body for d in got] == [str(i).encode() for i in range(len(sent))]
    assert [d.properties for d in got] == sent
    # a header table decoded for one message is not another's
    first, second = (d.properties.headers for d in got[4:6])
    assert first == second == {"n": 1}


def test_the_message_size_bound_is_the_one_the_connection_came_with() -> None:
    host = FakeHost(max_message_size=1000)
    client = _client(host)
    host.max_message_size = 10          # a change applies to the next connection
    client.send(1, m.QueueDeclare(queue="q"))
    client.take()
    client.publish(1, "", "q", b"x" * 500)
    assert host.namespace.queues["q"].message_count == 1
    later = _client(host)
    later.publish(1, "", "q", b"x" * 500)
    close = later.expect(m.ChannelClose, 1)
    assert close.reply_code == 406 and "larger than configured max size 10" in close.reply_text


def _consuming(host: FakeHost, count: int) -> Client:
    client = _client(host)
    client.send(1, m.QueueDeclare(queue="q"))
    client.send(1, m.BasicConsume(queue="q", consumer_tag="c"))
    client.take()
    client.raw(b"".join(client.publish_bytes(1, "", "q", b"%d" % i) for i in range(count)))
    assert len(client.deliveries()) == count
    return client


def test_ack_multiple_takes_what_it_names_and_no_more() -> None:
    host = FakeHost()
    client = _consuming(host, 6)
    queue = host.namespace.queues["q"]
    channel = client.server.channels[1]
    client.send(1, m.BasicAck(delivery_tag=2, multiple=True))
    assert (queue.unacked_count, sorted(channel.unacked), channel.unacked_bytes) == (4, [3, 4, 5, 6], 4)
    client.send(1, m.BasicAck(delivery_tag=4, multiple=False))
    client.send(1, m.BasicAck(delivery_tag=6, multiple=True))      # the last tag: all the rest
    assert (queue.unacked_count, channel.unacked, channel.unacked_bytes) == (0, {}, 0)
    client.send(1, m.BasicAck(delivery_tag=6, multiple=True))      # acked already: nothing
    assert client.take() == []
    client.send(1, m.BasicAck(delivery_tag=7, multiple=True))      # never delivered
    assert client.expect(m.ChannelClose, 1).reply_code == 406


def test_ack_multiple_with_tag_zero_takes_everything() -> None:
    host = FakeHost()
    client = _consuming(host, 3)
    client.send(1, m.BasicAck(delivery_tag=0, multiple=True))
    assert host.namespace.queues["q"].unacked_count == 0
    assert client.server.channels[1].unacked == {}


def test_acks_in_a_transaction_come_back_on_rollback() -> None:
    host = FakeHost()
    client = _consuming(host, 4)
    client.send(1, m.TxSelect())
    client.send(1, m.BasicAck(delivery_tag=3, multiple=True))
    channel = client.server.channels[1]
    assert sorted(channel.unacked) == [4]
    client.send(1, m.TxRollback())
    assert sorted(channel.unacked) == [1, 2, 3, 4] and channel.unacked_bytes == 4
    client.send(1, m.BasicAck(delivery_tag=0, multiple=True))
    client.send(1, m.TxCommit())
    assert host.namespace.queues["q"].unacked_count == 0 and channel.unacked == {}
