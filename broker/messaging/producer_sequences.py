"""Exactly-once publishing: the last committed sequence of each producer of a virtual host.

Delta Lake's application transactions (``txn`` actions: an application id and
the last version it committed) applied to a broker.  A *producer* -- the Spark
sink names one per streaming query and partition -- publishes each batch of
messages in one AMQP transaction, and marks every message of it with two
headers: :data:`PRODUCER_HEADER` (its id, a string) and
:data:`SEQUENCE_HEADER` (the batch's sequence, an integer that grows from one
batch to the next).  At ``tx.commit`` the broker asks :meth:`ProducerSequences.admit`:

- a sequence above the producer's last one is **accepted**: the transaction
  commits, and the new sequence is recorded in the same journal group as its
  messages (:meth:`ProducerSequences.committing`), so both become durable
  together or not at all;
- a sequence at or below it is a **replay** (a Spark task retried, or a
  micro-batch re-run after a restart): the whole transaction is dropped, and
  the commit still succeeds -- once the original commit is durable, and fails
  with it should that commit fail, so a replay is never answered "ok" for
  messages that were not stored.

While the original's group is on its way to disk, its sequence already counts
(a speculative second attempt of the same Spark task waits on it); should the
commit fail, the record goes back to the previous sequence, so the retry is
accepted.

The broker strips both headers from the messages it keeps: consumers, and
whoever republishes what they consumed (a dead-letter processor), never see
them, so a republished message can never be mistaken for a replay.

This module is pure bookkeeping: no I/O, no protocol.  The record is durable
when the virtual host keeps a journal (every accepted sequence becomes a
``producer_sequence`` row, recovered at start, whether or not the messages
themselves were persistent); on a ``memory`` node it lives as long as the
broker process.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from broker import errors

if TYPE_CHECKING:
    from broker.messaging.journal import Durability

__all__ = ["ProducerSequences", "ProducerMark", "Replay", "PRODUCER_HEADER", "SEQUENCE_HEADER",
           "PRODUCER_SEQUENCE", "MAX_SEQUENCE", "producer_mark"]

#: the headers a producer's messages carry (stripped by the broker)
PRODUCER_HEADER: Final = "x-deltamq-producer"
SEQUENCE_HEADER: Final = "x-deltamq-sequence"
#: the journal event recording a committed sequence (``queue`` = producer, ``delivery_count`` = sequence)
PRODUCER_SEQUENCE: Final = "producer_sequence"
#: sequences are journaled as the int32 ``delivery_count`` column
MAX_SEQUENCE: Final = 2**31 - 1
_MAX_PRODUCER = 255


@dataclass(frozen=True, slots=True)
class ProducerMark:
    """Who published a transaction's messages, and which of its batches they are."""

    producer: str
    sequence: int


def producer_mark(headers: Mapping[str, Any]) -> tuple[ProducerMark, dict[str, Any]]:
    """The mark ``headers`` carry, and the headers without it; PreconditionFailed when malformed."""
    producer = headers.get(PRODUCER_HEADER)
    sequence = headers.get(SEQUENCE_HEADER)
    if isinstance(producer, bytes):
        producer = producer.decode("utf-8", "replace")
    if not isinstance(producer, str) or not producer or len(producer) > _MAX_PRODUCER:
        raise errors.PreconditionFailed(
            f"header '{PRODUCER_HEADER}' must be a non-empty string of at most {_MAX_PRODUCER}"
            f" characters, got {producer!r}")
    if isinstance(sequence, bool) or not isinstance(sequence, int) or not 0 <= sequence <= MAX_SEQUENCE:
        raise errors.PreconditionFailed(
            f"header '{SEQUENCE_HEADER}' must be an integer from 0 to {MAX_SEQUENCE}"
            f" (producer '{producer}'), got {sequence!r}")
    rest = {key: value for key, value in headers.items() if key not in (PRODUCER_HEADER, SEQUENCE_HEADER)}
    return ProducerMark(producer, sequence), rest


@dataclass(frozen=True, slots=True)
class Replay:
    """A transaction to drop: its producer already committed its sequence.

    ``original``: the journal group still carrying that commit to disk (answer
    the replay once it is durable, and fail it if it fails); None when it is.
    """

    original: Durability | None


class ProducerSequences:
    """The last sequence each producer committed in one virtual host."""

    __slots__ = ("_committed", "_pending")

    def __init__(self) -> None:
        self._committed: dict[str, int] = {}
        # producer -> (sequence, its group on the way to disk)
        self._pending: dict[str, tuple[int, Durability]] = {}

    def restore(self, sequences: Mapping[str, int]) -> None:
        """Take the sequences a journal recovered (a producer's highest wins)."""
        committed = self._committed
        for producer, sequence in sequences.items():
            if sequence > committed.get(producer, -1):
                committed[producer] = sequence

    def last(self, producer: str) -> int | None:
        """The producer's last sequence, durable or on its way; None: it never committed."""
        pending = self._pending.get(producer)
        if pending is not None:
            return pending[0]
        return self._committed.get(producer)

    def committed(self) -> dict[str, int]:
        """Every producer's last durable sequence (a copy)."""
        return dict(self._committed)

    def admit(self, mark: ProducerMark) -> Replay | None:
        """None when ``mark``'s transaction is new; a :class:`Replay` to drop it otherwise."""
        pending = self._pending.get(mark.producer)
        if pending is not None and mark.sequence <= pending[0]:
            return Replay(pending[1])
        last = self._committed.get(mark.producer)
        if last is not None and mark.sequence <= last:
            return Replay(None)
        return None

    def committing(self, mark: ProducerMark, durability: Durability | None) -> None:
        """``mark``'s transaction was applied; ``durability``: its journal group (None: nothing to wait for)."""
        producer = mark.producer
        if durability is None or durability.done and durability.error is None:
            self._settle(producer, mark.sequence)
            return
        self._pending[producer] = (mark.sequence, durability)
        durability.when_durable(lambda: self._durable(mark, durability))

    def _durable(self, mark: ProducerMark, durability: Durability) -> None:
        if self._pending.get(mark.producer, (None, None))[1] is durability:
            del self._pending[mark.producer]
        if durability.error is None:
            self._settle(mark.producer, mark.sequence)
        # failed: the sequence is not taken, the producer's retry will be admitted

    def _settle(self, producer: str, sequence: int) -> None:
        if sequence > self._committed.get(producer, -1):
            self._committed[producer] = sequence

    def __len__(self) -> int:
        return len(self._committed.keys() | self._pending.keys())
