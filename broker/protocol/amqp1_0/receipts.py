"""What a receiving link (the client sends) answers and remembers beyond mode ``first``.

- In ``rcv-settle-mode`` second (exactly once) the broker's outcome goes
  unsettled: the delivery tag and outcome are kept in the link's unsettled map
  (:meth:`~broker.messaging.link_registry.LinkRegistry.record_unsettled`,
  stored with durability ``unsettled-state``) until the client settles the
  delivery; then they are forgotten.
- A delivery sent again with ``resume`` whose tag is in the map was routed
  before: it is answered from the map, never routed twice (spec 2.6.13).

Delivery ids name deliveries on one session only, so the ids awaiting the
client's settlement are forgotten when the link is detached; the tags stay in
the link's map for its resume.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .conditions import AmqpErrorCondition
from .definitions import Accepted, Disposition, Error, Rejected
from .resume import known_resumed
from .settlement import state_bytes

if TYPE_CHECKING:
    from broker.messaging.journal import Durability

    from .links import ReceivingLink

_SERIAL = 0xFFFFFFFF


class Receipts:
    """The unsettled answers of one receiving link endpoint."""

    def __init__(self, endpoint: ReceivingLink) -> None:
        self.endpoint = endpoint
        #: deliveries answered unsettled, by delivery id: their tags
        self.awaiting_settle: dict[int, bytes] = {}
        #: deliveries whose outcome waits for the journal, by delivery id: their tags
        self.awaiting_outcome: dict[int, bytes] = {}

    def resumed(self, delivery_id: int, tag: bytes, settled: bool, second: bool) -> bool:
        """A delivery sent with ``resume``: True if its tag is known (answered from the map,
        or forgotten when the client sent it settled); False: it is a new delivery."""
        endpoint = self.endpoint
        link = endpoint.link
        state = known_resumed(link, tag) if link is not None else None
        if state is None or link is None:
            return False
        if settled:
            endpoint.namespace.links.settled(link, tag)
            return True
        endpoint.session.send(Disposition(role=True, first=delivery_id, settled=not second, state=state))
        if second:
            self.awaiting_settle[delivery_id] = tag
        else:
            endpoint.namespace.links.settled(link, tag)
        return True

    def accept(self, delivery_id: int, tag: bytes, after: Durability | None) -> None:
        """Answer ``accepted`` unsettled once ``after`` (the journal group holding the message)
        is durable -- or ``rejected`` if it could not be stored."""
        def outcome() -> None:
            if self.awaiting_outcome.pop(delivery_id, None) is None:
                return                  # settled by the client meanwhile, or the link detached
            error = after.error if after is not None else None
            if error is None:
                self.answer(delivery_id, tag, Accepted())
            else:
                self.answer(delivery_id, tag, Rejected(error=Error(
                    condition=AmqpErrorCondition.INTERNAL_ERROR,
                    description=f"the message could not be stored: {error}"[:1000])))
        self.awaiting_outcome[delivery_id] = tag
        if after is None:
            outcome()
        else:
            after.when_durable(outcome)

    def answer(self, delivery_id: int, tag: bytes, state: Any) -> None:
        """Send ``state`` unsettled, keeping ``tag`` and ``state`` until the client settles."""
        endpoint = self.endpoint
        if endpoint.detached or endpoint.session.ended or not endpoint.connection.is_open:
            return
        if endpoint.link is not None:
            endpoint.namespace.links.record_unsettled(endpoint.link, tag, state_bytes(state))
            self.awaiting_settle[delivery_id] = tag
        endpoint.session.send(Disposition(role=True, first=delivery_id, settled=False, state=state))

    def peer_settled(self, first: int, last: int) -> None:
        """The client settled deliveries ``first``..``last``: forget their tags."""
        span = (last - first) & _SERIAL
        link = self.endpoint.link
        for delivery_id in [i for i in self.awaiting_outcome if (i - first) & _SERIAL <= span]:
            del self.awaiting_outcome[delivery_id]       # settled before we answered: nothing to keep
        for delivery_id in [i for i in self.awaiting_settle if (i - first) & _SERIAL <= span]:
            tag = self.awaiting_settle.pop(delivery_id)
            if link is not None:
                self.endpoint.namespace.links.settled(link, tag)

    def clear(self) -> None:
        self.awaiting_settle.clear()
        self.awaiting_outcome.clear()
