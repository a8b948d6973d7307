"""When a consumer's own code fails while a queue hands it a message.

A queue delivers from whoever made a message deliverable: a publish on one
connection hands the message to a consumer on another, within the
publisher's turn.  An exception raised by the consumer's side of that call
(``can_deliver`` or ``deliver``: a bug, a message that cannot be converted to
the consumer's protocol) belongs to the consumer, not to the publisher:

* the queue wraps it as :class:`ConsumerFailed` (naming the consumer and the
  entry) at the point of the call-out, and :func:`consumer_failed` handles it;
* the consumer is detached from the queue, so it is offered nothing more;
* the consumer is told through its optional ``delivery_failed(entry, exc)``
  method: the protocol engines forget whatever they recorded of the entry and
  close their own connection with the protocol's internal error (logged once,
  with the traceback, by :mod:`broker.protocol.internal_errors`);
* the entry goes back to the queue as a released one: its delivery counts
  (``delivery_count`` + 1, marked redelivered, since the consumer may have
  received part of it), so the queue's delivery limit applies -- a message
  that fails every consumer is dead-lettered once the limit is reached
  instead of closing consumers for ever;
* the queue carries on with its other consumers, and the publisher's publish
  completes as usual (confirmed once the message is safely queued).

No ``try`` is entered per consumer or per message beyond the ones the
queue's offers already run in (free on CPython 3.11 while nothing raises).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

from broker.messaging.queue_entry import ACQUIRED, Consumer, QueueEntry

if TYPE_CHECKING:
    from broker.messaging.queue import Queue

__all__ = ["ConsumerFailed", "consumer_failed", "notify_each"]

log = logging.getLogger(__name__)


class ConsumerFailed(Exception):
    """``consumer`` raised ``cause`` while being offered ``entry`` (not yet handed out)."""

    def __init__(self, consumer: Consumer, entry: QueueEntry, cause: Exception) -> None:
        super().__init__(consumer, entry, cause)
        self.consumer = consumer
        self.entry = entry
        self.cause = cause


def consumer_failed(queue: Queue, failure: ConsumerFailed) -> None:
    """Detach the failed consumer, let it close its connection, and put the entry back.

    The caller (the queue's dispatch, or an arrival's direct offer) goes on
    offering ready messages to the other consumers.
    """
    consumer, entry, cause = failure.consumer, failure.entry, failure.cause
    queue.remove_consumer(consumer)
    # The entry counts as out with the consumer until released: should the consumer's
    # connection release it while closing, the release below finds nothing left to do.
    entry.state = ACQUIRED
    queue._unacked += 1
    queue._unacked_bytes += len(entry.message.body)
    _tell(consumer, "delivery_failed", (entry, cause), cause, f"queue {queue.name!r}")
    queue.release(entry)


def notify_each(consumers: list[Consumer], call: Callable[[Consumer], None], what: str) -> None:
    """``call`` each consumer (another connection's code); one that raises is told through its
    ``connection_failed(exc)`` (its engine logs it and closes its connection), and the others
    still run."""
    for consumer in consumers:
        try:
            call(consumer)
        except Exception as exc:
            _tell(consumer, "connection_failed", (exc,), exc, what)


def _tell(consumer: Consumer, method: str, args: tuple[Any, ...], cause: Exception, what: str) -> None:
    """Call the failed consumer's ``method``; log ``cause`` here (once, with its traceback)
    only when the consumer has no such method to log and close its connection."""
    told: Callable[..., None] | None = getattr(consumer, method, None)
    try:
        if told is None:
            log.error("consumer %r failed (%s); detached", consumer, what, exc_info=cause)
        else:
            told(*args)
    except Exception:
        log.exception("consumer %r failed (%s), and so did telling it", consumer, what)
