"""The exchanges, queues and bindings of one virtual host, with RabbitMQ's rules.

:class:`Namespace` is what protocol engines talk to for every declare, bind,
delete and publish.  It validates like RabbitMQ and words its errors the same
way (``NOT_FOUND - no queue 'q' in vhost 'v'``, ``PRECONDITION_FAILED -
inequivalent arg 'durable' ...``), follows exchange-to-exchange bindings and
alternate exchanges when routing, republishes dead letters, and drives time:
it holds no timers, a caller asks :meth:`Namespace.next_deadline` and calls
:meth:`Namespace.run_due` then (message TTL, x-expires).

Durable objects are reported to :attr:`Namespace.listeners` as they are
created and deleted, each with a JSON-able ``to_record()``;
:meth:`Namespace.restore` rebuilds them from those records after a restart.
A change is stored *before* it is made: when the store fails (disk full,
read-only), a declare, bind, unbind or delete asked for by a client is
refused with :class:`~broker.errors.StoreFailed` and changes nothing.  A
deletion the broker makes on its own (auto-delete, x-expires, a cascade) is
made anyway; its object may come back after a restart.  The store's failing
and recovering are logged once each.

A store that commits in the background (a listener with ``submit``, such as
the Delta configuration store's writer thread) is used through
:meth:`Namespace.when_stored`: the operation runs up to the point where a
durable change must be stored, the change is handed to the store, and the
operation runs again -- from the start, against the namespace as it is then
-- once the store has it; so the event loop never waits for a commit, and a
change still takes effect only once stored.  Changes of one object (a queue,
an exchange, a binding) are stored one after the other: an operation that
meets an object whose change is in flight waits for it, then runs again.
"""

from __future__ import annotations

import logging
import secrets
import time
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, NoReturn, Protocol, Sequence, TypeVar, Union, cast

from broker.errors import (AccessRefused, BrokerError, CommandInvalid, NotAllowed, NotFound,
                           PreconditionFailed, ResourceLocked, StoreFailed)
from broker.messaging.arguments import (
    EQUIVALENCE_CHECKED_EXCHANGE_ARGS, EQUIVALENCE_CHECKED_QUEUE_ARGS, EXCHANGE_ARGUMENTS, QUEUE_ARGUMENTS,
    UnknownArguments, describe_value, inequivalent_argument, queue_settings, required_alternate_of,
    unknown_arguments)
from broker.messaging.exchange import EXCHANGE_TYPES, Binding, DirectExchange, Exchange
from broker.messaging.flow_control import QueueFlowControl
from broker.messaging.journal import MessageJournal
from broker.messaging.paged_queue import start_paging
from broker.messaging.last_value_queue import LastValueQueue
from broker.messaging.leases import Leases
from broker.messaging.link_registry import LinkRegistry
from broker.messaging.stored_changes import StoredOperations
from broker.messaging.message import Message
from broker.messaging.priority_queue import PriorityQueue
from broker.messaging.producer_sequences import ProducerSequences
from broker.messaging.queue import Queue, QueueHost
from broker.messaging.records import from_json_value
from broker.messaging.routing import Routing
from broker.messaging.selectors import SelectorError
from broker.messaging.sorted_queue import SortedQueue

log = logging.getLogger(__name__)

__all__ = ["Namespace", "NamespaceListener", "create_queue", "STANDARD_EXCHANGES", "MAX_NAME_BYTES"]

#: AMQP 0-9-1 names are short strings.
MAX_NAME_BYTES = 255

#: The exchanges every virtual host has (AMQP 0-9-1 section 3.1.3; amq.match is amq.headers' twin).
STANDARD_EXCHANGES: tuple[tuple[str, str], ...] = (
    ("amq.direct", "direct"), ("amq.fanout", "fanout"), ("amq.topic", "topic"),
    ("amq.headers", "headers"), ("amq.match", "headers"))

