"""A channel waiting for a durable change to be stored, and the frames held behind it.

A declare, bind, unbind or delete of a durable object takes effect once the
configuration store has it (:meth:`Namespace.when_stored`), which a store
with a background writer answers later, on the event loop.  AMQP orders a
channel's methods (0-9-1 spec 4.2.4: "a peer MUST process the methods of a
channel in the order they are sent"): a ``basic.publish`` to a queue just
declared -- with ``nowait`` too -- must find the queue.  So from the moment a
channel waits for the store until the store answers, every later frame of
that channel is held here, in order; then the answer (declare-ok, or the
channel's close when the store failed) is sent and the held frames are
processed, up to the next wait.  Other channels and other connections are
not held.  While a connection holds more than :data:`HOLD_LIMIT` bytes for
its waiting channels, the transport stops reading from it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from broker import errors

from . import methods as m

if TYPE_CHECKING:
    from .channel import Channel

T = TypeVar("T")

#: bytes of held frames above which the connection is not read (as for a blocked publisher)
HOLD_LIMIT = 1 << 20


class StoreWaits:
    """Per connection: the channels waiting for the store, and their held frames."""

    def __init__(self) -> None:
        #: channel -> its held frames; empty when no channel waits (read on every frame: a plain dict)
        self.held: dict[int, list[tuple[int, bytes]]] = {}
        self.held_bytes = 0

    def __bool__(self) -> bool:
        return bool(self.held)

    def __contains__(self, channel: int) -> bool:
        return channel in self.held

    def wait(self, channel: int) -> None:
        """``channel``'s frames from now on are held."""
        self.held.setdefault(channel, [])

    def hold(self, ftype: int, channel: int, payload: bytes) -> None:
        self.held[channel].append((ftype, payload))
        self.held_bytes += len(payload) + 8

    def release(self, channel: int) -> list[tuple[int, bytes]]:
        """Stop holding ``channel``; the frames held for it, oldest first."""
        frames = self.held.pop(channel, [])
        self.held_bytes -= sum(len(payload) + 8 for _, payload in frames)
        return frames

    @property
    def reading_paused(self) -> bool:
        return self.held_bytes >= HOLD_LIMIT


def when_stored(channel: Channel, method: m.Method, operation: Callable[[], T],
                then: Callable[[T], None]) -> None:
    """Run ``operation`` once its durable change is stored, then ``then(result)`` (the reply).

    When the namespace answers at once (no durable change, a store without a
    background writer, a refusal) this is a plain call: an error is raised
    to the channel's caller as before.  Otherwise the channel's later frames
    are held until the store answers.
    """
    outcome: list[tuple[Any, errors.BrokerError | None]] = []
    waiting = False

    def done(result: T | None, error: errors.BrokerError | None) -> None:
        if not waiting:
            outcome.append((result, error))
            return
        _answer(channel, method, then, result, error)

    channel.namespace.when_stored(operation, done)
    if outcome:
        result, error = outcome[0]
        if error is not None:
            raise error
        then(result)
        return
    waiting = True
    channel.connection.store_waits.wait(channel.number)


def _answer(channel: Channel, method: m.Method, then: Callable[[Any], None], result: Any,
            error: errors.BrokerError | None) -> None:
    """The store answered: reply (or close the channel), then process what was held."""
    connection = channel.connection
    if not connection.is_open or connection.channels.get(channel.number) is not channel:
        connection.store_waits.release(channel.number)
        return                          # the connection or channel went meanwhile: nobody to answer
    if not channel.closing:
        if error is None:
            then(result)
        elif error.hard:
            connection.hard_error_in_method(error, method)
        else:
            channel.soft_error(error, method)
    connection.release_channel(channel.number)
