"""A representative tour with aio-pika (asyncio, aiormq underneath): the client
most asyncio services use, with publisher confirms on by default."""

from __future__ import annotations

import asyncio
from typing import Any

import aio_pika
import aiormq.exceptions
import pytest

from tests.waiting import wait_until_async

from .support import BrokerEndpoint, unique

pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.timeout(30, func_only=True)]


async def collect(queue: aio_pika.abc.AbstractQueue, n: int, timeout: float = 5.0,
                  ack: bool = True) -> list[aio_pika.abc.AbstractIncomingMessage]:
    out: list[aio_pika.abc.AbstractIncomingMessage] = []
    async with asyncio.timeout(timeout):
        async with queue.iterator() as it:
            async for message in it:
                if ack:
                    await message.ack()
                out.append(message)
                if len(out) == n:
                    break
    return out


async def test_connect_and_capabilities(aio_conn: aio_pika.abc.AbstractConnection) -> None:
    transport: Any = aio_conn.transport
    props = transport.connection.server_properties
    caps = props["capabilities"]
    for cap in ("publisher_confirms", "basic.nack", "consumer_cancel_notify",
                "exchange_exchange_bindings", "connection.blocked", "per_consumer_qos",
                "authentication_failure_close"):
        assert caps.get(cap) is True, cap


async def test_wrong_password(broker: BrokerEndpoint) -> None:
    with pytest.raises(aiormq.exceptions.ProbableAuthenticationError) as info:
        await aio_pika.connect(broker.url(password="wrong"), timeout=10)
    assert "ACCESS_REFUSED" in str(info.value)


async def test_topic_routing_publish_consume(aio_conn: aio_pika.abc.AbstractConnection) -> None:
    ch = await aio_conn.channel()
    x = await ch.declare_exchange(unique("x.topic"), aio_pika.ExchangeType.TOPIC, auto_delete=True)
    q = await ch.declare_queue(exclusive=True)
    await q.bind(x, "logs.*.error")
    for key, body in (("logs.api.error", b"1"), ("logs.api.info", b"2"),
                      ("logs.db.error", b"3"), ("logs.error", b"4")):
        await x.publish(aio_pika.Message(body, headers={"k": key}, message_id=body.decode()), key)
    got = await collect(q, 2)
    assert [m.body for m in got] == [b"1", b"3"]
    assert [m.routing_key for m in got] == ["logs.api.error", "logs.db.error"]
    assert got[0].headers == {"k": "logs.api.error"} and got[0].message_id == "1"
    assert got[0].exchange == x.name and not got[0].redelivered
    assert await q.get(fail=False) is None


