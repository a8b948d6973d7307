"""AMQP 1.0 local transactions in memory (spec part 4), over a real Namespace: the coordinator
link, declare and discharge, transactional transfers and dispositions, what ends a transaction,
and the journal seeing a transaction's work only at its commit, as one journal transaction."""

from __future__ import annotations

from typing import Any

from broker.protocol.amqp1_0.definitions import (Accepted, AmqpValue, Attach, Coordinator, Declare, Declared,
                                                 Detach, Discharge, Disposition, End, Flow, Rejected, Released,
                                                 Source, TransactionalState, Transfer, TxnCapability)
from broker.protocol.amqp1_0.encoding import encode

from ...messaging.journal_fake import RecordingJournal
from .engine_client import Client10, message_payload

COORDINATOR = 7
SENDER = 0
RECEIVER = 1


class Txn:
    """A client with one session: a coordinator link, a sender to ``q`` and (on demand) a receiver."""

    def __init__(self, journal: RecordingJournal | None = None, channel: int = 0,
                 client: Client10 | None = None) -> None:
        self.client = client or Client10()
        self.channel = channel
        self.next_id = 0
        ns = self.client.host.namespace
        if client is None:
            if journal is not None:
                ns.journal = journal
            ns.declare_queue("q", durable=True)
            self.client.handshake()
        self.client.begin(channel)
        self.client.take()

    @property
    def queue(self) -> Any:
        return self.client.host.namespace.queue("q")

    def delivery_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def attach_coordinator(self, *capabilities: str, handle: int = COORDINATOR) -> Attach:
        self.client.send(Attach(name=f"txn-ctrl-{handle}", handle=handle, role=False, snd_settle_mode=0,
                                source=Source(), initial_delivery_count=0,
                                target=Coordinator(capabilities=list(capabilities) or None)), self.channel)
        return self.client.expect(Attach)

    def control(self, body: Any, handle: int = COORDINATOR) -> Disposition:
        delivery_id = self.delivery_id()
        self.client.transfer(handle, delivery_id, encode(AmqpValue(value=body)), channel=self.channel)
        return self.answer(delivery_id)

    def answer(self, delivery_id: int) -> Disposition:
        """The broker's settled disposition of the client's delivery ``delivery_id`` (others stay)."""
        for index, (_channel, value, _payload) in enumerate(self.client.received):
            if isinstance(value, Disposition) and value.role is True and value.first == delivery_id:
                del self.client.received[index]
                assert value.settled
                return value
        raise AssertionError(f"no disposition of delivery {delivery_id} among {self.client.received}")

    def declare(self) -> bytes:
        state = self.control(Declare()).state
        assert isinstance(state, Declared)
        return state.txn_id  # type: ignore[no-any-return]

    def discharge(self, txn_id: bytes, fail: bool = False) -> Any:
        return self.control(Discharge(txn_id=txn_id, fail=fail)).state

    def attach_sender(self, address: str = "q", handle: int = SENDER) -> None:
        self.client.attach_sender(address, handle=handle, name=f"sender-{self.channel}-{handle}",
                                  channel=self.channel)
        self.client.expect(Attach)
        self.client.expect(Flow)

    def send(self, body: bytes, txn_id: bytes | None, *, settled: bool = False, durable: bool = False,
             handle: int = SENDER) -> int:
        delivery_id = self.delivery_id()
        state = TransactionalState(txn_id=txn_id) if txn_id is not None else None
        self.client.transfer(handle, delivery_id, message_payload(body, durable=durable), settled=settled,
                             state=state, channel=self.channel)
        return delivery_id

    def receive(self, count: int) -> list[Transfer]:
        self.client.attach_receiver("q", handle=RECEIVER, channel=self.channel)
        self.client.expect(Attach)
        self.client.credit(RECEIVER, count, channel=self.channel)
        return self.transfers()

    def transfers(self) -> list[Transfer]:
        return [v for _c, v, _p in self.client.take() if isinstance(v, Transfer)]

    def dispose(self, delivery_id: int, state: Any, settled: bool) -> None:
        self.client.send(Disposition(role=True, first=delivery_id, settled=settled, state=state), self.channel)


