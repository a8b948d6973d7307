"""Settlement modes of the AMQP 1.0 engine in memory (spec 2.6.12, 2.8.2-2.8.3): the attach answers
with the modes asked for; as the receiver in mode second (exactly once) the broker sends its outcome
unsettled and forgets the delivery tag only once the sender settled; as the sender it honours a
receiver in mode second."""

from __future__ import annotations

from typing import Any

from broker.messaging.link_registry import LinkKey
from broker.messaging.termini import LinkRole
from broker.protocol.amqp1_0.definitions import (Accepted, Attach, Detach, Disposition, Rejected, Source, Target,
                                                 Transfer)

from ...messaging.journal_fake import RecordingJournal
from .engine_client import Client10, message_payload

SECOND = 1


def _open(journal: RecordingJournal | None = None) -> Client10:
    client = Client10()
    if journal is not None:
        client.host.namespace.journal = journal
    client.host.namespace.declare_queue("q", durable=journal is not None)
    client.handshake()
    client.begin()
    client.take()
    return client


def _attach_sender(client: Client10, *, rcv_settle_mode: int = SECOND, snd_settle_mode: int = 0,
                   name: str = "out", handle: int = 0, address: str = "q") -> Attach:
    client.send(Attach(name=name, handle=handle, role=False, snd_settle_mode=snd_settle_mode,
                       rcv_settle_mode=rcv_settle_mode, source=Source(address="client"),
                       target=Target(address=address), initial_delivery_count=0))
    return client.expect(Attach)


def _unsettled(client: Client10, name: str = "out", role: LinkRole = LinkRole.RECEIVING) -> dict[bytes, Any]:
    link = client.host.namespace.links.get(LinkKey("test-client", name, role))
    assert link is not None
    return dict(link.unsettled)


def _dispositions(client: Client10) -> list[Disposition]:
    return [v for v in client.values() if isinstance(v, Disposition)]


def test_the_attach_answer_carries_the_settlement_modes_asked_for() -> None:
    client = _open()
    answer = _attach_sender(client, rcv_settle_mode=SECOND, snd_settle_mode=0)
    assert (answer.role, answer.snd_settle_mode, answer.rcv_settle_mode) == (True, 0, SECOND)
    client.send(Attach(name="in", handle=1, role=True, snd_settle_mode=1, rcv_settle_mode=SECOND,
                       source=Source(address="q"), target=Target(address="client")))
    answer = client.expect(Attach)
    assert (answer.role, answer.snd_settle_mode, answer.rcv_settle_mode) == (False, 1, SECOND)
    client.send(Attach(name="in2", handle=2, role=True, source=Source(address="q"), target=Target(address="c")))
    answer = client.expect(Attach)       # defaults: mixed and first
    assert (answer.snd_settle_mode, answer.rcv_settle_mode) == (2, 0)


def test_a_settle_mode_that_does_not_exist_is_refused() -> None:
    client = _open()
    answer = _attach_sender(client, rcv_settle_mode=7)
    assert answer.target is None
    assert client.expect(Detach).error.condition == "amqp:invalid-field"


def test_in_mode_second_the_broker_settles_only_after_the_sender() -> None:
    client = _open()
    _attach_sender(client)
    client.transfer(0, 0, message_payload(b"once"))
    [disposition] = _dispositions(client)
    assert (disposition.first, disposition.settled) == (0, False)
    assert isinstance(disposition.state, Accepted)
    assert client.host.namespace.queue("q").message_count == 1
    assert list(_unsettled(client)) == [b"\x00\x00\x00\x00"]
    client.send(Disposition(role=False, first=0, settled=True, state=Accepted()))
    assert _unsettled(client) == {}
    assert _dispositions(client) == []                       # nothing more to say about it


def test_an_unsettled_disposition_of_the_sender_settles_nothing() -> None:
    client = _open()
    _attach_sender(client)
    client.transfer(0, 0, message_payload())
    client.send(Disposition(role=False, first=0, settled=False, state=Accepted()))
    assert len(_unsettled(client)) == 1


def test_a_durable_message_in_mode_second_is_answered_once_journaled() -> None:
    journal = RecordingJournal()
    client = _open(journal)
    _attach_sender(client)
    client.transfer(0, 0, message_payload(durable=True))
    assert _dispositions(client) == [] and _unsettled(client) == {}
    journal.complete()
    client._read()
    [disposition] = _dispositions(client)
    assert not disposition.settled and isinstance(disposition.state, Accepted)
    assert len(_unsettled(client)) == 1


