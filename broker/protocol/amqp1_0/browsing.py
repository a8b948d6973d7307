"""Browsing a queue over AMQP 1.0: a source with ``distribution-mode`` ``copy`` (part 3.5.3).

A receiver whose source names a queue and asks for ``copy`` (a Qpid JMS
``QueueBrowser``, a rhea receiver with ``distribution_mode: 'copy'``) gets
copies of the queue's ready messages, in delivery order, and takes none: they stay for
the queue's consumers.  Each message is sent once per link (a link's
browser remembers what it sent while the message is in the queue).
Messages acquired by a consumer at the time are not seen (a message a
consumer took and then gave back may be seen again: the browser forgets
what leaves the queue's ready messages).  A selector on
the source applies: only messages it matches are sent.

The browser is not one of the queue's consumers (it takes nothing, so it
must not count as a consumer for single-active-consumer or exclusivity): it
looks at the queue whenever the client gives credit (a ``flow``, and a
``drain`` -- Qpid JMS's way of asking whether there is more -- ends the
look with the credit the queue could not fill used up) and whenever output
may flow again.  A message arriving while the link still holds credit is
sent at the client's next flow.  A paged queue whose head is entirely on
disk (flow to disk) is read back as the browser looks: while the link holds
credit the look waits for that window to land, sends from it, and only then
answers a drain (the wait is the queue's own, not a consumer's, and a link
that goes away meanwhile forgets it).

Deliveries go out as any other (settled when the link's sender settle mode
is ``settled``); the client's disposition of a copy changes nothing in the
queue: ``accepted``, ``released`` and the rest are all answered and
forgotten.  (On a subscription to an exchange ``copy`` is what the
subscription does anyway -- Qpid JMS asks for it on topic consumers -- and
the link consumes its own queue.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.messaging.paged_storage import head_landing

if TYPE_CHECKING:
    from broker.messaging.message import Message
    from broker.messaging.paged_storage import PageWait
    from broker.messaging.queue import Queue
    from broker.messaging.queue_entry import QueueEntry
    from broker.messaging.selectors import Selector

    from .links import SendingLink

__all__ = ["COPY", "QueueBrowser", "is_browser"]

#: the distribution mode of a browsing source (MOVE, the default, consumes)
COPY = "copy"


def is_browser(distribution_mode: str | None) -> bool:
    return distribution_mode == COPY


class QueueBrowser:
    """Sends copies of ``queue``'s ready messages to ``link`` as its credit allows."""

    def __init__(self, link: SendingLink, queue: Queue, selector: Selector | None) -> None:
        self.link = link
        self.queue = queue
        self.selector = selector
        #: the messages sent, by identity (kept, so an id is not reused while it is here)
        self._sent: dict[int, Message] = {}
        #: the read back of the queue's head this browser waits for (None: none)
        self._landing: PageWait | None = None
        queue.watch(link)           # its deletion detaches the link, as a consumer's

    def _selects(self, entry: QueueEntry) -> bool:
        selector = self.selector
        return selector is None or selector.matches(entry.message, redelivered=entry.redelivered,
                                                    delivery_count=entry.delivery_count)

    def browse(self) -> None:
        """Send what the link has credit for and has not sent yet."""
        link = self.link
        if link.credit <= 0 or link.cancelled or self.queue.deleted:
            return
        entries = self.queue.browse(self._selects)
        sent = self._sent
        still: dict[int, Message] = {}
        for entry in entries:
            message = entry.message
            key = id(message)
            if key in sent:
                still[key] = message
                continue
            if link.credit <= 0 or not link.session.can_send():
                continue
            link.deliver(entry)
            still[key] = message
        self._sent = still                      # what left the queue is forgotten

    @property
    def awaiting(self) -> bool:
        """The look goes on once the queue's head is read back from disk (a drain waits for it)."""
        return self._landing is not None

    def look(self) -> None:
        """The client gave credit: send what it allows, and wait for a head on disk while credit is left."""
        self.browse()
        link = self.link
        if self._landing is not None or link.credit <= 0 or link.cancelled or self.queue.deleted:
            return
        landing = head_landing(self.queue)
        if landing is not None:
            self._landing = landing
            landing.when_durable(self._landed)

    def _landed(self) -> None:
        """The head's read landed (or failed, or the queue went): send from it, then answer a drain."""
        self._landing = None
        link = self.link
        if link.cancelled or not link.connection.is_open:
            return
        self.browse()
        if link.drain and link.credit > 0:
            link.end_drain()

    def stop(self) -> None:
        """The link goes: its wait for the queue's head is forgotten, and the queue's deletion."""
        self.queue.unwatch(self.link)
        landing, self._landing = self._landing, None
        if landing is not None:
            landing.forget(self._landed)

    def dispatch(self) -> None:
        """The connection's scheduled dispatch (output may flow again)."""
        self.browse()