def _filled(count: int = 1, journal: RecordingJournal | None = None) -> Txn:
    txn = Txn(journal)
    txn.attach_sender()
    for i in range(count):
        txn.send(b"m%d" % i, None, settled=True, durable=True)
    txn.client.take()
    if journal is not None:
        journal.complete()
    return txn


def _sent_dispositions(txn: Txn) -> list[Disposition]:
    return [v for v in txn.client.values() if isinstance(v, Disposition) and v.role is False]


# -- the coordinator link ----------------------------------------------------------------------

def test_the_coordinator_offers_local_transactions() -> None:
    txn = Txn()
    attach = txn.attach_coordinator(TxnCapability.LOCAL_TRANSACTIONS)
    assert attach.role is True and isinstance(attach.target, Coordinator)
    assert set(attach.target.capabilities) == {"amqp:local-transactions", "amqp:multi-txns-per-ssn"}
    flow = txn.client.expect(Flow)
    assert flow.handle == COORDINATOR and flow.link_credit > 0


def test_distributed_and_promotable_transactions_are_refused_as_not_implemented() -> None:
    for capability in (TxnCapability.DISTRIBUTED_TRANSACTIONS, TxnCapability.PROMOTABLE_TRANSACTIONS):
        txn = Txn()
        attach = txn.attach_coordinator(TxnCapability.LOCAL_TRANSACTIONS, capability)
        assert attach.target is None                                  # refused (spec 2.6.3)
        detach = txn.client.expect(Detach)
        assert detach.closed and detach.error.condition == "amqp:not-implemented"
        assert capability.split(":")[1].split("-")[0] in detach.error.description


def test_a_declare_with_a_global_id_is_rejected_as_not_implemented() -> None:
    txn = Txn()
    txn.attach_coordinator(TxnCapability.LOCAL_TRANSACTIONS)
    state = txn.control(Declare(global_id=b"xid-1"))
    assert isinstance(state.state, Rejected) and state.state.error.condition == "amqp:not-implemented"


def test_declares_return_distinct_txn_ids() -> None:
    txn = Txn()
    txn.attach_coordinator()
    first, second = txn.declare(), txn.declare()
    assert isinstance(first, bytes) and 0 < len(first) <= 32 and first != second


def test_a_control_message_that_is_neither_declare_nor_discharge_is_rejected() -> None:
    txn = Txn()
    txn.attach_coordinator()
    state = txn.control("commit please").state
    assert isinstance(state, Rejected) and state.error.condition == "amqp:invalid-field"


def test_discharging_an_unknown_txn_id_is_rejected_unknown_id() -> None:
    txn = Txn()
    txn.attach_coordinator()
    state = txn.discharge(b"\x00\x00\x00\x00\xff\xff\xff\xff")
    assert isinstance(state, Rejected) and state.error.condition == "amqp:transaction:unknown-id"
    txn_id = txn.declare()
    assert isinstance(txn.discharge(txn_id), Accepted)
    again = txn.discharge(txn_id)                                     # discharged: gone
    assert isinstance(again, Rejected) and again.error.condition == "amqp:transaction:unknown-id"


# -- transactional posting -----------------------------------------------------------------------

def test_a_transactional_send_is_enqueued_only_on_commit() -> None:
    txn = Txn()
    txn.attach_coordinator()
    txn.attach_sender()
    txn_id = txn.declare()
    delivery_id = txn.send(b"in the txn", txn_id)
    disposition = txn.client.expect(Disposition)
    assert (disposition.first, disposition.settled) == (delivery_id, True)
    assert isinstance(disposition.state, TransactionalState) and disposition.state.txn_id == txn_id
    assert isinstance(disposition.state.outcome, Accepted)
    assert txn.queue.message_count == 0
    assert isinstance(txn.discharge(txn_id), Accepted)
    assert txn.queue.message_count == 1


def test_a_consumer_gets_a_transactional_message_only_after_the_commit() -> None:
    txn = Txn()
    txn.attach_coordinator()
    txn.attach_sender()
    assert txn.receive(5) == []
    txn_id = txn.declare()
    txn.send(b"later", txn_id)
    assert txn.transfers() == []
    assert isinstance(txn.discharge(txn_id), Accepted)
    assert len(txn.transfers()) == 1


