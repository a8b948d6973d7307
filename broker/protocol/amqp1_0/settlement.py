"""Settlement modes of AMQP 1.0 links (spec 2.6.12, 2.8.2, 2.8.3) and delivery states as the
link registry keeps them.

The sender's mode (``snd-settle-mode``) says whether it sends deliveries
settled (at most once), unsettled (at least once, or exactly once with the
receiver's second mode) or either (mixed).  The receiver's mode
(``rcv-settle-mode``) says when it settles: ``first`` -- at once, with its
outcome; ``second`` -- only after the sender settled, having sent its outcome
unsettled (the exactly-once handshake: the sender learns the outcome, settles,
and only then does the receiver forget the delivery tag, so a delivery sent
again after a failure is known by its tag).

The broker honours every combination, so its ``attach`` answers with the
modes the peer asked for:

- as the receiver (the client sends) in mode ``second`` it answers each
  unsettled delivery with an unsettled disposition, keeps the delivery tag
  and outcome in the link's unsettled map (stored with durability
  ``unsettled-state``), and forgets it when the client settles it;
- as the sender (the client receives) it sends settled deliveries when asked
  for ``settled``, unsettled ones otherwise; a receiver in mode ``second``
  sends its outcome unsettled and the broker settles it (the receiver settles
  after).

:func:`state_bytes` and :func:`state_from` are the encoding of delivery
states in the registry's unsettled map (the AMQP encoding of the state, or of
null).
"""

from __future__ import annotations

from typing import Any

from .conditions import AmqpErrorCondition, ProtocolFault, Scope
from .decoding import decode
from .definitions import Accepted, Attach, Modified, Rejected, Released
from .encoding import encode
from .values import DecodeError

__all__ = ["SND_UNSETTLED", "SND_SETTLED", "SND_MIXED", "RCV_FIRST", "RCV_SECOND", "negotiated_modes",
           "receiver_settles_second", "state_bytes", "state_from", "is_outcome", "NULL_STATE"]

SND_UNSETTLED, SND_SETTLED, SND_MIXED = 0, 1, 2
RCV_FIRST, RCV_SECOND = 0, 1

#: the terminal delivery states (outcomes, messaging 3.4)
OUTCOMES = (Accepted, Rejected, Released, Modified)
#: a delivery whose state is not yet known (null), as the registry keeps it
NULL_STATE = encode(None)


def negotiated_modes(attach: Attach, handle: int) -> tuple[int, int]:
    """The ``snd-settle-mode`` and ``rcv-settle-mode`` of the broker's answer to ``attach``:
    the ones the peer asked for, since the broker honours every mode; a mode that does not
    exist is refused (``amqp:invalid-field``)."""
    snd = SND_MIXED if attach.snd_settle_mode is None else int(attach.snd_settle_mode)
    rcv = RCV_FIRST if attach.rcv_settle_mode is None else int(attach.rcv_settle_mode)
    if snd not in (SND_UNSETTLED, SND_SETTLED, SND_MIXED):
        raise ProtocolFault(AmqpErrorCondition.INVALID_FIELD, f"snd-settle-mode {snd}", Scope.LINK, handle)
    if rcv not in (RCV_FIRST, RCV_SECOND):
        raise ProtocolFault(AmqpErrorCondition.INVALID_FIELD, f"rcv-settle-mode {rcv}", Scope.LINK, handle)
    return snd, rcv


def receiver_settles_second(link_mode: int, transfer_mode: int | None, handle: int) -> bool:
    """Whether the broker, receiving a delivery, settles it only after the sender (mode
    ``second``): the transfer's own ``rcv-settle-mode`` may ask for ``first`` on a link in
    ``second``, never the reverse (spec 2.7.5)."""
    if transfer_mode is None:
        return link_mode == RCV_SECOND
    if transfer_mode == RCV_SECOND and link_mode != RCV_SECOND:
        raise ProtocolFault(AmqpErrorCondition.INVALID_FIELD,
                            "a transfer in rcv-settle-mode second on a link in mode first", Scope.LINK, handle)
    if transfer_mode not in (RCV_FIRST, RCV_SECOND):
        raise ProtocolFault(AmqpErrorCondition.INVALID_FIELD, f"rcv-settle-mode {transfer_mode}",
                            Scope.LINK, handle)
    return transfer_mode == RCV_SECOND


def is_outcome(state: Any) -> bool:
    return isinstance(state, OUTCOMES)


def state_bytes(state: Any) -> bytes:
    """A delivery state (None for null) as the registry's unsettled map keeps it."""
    return NULL_STATE if state is None else encode(state)


def state_from(data: bytes) -> Any:
    """The delivery state :func:`state_bytes` encoded; None for null or for bytes that are
    not one (a stored map from another version: the delivery's state is unknown)."""
    try:
        state, end = decode(data)
    except DecodeError:
        return None
    return state if end == len(data) else None
