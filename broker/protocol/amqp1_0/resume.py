"""Resuming a link's deliveries (AMQP 1.0 part 2.6.13): the unsettled maps exchanged on attach.

When a link is resumed or recovered (the registry kept it), both ends send
the deliveries they have not settled, each delivery tag with its state.  The
broker reconciles the peer's map with its own *before* it answers, so the map
it answers with is the truth after reconciling:

As the **receiver** (the client sends; the broker's map holds the outcomes
it sent unsettled in mode ``second``):

- a tag the peer's complete map does not name was settled by the peer: the
  broker forgets it;
- a tag both maps name stays: the broker's answer tells the peer the
  outcome, and the peer settles it -- by a disposition, or by sending the
  delivery again with ``resume`` set, which the broker answers from its map
  without routing the message a second time (:func:`known_resumed`);
- a tag only the peer knows was never received: the peer sends it again.

As the **sender** (the client receives; the broker's map holds the
deliveries it sent and the client has not settled; a link with durability
``unsettled-state`` keeps their queue entries acquired while it is
suspended):

- a tag to which the peer's map gives an outcome: the broker applies it
  (accepted acknowledges, rejected dead-letters, released and modified
  requeue) and forgets the tag, so the message is not delivered again;
- any other tag: the broker requeues the message and forgets the tag
  (settles it as released); the message is delivered again, as a new
  delivery, to this link or another consumer;
- unless the peer's map is incomplete: then a tag it does not name stays
  (its entry held), and the link sends no new deliveries (2.6.13) until it
  is attached again with the rest of the peer's map.

A peer's *incomplete* map (``incomplete-unsettled``) proves nothing by a
tag's absence: as the receiver the broker then keeps its tags.  The broker's
own answer is cut to what fits one frame (the peer's ``max-frame-size``); cut,
it says ``incomplete-unsettled``, and a receiving link that answered so
refuses a new (not resumed) delivery with ``amqp:illegal-state`` as the
specification requires.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .definitions import Accepted, Modified, Rejected, Released
from .encoding import encode
from .settlement import is_outcome, state_from

if TYPE_CHECKING:
    from broker.messaging.link_registry import Link, LinkRegistry
    from broker.messaging.queue_entry import QueueEntry

__all__ = ["peer_unsettled", "unsettled_field", "reconcile_receiving", "reconcile_sending",
           "known_resumed", "apply_outcome"]

#: bytes of a map32 constructor, size and count
_MAP_OVERHEAD = 9


def peer_unsettled(unsettled: Mapping[Any, Any] | None) -> dict[bytes, Any]:
    """The peer's unsettled map by delivery tag (bytes); a null map is an empty one."""
    return {bytes(tag): state for tag, state in (unsettled or {}).items()
            if isinstance(tag, (bytes, bytearray, memoryview))}


def unsettled_field(states: Mapping[bytes, bytes], budget: int) -> tuple[dict[bytes, Any] | None, bool]:
    """The ``unsettled`` field of the broker's attach (None when empty) and whether it is
    incomplete: as many entries of ``states`` (tag -> stored state) as fit in ``budget``
    encoded bytes."""
    if not states:
        return None, False
    field: dict[bytes, Any] = {}
    used = _MAP_OVERHEAD
    for tag, stored in states.items():
        size = len(encode(tag)) + len(stored)
        if used + size > budget:
            return field or None, True
        used += size
        field[tag] = state_from(stored)
    return field, False


def reconcile_receiving(registry: LinkRegistry, link: Link, peer: Mapping[bytes, Any], incomplete: bool) -> None:
    """The broker receives: forget the tags the peer's complete map shows it settled."""
    if incomplete:
        return
    kept = {tag: state for tag, state in link.unsettled.items() if tag in peer}
    if len(kept) != len(link.unsettled):
        registry.replace_unsettled(link, kept)


def known_resumed(link: Link, tag: bytes) -> Any:
    """The state the broker keeps for a delivery the peer sends again (``resume`` set);
    ``None`` when the tag is not in the map (then it is a new delivery)."""
    stored = link.unsettled.get(tag)
    return None if stored is None else (state_from(stored) or Accepted())


def reconcile_sending(registry: LinkRegistry, link: Link, peer: Mapping[bytes, Any], incomplete: bool) -> set[Any]:
    """The broker sends: settle the deliveries of its map -- with the peer's outcome where it
    gave one, else by requeueing the message; the queues touched (to dispatch).  With an
    ``incomplete`` peer map the tags it does not name stay, their entries still held."""
    held, link.held = link.held, {}
    queues: set[Any] = set()
    kept: dict[bytes, bytes] = {}
    for tag, stored in link.unsettled.items():
        if incomplete and tag not in peer:
            kept[tag] = stored
            if tag in held:
                link.held[tag] = held.pop(tag)
            continue
        entry = held.pop(tag, None)
        if entry is not None:
            state = peer.get(tag)
            apply_outcome(entry, state if is_outcome(state) else Released())
            queues.add(entry.queue)
    for entry in held.values():         # held without a tag in the map: requeue as well
        entry.queue.release(entry)
        queues.add(entry.queue)
    if len(kept) != len(link.unsettled):
        registry.replace_unsettled(link, kept)
    return queues


def apply_outcome(entry: QueueEntry, state: Any) -> None:
    """Settle ``entry`` with the outcome ``state``: acknowledge, dead-letter or requeue."""
    queue = entry.queue
    if isinstance(state, Accepted):
        queue.settle(entry)
    elif isinstance(state, Rejected):
        queue.reject(entry)
    elif isinstance(state, (Released, Modified)):
        queue.release(entry)

