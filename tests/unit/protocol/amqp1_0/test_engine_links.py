"""The AMQP 1.0 engine's sessions and links in memory, over a real Namespace: credit, windows,
multi-frame and aborted transfers, settlement both ways, drain, refusal and stealing."""

from __future__ import annotations

from broker.protocol.amqp1_0.definitions import (Accepted, Attach, Detach, Disposition, End, Flow, Modified,
                                                 Rejected, Released, Transfer)
from broker.protocol.amqp1_0.links import LINK_CREDIT
from broker.protocol.amqp1_0.sections import MessageSections
from broker.protocol.amqp1_0.session import INCOMING_WINDOW

from .engine_client import Client10, message_payload


def _open(queue: str = "q") -> Client10:
    client = Client10()
    client.host.namespace.declare_queue(queue, durable=False)
    client.handshake()
    client.begin()
    client.take()
    return client


def _sender(client: Client10, address: str = "q", handle: int = 0) -> Flow:
    client.attach_sender(address, handle=handle, name=f"s{handle}")
    attach = client.expect(Attach)
    assert attach.role is True and attach.target.address == address
    return client.expect(Flow)


def _fill(client: Client10, count: int, queue: str = "q") -> None:
    _sender(client, queue, handle=9)
    for i in range(count):
        client.transfer(9, 100 + i, message_payload(f"m{i}".encode()), settled=True)
    client.take()


def _transfers(client: Client10) -> list[tuple[Transfer, bytes]]:
    return [(v, p) for _c, v, p in client.take() if isinstance(v, Transfer)]


def test_sender_gets_credit_and_an_accepted_disposition() -> None:
    client = _open()
    flow = _sender(client)
    assert flow.handle == 0 and flow.link_credit == LINK_CREDIT and flow.delivery_count == 0
    client.transfer(0, 0, message_payload(b"hello"))
    disposition = client.expect(Disposition)
    assert (disposition.role, disposition.first, disposition.settled) == (True, 0, True)
    assert isinstance(disposition.state, Accepted)
    assert client.host.namespace.queue("q").message_count == 1


def test_pre_settled_transfer_gets_no_disposition() -> None:
    client = _open()
    _sender(client)
    client.transfer(0, 0, message_payload(), settled=True)
    assert not [v for v in client.values() if isinstance(v, Disposition)]
    assert client.host.namespace.queue("q").message_count == 1


