"""Persistent messages on durable queues survive the broker process dying (the Delta journal).

Each test starts a broker of its own (default configuration: a ``delta``
virtual host node) and kills it with SIGKILL -- no shutdown code runs -- or
stops it with SIGTERM, then starts it again on the same data directory.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
from collections.abc import Iterator

import aio_pika
import pika
import pytest

from .conftest import DeltaMQProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

if os.environ.get("DELTAMQ_TEST_AMQP_URL"):
    pytest.skip("starts brokers of its own: DeltaMQ only", allow_module_level=True)

PERSISTENT = pika.BasicProperties(delivery_mode=2)


@pytest.fixture
def own_broker() -> Iterator[DeltaMQProcess]:
    with DeltaMQProcess() as proc:
        yield proc


def connect(proc: DeltaMQProcess) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", proc.amqp_port))


def browse(ch: pika.adapters.blocking_connection.BlockingChannel, queue: str) -> list[tuple[bytes, bool]]:
    """(body, redelivered) of everything in ``queue``, left in place (the channel is closed after)."""
    seen = []
    while True:
        method, _props, body = ch.basic_get(queue)
        if method is None:
            return seen
        seen.append((body, method.redelivered))


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_confirmed_persistent_messages_survive_and_transient_ones_do_not(
        own_broker: DeltaMQProcess, sig: int) -> None:
    conn = connect(own_broker)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("orders", durable=True)
    ch.queue_declare("scratch", durable=False)
    for i in range(20):
        ch.basic_publish("", "orders", b"p%d" % i, PERSISTENT)
        ch.basic_publish("", "orders", b"t%d" % i)                 # transient: gone after restart
    ch.basic_publish("", "scratch", b"s", PERSISTENT)               # non-durable queue: gone
    consumer = conn.channel()
    consumer.tx_select()                                            # tx.commit-ok: the ack is durable
    consumer.basic_qos(prefetch_count=3)
    taken = []
    for method, _props, body in consumer.consume("orders"):
        taken.append((method.delivery_tag, body))
        if len(taken) == 3:
            break
    consumer.basic_ack(taken[0][0])                                  # p0 acked; t0, p1 held unacked
    consumer.tx_commit()
    own_broker.restart(sig)

    conn = connect(own_broker)
    ch = conn.channel()
    got = browse(ch, "orders")
    assert [body for body, _ in got] == [b"p%d" % i for i in range(1, 20)]
    assert [redelivered for _, redelivered in got][:2] == [True, False]
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        conn.channel().queue_declare("scratch", passive=True)
    assert info.value.reply_code == 404


def test_a_committed_transaction_is_durable_and_a_rolled_back_one_is_not(own_broker: DeltaMQProcess) -> None:
    conn = connect(own_broker)
    ch = conn.channel()
    ch.queue_declare("ledger", durable=True)
    ch.tx_select()
    for i in range(5):
        ch.basic_publish("", "ledger", b"c%d" % i, PERSISTENT)
    ch.tx_commit()
    ch.basic_publish("", "ledger", b"rolled back", PERSISTENT)
    ch.tx_rollback()
    method, _props, body = ch.basic_get("ledger")
    ch.basic_ack(method.delivery_tag)
    ch.tx_commit()                                                  # the ack of c0 is durable now
    own_broker.restart()
    conn = connect(own_broker)
    assert [b for b, _ in browse(conn.channel(), "ledger")] == [b"c%d" % i for i in range(1, 5)]


def test_dead_letters_and_queue_deletion_survive_a_restart(own_broker: DeltaMQProcess) -> None:
    conn = connect(own_broker)
    ch = conn.channel()
    ch.exchange_declare("dlx", "fanout", durable=True)
    ch.queue_declare("dead", durable=True)
    ch.queue_bind("dead", "dlx")
    ch.queue_declare("work", durable=True, arguments={"x-dead-letter-exchange": "dlx"})
    ch.queue_declare("doomed", durable=True)
    ch.tx_select()
    ch.basic_publish("", "work", b"bad", PERSISTENT)
    ch.basic_publish("", "doomed", b"gone", PERSISTENT)
    ch.tx_commit()
    method, _props, _body = ch.basic_get("work")
    ch.basic_reject(method.delivery_tag, requeue=False)
    ch.queue_delete("doomed")
    ch.queue_declare("doomed", durable=True)                        # same name, new queue
    ch.tx_commit()
    own_broker.restart()
    conn = connect(own_broker)
    ch = conn.channel()
    assert ch.queue_declare("work", passive=True).method.message_count == 0
    assert ch.queue_declare("doomed", passive=True).method.message_count == 0
    method, props, body = ch.basic_get("dead", auto_ack=True)
    assert body == b"bad" and props.headers["x-death"][0]["reason"] == "rejected"


async def _traffic(port: int, queue: str, counter: list[int], sent: set[bytes], confirmed: set[bytes],
                   acked: set[bytes], in_doubt: set[bytes], stop: asyncio.Event) -> None:
    """Publish with confirms and consume with transactional acks until the broker dies."""
    async def produce() -> None:
        connection = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{port}/")
        channel = await connection.channel(publisher_confirms=True)
        while not stop.is_set():
            batch = []
            for _ in range(20):
                counter[0] += 1
                body = b"m%d" % counter[0]
                sent.add(body)
                batch.append((body, channel.default_exchange.publish(
                    aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT), routing_key=queue)))
            for body, pending in batch:
                await pending
                confirmed.add(body)

    async def consume() -> None:
        connection = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{port}/")
        channel = await connection.channel(publisher_confirms=False)
        tx = channel.transaction()
        await tx.select()
        q = await channel.get_queue(queue)
        while not stop.is_set():
            taken = []
            for _ in range(10):
                message = await q.get(fail=False)
                if message is None:
                    break
                await message.ack()
                taken.append(message.body)
            in_doubt.update(taken)                  # acked, but durable only once commit-ok arrives
            await tx.commit()
            acked.update(taken)
            in_doubt.difference_update(taken)
            if not taken:
                await asyncio.sleep(0.01)       # an empty queue: back off before the next get

    tasks = [asyncio.create_task(produce()), asyncio.create_task(consume())]
    await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    stop.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def test_sigkill_under_load_loses_no_confirmed_message_and_resurrects_no_acked_one(
        own_broker: DeltaMQProcess) -> None:
    conn = connect(own_broker)
    conn.channel().queue_declare("crash", durable=True)
    conn.close()
    counter = [0]
    sent: set[bytes] = set()
    confirmed: set[bytes] = set()
    acked: set[bytes] = set()
    in_doubt: set[bytes] = set()          # acks whose tx.commit-ok never came: either outcome is right
    rng = random.Random(7)
    for _round in range(3):
        stop = asyncio.Event()

        async def run() -> None:
            traffic = asyncio.create_task(_traffic(own_broker.amqp_port, "crash", counter, sent, confirmed,
                                                   acked, in_doubt, stop))
            await asyncio.sleep(rng.uniform(1.0, 2.5))   # traffic runs for a random while (the test)
            assert own_broker.proc is not None
            os.killpg(own_broker.proc.pid, signal.SIGKILL)   # mid-traffic, no warning
            await asyncio.wait_for(traffic, 30)

        asyncio.run(run())
        assert own_broker.proc is not None
        own_broker.proc.wait(timeout=30)
        own_broker.start()
        conn = connect(own_broker)
        queued = [body for body, _ in browse(conn.channel(), "crash")]
        conn.close()
        remaining = set(queued)
        assert len(queued) == len(remaining), "a message is queued twice"
        lost = confirmed - remaining - acked - in_doubt
        assert not lost, f"lost confirmed messages: {sorted(lost)[:10]}"
        acked |= in_doubt - remaining       # settled for good: must not come back later either
        in_doubt.clear()
        assert not remaining & acked, f"acked messages came back: {sorted(remaining & acked)[:10]}"
        assert remaining <= sent, "messages nobody sent"
    assert len(confirmed) > 40 and len(acked) > 10            # the test did exercise the broker