def test_a_rolled_back_send_never_reaches_the_queue() -> None:
    txn = Txn()
    txn.attach_coordinator()
    txn.attach_sender()
    txn_id = txn.declare()
    txn.send(b"one", txn_id)
    txn.send(b"two", txn_id, settled=True)
    assert isinstance(txn.discharge(txn_id, fail=True), Accepted)
    assert txn.queue.message_count == 0


def test_two_transactions_on_one_session_are_independent() -> None:
    txn = Txn()
    txn.attach_coordinator()
    txn.attach_sender()
    kept, dropped = txn.declare(), txn.declare()
    txn.send(b"kept", kept)
    txn.send(b"dropped", dropped)
    assert isinstance(txn.discharge(dropped, fail=True), Accepted)
    assert isinstance(txn.discharge(kept), Accepted)
    assert txn.queue.message_count == 1


def test_an_unroutable_transactional_send_is_rejected_in_the_transaction() -> None:
    txn = Txn()
    txn.attach_coordinator()
    txn.attach_sender("amq.direct/nobody", handle=2)
    txn_id = txn.declare()
    txn.send(b"lost", txn_id, handle=2)
    state = txn.client.expect(Disposition).state
    assert isinstance(state, TransactionalState) and isinstance(state.outcome, Rejected)
    assert state.outcome.error.condition == "amqp:not-found"
    assert isinstance(txn.discharge(txn_id), Accepted)               # the sender was told: it may commit


def test_a_settled_transactional_send_that_fails_makes_the_commit_roll_back() -> None:
    txn = Txn()
    txn.attach_coordinator()
    txn.attach_sender()
    txn.attach_sender("amq.direct/nobody", handle=2)
    txn_id = txn.declare()
    txn.send(b"fine", txn_id)
    txn.send(b"lost", txn_id, settled=True, handle=2)               # nobody can tell the sender
    state = txn.discharge(txn_id)
    assert isinstance(state, Rejected) and state.error.condition == "amqp:transaction:rollback"
    assert "rejected" in state.error.description
    assert txn.queue.message_count == 0                              # all or nothing


def test_a_transfer_naming_an_unknown_txn_id_detaches_its_link() -> None:
    txn = Txn()
    txn.attach_coordinator()
    txn.attach_sender()
    txn.send(b"x", b"\x01\x02")
    detach = txn.client.expect(Detach)
    assert detach.handle == SENDER and detach.error.condition == "amqp:transaction:unknown-id"
    assert txn.queue.message_count == 0


def test_a_txn_id_of_another_session_is_unknown() -> None:
    first = Txn()
    first.attach_coordinator()
    txn_id = first.declare()
    second = Txn(channel=1, client=first.client)
    second.attach_coordinator()
    second.attach_sender()
    second.send(b"x", txn_id)
    detach = second.client.expect(Detach)
    assert detach.error.condition == "amqp:transaction:unknown-id"
    state = second.discharge(txn_id)
    assert isinstance(state, Rejected) and state.error.condition == "amqp:transaction:unknown-id"
    assert isinstance(first.discharge(txn_id), Accepted)           # still live on its own session


# -- transactional retirement ----------------------------------------------------------------------

def test_a_transactional_accept_is_applied_on_commit() -> None:
    txn = _filled()
    txn.attach_coordinator()
    txn_id = txn.declare()
    [transfer] = txn.receive(1)
    txn.dispose(transfer.delivery_id, TransactionalState(txn_id=txn_id, outcome=Accepted()), settled=False)
    assert txn.queue.unacked_count == 1 and not _sent_dispositions(txn)
    assert isinstance(txn.discharge(txn_id), Accepted)
    assert (txn.queue.message_count, txn.queue.unacked_count) == (0, 0)
    # the broker settles the delivery the client left unsettled
    [settled] = [d for d in _sent_dispositions(txn) if d.first == transfer.delivery_id]
    assert settled.settled and isinstance(settled.state, Accepted)