def test_credit_is_renewed_and_a_transfer_without_credit_detaches_the_link() -> None:
    client = _open()
    _sender(client)
    for i in range(LINK_CREDIT // 2):
        client.transfer(0, i, message_payload(), settled=True)
    renewed = [v for v in client.values() if isinstance(v, Flow)]
    assert renewed and renewed[-1].link_credit == LINK_CREDIT
    assert renewed[-1].delivery_count == LINK_CREDIT // 2
    # a sender that says it used all the credit it was given has none left
    client.send(Flow(next_incoming_id=0, incoming_window=1000, next_outgoing_id=LINK_CREDIT, outgoing_window=1000,
                     handle=0, delivery_count=LINK_CREDIT // 2 + LINK_CREDIT, link_credit=0))
    client.transfer(0, 9999, message_payload(), settled=True)
    detach = client.expect(Detach)
    assert detach.error.condition == "amqp:link:transfer-limit-exceeded"


def test_multi_frame_transfer_is_assembled_and_aborted_one_dropped() -> None:
    client = _open()
    _sender(client)
    payload = message_payload(b"x" * 3000)
    client.transfer(0, 0, payload[:1000], settled=True, more=True)
    client.send(Transfer(handle=0, more=True), 0, payload[1000:2000])
    client.send(Transfer(handle=0), 0, payload[2000:])
    client.transfer(0, 1, payload[:500], settled=True, more=True)
    client.send(Transfer(handle=0, aborted=True), 0)
    queue = client.host.namespace.queue("q")
    assert queue.message_count == 1
    entry = queue.get()
    assert entry is not None and entry.message.body == b"x" * 3000       # a data section: its bytes


def test_message_larger_than_max_message_size_detaches() -> None:
    client = _open()
    client.host.max_message_size = 1000
    _sender(client)
    client.transfer(0, 0, message_payload(b"y" * 2000))
    assert client.expect(Detach).error.condition == "amqp:link:message-size-exceeded"


def test_unroutable_message_is_rejected_with_not_found() -> None:
    client = _open()
    _sender(client, "/exchanges/amq.direct/nobody")
    client.transfer(0, 0, message_payload())
    disposition = client.expect(Disposition)
    assert isinstance(disposition.state, Rejected)
    assert disposition.state.error.condition == "amqp:not-found"


def test_routing_key_from_subject_for_an_exchange_address() -> None:
    from broker.protocol.amqp1_0.definitions import Data, Properties
    from broker.protocol.amqp1_0.encoding import encode

    client = _open()
    client.host.namespace.bind_queue("q", "amq.direct", "colour")
    _sender(client, "amq.direct")
    client.transfer(0, 0, encode(Properties(subject="colour")) + encode(Data(value=b"b")))
    assert isinstance(client.expect(Disposition).state, Accepted)
    assert client.host.namespace.queue("q").message_count == 1


def test_bad_target_address_is_refused_with_a_null_target() -> None:
    client = _open()
    client.attach_sender("nowhere")
    attach = client.expect(Attach)
    assert attach.target is None
    detach = client.expect(Detach)
    assert detach.closed and detach.error.condition == "amqp:not-found"
    client.send(Detach(handle=0, closed=True))
    assert not [v for v in client.values() if isinstance(v, Detach)]   # nothing more to answer


def test_receiver_gets_as_many_deliveries_as_credit() -> None:
    client = _open()
    _fill(client, 3)
    client.attach_receiver("q")
    attach = client.expect(Attach)
    assert attach.role is False and attach.initial_delivery_count == 0
    assert not _transfers(client)                    # no credit yet
    client.credit(1, 2)
    got = _transfers(client)
    assert [t.delivery_id for t, _p in got] == [0, 1]
    assert MessageSections(got[0][1]).body() == [b"m0"]
    assert MessageSections(got[0][1]).first_acquirer
    client.credit(1, 3, delivery_count=2)            # the receiver's count: one more credit
    assert [t.delivery_id for t, _p in _transfers(client)] == [2]


def test_drain_uses_up_credit_the_queue_cannot_fill() -> None:
    client = _open()
    _fill(client, 1)
    client.attach_receiver("q")
    client.take()
    client.credit(1, 5, drain=True)
    taken = client.take()
    assert len([v for _c, v, _p in taken if isinstance(v, Transfer)]) == 1
    flow = [v for _c, v, _p in taken if isinstance(v, Flow)][-1]
    assert flow.drain and flow.link_credit == 0 and flow.delivery_count == 5


def test_dispositions_settle_requeue_and_reject() -> None:
    client = _open()
    _fill(client, 3)
    queue = client.host.namespace.queue("q")
    client.attach_receiver("q")
    client.credit(1, 3)
    assert len(_transfers(client)) == 3
    assert queue.unacked_count == 3
    client.send(Disposition(role=True, first=0, settled=True, state=Accepted()))
    client.send(Disposition(role=True, first=1, settled=True, state=Rejected()))
    assert queue.unacked_count == 1 and queue.message_count == 0
    client.send(Disposition(role=True, first=2, settled=True, state=Modified(delivery_failed=True)))
    assert queue.message_count == 1
    client.credit(1, 1, delivery_count=3)
    (again, payload), = _transfers(client)
    assert MessageSections(payload).delivery_count == 1 and not MessageSections(payload).first_acquirer


def test_unsettled_disposition_is_answered_settled() -> None:
    client = _open()
    _fill(client, 1)
    client.attach_receiver("q")
    client.credit(1, 1)
    client.take()
    client.send(Disposition(role=True, first=0, settled=False, state=Released()))
    answer = client.expect(Disposition)
    assert answer.role is False and answer.settled and isinstance(answer.state, Released)
    assert client.host.namespace.queue("q").message_count == 1


def test_pre_settled_receiver_takes_messages_for_good() -> None:
    client = _open()
    _fill(client, 2)
    client.attach_receiver("q", snd_settle_mode=1)
    client.credit(1, 5)
    got = _transfers(client)
    assert len(got) == 2 and all(t.settled for t, _p in got)
    queue = client.host.namespace.queue("q")
    assert queue.message_count == 0 and queue.unacked_count == 0


def test_session_window_holds_deliveries_until_the_peer_opens_it() -> None:
    client = _open()
    _fill(client, 3)
    client.attach_receiver("q")
    client.credit(1, 10, incoming_window=1)
    assert len(_transfers(client)) == 1
    client.send(Flow(next_incoming_id=1, incoming_window=5, next_outgoing_id=0, outgoing_window=1000))
    assert len(_transfers(client)) == 2


def test_ending_the_session_requeues_unsettled_deliveries() -> None:
    client = _open()
    _fill(client, 2)
    client.attach_receiver("q")
    client.credit(1, 2)
    client.take()
    client.send(End())
    assert isinstance(client.expect(End), End)
    queue = client.host.namespace.queue("q")
    assert queue.message_count == 2 and queue.unacked_count == 0 and queue.consumer_count == 0


def test_the_incoming_window_is_reopened_before_it_closes() -> None:
    client = _open()
    _sender(client)
    session_flows = []
    for i in range(INCOMING_WINDOW // 2):
        client.transfer(0, i, message_payload(), settled=True)
        session_flows += [v for v in client.values() if isinstance(v, Flow) and v.handle is None]
    assert session_flows and session_flows[-1].incoming_window == INCOMING_WINDOW


def test_transfer_on_an_unattached_handle_ends_the_session() -> None:
    client = _open()
    client.transfer(7, 0, message_payload())
    assert client.expect(End).error.condition == "amqp:session:unattached-handle"


def test_a_second_attach_of_the_link_steals_it() -> None:
    client = _open()
    client.begin(channel=1)
    client.attach_receiver("q", handle=1, name="same", channel=0)
    client.attach_receiver("q", handle=1, name="same", channel=1)
    taken = client.take()
    detach = next(v for c, v, _p in taken if isinstance(v, Detach))
    assert detach.error.condition == "amqp:link:stolen"
    attaches = [c for c, v, _p in taken if isinstance(v, Attach)]
    assert attaches == [0, 1]
    assert client.host.namespace.queue("q").consumer_count == 1


def test_a_source_naming_an_exchange_subscribes_with_a_queue_of_its_own() -> None:
    client = _open()
    client.attach_receiver("amq.topic/colour.*", handle=1, name="topic-sub")
    attach = client.expect(Attach)
    assert attach.source.address == "amq.topic/colour.*"
    client.credit(1, 10)
    _sender(client, "amq.topic/colour.red", handle=0)
    client.transfer(0, 0, message_payload(b"red"))
    client.transfer(0, 1, message_payload(b"shape"), settled=True)     # same key: both arrive
    got = _transfers(client)
    assert [MessageSections(p).body() for _t, p in got] == [[b"red"], [b"shape"]]
    queues = [name for name in client.host.namespace.queues if name.startswith("qpidsub_/test-client_/")]
    assert len(queues) == 1 and queues[0].endswith("_/nondurable")
    client.send(Detach(handle=1, closed=True))
    assert not [n for n in client.host.namespace.queues if n.startswith("qpidsub_/")]   # closed: gone


def test_a_source_naming_nothing_is_refused() -> None:
    client = _open()
    client.attach_receiver("/exchanges/no-such-exchange")
    assert client.expect(Attach).source is None
    assert client.expect(Detach).error.condition == "amqp:not-found"
