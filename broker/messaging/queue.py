"""Queues: where messages wait for consumers.

:class:`Queue` is the standard FIFO queue and the base of the priority,
last-value and sorted variants, which only replace its storage methods
(``_store``/``_take``/``_put_back``/``_peek``/``_clear``/``_new_entry``).

Storage of the standard queue
-----------------------------
A queued message that has never been handed out costs one pointer in a
``deque``: no per-message entry object exists until the message is taken from
the head.  Taking it creates its :class:`QueueEntry`, numbered by how many
messages were taken before it.  A released (requeued) entry goes into a heap
ordered by that number.  Because messages only ever leave from the head, every
released entry is older than everything still in the deque, so the queue's
head is simply "the smallest released entry, else the deque's head": requeued
messages return to their original position (RabbitMQ, Broker-J), and enqueue
and dequeue stay O(1) (O(log r) for r outstanding releases).

Message TTL is computed, not stored: ``arrival + x-message-ttl`` against the
message's own ``expires_at``, the smaller wins.  Like RabbitMQ, expired
messages are removed when they reach the head (and by :meth:`Queue.run_due`).

Journal
-------
A durable queue of a virtual host with a message journal holds it in
:attr:`Queue.journal` and reports every event of every persistent message to
it: enqueued, delivered, requeued, settled with its outcome, and the queue's
own deletion.  Recovery puts journaled messages back with :meth:`Queue.restore`,
which reports nothing.  A persistent message joins the queue only once its
``enqueue`` row is durable (:mod:`broker.messaging.arrivals`).

Lease consumers take and settle many fresh messages at once as runs
(:mod:`broker.messaging.entry_runs`).

Consumers and dispatch are in :mod:`broker.messaging.consumers`; entries, their
states and the consumer and host interfaces in :mod:`broker.messaging.queue_entry`.
"""

from __future__ import annotations

import time
from collections import deque
from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable

from broker.messaging.arguments import QueueSettings, queue_settings
from broker.messaging.arrivals import ArrivalHold, enqueue_all
from broker.messaging.consumer_faults import ConsumerFailed, consumer_failed, notify_each
from broker.messaging.consumers import DELIVERED, ConsumerDispatch
from broker.messaging.entry_runs import RunTaking
from broker.messaging.journal import ACKED, PURGED, REPLACED, Durability, MessageJournal, settle_outcome
from broker.messaging.message import Message
from broker.messaging.queue_entry import ACQUIRED, AVAILABLE, SETTLED, Consumer, QueueEntry, QueueHost
from broker.messaging.records import to_json_value

if TYPE_CHECKING:
    from broker.messaging.exchange import Binding
    from broker.messaging.paged_queue import PageState

__all__ = ["Queue", "QueueEntry", "enqueue_all", "Consumer", "QueueHost", "AVAILABLE", "ACQUIRED", "SETTLED"]