async def test_publisher_confirms_and_reject_publish_nack(
        aio_conn: aio_pika.abc.AbstractConnection) -> None:
    ch = await aio_conn.channel()  # publisher_confirms=True by default
    q = await ch.declare_queue(unique("q.full"), auto_delete=True,
                               arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    confirm: Any = await ch.default_exchange.publish(aio_pika.Message(b"fits"), q.name)
    assert confirm.name == "Basic.Ack"
    with pytest.raises(aiormq.exceptions.DeliveryError) as info:
        await ch.default_exchange.publish(aio_pika.Message(b"overflows"), q.name)
    assert info.value.frame.name == "Basic.Nack"
    m = await q.get()
    assert m.body == b"fits"
    await m.ack()


async def test_mandatory_return_raises(aio_conn: aio_pika.abc.AbstractConnection) -> None:
    ch = await aio_conn.channel(on_return_raises=True)
    key = unique("nowhere")
    with pytest.raises(aiormq.exceptions.PublishError) as info:
        await ch.default_exchange.publish(aio_pika.Message(b"back"), key, mandatory=True)
    ret: Any = info.value.message
    assert ret.delivery.reply_code == 312 and ret.delivery.reply_text == "NO_ROUTE"
    assert ret.delivery.routing_key == key and ret.body == b"back"


async def test_prefetch_and_nack_requeue(aio_conn: aio_pika.abc.AbstractConnection) -> None:
    ch = await aio_conn.channel()
    await ch.set_qos(prefetch_count=2)
    q = await ch.declare_queue(unique("q.prefetch"), auto_delete=True)
    for i in range(5):
        await ch.default_exchange.publish(aio_pika.Message(str(i).encode()), q.name)
    seen: list[aio_pika.abc.AbstractIncomingMessage] = []
    got_two = asyncio.Event()

    async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        seen.append(message)
        if len(seen) == 2:
            got_two.set()
    tag = await q.consume(on_message)
    await asyncio.wait_for(got_two.wait(), 5)
    # prefetch 2: the broker keeps the other three until we settle
    ready = await ch.declare_queue(q.name, passive=True)
    assert ready.declaration_result.message_count == 3
    assert [m.body for m in seen] == [b"0", b"1"]
    await seen[0].nack(requeue=True)
    await seen[1].reject(requeue=False)
    await wait_until_async(lambda: len(seen) >= 4, what="the requeued and the next message")
    assert [m.body for m in seen[2:4]] == [b"0", b"2"]
    assert seen[2].redelivered and not seen[3].redelivered
    await q.cancel(tag)


async def test_channel_error_keeps_connection(aio_conn: aio_pika.abc.AbstractConnection) -> None:
    ch = await aio_conn.channel()
    missing = unique("q.missing")
    with pytest.raises(aiormq.exceptions.ChannelNotFoundEntity) as info:
        await ch.declare_queue(missing, passive=True)
    assert missing in info.value.args[0]
    ch2 = await aio_conn.channel()
    q = await ch2.declare_queue(exclusive=True)
    await ch2.default_exchange.publish(aio_pika.Message(b"ok"), q.name)
    assert (await q.get(no_ack=True)).body == b"ok"


async def test_exclusive_queue_locked(broker: BrokerEndpoint,
                                      aio_conn: aio_pika.abc.AbstractConnection) -> None:
    ch = await aio_conn.channel()
    q = await ch.declare_queue(unique("q.excl"), exclusive=True)
    other = await aio_pika.connect(broker.url())
    try:
        och = await other.channel()
        with pytest.raises(aiormq.exceptions.ChannelLockedResource):
            await och.declare_queue(q.name, passive=True)
    finally:
        await other.close()


async def test_consumer_cancelled_by_broker(aio_conn: aio_pika.abc.AbstractConnection) -> None:
    ch = await aio_conn.channel()
    q = await ch.declare_queue(unique("q.cancel"))
    cancelled: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    underlay = await ch.get_underlay_channel()
    def on_cancel(frame: Any) -> None:
        if not cancelled.done():
            cancelled.set_result(frame.consumer_tag)
    underlay.on_consumer_cancel_callbacks.add(on_cancel)
    async def ignore(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        pass
    tag = await q.consume(ignore)
    other = await aio_conn.channel()
    await other.queue_delete(q.name)
    assert await asyncio.wait_for(cancelled, 5) == tag


async def test_transaction_commit_and_rollback(aio_conn: aio_pika.abc.AbstractConnection) -> None:
    observer = await aio_conn.channel()
    q = await observer.declare_queue(unique("q.tx"), auto_delete=True)
    ch = await aio_conn.channel(publisher_confirms=False)
    tx = ch.transaction()
    await tx.select()
    await ch.default_exchange.publish(aio_pika.Message(b"committed"), q.name)
    assert await q.get(fail=False) is None
    await tx.commit()
    await ch.default_exchange.publish(aio_pika.Message(b"rolled back"), q.name)
    await tx.rollback()
    m = await q.get(no_ack=True)
    assert m.body == b"committed"
    assert await q.get(fail=False) is None


async def test_dead_letter_x_death(aio_conn: aio_pika.abc.AbstractConnection) -> None:
    ch = await aio_conn.channel()
    dlx = await ch.declare_exchange(unique("x.dlx"), aio_pika.ExchangeType.FANOUT, auto_delete=True)
    dlq = await ch.declare_queue(exclusive=True)
    await dlq.bind(dlx)
    q = await ch.declare_queue(unique("q.src"), auto_delete=True,
                               arguments={"x-dead-letter-exchange": dlx.name})
    await ch.default_exchange.publish(aio_pika.Message(b"reject me"), q.name)
    m = await q.get()
    await m.reject(requeue=False)
    [dead] = await collect(dlq, 1)
    assert dead.body == b"reject me"
    deaths: Any = dead.headers["x-death"]
    [death] = deaths
    assert death["reason"] == "rejected" and death["queue"] == q.name and death["count"] == 1


async def test_priority_queue(aio_conn: aio_pika.abc.AbstractConnection) -> None:
    ch = await aio_conn.channel()
    q = await ch.declare_queue(unique("q.prio"), auto_delete=True,
                               arguments={"x-max-priority": 9})
    for body, prio in ((b"low", 1), (b"high", 9), (b"mid", 4), (b"high2", 9)):
        await ch.default_exchange.publish(aio_pika.Message(body, priority=prio), q.name)
    got = await collect(q, 4)
    assert [m.body for m in got] == [b"high", b"high2", b"mid", b"low"]
    assert [m.priority for m in got] == [9, 9, 4, 1]


async def test_large_message(aio_conn: aio_pika.abc.AbstractConnection) -> None:
    ch = await aio_conn.channel()
    q = await ch.declare_queue(exclusive=True)
    body = bytes(range(256)) * 8192  # 2 MiB
    await ch.default_exchange.publish(aio_pika.Message(body), q.name)
    [m] = await collect(q, 1, timeout=15)
    assert m.body == body
