"""A queue's consumers and how it hands them messages.

Consumers are served round-robin; one whose ``can_deliver`` says no is
skipped.  With consumer priorities (RabbitMQ's ``x-priority``) the
highest-priority consumer with credit wins, round-robin among equals.  With
single-active-consumer only the first registered consumer receives messages,
and the next one takes over when it goes.  ``add_consumer`` does not deliver:
the engine announces the consumer (basic.consume-ok) and then calls
:meth:`ConsumerDispatch.dispatch`, as it does whenever credit returns.

A consumer may carry a message selector (its ``selector`` attribute, a
:class:`~broker.messaging.selectors.Selector`, as Broker-J's consumer
filters): it is offered only the messages the selector matches, and a message
no consumer matches stays in the queue while later ones go past it.  While no
consumer of the queue has a selector, dispatch takes the head and stops at the
first message nobody can take.  With selectors, it looks past messages that
the consumers with credit do not match (putting them back where they were)
and stops only when no consumer has credit.  The price is a scan of those
unmatched messages whenever dispatch runs (Broker-J keeps a cursor per
consumer instead): a queue where messages nobody selects pile up should get a
consumer for them, or a TTL.

:class:`ConsumerDispatch` is that part of :class:`~broker.messaging.queue.Queue`;
its state lives in the queue's slots.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator, cast

from broker.errors import AccessRefused
from broker.messaging.consumer_faults import ConsumerFailed, consumer_failed
from broker.messaging.journal import ACKED, MessageJournal
from broker.messaging.message import Message
from broker.messaging.queue_entry import ACQUIRED, SETTLED, Consumer, QueueEntry, QueueHost
from broker.messaging.selectors import Selector

if TYPE_CHECKING:
    from broker.messaging.queue import Queue

__all__ = ["ConsumerDispatch", "DELIVERED"]

# What offering an entry to selective consumers came to
DELIVERED, _UNMATCHED, _NO_CREDIT = 0, 1, 2


def _selector(consumer: Consumer) -> Selector | None:
    return getattr(consumer, "selector", None)


def _priority_groups(consumers: list[Consumer]) -> Iterator[tuple[int, int, int]]:
    """(priority, first index, size) of each run of equal priority, highest first."""
    count = len(consumers)
    start = 0
    while start < count:
        priority = getattr(consumers[start], "priority", 0)
        end = start + 1
        while end < count and getattr(consumers[end], "priority", 0) == priority:
            end += 1
        yield priority, start, end - start
        start = end


class ConsumerDispatch:
    """Registering consumers and delivering ready messages to them (a base of the queue)."""

    # The state is in the queue's slots.  No slots here at runtime keeps the
    # queue free of a __dict__; mypy, seeing none, lets these methods assign
    # the attributes annotated below.
    if not TYPE_CHECKING:
        __slots__ = ()

    name: str
    vhost: str
    auto_delete: bool
    journal: MessageJournal | None
    delivered_messages: int
    delivered_bytes: int
    _clock: Callable[[], float]
    _host: QueueHost | None
    _consumers: list[Consumer]
    _next_consumer: int
    _prioritised: bool
    _filtered: bool
    _priority_cursor: dict[int, int]
    _exclusive_consumer: bool
    _sac: bool
    _ready: int
    _ready_bytes: int
    _unacked: int
    _unacked_bytes: int
    _dispatching: bool
    _deleted: bool
    _timed: bool
    _last_used: float

    if TYPE_CHECKING:  # the queue's own storage and retirement
        def _take(self) -> QueueEntry | None: ...
        def _put_back(self, entry: QueueEntry) -> None: ...
        def _expiry(self, message: Message) -> float | None: ...
        def _retire(self, entry: QueueEntry, reason: str, deliveries: int | None = None) -> None: ...
        def _forget(self, entry: QueueEntry) -> None: ...

    @property
    def consumer_count(self) -> int:
        return len(self._consumers)

    @property
    def consumers(self) -> tuple[Consumer, ...]:
        return tuple(self._consumers)

    def add_consumer(self, consumer: Consumer, exclusive: bool = False) -> None:
        """Register ``consumer``; call :meth:`dispatch` once the engine has announced it.

        Raises AccessRefused when an exclusive consumer is present, or when
        ``exclusive`` is asked for while any consumer is.
        """
        if self._exclusive_consumer or (exclusive and self._consumers):
            raise AccessRefused(f"queue '{self.name}' in vhost '{self.vhost}' in exclusive use")
        # RabbitMQ's consumer priorities (x-priority): consumers are kept highest
        # priority first, a newcomer after those of its own priority
        priority = getattr(consumer, "priority", 0)
        consumers = self._consumers
        index = len(consumers)
        while index and getattr(consumers[index - 1], "priority", 0) < priority:
            index -= 1
        consumers.insert(index, consumer)
        if index < self._next_consumer:
            self._next_consumer += 1
        self._prioritised = any(getattr(c, "priority", 0) for c in consumers)
        self._filtered = any(_selector(c) is not None for c in consumers)
        self._exclusive_consumer = exclusive

    def remove_consumer(self, consumer: Consumer) -> None:
        """Unregister ``consumer`` (its unacked entries stay acquired until the engine releases them).

        The last consumer of an auto-delete queue going deletes the queue.
        """
        consumers = self._consumers
        for index, candidate in enumerate(consumers):
            if candidate is consumer:
                break
        else:
            return
        del consumers[index]
        if index < self._next_consumer:
            self._next_consumer -= 1
        self._prioritised = any(getattr(c, "priority", 0) for c in consumers)
        self._filtered = any(_selector(c) is not None for c in consumers)
        self._exclusive_consumer = False
        if consumers:
            self.dispatch()  # with single-active-consumer, the next one takes over
            return
        self._last_used = self._clock()
        if self.auto_delete and self._host is not None:
            self._host.queue_unused(cast("Queue", self))

    def dispatch(self) -> None:
        """Deliver ready messages to consumers for as long as one of them has credit."""
        consumers = self._consumers
        if not consumers or not self._ready or self._dispatching or self._deleted:
            return
        passed: list[QueueEntry] = []     # entries no consumer with credit selects, put back at the end
        self._dispatching = True
        try:
            while True:
                try:
                    self._deliver_ready(consumers, self._filtered, passed)
                    break
                except ConsumerFailed as failure:   # that consumer's fault: the others go on
                    consumer_failed(cast("Queue", self), failure)
        finally:
            for entry in passed:
                self._put_back(entry)
            self._dispatching = False

    def _deliver_ready(self, consumers: list[Consumer], selective: bool, passed: list[QueueEntry]) -> None:
        """The loop of :meth:`dispatch` (a consumer's failure leaves it as ConsumerFailed)."""
        now = self._clock() if self._timed else None
        while self._ready and consumers and not self._deleted:
            entry = self._take()
            if entry is None:
                break
            message = entry.message
            self._ready -= 1
            self._ready_bytes -= len(message.body)
            if now is not None:
                expiry = self._expiry(message)
                if expiry is not None and expiry <= now:
                    self._retire(entry, "expired")
                    continue
            if selective:
                outcome = self._offer_selective(entry, consumers)
                if outcome == DELIVERED:
                    continue
                self._ready += 1
                self._ready_bytes += len(message.body)
                passed.append(entry)
                if outcome == _NO_CREDIT:
                    break
            elif not self._offer(entry, consumers):
                self._ready += 1
                self._ready_bytes += len(message.body)
                self._put_back(entry)
                break

    def _wanted(self, message: Message) -> bool:
        """Some consumer would take ``message`` (a selective queue's arrival behind others)."""
        for consumer in self._consumers:
            selector = _selector(consumer)
            if selector is None or selector.matches(message):
                return True
        return False

    def _offer_selective(self, entry: QueueEntry, consumers: list[Consumer]) -> int:
        """Hand ``entry`` to the next consumer with credit whose selector matches it.

        The order is the usual one (single active consumer; priorities with
        round-robin among equals; round-robin).  The outcome says whether it
        was delivered, or else whether any consumer had credit for it.
        """
        message = entry.message
        credit = False
        for index in self._offer_order(consumers):
            consumer = consumers[index]
            try:
                if not consumer.can_deliver(entry):
                    continue
                credit = True
                selector = _selector(consumer)
                if selector is not None and not selector.matches(
                        message, redelivered=entry.redelivered, delivery_count=entry.delivery_count):
                    continue
                entry.state = ACQUIRED      # out with the consumer; counted once delivered
                consumer.deliver(entry)
            except Exception as exc:
                raise ConsumerFailed(consumer, entry, exc) from exc
            self._advance_past(index, consumers)
            self._hand_out(entry, consumer.no_ack)
            return DELIVERED
        return _UNMATCHED if credit else _NO_CREDIT

    def _offer_order(self, consumers: list[Consumer]) -> list[int]:
        """Indices of ``consumers`` in the order an entry is offered to them."""
        count = len(consumers)
        if self._sac:
            return [0] if count else []
        if not self._prioritised:
            start = self._next_consumer
            return [(start + step) % count for step in range(count)]
        order: list[int] = []
        for priority, start, size in _priority_groups(consumers):
            cursor = self._priority_cursor.get(priority, 0) % size
            order.extend(start + (cursor + step) % size for step in range(size))
        return order

    def _advance_past(self, index: int, consumers: list[Consumer]) -> None:
        """Round-robin: the consumer after ``index`` (among its priority's) is offered next."""
        if self._sac:
            return
        if not self._prioritised:
            self._next_consumer = index + 1
            return
        for priority, start, size in _priority_groups(consumers):
            if start <= index < start + size:
                self._priority_cursor[priority] = (index - start + 1) % size
                return

    def _offer(self, entry: QueueEntry, consumers: list[Consumer]) -> bool:
        """Hand ``entry`` to the next consumer able to take it; False when none can.

        The consumer's own code (``can_deliver``, ``deliver``) raising comes out as
        :class:`ConsumerFailed`, with ``entry`` not handed out: it is delivered (marked
        acquired) first, then counted as out with the consumer (or settled, for no-ack).
        """
        count = len(consumers)
        consumer = consumers[0] if count else None
        try:
            if count == 1 or self._sac:
                if consumer is None or not consumer.can_deliver(entry):
                    return False
            elif self._prioritised:
                consumer = self._by_priority(entry, consumers)
                if consumer is None:
                    return False
            else:
                start = self._next_consumer
                for step in range(count):
                    index = (start + step) % count
                    consumer = consumers[index]
                    if consumer.can_deliver(entry):
                        self._next_consumer = index + 1
                        break
                else:
                    return False
            entry.state = ACQUIRED          # out with the consumer; counted once delivered
            consumer.deliver(entry)
        except ConsumerFailed:
            raise
        except Exception as exc:
            raise ConsumerFailed(cast(Consumer, consumer), entry, exc) from exc
        # what _hand_out does, inlined: every message a consumer takes at once comes here
        size = len(entry.message.body)
        if consumer.no_ack:
            entry.state = SETTLED
            self._forget(entry)
        else:
            entry.state = ACQUIRED
            self._unacked += 1
            self._unacked_bytes += size
        self.delivered_messages += 1
        self.delivered_bytes += size
        if self.journal is not None and entry.message.persistent:
            self._journal_taken(entry)
        return True

    def _hand_out(self, entry: QueueEntry, no_ack: bool) -> None:
        """``entry`` goes to a consumer or basic.get: acquired, or settled at once when ``no_ack``."""
        if no_ack:
            entry.state = SETTLED
            self._forget(entry)
        else:
            entry.state = ACQUIRED
            self._unacked += 1
            self._unacked_bytes += len(entry.message.body)
        self.delivered_messages += 1
        self.delivered_bytes += len(entry.message.body)
        if self.journal is not None and entry.message.persistent:
            self._journal_taken(entry)

    def _journal_taken(self, entry: QueueEntry) -> None:
        """Journal a delivery: settled at once for no-ack, else delivered."""
        journal = self.journal
        assert journal is not None
        if entry.state == SETTLED:
            journal.settled(cast("Queue", self), entry.message, ACKED, None, entry.delivery_count + 1)
        else:
            journal.delivered(entry)

    def _by_priority(self, entry: QueueEntry, consumers: list[Consumer]) -> Consumer | None:
        """The highest-priority consumer with credit; round-robin among equals (RabbitMQ)."""
        for priority, start, size in _priority_groups(consumers):
            cursor = self._priority_cursor.get(priority, 0) % size
            for step in range(size):
                index = start + (cursor + step) % size
                consumer = consumers[index]
                try:
                    deliverable = consumer.can_deliver(entry)
                except Exception as exc:
                    raise ConsumerFailed(consumer, entry, exc) from exc
                if deliverable:
                    self._priority_cursor[priority] = (cursor + step + 1) % size
                    return consumer
        return None