class Queue(ConsumerDispatch, ArrivalHold, RunTaking):
    """The standard FIFO queue (and the base of the other kinds)."""

    type: ClassVar[str] = "standard"

    __slots__ = (
        "name", "vhost", "durable", "journal", "auto_delete", "exclusive_owner", "arguments", "settings",
        "bindings", "_clock", "_host", "_consumers", "_next_consumer", "_exclusive_consumer",
        "_prioritised", "_priority_cursor", "_filtered",
        "_sac", "_ready", "_ready_bytes", "_unacked", "_unacked_bytes", "_dispatching",
        "_deleted", "_timed", "_ttl", "_limited", "_last_used", "_fresh", "_returned", "_taken",
        "_arriving", "_awaited", "_pages", "_watchers",
        "enqueued_messages", "enqueued_bytes", "delivered_messages", "delivered_bytes",
    )

    def __init__(self, name: str, *, vhost: str = "", durable: bool = False,
                 auto_delete: bool = False, exclusive_owner: object | None = None,
                 arguments: dict[str, Any] | None = None, settings: QueueSettings | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 host: QueueHost | None = None, journal: MessageJournal | None = None) -> None:
        self.name = name
        self.vhost = vhost
        self.durable = durable
        #: where persistent messages' events go (durable queues of journaled vhosts only)
        self.journal = journal
        self.auto_delete = auto_delete
        self.exclusive_owner = exclusive_owner
        self.arguments: dict[str, Any] = dict(arguments or {})
        if settings is None:
            settings = queue_settings(self.arguments, name, vhost)
        self.settings = settings
        self.bindings: set[Binding] = set()
        self._clock = clock
        self._host = host
        self._consumers: list[Consumer] = []
        #: told of the queue's deletion like consumers, without consuming (AMQP 1.0 browsers)
        self._watchers: list[Consumer] = []
        self._next_consumer = 0
        self._prioritised = False                    # some consumer has an x-priority
        self._filtered = False                       # some consumer has a message selector
        self._priority_cursor: dict[int, int] = {}   # round-robin position per priority
        self._exclusive_consumer = False
        self._sac = settings.single_active_consumer
        self._ready = 0
        self._ready_bytes = 0
        self._unacked = 0
        self._unacked_bytes = 0
        self._dispatching = False
        self._deleted = False
        self._ttl = None if settings.message_ttl is None else settings.message_ttl / 1000.0
        self._timed = self._ttl is not None or settings.expires is not None
        # producer flow control neither refuses nor drops: broker.messaging.flow_control
        self._limited = settings.limited and settings.overflow != "producer-flow-control"
        self._last_used = clock()
        self._fresh: deque[Message] = deque()
        self._returned: list[QueueEntry] = []
        self._taken = 0
        # arrivals held until the journal group they wait for is durable (None: durable at once)
        self._arriving: deque[tuple[Message, Durability | None]] = deque()
        self._awaited: Durability | None = None
        # paged out of memory (flow to disk): see broker.messaging.paged_queue
        self._pages: PageState | None = None
        # statistics for management: messages (and body bytes) accepted, and
        # delivered to consumers or basic.get (redeliveries count again)
        self.enqueued_messages = 0
        self.enqueued_bytes = 0
        self.delivered_messages = 0
        self.delivered_bytes = 0

    # -- read-only views -------------------------------------------------------

    @property
    def exclusive(self) -> bool:
        return self.exclusive_owner is not None

    @property
    def message_count(self) -> int:
        """Messages ready for delivery (not counting unacknowledged ones), as RabbitMQ reports."""
        return self._ready

    @property
    def message_bytes(self) -> int:
        return self._ready_bytes

    @property
    def unacked_count(self) -> int:
        return self._unacked

    @property
    def unacked_bytes(self) -> int:
        """Body bytes of the messages delivered and not yet settled."""
        return self._unacked_bytes

    @property
    def paged_count(self) -> int:
        """Ready messages paged out of memory (:mod:`broker.messaging.paged_queue`)."""
        return 0

    @property
    def paged_bytes(self) -> int:
        """Their body bytes."""
        return 0

    @property
    def deleted(self) -> bool:
        return self._deleted

    @property
    def timed(self) -> bool:
        """True when the queue has deadlines (message TTL or queue expiry) to be driven."""
        return self._timed

    # -- publishing --------------------------------------------------------------

    def enqueue(self, message: Message, after: Durability | None = None, *, keep: bool = False) -> bool:
        """Add ``message``; False when refused by a reject-publish overflow policy.

        With the queue empty and a consumer able to take it, the message goes
        straight to that consumer without touching storage.  A persistent
        message this queue journals, or one given ``after`` (the journal group
        another queue journaled it in), is held until that group is durable.
        ``keep``: the broker itself enqueues it (a dead letter): it is not held,
        and the journal commits it again should its commit fail (see
        :meth:`MessageJournal.enqueued`).
        """
        if self._deleted:
            return False
        if self._limited and not self._admit(message):
            return False
        journal = self.journal
        if journal is not None and message.persistent and not journal.enqueued(self, message, keep):
            after = journal.pending
        if after is not None or self._arriving:
            self.hold(message, after)
        else:
            self._accept(message)
        return True

    def _accept(self, message: Message) -> None:
        """``message`` joins the queue: straight to a consumer, or into storage."""
        self.enqueued_messages += 1
        self.enqueued_bytes += len(message.body)
        if message.expires_at is not None and not self._timed:
            self._become_timed()
        consumers = self._consumers
        if consumers and not self._ready and not self._dispatching:
            entry = self._new_entry(message)
            try:
                if (self._offer_selective(entry, consumers) == DELIVERED) if self._filtered \
                        else self._offer(entry, consumers):
                    return
            except ConsumerFailed as failure:     # that consumer's fault: the entry is queued
                consumer_failed(self, failure)    # (and offered to the others)
                return
            if self._timed and self._expired_on_arrival(message):
                self._retire(entry, "expired")
                return
            self._ready += 1
            self._ready_bytes += len(message.body)
            self._put_back(entry)
        else:
            if self._timed and self._expired_on_arrival(message):
                self._discard(message, "expired", 0)
                return
            self._ready += 1
            self._ready_bytes += len(message.body)
            self._store(message)
            if self._filtered and consumers and not self._dispatching and self._wanted(message):
                # behind messages the consumers passed over, one of them wants this one
                self.dispatch()
        if self._limited:
            self._drop_over_limit()

    def _expired_on_arrival(self, message: Message) -> bool:
        """A message not taken at once whose TTL is already over (x-message-ttl 0: RabbitMQ drops it)."""
        expiry = self._expiry(message)
        return expiry is not None and expiry <= self._clock()

    def _admit(self, message: Message) -> bool:
        """The reject-publish policies: refuse a message that would overfill the queue."""
        settings = self.settings
        if settings.overflow == "drop-head":
            return True
        max_length, max_bytes = settings.max_length, settings.max_length_bytes
        if ((max_length is not None and self._ready >= max_length)
                or (max_bytes is not None and self._ready_bytes + len(message.body) > max_bytes)):
            if settings.overflow == "reject-publish-dlx":
                self._dead_letter(message, "maxlen")
            return False
        return True

    def _drop_over_limit(self) -> None:
        """The drop-head policy: dead-letter (reason ``maxlen``) from the head until within limits."""
        settings = self.settings
        if settings.overflow != "drop-head":
            return
        max_length, max_bytes = settings.max_length, settings.max_length_bytes
        while ((max_length is not None and self._ready > max_length)
               or (max_bytes is not None and self._ready_bytes > max_bytes)):
            entry = self._take()
            if entry is None:
                break
            self._remove(entry, "maxlen")

    # -- basic.get and settlement ------------------------------------------------

    def get(self, *, no_ack: bool = False) -> QueueEntry | None:
        """Acquire the head for basic.get (settled at once when ``no_ack``); None when empty."""
        self._last_used = now = self._clock()
        timed = self._timed
        while self._ready:
            entry = self._take()
            if entry is None:
                break
            self._ready -= 1
            self._ready_bytes -= len(entry.message.body)
            if timed:
                expiry = self._expiry(entry.message)
                if expiry is not None and expiry <= now:
                    self._retire(entry, "expired")
                    continue
            self._hand_out(entry, no_ack)
            return entry
        return None

    def settle(self, entry: QueueEntry, by: str | None = None) -> None:
        """Acknowledge: the entry leaves the queue.  Settling twice is a no-op.

        ``by``: what the journal's ``reason`` says of an ack made by a lease
        consumer (``consumer:<name>``, :mod:`broker.messaging.leases`); None for the rest.
        """
        if entry.state == ACQUIRED:
            entry.state = SETTLED
            self._unacked -= 1
            self._unacked_bytes -= len(entry.message.body)
            self._forget(entry)
            journal = self.journal
            if journal is not None and entry.message.persistent:
                journal.settled(self, entry.message, ACKED, by, entry.delivery_count + 1)

    def reject(self, entry: QueueEntry) -> None:
        """Reject without requeue: dead-letter (reason ``rejected``) or discard."""
        if entry.state == ACQUIRED:
            self._unacked -= 1
            self._unacked_bytes -= len(entry.message.body)
            self._retire(entry, "rejected", entry.delivery_count + 1)

    def reinstate(self, entry: QueueEntry) -> None:
        """Undo the settlement of ``entry`` (its transaction could not be made durable): requeue it."""
        if entry.state != SETTLED or self._deleted:
            return
        entry.delivery_count += 1
        entry.redelivered = True
        self._ready += 1
        self._ready_bytes += len(entry.message.body)
        self._put_back(entry)
        self.dispatch()

    def release(self, entry: QueueEntry) -> None:
        """Requeue at the entry's original position, marked redelivered, then dispatch."""
        if self._release(entry):
            self.dispatch()

    def release_many(self, entries: Iterable[QueueEntry]) -> None:
        """Release several entries (a channel closing) and dispatch once."""
        released = False
        for entry in entries:
            released = self._release(entry) or released
        if released:
            self.dispatch()

    def _release(self, entry: QueueEntry) -> bool:
        if entry.state != ACQUIRED:
            return False
        self._unacked -= 1
        self._unacked_bytes -= len(entry.message.body)
        entry.delivery_count += 1
        entry.redelivered = True
        if self._deleted:
            entry.state = SETTLED
            return False
        limit = self.settings.delivery_limit
        if limit is not None and entry.delivery_count > limit:
            self._retire(entry, "delivery_limit")
            return False
        journal = self.journal
        if not self._may_requeue(entry):
            entry.state = SETTLED
            self._forget(entry)
            if journal is not None and entry.message.persistent:
                journal.settled(self, entry.message, REPLACED, None, entry.delivery_count)
            return False
        if journal is not None and entry.message.persistent:
            journal.requeued(entry)
        self._ready += 1
        self._ready_bytes += len(entry.message.body)
        self._put_back(entry)
        if self._limited:
            self._drop_over_limit()
        return True

    def purge(self) -> int:
        """Drop every ready message (not dead-lettered, as RabbitMQ); the number dropped."""
        count = self._ready
        journal = self.journal
        if journal is not None:
            for item in self._ready_items():
                message = item if type(item) is Message else item.message  # type: ignore[union-attr]
                if message.persistent:
                    deliveries = 0 if type(item) is Message else item.delivery_count  # type: ignore[union-attr]
                    journal.settled(self, message, PURGED, None, deliveries)
        self._clear()
        self._ready = self._ready_bytes = 0
        return count

    # -- management: looking at and taking chosen ready messages ---------------------

    def browse(self, select: Callable[[QueueEntry], bool] | None = None,
               limit: int | None = None) -> list[QueueEntry]:
        """Ready messages in delivery order (those ``select`` accepts, at most ``limit``), left in place.

        Generic over the queue kinds: entries are taken from the head as a
        consumer would take them and put back where they were, which the
        storage of every kind preserves.  Without ``select``, only the first
        ``limit`` are touched.
        """
        seen: list[QueueEntry] = []
        chosen: list[QueueEntry] = []
        try:
            while limit is None or len(chosen) < limit:
                entry = self._take()
                if entry is None:
                    break
                seen.append(entry)
                if select is None or select(entry):
                    chosen.append(entry)
        finally:
            for entry in seen:
                self._put_back(entry)
        return chosen

    def remove_ready(self, select: Callable[[QueueEntry], bool],
                     limit: int | None = None) -> list[QueueEntry]:
        """Take the ready messages ``select`` accepts out of the queue (management's move and delete).

        ``select`` may act on the entry (enqueue its message elsewhere) and
        returns whether it leaves this queue.  Entries leave in delivery
        order, at most ``limit`` of them; each persistent one is journaled as
        ``purged``; the others stay where they were.
        """
        kept: list[QueueEntry] = []
        removed: list[QueueEntry] = []
        try:
            while limit is None or len(removed) < limit:
                entry = self._take()
                if entry is None:
                    break
                if select(entry):
                    removed.append(entry)
                else:
                    kept.append(entry)
        finally:
            for entry in kept:
                self._put_back(entry)
        journal = self.journal
        for entry in removed:
            entry.state = SETTLED
            self._ready -= 1
            self._ready_bytes -= len(entry.message.body)
            self._forget(entry)
            if journal is not None and entry.message.persistent:
                journal.settled(self, entry.message, PURGED, None, entry.delivery_count)
        return removed

    def acquire(self, select: Callable[[QueueEntry], bool], limit: int) -> list[QueueEntry]:
        """Acquire up to ``limit`` chosen ready messages as basic.get would (a lease consumer's claim).

        Only messages delivered before can be chosen (a lease consumer claims
        what it was granted once): a standard queue keeps those ahead of the
        never-delivered ones, so the scan stops at the first of these there.
        """
        kept: list[QueueEntry] = []
        taken: list[QueueEntry] = []
        ordered = self.type == "standard"
        try:
            while len(taken) < limit:
                entry = self._take()
                if entry is None:
                    break
                if select(entry):
                    taken.append(entry)
                else:
                    kept.append(entry)
                    if ordered and not entry.delivery_count:
                        break
        finally:
            for entry in kept:
                self._put_back(entry)
        for entry in taken:
            self._ready -= 1
            self._ready_bytes -= len(entry.message.body)
            self._hand_out(entry, False)
        return taken

    def restore(self, message: Message, deliveries: int = 0) -> None:
        """Put back a message recovered from the journal, at the tail (nothing is journaled).

        ``deliveries`` is how often it had been delivered from this queue: a
        delivered message comes back marked redelivered.
        """
        self._ready += 1
        self._ready_bytes += len(message.body)
        if message.expires_at is not None and not self._timed:
            self._become_timed()
        if deliveries:
            entry = self._new_entry(message)
            entry.delivery_count = deliveries
            entry.redelivered = True
            self._put_back(entry)
        else:
            self._store(message)

    # -- lifetime and deadlines --------------------------------------------------

    def touch(self) -> None:
        """Note a use (redeclare) for x-expires."""
        self._last_used = self._clock()

    def delete(self) -> int:
        """Drop everything and tell consumers (broker-side cancel); the ready count dropped.

        Called by the Namespace; a deleted queue refuses enqueues and ignores releases.
        """
        if self._deleted:
            return 0
        count = self._ready
        self._deleted = True
        if self.journal is not None:
            self.journal.queue_deleted(self)
        consumers, self._consumers = self._consumers + self._watchers, []
        self._watchers = []
        self._clear()
        self._ready = self._ready_bytes = 0
        # each consumer's own code, on its own connection: one failing closes only that one
        notify_each(consumers, lambda consumer: consumer.queue_deleted(self), "queue deletion")
        return count

    def watch(self, watcher: Consumer) -> None:
        """Tell ``watcher`` (``queue_deleted``) when the queue is deleted; it takes no messages."""
        self._watchers.append(watcher)

    def unwatch(self, watcher: Consumer) -> None:
        if watcher in self._watchers:
            self._watchers.remove(watcher)

    def next_deadline(self) -> float | None:
        """The earliest time :meth:`run_due` has work: a head message's expiry or queue expiry."""
        if self._deleted:
            return None
        deadline = self._head_expiry()
        expires = self.settings.expires
        if expires is not None and not self._consumers:
            idle = self._last_used + expires / 1000.0
            if deadline is None or idle < deadline:
                deadline = idle
        return deadline

    def run_due(self, now: float) -> bool:
        """Expire head messages due by ``now``; True when the queue itself has expired (x-expires)."""
        if self._deleted:
            return False
        self._expire_heads(now)
        expires = self.settings.expires
        return (expires is not None and not self._consumers
                and now >= self._last_used + expires / 1000.0)

    def _expiry(self, message: Message) -> float | None:
        """When ``message`` expires in this queue: the smaller of queue TTL and its own expiration."""
        expires_at = message.expires_at
        ttl = self._ttl
        if ttl is not None:
            by_queue = message.arrival + ttl
            if expires_at is None or by_queue < expires_at:
                return by_queue
        return expires_at

    def _head_expiry(self) -> float | None:
        head = self._peek()
        if head is None:
            return None
        return self._expiry(head if type(head) is Message else head.message)  # type: ignore[union-attr]

    def _expire_heads(self, now: float) -> None:
        while self._ready:
            head = self._peek()
            if head is None:
                return
            expiry = self._expiry(head if type(head) is Message else head.message)  # type: ignore[union-attr]
            if expiry is None or expiry > now:
                return
            entry = self._take()
            if entry is None:
                return
            self._remove(entry, "expired")

    def _become_timed(self) -> None:
        self._timed = True
        if self._host is not None:
            self._host.queue_timed(self)

    # -- leaving the queue -----------------------------------------------------------

    def _remove(self, entry: QueueEntry, reason: str) -> None:
        """Take a just-taken ready ``entry`` out of the counts and retire it."""
        self._ready -= 1
        self._ready_bytes -= len(entry.message.body)
        self._retire(entry, reason)

    def _retire(self, entry: QueueEntry, reason: str, deliveries: int | None = None) -> None:
        """``entry`` leaves for ``reason`` (dead-lettered when there is a DLX).

        ``deliveries`` defaults to the entry's count (right for an entry not out with a consumer).
        """
        entry.state = SETTLED
        self._forget(entry)
        self._discard(entry.message, reason, entry.delivery_count if deliveries is None else deliveries)

    def _discard(self, message: Message, reason: str, deliveries: int) -> None:
        journal = self.journal
        if journal is not None and message.persistent:
            journal.settled(self, message, settle_outcome(reason, self.settings.dead_letter_exchange),
                            reason, deliveries)
        self._dead_letter(message, reason)

    def _dead_letter(self, message: Message, reason: str) -> None:
        if self._host is not None and self.settings.dead_letter_exchange is not None:
            self._host.dead_letter(self, message, reason)

    # -- storage (overridden by the other queue kinds) ---------------------------------

    def _new_entry(self, message: Message) -> QueueEntry:
        """An entry for a message going straight to a consumer (storage is empty)."""
        entry = QueueEntry(message, self, self._taken)
        self._taken += 1
        return entry

    def _store(self, message: Message) -> None:
        self._fresh.append(message)

    def _take(self) -> QueueEntry | None:
        returned = self._returned
        if returned:
            return heappop(returned)
        fresh = self._fresh
        if fresh:
            entry = QueueEntry(fresh.popleft(), self, self._taken)
            self._taken += 1
            return entry
        return None

    def _put_back(self, entry: QueueEntry) -> None:
        entry.state = AVAILABLE
        heappush(self._returned, entry)

    def _peek(self) -> Message | QueueEntry | None:
        if self._returned:
            return self._returned[0]
        if self._fresh:
            return self._fresh[0]
        return None

    def _ready_items(self) -> Iterable[Message | QueueEntry]:
        """Everything ready in storage (to journal a purge)."""
        return [*self._returned, *self._fresh]

    def _clear(self) -> None:
        self._fresh.clear()
        for entry in self._returned:
            entry.state = SETTLED
        self._returned.clear()

    def _may_requeue(self, entry: QueueEntry) -> bool:
        return True

    def _forget(self, entry: QueueEntry) -> None:
        """Hook: ``entry`` has left the queue for good."""

    def to_record(self) -> dict[str, Any]:
        """The JSON-able record a durable configuration store keeps for this queue."""
        return {"object": "queue", "name": self.name, "type": self.type, "durable": self.durable,
                "auto_delete": self.auto_delete, "arguments": to_json_value(self.arguments)}

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} {self.name!r} vhost={self.vhost!r} ready={self._ready} "
                f"unacked={self._unacked} consumers={len(self._consumers)}>")