_QUEUE_CLASSES: dict[str, type[Queue]] = {
    "standard": Queue, "priority": PriorityQueue, "lvq": LastValueQueue, "sorted": SortedQueue}

_DEFAULT_EXCHANGE_REFUSAL = "operation not permitted on the default exchange"

DurableObject = Union[Exchange, Queue, Binding]
T = TypeVar("T")

log = logging.getLogger(__name__)


def create_queue(name: str, *, vhost: str = "", durable: bool = False, auto_delete: bool = False,
                 exclusive_owner: object | None = None, arguments: dict[str, Any] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 host: QueueHost | None = None, journal: MessageJournal | None = None) -> Queue:
    """A queue of the kind its ``arguments`` ask for (standard, priority, last-value, sorted)."""
    settings = queue_settings(arguments, name, vhost)
    cls = _QUEUE_CLASSES[settings.kind]
    queue = cls(name, vhost=vhost, durable=durable, auto_delete=auto_delete,
                exclusive_owner=exclusive_owner, arguments=arguments, settings=settings,
                clock=clock, host=host, journal=journal)
    if settings.lazy:                      # x-queue-mode lazy: pages when it can (flow to disk)
        start_paging(queue, lazy=True)
    return queue


class NamespaceListener(Protocol):
    """Told when a durable exchange, queue or binding is created or deleted (the config journal)."""

    def object_created(self, obj: DurableObject) -> None: ...

    def object_deleted(self, obj: DurableObject) -> None: ...


def _describe(obj: DurableObject) -> str:
    if isinstance(obj, Binding):
        return (f"binding of '{obj.destination.name}' to exchange '{obj.source.name}'"
                f" with key '{obj.routing_key}'")
    return f"{'queue' if isinstance(obj, Queue) else 'exchange'} '{obj.name}'"


def _flag(value: bool) -> str:
    return "true" if value else "false"


