"""A channel's outgoing frames, in the order of the requests that caused them.

Spec 0-9-1 section 2.2.2 / 4.2.4: a peer sends synchronous requests on a
channel and matches each reply to the oldest request still unanswered, so
replies must leave in request order.  Most replies are known at once; one is
not: ``tx.commit-ok`` waits until the journal has the transaction on disk.
A ``tx.rollback`` sent right behind the commit must not overtake it.

:class:`ReplyOrder` keeps that order.  :meth:`ReplyOrder.reserve` takes a place
for a reply that is not known yet; everything sent after it (replies,
deliveries, returns, a ``channel.close``) waits behind it until
:meth:`ReplyOrder.fill` gives the reserved place its frames, then leaves in
order.  While nothing is reserved, frames go straight through at no cost.
"""

from __future__ import annotations

from collections import deque
from typing import Callable

__all__ = ["ReplyOrder", "Reservation"]


class Reservation:
    """A place in a channel's output for a reply that is not known yet."""

    __slots__ = ("frames", "size", "filled")

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.size = 0
        self.filled = False


class ReplyOrder:
    """Writes a channel's frames through ``write`` in order, holding them behind reservations."""

    __slots__ = ("_write", "waiting")

    def __init__(self, write: Callable[[list[bytes], int], None]) -> None:
        self._write = write
        #: reservations and what waits behind them; empty: frames go straight through
        self.waiting: deque[Reservation] = deque()   # starts with an unfilled reservation

    @property
    def holding(self) -> bool:
        """True while a reserved reply holds the channel's output back."""
        return bool(self.waiting)

    def send(self, frames: list[bytes], size: int) -> None:
        if not self.waiting:
            self._write(frames, size)
            return
        last = self.waiting[-1]
        if last.filled:                      # join the frames already waiting
            last.frames += frames
            last.size += size
        else:
            waiting = Reservation()
            waiting.frames, waiting.size, waiting.filled = list(frames), size, True
            self.waiting.append(waiting)

    def reserve(self) -> Reservation:
        reservation = Reservation()
        self.waiting.append(reservation)
        return reservation

    def fill(self, reservation: Reservation, frames: list[bytes], size: int) -> None:
        """The reserved reply is known: write it, and what waited behind it, up to the next reservation."""
        reservation.frames[:0] = frames
        reservation.size += size
        reservation.filled = True
        queue = self.waiting
        while queue and queue[0].filled:
            ready = queue.popleft()
            if ready.frames:
                self._write(ready.frames, ready.size)

    def discard(self) -> None:
        """The connection is gone: nothing held will be sent."""
        self.waiting.clear()
