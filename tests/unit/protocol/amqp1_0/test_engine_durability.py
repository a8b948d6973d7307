"""The AMQP 1.0 engine with a message journal and a resource alarm: a durable message is accepted
only once the journal has it; a blocked connection's senders get no new credit."""

from __future__ import annotations

from broker.protocol.amqp1_0.definitions import Accepted, Disposition, Flow, Transfer
from broker.protocol.amqp1_0.framing import encode_frame
from broker.protocol.amqp1_0.links import LINK_CREDIT

from ...messaging.journal_fake import RecordingJournal
from .engine_client import Client10, message_payload


def _client(journal: RecordingJournal | None = None) -> Client10:
    client = Client10()
    if journal is not None:
        client.host.namespace.journal = journal
    client.host.namespace.declare_queue("durable", durable=True)
    client.host.namespace.declare_queue("scratch")
    client.open_senders(("durable", "d"), ("scratch", "s"))
    return client


def test_a_durable_message_is_accepted_only_once_the_journal_has_it() -> None:
    journal = RecordingJournal()
    client = _client(journal)
    client.transfer(0, 0, message_payload(durable=True))
    assert not [v for v in client.values() if isinstance(v, Disposition)]
    journal.complete()
    client._read()
    disposition = client.expect(Disposition)
    assert disposition.first == 0 and disposition.settled and isinstance(disposition.state, Accepted)


def test_transient_messages_are_accepted_at_once() -> None:
    journal = RecordingJournal()
    client = _client(journal)
    client.raw(b"".join((                                            # one read: one flush
        encode_frame(Transfer(handle=0, delivery_id=0, delivery_tag=b"0"), 0,
                     message_payload(durable=False)),                # transient on a durable queue
        encode_frame(Transfer(handle=1, delivery_id=1, delivery_tag=b"1"), 0,
                     message_payload(durable=True)))))               # durable on a non-durable queue
    [disposition] = [v for v in client.values() if isinstance(v, Disposition)]
    assert (disposition.first, disposition.last) == (0, 1)          # consecutive ids: one range


def test_a_blocked_connection_grants_no_new_credit_until_unblocked() -> None:
    client = _client()
    client.server.set_blocked(True, "low on memory")
    for i in range(LINK_CREDIT // 2 + 1):
        client.transfer(1, i, message_payload(), settled=True)
    assert not [v for v in client.values() if isinstance(v, Flow) and v.handle == 1]
    client.server.set_blocked(False, "")
    client._read()
    flows = [v for v in client.values() if isinstance(v, Flow) and v.handle == 1]
    assert flows and flows[-1].link_credit == LINK_CREDIT


def test_a_failed_journal_commit_rejects_what_waited_for_it() -> None:
    from broker.protocol.amqp1_0.definitions import Rejected

    journal = RecordingJournal()
    client = _client(journal)
    client.transfer(0, 0, message_payload(durable=True))
    journal.complete(OSError("disk full"))
    client._read()
    disposition = client.expect(Disposition)
    assert isinstance(disposition.state, Rejected)
    assert disposition.state.error.condition == "amqp:internal-error"
    assert "disk full" in disposition.state.error.description


def test_a_link_detached_before_the_commit_gets_no_disposition() -> None:
    from broker.protocol.amqp1_0.definitions import Detach

    journal = RecordingJournal()
    client = _client(journal)
    client.transfer(0, 0, message_payload(durable=True))
    client.send(Detach(handle=0, closed=True))
    client.take()
    journal.complete()
    client._read()
    assert not [v for v in client.values() if isinstance(v, Disposition)]