def test_a_failed_journal_commit_in_mode_second_is_rejected_unsettled() -> None:
    journal = RecordingJournal()
    client = _open(journal)
    _attach_sender(client)
    client.transfer(0, 0, message_payload(durable=True))
    journal.complete(OSError("disk gone"))
    client._read()
    [disposition] = _dispositions(client)
    assert not disposition.settled and isinstance(disposition.state, Rejected)
    assert "disk gone" in disposition.state.error.description


def test_an_unroutable_message_in_mode_second_is_rejected_unsettled() -> None:
    client = _open()
    _attach_sender(client, address="/exchanges/amq.direct/nowhere")
    client.transfer(0, 0, message_payload())
    [disposition] = _dispositions(client)
    assert not disposition.settled and isinstance(disposition.state, Rejected)
    client.send(Disposition(role=False, first=0, settled=True))
    assert _unsettled(client) == {}


def test_a_transfer_may_ask_for_mode_first_on_a_link_in_mode_second() -> None:
    client = _open()
    _attach_sender(client)
    client.transfer(0, 0, message_payload(), rcv_settle_mode=0)
    [disposition] = _dispositions(client)
    assert disposition.settled and _unsettled(client) == {}


def test_a_transfer_asking_for_mode_second_on_a_link_in_mode_first_detaches_it() -> None:
    client = _open()
    _attach_sender(client, rcv_settle_mode=0)
    client.transfer(0, 0, message_payload(), rcv_settle_mode=SECOND)
    assert client.expect(Detach).error.condition == "amqp:invalid-field"


def test_pre_settled_transfers_in_mode_second_are_not_answered() -> None:
    client = _open()
    _attach_sender(client)
    client.transfer(0, 0, message_payload(), settled=True)
    assert _dispositions(client) == [] and _unsettled(client) == {}
    assert client.host.namespace.queue("q").message_count == 1


def _filled_receiver(client: Client10, count: int, rcv_settle_mode: int) -> list[Transfer]:
    _attach_sender(client, name="filler", handle=9, rcv_settle_mode=0)
    for i in range(count):
        client.transfer(9, 100 + i, message_payload(f"m{i}".encode()), settled=True)
    client.send(Attach(name="in", handle=1, role=True, snd_settle_mode=0, rcv_settle_mode=rcv_settle_mode,
                       source=Source(address="q"), target=Target(address="client")))
    client.credit(1, count)
    return [v for v in client.values() if isinstance(v, Transfer)]


def test_the_broker_as_sender_honours_a_receiver_in_mode_second() -> None:
    client = _open()
    transfers = _filled_receiver(client, 2, SECOND)
    assert [t.settled for t in transfers] == [False, False]
    assert len(_unsettled(client, "in", LinkRole.SENDING)) == 2
    queue = client.host.namespace.queue("q")
    client.send(Disposition(role=True, first=transfers[0].delivery_id, settled=False, state=Accepted()))
    [disposition] = _dispositions(client)           # the sender settles first ...
    assert disposition.settled and isinstance(disposition.state, Accepted) and disposition.role is False
    assert queue.unacked_count == 1 and len(_unsettled(client, "in", LinkRole.SENDING)) == 1
    # ... and the receiver's settlement after ours changes nothing more
    client.send(Disposition(role=True, first=transfers[0].delivery_id, settled=True, state=Accepted()))
    assert _dispositions(client) == [] and queue.unacked_count == 1


def test_a_receiver_in_mode_first_settles_with_its_outcome() -> None:
    client = _open()
    transfers = _filled_receiver(client, 2, 0)
    client.send(Disposition(role=True, first=transfers[0].delivery_id, last=transfers[1].delivery_id,
                            settled=True, state=Accepted()))
    assert _dispositions(client) == []
    assert client.host.namespace.queue("q").unacked_count == 0
    assert _unsettled(client, "in", LinkRole.SENDING) == {}


def test_delivery_tags_of_the_sender_are_unique_to_the_link_endpoint() -> None:
    client = _open()
    transfers = _filled_receiver(client, 2, 0)
    tags = [bytes(t.delivery_tag) for t in transfers]
    assert len(set(tags)) == 2 and all(len(tag) == 12 for tag in tags)
    assert set(_unsettled(client, "in", LinkRole.SENDING)) == set(tags)


def test_a_delivery_the_sender_settles_before_the_journal_answers_leaves_nothing_behind() -> None:
    journal = RecordingJournal()
    client = _open(journal)
    _attach_sender(client)
    client.transfer(0, 0, message_payload(durable=True))
    client.send(Disposition(role=False, first=0, settled=True))       # the sender gives up waiting
    journal.complete()
    client._read()
    assert _dispositions(client) == [] and _unsettled(client) == {}