def test_a_rolled_back_unsettled_accept_leaves_the_delivery_held_by_its_link() -> None:
    txn = _filled()
    txn.attach_coordinator()
    txn_id = txn.declare()
    [transfer] = txn.receive(2)                                       # a credit left for a redelivery
    txn.dispose(transfer.delivery_id, TransactionalState(txn_id=txn_id, outcome=Accepted()), settled=False)
    assert isinstance(txn.discharge(txn_id, fail=True), Accepted)
    assert txn.queue.unacked_count == 1 and not txn.transfers()    # still the link's, not redelivered
    txn.dispose(transfer.delivery_id, Released(), settled=True)      # the client lets it go
    [again] = txn.transfers()
    assert again.delivery_id != transfer.delivery_id


def test_a_rolled_back_settled_accept_returns_the_message_to_its_queue() -> None:
    txn = _filled()
    txn.attach_coordinator()
    txn_id = txn.declare()
    [transfer] = txn.receive(2)
    txn.dispose(transfer.delivery_id, TransactionalState(txn_id=txn_id, outcome=Accepted()), settled=True)
    assert txn.queue.unacked_count == 1                               # held by the transaction
    assert isinstance(txn.discharge(txn_id, fail=True), Accepted)
    [again] = txn.transfers()                                         # delivered again, counted
    assert again.delivery_id != transfer.delivery_id
    assert txn.queue.unacked_count == 1


def test_a_settled_transactional_accept_commits() -> None:
    txn = _filled(2)
    txn.attach_coordinator()
    txn_id = txn.declare()
    transfers = txn.receive(2)
    for transfer in transfers:
        txn.dispose(transfer.delivery_id, TransactionalState(txn_id=txn_id, outcome=Accepted()), settled=True)
    assert isinstance(txn.discharge(txn_id), Accepted)
    assert (txn.queue.message_count, txn.queue.unacked_count) == (0, 0)


def test_a_transactional_release_requeues_on_commit() -> None:
    txn = _filled()
    txn.attach_coordinator()
    txn_id = txn.declare()
    [transfer] = txn.receive(1)
    txn.dispose(transfer.delivery_id, TransactionalState(txn_id=txn_id, outcome=Released()), settled=True)
    assert not txn.transfers()
    txn.client.credit(RECEIVER, 1, delivery_count=1)
    assert isinstance(txn.discharge(txn_id), Accepted)
    assert len(txn.transfers()) == 1                                  # back in the queue, delivered again


def test_a_delivery_settled_outside_its_transaction_makes_the_commit_roll_back() -> None:
    txn = _filled(2)
    txn.attach_coordinator()
    txn_id = txn.declare()
    first, second = txn.receive(2)
    txn.dispose(first.delivery_id, TransactionalState(txn_id=txn_id, outcome=Accepted()), settled=False)
    txn.dispose(second.delivery_id, TransactionalState(txn_id=txn_id, outcome=Accepted()), settled=True)
    txn.dispose(first.delivery_id, Released(), settled=True)          # not in the transaction
    state = txn.discharge(txn_id)
    assert isinstance(state, Rejected) and state.error.condition == "amqp:transaction:rollback"
    # nothing of it applied: the one settled in it is back in the queue with the released one
    assert (txn.queue.message_count, txn.queue.unacked_count) == (2, 0)


def test_a_transactional_disposition_naming_an_unknown_txn_id_detaches_the_link() -> None:
    txn = _filled()
    [transfer] = txn.receive(1)
    txn.dispose(transfer.delivery_id, TransactionalState(txn_id=b"\x09", outcome=Accepted()), settled=True)
    detach = txn.client.expect(Detach)
    assert detach.handle == RECEIVER and detach.error.condition == "amqp:transaction:unknown-id"
    assert (txn.queue.message_count, txn.queue.unacked_count) == (1, 0)   # not lost: back in the queue


# -- what ends a transaction ------------------------------------------------------------------------

