"""The transaction coordinator (spec 4.2-4.3): the broker's end of a controller's link.

A client declares and discharges transactions by sending messages on a link
whose target is a ``coordinator`` rather than a node.  The broker answers the
attach with the coordinator's actual capabilities -- ``amqp:local-transactions``
and ``amqp:multi-txns-per-ssn`` -- and refuses a controller that asks for
``amqp:distributed-transactions`` or ``amqp:promotable-transactions`` (the
link is detached with ``amqp:not-implemented``).  Coordinator links are not
in the link registry: they have no terminus to keep or resume.

Each message's body is one amqp-value:

- ``declare``: a new transaction on this session, answered ``declared`` with
  its txn-id; a declare with a ``global-id`` asks for a distributed
  transaction and is ``rejected`` with ``amqp:not-implemented``.
- ``discharge``: ``fail`` true rolls the transaction back, false commits it
  (one journal transaction, answered once durable); ``accepted`` when done,
  ``rejected`` with ``amqp:transaction:unknown-id`` for a txn-id this
  session does not have, or ``amqp:transaction:rollback`` when the
  transaction could not commit and was rolled back instead.
"""

from __future__ import annotations

from typing import Any, Final

from .conditions import AmqpErrorCondition
from .definitions import (Accepted, Coordinator, Declare, Declared, Discharge, Error, Rejected, TxnCapability)
from .links import LINK_CREDIT, ReceivingLink
from .sections import MessageSections
from .values import DecodeError, Symbol

__all__ = ["CoordinatorLink", "CAPABILITIES"]

#: what the coordinator offers
CAPABILITIES: Final = (TxnCapability.LOCAL_TRANSACTIONS, TxnCapability.MULTI_TXNS_PER_SSN)
_REFUSED: Final = {
    str(TxnCapability.DISTRIBUTED_TRANSACTIONS): "distributed transactions",
    str(TxnCapability.PROMOTABLE_TRANSACTIONS): "promotable transactions",
}


def requested_capabilities(coordinator: Coordinator) -> tuple[str, ...]:
    capabilities: Any = coordinator.capabilities
    if capabilities is None:
        return ()
    if isinstance(capabilities, str):            # a single symbol need not be an array
        return (str(capabilities),)
    return tuple(str(c) for c in capabilities)


class CoordinatorLink(ReceivingLink):
    """The broker's receiving end of a transaction controller's link."""

    def attach(self) -> None:
        target = self.peer_attach.target
        assert isinstance(target, Coordinator)
        refused = [_REFUSED[c] for c in requested_capabilities(target) if c in _REFUSED]
        if refused:
            self.refuse(Error(condition=AmqpErrorCondition.NOT_IMPLEMENTED,
                              description=f"{' and '.join(refused)} are not supported: the coordinator offers"
                                          f" {', '.join(CAPABILITIES)}"))
            return
        self.answer_attach(Coordinator(capabilities=[Symbol(c) for c in CAPABILITIES]))
        self.credit = LINK_CREDIT
        self.send_flow()

    def _renew_credit(self) -> None:
        # declares and discharges bring no message: a resource alarm does not stop them
        if self.credit <= LINK_CREDIT // 2 and not self.detached:
            self.credit = LINK_CREDIT
            self.send_flow()

    def _publish(self, delivery_id: int, settled: bool, payload: bytes, state: Any = None) -> None:
        try:
            body = MessageSections(payload).body()
        except DecodeError as exc:
            self._refuse_control(delivery_id, settled, AmqpErrorCondition.DECODE_ERROR,
                                 f"the coordinator could not decode the message: {exc}")
            return
        transactions = self.session.transactions
        if isinstance(body, Declare):
            if body.global_id is not None:
                self._refuse_control(delivery_id, settled, AmqpErrorCondition.NOT_IMPLEMENTED,
                                     "a declare with a global-id asks for a distributed transaction, which"
                                     " the coordinator does not support (it offers local transactions)")
                return
            txn = transactions.declare(self)
            self._settle(delivery_id, settled, Declared(txn_id=txn.txn_id))
        elif isinstance(body, Discharge):
            def answer(error: Error | None) -> None:
                self._settle(delivery_id, settled, Accepted() if error is None else Rejected(error=error))

            transactions.discharge(body.txn_id, bool(body.fail), answer)
        else:
            self._refuse_control(delivery_id, settled, AmqpErrorCondition.INVALID_FIELD,
                                 "a message to the coordinator carries a declare or a discharge as its"
                                 f" amqp-value body, not {type(body).__name__}")

    def _refuse_control(self, delivery_id: int, settled: bool, condition: str, description: str) -> None:
        self._settle(delivery_id, settled, Rejected(error=Error(condition=condition, description=description)))

    def release(self) -> None:
        super().release()
        self.session.transactions.rollback_declared_by(self)
