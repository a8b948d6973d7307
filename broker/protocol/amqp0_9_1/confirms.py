"""Publisher confirms of one channel: which publishes to ack or nack, and when (RabbitMQ's extension).

Pure bookkeeping (RabbitMQ's ``rabbit_confirms``): no frames, no journal
calls.  Once a channel is in confirm mode every publish gets the next
sequence number (from 1) and, when its fate is known, an outcome: acked
(routed, or unroutable), nacked (a queue refused it: reject-publish
overflow), or a journal group (:class:`~broker.messaging.journal.Durability`)
to wait for, when the message must be durable before it is acked.

Outcomes are kept as runs of consecutive sequence numbers with one outcome
each, and answered strictly in sequence order: a publish is never confirmed
before an earlier one, so an ack never overtakes the durability of an earlier
message, and each run becomes one ``basic.ack``/``basic.nack`` with
``multiple`` set when it covers more than one publish.  A journal group that
failed turns its run into a nack.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Final, NamedTuple, Union

if TYPE_CHECKING:
    from broker.messaging.journal import Durability

__all__ = ["ACK", "NACK", "Answer", "ConfirmLedger", "Outcome"]

ACK: Final = "ack"
NACK: Final = "nack"

#: ACK, NACK, or the journal group that must be durable first
Outcome = Union[str, "Durability"]


class Answer(NamedTuple):
    """One frame to send: ``basic.ack`` (``ack``) or ``basic.nack`` up to ``delivery_tag``."""

    ack: bool
    delivery_tag: int
    multiple: bool


class ConfirmLedger:
    """The outcomes of a channel's publishes, answered in order."""

    __slots__ = ("published", "answered", "_runs")

    def __init__(self) -> None:
        #: the sequence number of the latest publish
        self.published = 0
        #: every publish up to this one has been answered
        self.answered = 0
        self._runs: deque[tuple[int, Outcome]] = deque()   # (last seq of the run, outcome)

    def publish(self) -> int:
        """Number the next publish; returns its sequence number."""
        self.published += 1
        return self.published

    def record(self, outcome: Outcome) -> None:
        """Set the outcome of the latest publish (each publish exactly once, in order)."""
        runs = self._runs
        seq = self.published
        if runs and runs[-1][1] is outcome:
            runs[-1] = (seq, outcome)
        else:
            runs.append((seq, outcome))

    @property
    def outstanding(self) -> int:
        """Publishes recorded but not answered yet."""
        return self._runs[-1][0] - self.answered if self._runs else 0

    def answers(self) -> tuple[list[Answer], Durability | None]:
        """The answers due now, in order, and the journal group that holds back the rest.

        Consecutive acks merge into one answer; a nack ends the acks before
        it.  The group returned (None: nothing is held back) is the one the
        caller should wait for before asking again.
        """
        runs = self._runs
        out: list[Answer] = []
        ack_upto = 0
        blocked: Durability | None = None
        while runs:
            upto, outcome = runs[0]
            if outcome is ACK:
                ack_upto = upto
            elif outcome is NACK:
                ack_upto = self._nack(out, ack_upto, upto)
            else:
                group: Durability = outcome  # type: ignore[assignment]
                if not group.done:
                    blocked = group
                    break
                if group.error is None:
                    ack_upto = upto
                else:                          # the journal could not make them durable
                    ack_upto = self._nack(out, ack_upto, upto)
            runs.popleft()
        if ack_upto:
            self._ack(out, ack_upto)
        return out, blocked

    def _ack(self, out: list[Answer], upto: int) -> None:
        if upto > self.answered:
            out.append(Answer(True, upto, upto - self.answered > 1))
            self.answered = upto

    def _nack(self, out: list[Answer], ack_upto: int, upto: int) -> int:
        if ack_upto:
            self._ack(out, ack_upto)
        out.append(Answer(False, upto, upto - self.answered > 1))
        self.answered = upto
        return 0
