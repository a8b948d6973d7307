"""Exactly-once publishing through the 0-9-1 engine: marked transactions, replays dropped at tx.commit."""

from __future__ import annotations

from typing import Any

import pytest

from broker.messaging.message import MessageProperties
from broker.messaging.producer_sequences import PRODUCER_HEADER, SEQUENCE_HEADER
from broker.protocol.amqp0_9_1 import methods as m

from ..messaging.journal_fake import RecordingJournal
from .harness import Client, Delivery, FakeHost


def marked(producer: str, sequence: int, **headers: Any) -> MessageProperties:
    return MessageProperties(delivery_mode=2, headers={PRODUCER_HEADER: producer, SEQUENCE_HEADER: sequence,
                                                       **headers})


@pytest.fixture
def journal() -> RecordingJournal:
    return RecordingJournal()


def connect(host: FakeHost, channels: tuple[int, ...] = (1,)) -> Client:
    c = Client(host)
    c.handshake()
    for number in channels:
        c.open_channel(number)
        c.send(number, m.TxSelect())
        c.expect(m.TxSelectOk)
    return c


@pytest.fixture
def host(journal: RecordingJournal) -> FakeHost:
    host = FakeHost()
    host.namespace.journal = journal
    return host


@pytest.fixture
def client(host: FakeHost) -> Client:
    c = connect(host, (1, 2))
    c.send(1, m.QueueDeclare(queue="durable", durable=True))
    c.expect(m.QueueDeclareOk)
    return c


def publish_batch(client: Client, channel: int, producer: str, sequence: int, count: int = 2) -> None:
    for i in range(count):
        client.publish(channel, "", "durable", b"%d-%d" % (sequence, i), marked(producer, sequence, n=i))
    client.send(channel, m.TxCommit())


def depth(host: FakeHost) -> int:
    return host.namespace.queues["durable"].message_count


def test_a_replayed_sequence_is_dropped_and_answered_commit_ok(
        client: Client, host: FakeHost, journal: RecordingJournal) -> None:
    publish_batch(client, 1, "query/0", 0)
    assert [e for e in journal.events if e[0] == "producer_sequence"] == [("producer_sequence", "query/0", 0, 1)]
    assert {e[3] for e in journal.of("enqueue")} == {1}           # the same transaction, the same group
    journal.complete()
    client.expect(m.TxCommitOk, 1)
    assert depth(host) == 2
    events = len(journal.events)
    publish_batch(client, 1, "query/0", 0)                        # the replay
    client.expect(m.TxCommitOk, 1)
    assert depth(host) == 2 and len(journal.events) == events      # nothing published, nothing journaled
    publish_batch(client, 1, "query/1", 0)                        # another producer, same sequence
    publish_batch(client, 2, "query/0", 1)                        # the next batch
    journal.complete()
    client.expect(m.TxCommitOk, 1)
    client.expect(m.TxCommitOk, 2)
    assert depth(host) == 6


def test_the_mark_is_stripped_from_what_consumers_get(client: Client, journal: RecordingJournal) -> None:
    publish_batch(client, 1, "query/0", 0, count=1)
    journal.complete()
    client.expect(m.TxCommitOk, 1)
    client.send(1, m.BasicGet(queue="durable", no_ack=True))
    got = client.expect(Delivery, 1)
    assert got.properties.headers == {"n": 0}
    assert got.properties.delivery_mode == 2


def test_a_replay_while_the_original_is_on_its_way_waits_for_it(
        client: Client, host: FakeHost, journal: RecordingJournal) -> None:
    publish_batch(client, 1, "query/0", 3)
    publish_batch(client, 2, "query/0", 3)                        # a speculative second attempt
    assert client.take() == []
    journal.complete()
    assert sorted(ch for ch, obj in client.take() if isinstance(obj, m.TxCommitOk)) == [1, 2]
    assert depth(host) == 2


def test_a_replay_of_a_failed_original_fails_too_and_the_retry_is_admitted(
        client: Client, host: FakeHost, journal: RecordingJournal) -> None:
    publish_batch(client, 1, "query/0", 3)
    publish_batch(client, 2, "query/0", 3)
    journal.complete(OSError("disk full"))
    closes = sorted((ch, obj.reply_code) for ch, obj in client.take() if isinstance(obj, m.ChannelClose))
    assert closes == [(1, 541), (2, 541)]                         # neither was published: both fail
    retry = connect(host)
    publish_batch(retry, 1, "query/0", 3)
    journal.complete()
    retry.expect(m.TxCommitOk, 1)
    assert depth(host) == 2


def test_a_marked_publish_needs_a_transaction(host: FakeHost) -> None:
    c = Client(host)
    c.handshake()
    c.open_channel(1)
    c.publish(1, "", "anything", b"x", marked("query/0", 0))
    close = c.expect(m.ChannelClose, 1)
    assert close.reply_code == 406 and "tx.select" in close.reply_text


def test_one_transaction_carries_one_producer_sequence(client: Client) -> None:
    client.publish(1, "", "durable", b"a", marked("query/0", 0))
    client.publish(1, "", "durable", b"b", marked("query/0", 1))
    close = client.expect(m.ChannelClose, 1)
    assert close.reply_code == 406 and "one producer sequence" in close.reply_text


def test_rollback_forgets_the_mark(client: Client, host: FakeHost, journal: RecordingJournal) -> None:
    client.publish(1, "", "durable", b"a", marked("query/0", 0))
    client.send(1, m.TxRollback())
    client.expect(m.TxRollbackOk, 1)
    publish_batch(client, 1, "query/0", 1)
    journal.complete()
    client.expect(m.TxCommitOk, 1)
    assert host.namespace.producers.committed() == {"query/0": 1}


def test_without_a_journal_the_record_is_kept_in_memory() -> None:
    host = FakeHost()                                            # a memory node
    c = connect(host)
    c.send(1, m.QueueDeclare(queue="durable"))
    c.expect(m.QueueDeclareOk)
    publish_batch(c, 1, "query/0", 0)
    c.expect(m.TxCommitOk, 1)
    publish_batch(c, 1, "query/0", 0)
    c.expect(m.TxCommitOk, 1)
    assert depth(host) == 2


def test_unroutable_marked_messages_still_record_the_sequence(client: Client, host: FakeHost,
                                                             journal: RecordingJournal) -> None:
    client.publish(1, "", "nowhere", b"a", marked("query/0", 0))
    client.send(1, m.TxCommit())
    journal.complete()
    client.expect(m.TxCommitOk, 1)
    assert host.namespace.producers.committed() == {"query/0": 0}