class Namespace(Routing):
    """One virtual host's exchanges, queues and bindings."""

    def __init__(self, vhost_name: str, clock: Callable[[], float] = time.monotonic, *,
                 wall_clock: Callable[[], float] = time.time) -> None:
        """``clock`` (monotonic seconds) times TTL and expiry; ``wall_clock`` stamps x-death."""
        self.vhost_name = vhost_name
        self.listeners: list[NamespaceListener] = []      # told of durable objects (to store them)
        self.observers: list[NamespaceListener] = []      # told of every object (the model's views)
        # RabbitMQ direct reply-to: token -> the requesting channel's reply consumer
        self.reply_targets: dict[str, Any] = {}
        #: the broker clock (monotonic seconds): engines stamp Message.arrival with it
        self.clock = clock
        #: where durable queues journal persistent messages (None: nothing is journaled)
        self.journal: MessageJournal | None = None
        #: each producer's last committed sequence (exactly-once publishing; the journal restores it)
        self.producers = ProducerSequences()
        #: what a declare with arguments nobody reads gets: ignored (RabbitMQ), logged, or refused (Broker-J)
        self.unknown_arguments: UnknownArguments = "IGNORE"
        self._logged_unknown: set[str] = set()
        self._wall_clock = wall_clock
        #: operations whose changes a background store keeps (:meth:`when_stored`)
        self._stored_operations = StoredOperations(self)
        self._queues: dict[str, Queue] = {}
        self._timed: set[Queue] = set()
        #: consumers that take messages by grant, under a lease (Spark jobs)
        self.leases = Leases(clock)
        #: statistics for management: messages (and body bytes) published into this virtual host
        self.published_messages = 0
        self.published_bytes = 0
        self._restoring = False
        #: why the last store write failed, until one succeeds again (None: they succeed)
        self.store_failure: BaseException | None = None
        self.default_exchange: Exchange = DirectExchange("", vhost=vhost_name, durable=True)
        self._exchanges: dict[str, Exchange] = {"": self.default_exchange}
        for name, kind in STANDARD_EXCHANGES:
            self._exchanges[name] = EXCHANGE_TYPES[kind](name, vhost=vhost_name, durable=True)
        #: AMQP 1.0 links and their termini (the virtual host gives it its store on open)
        self.links = LinkRegistry(self, wall_clock=wall_clock)
        #: queues with producer flow control and the publishers they block
        self.flow = QueueFlowControl(vhost_name, clock=clock)

    @property
    def queues(self) -> Mapping[str, Queue]:
        return MappingProxyType(self._queues)

    @property
    def exchanges(self) -> Mapping[str, Exchange]:
        return MappingProxyType(self._exchanges)

    # -- lookups -----------------------------------------------------------------------

    def exchange(self, name: str) -> Exchange:
        exchange = self._exchanges.get(name)
        if exchange is None:
            raise NotFound(f"no exchange '{name}' in vhost '{self.vhost_name}'")
        return exchange

    def queue(self, name: str, owner: object | None = None) -> Queue:
        """The queue ``name``; ResourceLocked when it is exclusive to an owner other than ``owner``."""
        queue = self._queues.get(name)
        if queue is None:
            raise NotFound(f"no queue '{name}' in vhost '{self.vhost_name}'")
        self._check_access(queue, owner)
        return queue

    def _check_access(self, queue: Queue, owner: object | None) -> None:
        if queue.exclusive_owner is not None and queue.exclusive_owner != owner:
            self._locked(queue)

    def _locked(self, queue: Queue) -> NoReturn:
        raise ResourceLocked(
                f"cannot obtain exclusive access to locked queue '{queue.name}' in vhost "
                f"'{self.vhost_name}'. It could be originally declared on another connection or "
                f"the exclusive property value does not match that of the original declaration.")

    def _check_length(self, kind: str, name: str) -> None:
        size = len(name.encode("utf-8"))
        if size > MAX_NAME_BYTES:
            raise PreconditionFailed(
                f"{kind} name '{name[:40]}...' in vhost '{self.vhost_name}' is {size} bytes long; "
                f"at most {MAX_NAME_BYTES} are allowed")

    def _inequivalent(self, kind: str, name: str, field: str, received: str, current: str) -> PreconditionFailed:
        return PreconditionFailed(
            f"inequivalent arg '{field}' for {kind} '{name}' in vhost '{self.vhost_name}': "
            f"received {received} but current is {current}")

    # -- exchanges --------------------------------------------------------------------

    def declare_exchange(self, name: str, type: str, *, passive: bool = False,
                         durable: bool = False, auto_delete: bool = False, internal: bool = False,
                         arguments: dict[str, Any] | None = None) -> Exchange:
        self._check_length("exchange", name)
        if passive:
            return self.exchange(name)
        if not name:
            raise AccessRefused(_DEFAULT_EXCHANGE_REFUSAL)
        if name.startswith("amq."):
            raise AccessRefused(f"exchange name '{name}' contains reserved prefix 'amq.*'")
        cls = EXCHANGE_TYPES.get(type)
        if cls is None:
            raise CommandInvalid(f"invalid exchange type '{type}'")
        existing = self._exchanges.get(name)
        if existing is not None:
            self._check_exchange_equivalence(existing, type, durable, auto_delete, internal, arguments)
            return existing
        self._check_arguments("exchange", name, arguments, EXCHANGE_ARGUMENTS)
        exchange = cls(name, vhost=self.vhost_name, durable=durable, auto_delete=auto_delete,
                       internal=internal, arguments=arguments)
        self._store_created(exchange)
        self._exchanges[name] = exchange
        self._created(exchange)
        return exchange

    def _check_exchange_equivalence(self, exchange: Exchange, type: str, durable: bool,
                                    auto_delete: bool, internal: bool,
                                    arguments: dict[str, Any] | None) -> None:
        if exchange.type != type:
            raise self._inequivalent("exchange", exchange.name, "type", f"'{type}'", f"'{exchange.type}'")
        self._check_equivalence("exchange", exchange.name,
                                (("durable", durable, exchange.durable),
                                 ("auto_delete", auto_delete, exchange.auto_delete),
                                 ("internal", internal, exchange.internal)),
                                exchange.arguments, arguments, EQUIVALENCE_CHECKED_EXCHANGE_ARGS)

    def _check_equivalence(self, kind: str, name: str, flags: tuple[tuple[str, bool, bool], ...],
                           current: dict[str, Any] | None, arguments: dict[str, Any] | None,
                           checked: frozenset[str]) -> None:
        """The first flag ``(field, received, current)`` or checked argument that differs fails."""
        for field, received, now in flags:
            if received != now:
                raise self._inequivalent(kind, name, field, f"'{_flag(received)}'", f"'{_flag(now)}'")
        differs = inequivalent_argument(current, arguments, checked)
        if differs is not None:
            key, theirs, mine = differs
            raise self._inequivalent(kind, name, key, describe_value(theirs), describe_value(mine))

    def _check_arguments(self, kind: str, name: str, arguments: dict[str, Any] | None,
                         known: frozenset[str]) -> None:
        """Unknown arguments per :attr:`unknown_arguments`; a Broker-J-spelt alternate must exist."""
        if arguments:
            unknown = unknown_arguments(arguments, known)
            if unknown and self.unknown_arguments == "FAIL":
                names = ", ".join(f"'{key}'" for key in unknown)
                raise PreconditionFailed(f"unknown argument(s) {names} for {kind} '{name}' in vhost"
                                         f" '{self.vhost_name}'")
            if unknown and self.unknown_arguments == "LOG" and not self._logged_unknown.issuperset(unknown):
                self._logged_unknown.update(unknown)       # once per argument name
                log.warning("ignoring unknown argument(s) %s declaring %s '%s' in vhost '%s'",
                            ", ".join(unknown), kind, name, self.vhost_name)
        alternate = required_alternate_of(arguments)
        if alternate is not None and alternate not in self._exchanges and alternate != name:
            raise NotFound(f"unknown alternate exchange '{alternate}' for {kind} '{name}'"
                           f" in vhost '{self.vhost_name}'")

    def _named_as_alternate(self, exchange_name: str) -> str | None:
        """Which exchange or queue names ``exchange_name`` as its alternate (Broker-J spelling)."""
        for exchange in self._exchanges.values():
            if exchange.name != exchange_name and required_alternate_of(exchange.arguments) == exchange_name:
                return f"exchange '{exchange.name}'"
        for queue in self._queues.values():
            if required_alternate_of(queue.arguments) == exchange_name:
                return f"queue '{queue.name}'"
        return None

    def delete_exchange(self, name: str, *, if_unused: bool = False) -> None:
        """Delete ``name`` (deleting a missing exchange succeeds, as in RabbitMQ).

        An exchange that an exchange or queue names as its alternate with
        Broker-J's spelling cannot go (530 NOT_ALLOWED, as Broker-J)."""
        if not name:
            raise AccessRefused(_DEFAULT_EXCHANGE_REFUSAL)
        if name.startswith("amq."):
            raise AccessRefused(f"exchange name '{name}' contains reserved prefix 'amq.*'")
        exchange = self._exchanges.get(name)
        if exchange is None:
            return
        if if_unused and exchange.bindings:
            raise PreconditionFailed(f"exchange '{name}' in vhost '{self.vhost_name}' in use")
        user = self._named_as_alternate(name)
        if user is not None:
            raise NotAllowed(f"exchange '{name}' in vhost '{self.vhost_name}' is the alternate exchange"
                             f" of {user}")
        self._delete_exchange(exchange, refuse=True)

    def _delete_exchange(self, exchange: Exchange, *, refuse: bool = False) -> None:
        if self._exchanges.get(exchange.name) is not exchange:
            return
        self._store_deleted(exchange, refuse)
        del self._exchanges[exchange.name]
        exchange.deleted = True
        for binding in list(exchange.bindings.values()):
            self._remove_binding(binding)
        for binding in list(exchange.bindings_in):
            self._remove_binding(binding)
        self._deleted(exchange)

    # -- queues -------------------------------------------------------------------------

    def declare_queue(self, name: str, *, passive: bool = False, durable: bool = False,
                      exclusive_owner: object | None = None, auto_delete: bool = False,
                      arguments: dict[str, Any] | None = None,
                      owner: object | None = None) -> tuple[Queue, int, int]:
        """Declare (or check) a queue: ``(queue, message_count, consumer_count)``.

        ``exclusive_owner`` makes the queue exclusive to that owner (a
        connection).  Exclusivity is checked as RabbitMQ does:

        - a non-passive declare must match the queue's exclusivity exactly (same
          owner, or both non-exclusive), else ResourceLocked -- so a connection
          redeclaring its own exclusive queue without ``exclusive`` is refused too;
        - a passive declare of an exclusive queue must come from its owner:
          ``owner`` (the declaring connection; defaults to ``exclusive_owner``).
          Engines should always pass it; when neither is given the caller is
          unknown and the check is skipped.
        """
        if passive:
            requester = owner if owner is not None else exclusive_owner
            queue = self._queues.get(name)
            if queue is None:
                raise NotFound(f"no queue '{name}' in vhost '{self.vhost_name}'")
            if requester is not None:
                self._check_access(queue, requester)
            queue.touch()
            return queue, queue.message_count + queue.held_count, queue.consumer_count
        if not name:
            name = self._server_name()
        else:
            self._check_length("queue", name)
            if name.startswith("amq."):
                raise AccessRefused(f"queue name '{name}' contains reserved prefix 'amq.*'")
        existing = self._queues.get(name)
        if existing is not None:
            if existing.exclusive_owner != exclusive_owner:
                self._locked(existing)
            self._check_queue_equivalence(existing, durable, auto_delete, arguments)
            existing.touch()
            return existing, existing.message_count + existing.held_count, existing.consumer_count
        self._check_arguments("queue", name, arguments, QUEUE_ARGUMENTS)
        journal = self.journal if durable and exclusive_owner is None else None
        queue = create_queue(name, vhost=self.vhost_name, durable=durable, auto_delete=auto_delete,
                             exclusive_owner=exclusive_owner, arguments=arguments,
                             clock=self.clock, host=self, journal=journal)
        self._add_queue(queue)
        return queue, 0, 0

    def _server_name(self) -> str:
        while True:
            name = "amq.gen-" + secrets.token_urlsafe(16)
            if name not in self._queues:
                return name

    def _add_queue(self, queue: Queue) -> None:
        self._store_created(queue)
        self._queues[queue.name] = queue
        if queue.timed:
            self._timed.add(queue)
        self.flow.queue_added(queue)
        self._created(queue)

    def _check_queue_equivalence(self, queue: Queue, durable: bool, auto_delete: bool,
                                 arguments: dict[str, Any] | None) -> None:
        self._check_equivalence("queue", queue.name,
                                (("durable", durable, queue.durable),
                                 ("auto_delete", auto_delete, queue.auto_delete)),
                                queue.arguments, arguments, EQUIVALENCE_CHECKED_QUEUE_ARGS)

    def delete_queue(self, name: str, *, if_unused: bool = False, if_empty: bool = False,
                     owner: object | None = None) -> int:
        """Delete ``name``; the number of ready messages dropped (0 for a missing queue)."""
        queue = self._queues.get(name)
        if queue is None:
            return 0
        self._check_access(queue, owner)
        if if_unused and queue.consumer_count:
            raise PreconditionFailed(f"queue '{name}' in vhost '{self.vhost_name}' in use")
        if if_empty and queue.message_count:
            raise PreconditionFailed(f"queue '{name}' in vhost '{self.vhost_name}' not empty")
        return self._delete_queue(queue, refuse=True)

    def _delete_queue(self, queue: Queue, *, refuse: bool = False) -> int:
        if self._queues.get(queue.name) is not queue:
            return 0
        self._store_deleted(queue, refuse)
        del self._queues[queue.name]
        self._timed.discard(queue)
        self.flow.queue_deleted(queue)
        for binding in list(queue.bindings):
            self._remove_binding(binding)
        count = queue.delete()
        self._deleted(queue)
        return count

    def owner_closed(self, owner: object) -> None:
        """The connection ``owner`` closed: delete its exclusive queues."""
        for queue in [q for q in self._queues.values()
                      if q.exclusive_owner is not None and q.exclusive_owner == owner]:
            self._delete_queue(queue)

    # -- bindings -----------------------------------------------------------------------

    def bind_queue(self, queue_name: str, exchange_name: str, routing_key: str,
                   arguments: dict[str, Any] | None = None, owner: object | None = None) -> None:
        if not exchange_name:
            raise AccessRefused(_DEFAULT_EXCHANGE_REFUSAL)
        queue = self.queue(queue_name, owner)
        exchange = self.exchange(exchange_name)
        binding = Binding(exchange, queue, routing_key, arguments)
        if exchange.add_binding(binding):
            self._store_added_binding(binding)
            queue.bindings.add(binding)
            self._created(binding)

    def unbind_queue(self, queue_name: str, exchange_name: str, routing_key: str,
                     arguments: dict[str, Any] | None = None, owner: object | None = None) -> None:
        """Remove a binding; removing one that does not exist succeeds, and so does
        removing one whose queue or exchange is gone (RabbitMQ answers unbind-ok:
        clients unbind in teardowns after an auto-delete queue went)."""
        if not exchange_name:
            raise AccessRefused(_DEFAULT_EXCHANGE_REFUSAL)
        queue = self._queues.get(queue_name)
        exchange = self._exchanges.get(exchange_name)
        if queue is None or exchange is None:
            return
        self._check_access(queue, owner)
        binding = exchange.find_binding(queue, routing_key, arguments)
        if binding is not None:
            self._remove_binding(binding, refuse=True)

    def bind_exchange(self, destination: str, source: str, routing_key: str,
                      arguments: dict[str, Any] | None = None) -> None:
        if not destination or not source:
            raise AccessRefused(_DEFAULT_EXCHANGE_REFUSAL)
        target = self.exchange(destination)
        origin = self.exchange(source)
        binding = Binding(origin, target, routing_key, arguments)
        if origin.add_binding(binding):
            self._store_added_binding(binding)
            target.bindings_in.add(binding)
            self._created(binding)

    def unbind_exchange(self, destination: str, source: str, routing_key: str,
                        arguments: dict[str, Any] | None = None) -> None:
        """Remove an exchange-to-exchange binding; as :meth:`unbind_queue`, a missing
        binding, source or destination is not an error."""
        if not destination or not source:
            raise AccessRefused(_DEFAULT_EXCHANGE_REFUSAL)
        target = self._exchanges.get(destination)
        origin = self._exchanges.get(source)
        if target is None or origin is None:
            return
        binding = origin.find_binding(target, routing_key, arguments)
        if binding is not None:
            self._remove_binding(binding, refuse=True)

    def _store_added_binding(self, binding: Binding) -> None:
        """Store a binding just added to its source; take it out again if that fails."""
        try:
            self._store_created(binding)
        except StoreFailed:
            binding.source.remove_binding(binding)
            raise

    def _remove_binding(self, binding: Binding, *, refuse: bool = False) -> None:
        source = binding.source
        if source.bindings.get(binding.identity) is not binding:
            return
        self._store_deleted(binding, refuse)
        source.remove_binding(binding)
        destination = binding.destination
        if isinstance(destination, Exchange):
            destination.bindings_in.discard(binding)
        else:
            destination.bindings.discard(binding)
        self._deleted(binding)
        # an auto-delete exchange goes when its last binding does (it had one, so it was used)
        if source.auto_delete and not source.bindings and not source.deleted:
            self._delete_exchange(source)

    # -- QueueHost: what queues ask of their virtual host (dead_letter: see Routing) ---------

    def queue_unused(self, queue: Queue) -> None:
        """An auto-delete queue lost its last consumer."""
        self._delete_queue(queue)

    def queue_timed(self, queue: Queue) -> None:
        """``queue`` now holds messages with an expiry: include it in deadlines."""
        if self._queues.get(queue.name) is queue:
            self._timed.add(queue)

    # -- time ----------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """When :meth:`run_due` next has work (clock seconds), or None."""
        earliest = self.leases.next_deadline()
        linked = self.links.next_deadline()
        if linked is not None and (earliest is None or linked < earliest):
            earliest = linked
        for queue in self._timed:
            deadline = queue.next_deadline()
            if deadline is not None and (earliest is None or deadline < earliest):
                earliest = deadline
        recheck = self.flow.next_recheck                # while a queue is overfull
        if recheck is not None and (earliest is None or recheck < earliest):
            earliest = recheck
        return earliest

    def run_due(self, now: float) -> None:
        """Expire messages whose TTL has passed, delete queues unused for their x-expires, end
        leases, remove expired AMQP 1.0 link termini."""
        self.leases.run_due(now)
        self.links.run_due(now)
        self.flow.recheck(now)
        for queue in list(self._timed):
            if queue.deleted:
                self._timed.discard(queue)
            elif queue.run_due(now):
                self._delete_queue(queue)

    # -- durable objects: listeners and restore ---------------------------------------------

    @staticmethod
    def is_durable_object(obj: DurableObject) -> bool:
        """Whether ``obj`` outlives a restart (exclusive queues never do)."""
        if isinstance(obj, Binding):
            return Namespace.is_durable_object(obj.source) and Namespace.is_durable_object(obj.destination)
        if isinstance(obj, Queue):
            return obj.durable and obj.exclusive_owner is None
        return obj.durable

    def _created(self, obj: DurableObject) -> None:
        for observer in self.observers:
            observer.object_created(obj)

    def _deleted(self, obj: DurableObject) -> None:
        for observer in self.observers:
            observer.object_deleted(obj)

    def _store_created(self, obj: DurableObject) -> None:
        """Store a durable object about to be added; StoreFailed (nothing is added) if that fails."""
        if self.listeners and not self._restoring and self.is_durable_object(obj):
            self._store(obj, "create", lambda listener: listener.object_created(obj), refuse=True)

    def _store_deleted(self, obj: DurableObject, refuse: bool) -> None:
        """Store the removal of a durable object about to go; with ``refuse``, StoreFailed if that fails."""
        if self.listeners and not self._restoring and self.is_durable_object(obj):
            self._store(obj, "delete", lambda listener: listener.object_deleted(obj), refuse=refuse)

    def _store(self, obj: DurableObject, verb: str, tell: Callable[[NamespaceListener], None], *,
               refuse: bool) -> None:
        if self._stored_operations.deferring is not None:
            self._stored_operations.store(obj, verb, refuse=refuse)
            return
        try:
            for listener in self.listeners:
                tell(listener)
        except BrokerError:
            raise
        except Exception as exc:
            what = _describe(obj)
            self.note_store_failure(exc)
            if refuse:
                raise StoreFailed(f"cannot {verb} {what} in vhost '{self.vhost_name}': the configuration"
                                  f" store failed: {exc}") from exc
            return
        self.note_store_success()

    def describe(self, obj: DurableObject) -> str:
        return _describe(obj)

    @property
    def restoring(self) -> bool:
        """Objects are being restored from their records (nothing is stored)."""
        return self._restoring

    def note_store_success(self) -> None:
        if self.store_failure is not None:
            log.warning("configuration store of virtual host '%s': writes succeed again",
                        self.vhost_name)
            self.store_failure = None

    def note_store_failure(self, exc: BaseException) -> None:
        if self.store_failure is None:
            log.error("configuration store of virtual host '%s': writes failing: %s",
                      self.vhost_name, exc)
        self.store_failure = exc

    def when_stored(self, operation: Callable[[], T],
                    done: Callable[[T | None, BrokerError | None], None]) -> None:
        """Run ``operation`` (a declare, bind, unbind or delete) once what it changes is stored.

        ``done(result, None)`` when it took effect, ``done(None, error)`` when
        it was refused (``StoreFailed`` when the store failed: then nothing
        of it was made).  Without a background store this is the plain call,
        and ``done`` is called before this returns; with one, ``done`` is
        called from the event loop once the store has answered.  See
        :class:`~broker.messaging.stored_changes.StoredOperations`.
        """
        self._stored_operations.when_stored(operation, done)

    def records(self) -> list[dict[str, Any]]:
        """Records of every durable object, exchanges then queues then bindings."""
        standard = {name for name, _ in STANDARD_EXCHANGES} | {""}
        exchanges = [x for name, x in self._exchanges.items() if name not in standard]
        objects: list[DurableObject] = [*exchanges, *self._queues.values()]
        objects += [b for x in self._exchanges.values() for b in x.bindings.values()]
        return [obj.to_record() for obj in objects if self.is_durable_object(obj)]

    def restore(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Recreate durable objects from their records (listeners are not told)."""
        restorers = {"exchange": self._restore_exchange, "queue": self._restore_queue,
                     "binding": self._restore_binding}
        by_kind: dict[str, list[Mapping[str, Any]]] = {kind: [] for kind in restorers}
        for record in records:
            kind = record.get("object")
            if kind not in by_kind:
                raise ValueError(f"not a namespace record: {record!r}")
            by_kind[kind].append(record)
        self._restoring = True
        try:
            for kind, restore in restorers.items():  # exchanges, then queues, then bindings
                for record in by_kind[kind]:
                    restore(record)
        finally:
            self._restoring = False

    def _restore_exchange(self, record: Mapping[str, Any]) -> None:
        name = record["name"]
        if name in self._exchanges:
            return
        cls = EXCHANGE_TYPES.get(record["type"])
        if cls is None:
            raise CommandInvalid(f"invalid exchange type '{record['type']}'")
        exchange = self._exchanges[name] = cls(
            name, vhost=self.vhost_name, durable=record.get("durable", True),
            auto_delete=record.get("auto_delete", False), internal=record.get("internal", False),
            arguments=from_json_value(record.get("arguments") or {}))
        self._created(exchange)

    def _restore_queue(self, record: Mapping[str, Any]) -> None:
        name = record["name"]
        if name in self._queues:
            return
        durable = record.get("durable", True)
        self._add_queue(create_queue(
            name, vhost=self.vhost_name, durable=durable,
            auto_delete=record.get("auto_delete", False),
            arguments=from_json_value(record.get("arguments") or {}), clock=self.clock, host=self,
            journal=self.journal if durable else None))

    def _restore_binding(self, record: Mapping[str, Any]) -> None:
        source = self._exchanges.get(record["source"])
        if record.get("destination_type") == "exchange":
            destination: Queue | Exchange | None = self._exchanges.get(record["destination"])
        else:
            destination = self._queues.get(record["destination"])
        if source is None or destination is None:
            return
        try:
            binding = Binding(source, destination, record.get("routing_key", ""),
                              from_json_value(record.get("arguments") or {}))
        except SelectorError as error:
            # a selector stored before selectors were checked: better no route than one for everything
            log.error("binding of %r to exchange %r not restored: %s",
                      destination.name, source.name, error.text)
            return
        if source.add_binding(binding):
            if isinstance(destination, Exchange):
                destination.bindings_in.add(binding)
            else:
                destination.bindings.add(binding)
