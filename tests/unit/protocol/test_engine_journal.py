"""The engine with a message journal: confirms and tx.commit-ok wait until the journal is durable."""

from __future__ import annotations

import pytest

from broker.messaging.message import MessageProperties
from broker.protocol.amqp0_9_1 import methods as m

from ..messaging.journal_fake import RecordingJournal
from .harness import Client, Delivery, FakeHost

PERSISTENT = MessageProperties(delivery_mode=2)


@pytest.fixture
def journal() -> RecordingJournal:
    return RecordingJournal()


@pytest.fixture
def client(journal: RecordingJournal) -> Client:
    host = FakeHost()
    host.namespace.journal = journal
    c = Client(host)
    c.handshake()
    c.open_channel(1)
    c.send(1, m.QueueDeclare(queue="durable", durable=True))
    c.expect(m.QueueDeclareOk)
    c.send(1, m.QueueDeclare(queue="scratch"))
    c.expect(m.QueueDeclareOk)
    return c


def confirm_mode(client: Client) -> None:
    client.send(1, m.ConfirmSelect())
    client.expect(m.ConfirmSelectOk)


def test_a_persistent_message_is_confirmed_only_once_durable(client: Client, journal: RecordingJournal) -> None:
    confirm_mode(client)
    client.publish(1, "", "durable", b"p", PERSISTENT)
    assert client.take() == []                       # not yet on disk: no confirm
    journal.complete()
    ack = client.expect(m.BasicAck, 1)
    assert (ack.delivery_tag, ack.multiple) == (1, False)


def test_transient_messages_are_confirmed_at_once(client: Client, journal: RecordingJournal) -> None:
    confirm_mode(client)
    client.publish(1, "", "durable", b"t")                    # transient on a durable queue
    client.publish(1, "", "scratch", b"p", PERSISTENT)        # persistent on a non-durable queue
    assert [type(obj) for _ch, obj in client.take()] == [m.BasicAck, m.BasicAck]
    assert journal.events == []


def test_a_later_transient_confirm_never_overtakes_an_earlier_durable_one(
        client: Client, journal: RecordingJournal) -> None:
    confirm_mode(client)
    data = (client.publish_bytes(1, "", "scratch", b"1") + client.publish_bytes(1, "", "durable", b"2", PERSISTENT)
            + client.publish_bytes(1, "", "scratch", b"3"))
    client.raw(data)
    ack = client.expect(m.BasicAck, 1)
    assert (ack.delivery_tag, ack.multiple) == (1, False)   # only what precedes the durable one
    assert client.take() == []
    journal.complete()
    ack = client.expect(m.BasicAck, 1)
    assert (ack.delivery_tag, ack.multiple) == (3, True)


def test_publishes_spread_over_two_groups_are_confirmed_group_by_group(
        client: Client, journal: RecordingJournal) -> None:
    confirm_mode(client)
    client.publish(1, "", "durable", b"1", PERSISTENT)
    first = journal.group
    journal.group = type(first)()                    # the first group is being committed
    client.publish(1, "", "durable", b"2", PERSISTENT)
    second = journal.group
    journal.group = first
    journal.complete()
    ack = client.expect(m.BasicAck, 1)
    assert ack.delivery_tag == 1
    journal.group = second
    journal.complete()
    assert client.expect(m.BasicAck, 1).delivery_tag == 2


def test_a_failed_commit_nacks_what_it_held(client: Client, journal: RecordingJournal) -> None:
    confirm_mode(client)
    client.raw(client.publish_bytes(1, "", "durable", b"1", PERSISTENT)
               + client.publish_bytes(1, "", "durable", b"2", PERSISTENT))
    journal.complete(OSError("disk full"))
    nack = client.expect(m.BasicNack, 1)
    assert (nack.delivery_tag, nack.multiple) == (2, True)


def test_tx_commit_ok_waits_for_the_journal_and_events_carry_the_tx_id(
        client: Client, journal: RecordingJournal) -> None:
    client.send(1, m.TxSelect())
    client.expect(m.TxSelectOk)
    client.publish(1, "", "durable", b"a", PERSISTENT)
    client.publish(1, "", "durable", b"b", PERSISTENT)
    assert journal.events == []                      # nothing happens before commit
    client.send(1, m.TxCommit())
    assert client.take() == []
    assert [e[3] for e in journal.of("enqueue")] == [1, 1]
    journal.complete()
    client.expect(m.TxCommitOk, 1)


