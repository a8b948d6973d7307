"""Exactly-once publishing with pika: transactions marked with a producer and a sequence.

What the Spark sink relies on, seen by an unmodified client: a transaction
whose sequence the producer already committed is dropped and still answered
``tx.commit-ok``; the broker strips the mark; a mark outside a transaction is
refused.  A DeltaMQ extension (RabbitMQ would keep both copies).
"""

from __future__ import annotations

from typing import Any

import pika
import pika.exceptions
import pytest

from broker.messaging.producer_sequences import PRODUCER_HEADER, SEQUENCE_HEADER

from .support import BrokerEndpoint, unique

pytestmark = [pytest.mark.integration, pytest.mark.deltamq_only, pytest.mark.timeout(30, func_only=True)]


def batch(conn: Any, queue: str, producer: str, sequence: int, bodies: list[bytes]) -> None:
    ch = conn.channel()
    ch.tx_select()
    for body in bodies:
        ch.basic_publish("", queue, body, pika.BasicProperties(
            delivery_mode=2, headers={PRODUCER_HEADER: producer, SEQUENCE_HEADER: sequence, "app": "x"}))
    ch.tx_commit()
    ch.close()


def drain(conn: Any, queue: str) -> list[tuple[bytes, Any]]:
    ch = conn.channel()
    got = []
    while True:
        method, props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            ch.close()
            return got
        got.append((body, props.headers))


def test_a_replayed_transaction_is_dropped_and_the_mark_stripped(conn: Any, broker: BrokerEndpoint) -> None:
    queue = unique("once")
    conn.channel().queue_declare(queue, durable=True)
    producer = unique("query") + "/0"
    batch(conn, queue, producer, 0, [b"a", b"b"])
    other = pika.BlockingConnection(broker.pika_params())      # the replay comes from a new connection
    batch(other, queue, producer, 0, [b"a", b"b"])             # answered commit-ok, published nothing
    batch(other, queue, producer, 1, [b"c"])
    batch(other, queue, producer, 1, [b"c"])
    batch(other, queue, unique("query") + "/0", 0, [b"d"])    # another producer
    other.close()
    assert drain(conn, queue) == [(b"a", {"app": "x"}), (b"b", {"app": "x"}), (b"c", {"app": "x"}),
                                  (b"d", {"app": "x"})]
    conn.channel().queue_delete(queue)


def test_a_mark_outside_a_transaction_is_refused(conn: Any) -> None:
    ch = conn.channel()
    ch.basic_publish("", "anywhere", b"x", pika.BasicProperties(
        headers={PRODUCER_HEADER: "p", SEQUENCE_HEADER: 1}))
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(unique("q"), passive=False)
    assert info.value.reply_code == 406 and "tx.select" in info.value.reply_text