def test_ending_the_session_rolls_back() -> None:
    txn = _filled()
    txn.attach_coordinator()
    txn_id = txn.declare()
    [transfer] = txn.receive(1)
    txn.dispose(transfer.delivery_id, TransactionalState(txn_id=txn_id, outcome=Accepted()), settled=True)
    txn.send(b"uncommitted", txn_id)
    txn.client.send(End(), txn.channel)
    txn.client.expect(End)
    assert (txn.queue.message_count, txn.queue.unacked_count) == (1, 0)   # m0 back; nothing new


def test_losing_the_connection_rolls_back() -> None:
    txn = _filled()
    txn.attach_coordinator()
    txn_id = txn.declare()
    [transfer] = txn.receive(1)
    txn.dispose(transfer.delivery_id, TransactionalState(txn_id=txn_id, outcome=Accepted()), settled=True)
    txn.send(b"uncommitted", txn_id)
    txn.client.server.connection_lost()
    assert (txn.queue.message_count, txn.queue.unacked_count) == (1, 0)


def test_closing_the_coordinator_link_rolls_back_what_it_declared() -> None:
    txn = Txn()
    txn.attach_coordinator()
    txn.attach_sender()
    txn_id = txn.declare()
    txn.send(b"uncommitted", txn_id)
    txn.client.send(Detach(handle=COORDINATOR, closed=True), txn.channel)
    txn.client.expect(Detach)
    txn.attach_coordinator(handle=8)
    state = txn.control(Discharge(txn_id=txn_id), handle=8).state
    assert isinstance(state, Rejected) and state.error.condition == "amqp:transaction:unknown-id"
    assert txn.queue.message_count == 0


# -- the journal -----------------------------------------------------------------------------------------

def test_the_journal_gets_the_work_only_at_commit_as_one_transaction() -> None:
    journal = RecordingJournal()
    txn = _filled(1, journal)
    txn.attach_coordinator()
    txn_id = txn.declare()
    [transfer] = txn.receive(1)
    txn.dispose(transfer.delivery_id, TransactionalState(txn_id=txn_id, outcome=Accepted()), settled=True)
    txn.send(b"a", txn_id, durable=True)
    txn.send(b"b", txn_id, durable=True)
    txn.client.take()
    assert journal.of("enqueue") == [("enqueue", "q", 1, None)] and not journal.of("settle")
    delivery_id = txn.delivery_id()
    txn.client.transfer(COORDINATOR, delivery_id, encode(AmqpValue(value=Discharge(txn_id=txn_id))))
    assert not [v for v in txn.client.values() if isinstance(v, Disposition)]   # not before it is durable
    enqueued, settled = journal.of("enqueue")[1:], journal.of("settle")
    assert len(enqueued) == 2 and len(settled) == 1
    [tx] = {e[-1] for e in enqueued + settled}                        # one journal transaction
    assert tx is not None
    journal.complete()
    txn.client._read()
    assert isinstance(txn.answer(delivery_id).state, Accepted)


def test_a_rolled_back_transaction_leaves_no_trace_in_the_journal() -> None:
    journal = RecordingJournal()
    txn = Txn(journal)
    txn.attach_coordinator()
    txn.attach_sender()
    txn_id = txn.declare()
    txn.send(b"a", txn_id, durable=True)
    assert isinstance(txn.discharge(txn_id, fail=True), Accepted)
    assert journal.events == []


def test_a_commit_the_journal_could_not_store_is_rejected_as_rolled_back() -> None:
    journal = RecordingJournal()
    txn = _filled(1, journal)
    txn.attach_coordinator()
    txn_id = txn.declare()
    [transfer] = txn.receive(1)
    txn.dispose(transfer.delivery_id, TransactionalState(txn_id=txn_id, outcome=Accepted()), settled=True)
    txn.send(b"a", txn_id, durable=True)
    txn.client.take()
    delivery_id = txn.delivery_id()
    txn.client.transfer(COORDINATOR, delivery_id, encode(AmqpValue(value=Discharge(txn_id=txn_id))))
    journal.complete(OSError("disk full"))
    txn.client._read()
    state = txn.answer(delivery_id).state
    assert isinstance(state, Rejected) and state.error.condition == "amqp:transaction:rollback"
    assert "disk full" in state.error.description
    assert txn.queue.message_count + txn.queue.unacked_count == 1     # m0 reinstated (and redelivered)