def test_tx_commit_without_persistent_work_answers_at_once(client: Client, journal: RecordingJournal) -> None:
    client.send(1, m.TxSelect())
    client.expect(m.TxSelectOk)
    client.publish(1, "", "scratch", b"a")
    client.send(1, m.TxCommit())
    client.expect(m.TxCommitOk, 1)


def test_a_confirm_due_after_the_channel_closed_is_not_sent(client: Client, journal: RecordingJournal) -> None:
    confirm_mode(client)
    client.publish(1, "", "durable", b"p", PERSISTENT)
    client.send(1, m.ChannelClose(reply_code=200, reply_text="bye", class_id=0, method_id=0))
    client.expect(m.ChannelCloseOk, 1)
    client.open_channel(1)
    journal.complete()
    assert client.take() == []


# -- when the journal's commit fails: a failed operation leaves no trace --------------------------

def consume(client: Client, channel: int, queue: str, *, no_ack: bool = True) -> None:
    client.open_channel(channel)
    client.send(channel, m.BasicConsume(queue=queue, consumer_tag=f"c{channel}", no_ack=no_ack))
    client.expect(m.BasicConsumeOk, channel)


def test_a_persistent_message_reaches_consumers_only_once_durable(
        client: Client, journal: RecordingJournal) -> None:
    consume(client, 2, "durable")
    confirm_mode(client)
    client.publish(1, "", "durable", b"p", PERSISTENT)
    assert client.deliveries() == []                 # held until its enqueue row is on disk
    journal.complete()
    assert [d.body for d in client.deliveries()] == [b"p"]
    client.expect(m.BasicAck, 1)


def test_a_nacked_message_is_never_delivered(client: Client, journal: RecordingJournal) -> None:
    consume(client, 2, "durable")
    confirm_mode(client)
    client.publish(1, "", "durable", b"lost", PERSISTENT)
    client.publish(1, "", "durable", b"after", PERSISTENT)
    journal.complete(OSError("[Errno 28] No space left on device"))
    assert client.expect(m.BasicNack, 1).delivery_tag == 2
    assert client.deliveries() == []
    client.send(1, m.BasicGet(queue="durable", no_ack=True))
    client.expect(m.BasicGetEmpty, 1)


def test_a_failed_publish_to_a_durable_and_a_transient_queue_reaches_neither(
        client: Client, journal: RecordingJournal) -> None:
    client.send(1, m.ExchangeDeclare(exchange="fan", type="fanout"))
    client.expect(m.ExchangeDeclareOk, 1)
    for queue in ("durable", "scratch"):
        client.send(1, m.QueueBind(queue=queue, exchange="fan"))
        client.expect(m.QueueBindOk, 1)
    consume(client, 2, "scratch")
    confirm_mode(client)
    client.publish(1, "fan", "", b"both", PERSISTENT)
    assert client.deliveries() == []                 # the transient queue waits for the journal too
    journal.complete(OSError("disk full"))
    client.expect(m.BasicNack, 1)
    assert client.deliveries() == []
    client.publish(1, "fan", "", b"again", PERSISTENT)
    journal.complete()
    assert [d.body for d in client.deliveries()] == [b"again"]


def test_a_transient_message_behind_a_held_one_keeps_its_place(
        client: Client, journal: RecordingJournal) -> None:
    consume(client, 2, "durable")
    client.publish(1, "", "durable", b"1", PERSISTENT)
    client.publish(1, "", "durable", b"2")
    assert client.deliveries() == []
    journal.complete()
    assert [d.body for d in client.deliveries()] == [b"1", b"2"]


def test_a_failed_tx_commit_closes_the_channel_and_leaves_no_trace(
        client: Client, journal: RecordingJournal) -> None:
    client.publish(1, "", "durable", b"old", PERSISTENT)
    journal.complete()
    client.open_channel(2)
    client.send(2, m.TxSelect())
    client.expect(m.TxSelectOk, 2)
    client.send(2, m.BasicGet(queue="durable"))
    got = client.expect(Delivery, 2)
    client.send(2, m.BasicAck(delivery_tag=got.method.delivery_tag))
    client.publish(2, "", "durable", b"new", PERSISTENT)
    client.send(2, m.TxCommit())
    journal.complete(OSError("[Errno 28] No space left on device"))
    close = client.expect(m.ChannelClose, 2)
    assert close.reply_code == 541 and "No space left on device" in close.reply_text
    client.send(2, m.ChannelCloseOk())
    # the acknowledged message is back (redelivered), the published one never arrived
    client.send(1, m.BasicGet(queue="durable", no_ack=True))
    again = client.expect(Delivery, 1)
    assert again.body == b"old" and again.method.redelivered
    client.send(1, m.BasicGet(queue="durable", no_ack=True))
    client.expect(m.BasicGetEmpty, 1)


# -- replies leave in request order (spec 0-9-1 4.2.4): commit-ok holds later replies back ------

@pytest.fixture
def tx_client(client: Client) -> Client:
    client.send(1, m.TxSelect())
    client.expect(m.TxSelectOk)
    return client


def kinds(client: Client) -> list[type]:
    return [type(obj.method if isinstance(obj, Delivery) else obj) for _ch, obj in client.take()]


def test_tx_rollback_right_behind_a_durable_commit_answers_after_it(
        tx_client: Client, journal: RecordingJournal) -> None:
    tx_client.publish(1, "", "durable", b"a", PERSISTENT)
    tx_client.raw(tx_client.encode(1, m.TxCommit()) + tx_client.encode(1, m.TxRollback())
                  + tx_client.encode(1, m.QueueDeclare(queue="durable", passive=True)))
    assert tx_client.take() == []                     # nothing may overtake commit-ok
    journal.complete()
    assert kinds(tx_client) == [m.TxCommitOk, m.TxRollbackOk, m.QueueDeclareOk]


def test_other_channels_are_not_held_back_by_a_commit(tx_client: Client, journal: RecordingJournal) -> None:
    tx_client.open_channel(2)
    tx_client.publish(1, "", "durable", b"a", PERSISTENT)
    tx_client.send(1, m.TxCommit())
    tx_client.send(2, m.QueueDeclare(queue="durable", passive=True))
    tx_client.expect(m.QueueDeclareOk, 2)
    assert tx_client.take() == []
    journal.complete()
    tx_client.expect(m.TxCommitOk, 1)


def test_deliveries_wait_behind_a_held_consume_ok(tx_client: Client, journal: RecordingJournal) -> None:
    tx_client.publish(1, "", "durable", b"a", PERSISTENT)
    tx_client.send(1, m.TxCommit())                   # the message is queued, commit-ok not yet sent
    tx_client.send(1, m.BasicConsume(queue="durable", consumer_tag="c"))
    assert tx_client.take() == []
    journal.complete()
    out = tx_client.take()
    assert [type(obj.method if isinstance(obj, Delivery) else obj) for _ch, obj in out] == [
        m.TxCommitOk, m.BasicConsumeOk, m.BasicDeliver]
    assert out[2][1].body == b"a"


def test_channel_close_behind_a_commit_gets_commit_ok_then_close_ok(
        tx_client: Client, journal: RecordingJournal) -> None:
    tx_client.publish(1, "", "durable", b"a", PERSISTENT)
    tx_client.send(1, m.TxCommit())
    tx_client.send(1, m.ChannelClose(reply_code=200, reply_text="bye"))
    assert tx_client.take() == []
    journal.complete()
    assert kinds(tx_client) == [m.TxCommitOk, m.ChannelCloseOk]


def test_a_commit_that_becomes_durable_after_the_connection_closed_sends_nothing(
        tx_client: Client, journal: RecordingJournal) -> None:
    tx_client.publish(1, "", "durable", b"a", PERSISTENT)
    tx_client.send(1, m.TxCommit())
    tx_client.send(1, m.TxRollback())
    tx_client.server.connection_lost()
    journal.complete()
    assert tx_client.server.data_to_send() == b""


def test_a_failed_commit_with_a_close_behind_it_still_answers_the_close(
        tx_client: Client, journal: RecordingJournal) -> None:
    tx_client.publish(1, "", "durable", b"a", PERSISTENT)
    tx_client.send(1, m.TxCommit())
    tx_client.send(1, m.ChannelClose(reply_code=200, reply_text="bye"))
    assert tx_client.take() == []
    journal.complete(OSError("[Errno 28] No space left on device"))
    assert kinds(tx_client) == [m.ChannelCloseOk]     # the client is not left waiting for its close


def test_a_failed_commit_drops_what_was_asked_behind_it_and_closes_the_channel(
        tx_client: Client, journal: RecordingJournal) -> None:
    tx_client.publish(1, "", "durable", b"a", PERSISTENT)
    tx_client.send(1, m.TxCommit())
    tx_client.send(1, m.QueueDeclare(queue="durable", passive=True))
    journal.complete(OSError("[Errno 28] No space left on device"))
    out = tx_client.take()
    assert [type(obj) for _ch, obj in out] == [m.ChannelClose]
    assert out[0][1].reply_code == 541


def test_a_mandatory_publish_whose_commit_fails_is_nacked_not_returned(
        client: Client, journal: RecordingJournal) -> None:
    confirm_mode(client)
    client.publish(1, "", "durable", b"routed", PERSISTENT, mandatory=True)
    journal.complete(OSError("[Errno 30] Read-only file system"))
    # it was routed: no basic.return (spec 1.8: only unroutable messages come back), just the nack
    assert [type(obj) for _ch, obj in client.take()] == [m.BasicNack]


def test_a_get_right_after_a_publish_waits_for_the_message(client: Client, journal: RecordingJournal) -> None:
    client.publish(1, "", "durable", b"just published", PERSISTENT)
    client.open_channel(2)
    client.send(2, m.BasicGet(queue="durable", no_ack=True))
    assert client.take() == []                       # held: answered once the journal decided
    journal.complete()
    assert client.expect(Delivery, 2).body == b"just published"


def test_a_get_waiting_for_a_failed_publish_finds_the_queue_empty(
        client: Client, journal: RecordingJournal) -> None:
    client.publish(1, "", "durable", b"never", PERSISTENT)
    client.send(1, m.BasicGet(queue="durable", no_ack=True))
    journal.complete(OSError("disk full"))
    client.expect(m.BasicGetEmpty, 1)


def test_what_is_asked_after_a_waiting_get_is_answered_after_it(
        client: Client, journal: RecordingJournal) -> None:
    client.publish(1, "", "durable", b"first", PERSISTENT)
    client.open_channel(2)
    client.raw(client.encode(2, m.BasicGet(queue="durable", no_ack=True))
               + client.encode(2, m.QueueDeclare(queue="durable", passive=True)))
    assert client.take() == []                       # the declare-ok may not overtake the get
    journal.complete()
    out = client.take()
    assert [type(obj.method if isinstance(obj, Delivery) else obj) for _ch, obj in out] == [
        m.BasicGetOk, m.QueueDeclareOk]


def test_a_close_behind_a_waiting_get_is_answered_after_it(client: Client, journal: RecordingJournal) -> None:
    client.publish(1, "", "durable", b"first", PERSISTENT)
    client.open_channel(2)
    client.send(2, m.BasicGet(queue="durable", no_ack=True))
    client.send(2, m.ChannelClose(reply_code=200, reply_text="bye"))
    assert client.take() == []
    journal.complete()
    assert [type(obj) for _ch, obj in client.take()] == [m.ChannelCloseOk]


def test_a_get_from_a_priority_queue_waits_for_higher_priorities_on_their_way(
        client: Client, journal: RecordingJournal) -> None:
    client.send(1, m.QueueDeclare(queue="prio", durable=True, arguments={"x-max-priority": 10}))
    client.expect(m.QueueDeclareOk, 1)
    client.publish(1, "", "prio", b"low", MessageProperties(delivery_mode=2, priority=1))
    journal.complete()
    client.publish(1, "", "prio", b"top", MessageProperties(delivery_mode=2, priority=10))
    client.send(1, m.BasicGet(queue="prio", no_ack=True))
    assert client.take() == []                       # "low" is ready, but "top" is on its way
    journal.complete()
    assert client.expect(Delivery, 1).body == b"top"


def test_a_declare_counts_the_messages_on_their_way_to_disk(
        client: Client, journal: RecordingJournal) -> None:
    client.publish(1, "", "durable", b"p", PERSISTENT)
    client.send(1, m.QueueDeclare(queue="durable", passive=True))
    assert client.expect(m.QueueDeclareOk, 1).message_count == 1
