"""Bookkeeping for durable changes stored in the background (see :meth:`Namespace.when_stored`).

A namespace operation (declare, bind, unbind, delete) whose durable change
must be stored first stops with :class:`MustStore`; the namespace hands the
change to the store's writer (a :class:`StoreWriter`), and once it is durable
runs the operation again, with a :class:`Deferral` that remembers what is
stored already.  :class:`InFlight` keeps, per object, the changes handed over
and not yet durable, and who waits for them.  :class:`StoredOperations` is
the namespace's side of it all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from broker.errors import BrokerError, InternalError, StoreFailed

log = logging.getLogger(__name__)
T = TypeVar("T")

#: what names an exchange, a queue or a binding within a namespace
Identity = tuple[Any, ...]


def identity(obj: Any) -> Identity:
    """The object a change is about: a queue, an exchange (by name) or a binding."""
    source = getattr(obj, "source", None)
    if source is not None:
        return ("binding", source.name, obj.identity)
    kind = "exchange" if hasattr(obj, "bindings_in") else "queue"
    return (kind, obj.name)


class StoreTicket(Protocol):
    """A change handed to a store: ``callback(None)`` once durable, ``callback(error)`` if not.

    The callback runs on the event loop.
    """

    def when_stored(self, callback: Callable[[BaseException | None], None]) -> None: ...


@runtime_checkable
class StoreWriter(Protocol):
    """A namespace listener that can store a change without waiting for it."""

    def can_submit(self) -> bool:
        """Whether :meth:`submit` may be used now (a background writer and a running loop)."""
        ...

    def submit(self, obj: Any, *, created: bool) -> StoreTicket:
        """Store ``obj``'s creation (``created``) or deletion in the background."""
        ...

    def object_created(self, obj: Any) -> None: ...

    def object_deleted(self, obj: Any) -> None: ...


class MustStore(StoreFailed):
    """An operation stopped before a change: store it first (or wait for ``wait``, then retry).

    A :class:`~broker.errors.StoreFailed`, so the namespace's own undo of a
    refused store (a binding added to its exchange, taken out again) runs.
    """

    def __init__(self, obj: Any, verb: str, wait: list[Callable[[], None]] | None) -> None:
        super().__init__(f"{verb} must be stored first")
        self.obj = obj
        self.verb = verb
        #: another change of the same object is in flight: append the retry here
        self.wait = wait


class Deferral:
    """One operation run under ``when_stored``: the changes stored for it so far."""

    def __init__(self, writer: StoreWriter) -> None:
        self.writer = writer
        self._stored: list[tuple[Any, str, Any]] = []

    def stored(self, obj: Any, verb: str) -> None:
        self._stored.append((obj, verb, _content(obj)))

    def has_stored(self, obj: Any, verb: str) -> bool:
        """Was this very change (same object, same verb, same record) stored for the operation?"""
        key, content = identity(obj), _content(obj)
        return any(identity(o) == key and v == verb and c == content for o, v, c in self._stored)

    def take_stored(self) -> list[tuple[Any, str]]:
        """The changes stored for an operation that then failed (to undo them); forgets them."""
        taken = [(obj, verb) for obj, verb, _ in self._stored]
        self._stored.clear()
        return taken


def _content(obj: Any) -> Any:
    record = obj.to_record()
    return sorted((key, repr(value)) for key, value in record.items())


class InFlight:
    """Per object: how many changes are handed over and not yet durable, and who waits."""

    def __init__(self) -> None:
        self._count: dict[Identity, int] = {}
        self._waiters: dict[Identity, list[Callable[[], None]]] = {}

    def __len__(self) -> int:
        return len(self._count)

    def waiters(self, key: Identity) -> list[Callable[[], None]] | None:
        """The list to append a retry to when ``key`` has a change in flight; None when it has not."""
        if key not in self._count:
            return None
        return self._waiters.setdefault(key, [])

    def begin(self, key: Identity) -> None:
        self._count[key] = self._count.get(key, 0) + 1

    def end(self, key: Identity) -> None:
        left = self._count[key] - 1
        if left:
            self._count[key] = left
            return
        del self._count[key]
        for retry in self._waiters.pop(key, []):
            retry()


class StoreHost(Protocol):
    """What :class:`StoredOperations` needs of its namespace."""

    vhost_name: str

    @property
    def listeners(self) -> Sequence[Any]: ...

    @property
    def restoring(self) -> bool: ...

    def describe(self, obj: Any) -> str: ...

    def note_store_success(self) -> None: ...

    def note_store_failure(self, exc: BaseException) -> None: ...


class StoredOperations:
    """A namespace's operations whose durable changes a background store keeps.

    An operation runs under :meth:`when_stored`; where it would store a
    change, :meth:`store` (called by the namespace) stops it with
    :class:`MustStore`; the change is submitted, and once durable the
    operation runs again from the start, this time passing that store.
    """

    def __init__(self, namespace: StoreHost) -> None:
        self.namespace = namespace
        #: the operation running now under :meth:`when_stored` (None: stores are plain calls)
        self.deferring: Deferral | None = None
        #: changes handed to the store and not yet durable, by object
        self.in_flight = InFlight()

    def writer(self) -> StoreWriter | None:
        """The listener that stores in the background, when it is the only one."""
        if len(self.namespace.listeners) != 1 or self.namespace.restoring:
            return None
        writer = self.namespace.listeners[0]
        if not isinstance(writer, StoreWriter) or not writer.can_submit():
            return None
        return writer

    def when_stored(self, operation: Callable[[], T],
                    done: Callable[[T | None, BrokerError | None], None]) -> None:
        """:meth:`Namespace.when_stored <broker.messaging.namespace.Namespace.when_stored>`."""
        writer = self.writer()
        if writer is None:
            try:
                result = operation()
            except BrokerError as exc:
                done(None, exc)
                return
            done(result, None)
            return
        self._attempt(operation, done, Deferral(writer))

    def _attempt(self, operation: Callable[[], T], done: Callable[[T | None, BrokerError | None], None],
                 deferral: Deferral) -> None:
        self.deferring = deferral
        try:
            result = operation()
        except MustStore as need:
            self.deferring = None
            obj, verb, wait = need.obj, need.verb, need.wait
            again: Callable[[], None] = lambda: self._attempt(operation, done, deferral)
            if wait is not None:
                wait.append(again)                    # another change of the object goes first
            else:
                def stored(error: BaseException | None) -> None:
                    if error is None:
                        self.namespace.note_store_success()
                        deferral.stored(obj, verb)
                        again()
                        return
                    self.namespace.note_store_failure(error)
                    self._compensate(deferral)
                    done(None, StoreFailed(f"cannot {verb} {self.namespace.describe(obj)} in vhost"
                                           f" '{self.namespace.vhost_name}': the configuration store failed:"
                                           f" {error}"))
                self._submit(deferral.writer, obj, verb, stored)
            return
        except BrokerError as exc:
            self.deferring = None
            self._compensate(deferral)
            done(None, exc)
            return
        except Exception as exc:      # a bug: the waiting client hears of it, the loop goes on
            self.deferring = None
            log.exception("internal error in vhost '%s'", self.namespace.vhost_name)
            self._compensate(deferral)
            done(None, InternalError(f"internal error: {exc!r}"))
            return
        self.deferring = None
        done(result, None)

    def store(self, obj: Any, verb: str, *, refuse: bool) -> None:
        """The namespace's store of ``obj`` under :meth:`when_stored`: stored already, or stop and store first."""
        deferral = self.deferring
        assert deferral is not None
        if deferral.has_stored(obj, verb):
            return
        if refuse:
            raise MustStore(obj, verb, self.in_flight.waiters(identity(obj)))
        # a change the broker makes on its own (a cascade): made now, stored behind
        def stored(error: BaseException | None) -> None:
            if error is None:
                self.namespace.note_store_success()
            else:
                self.namespace.note_store_failure(error)
        self._submit(deferral.writer, obj, verb, stored)

    def _submit(self, writer: StoreWriter, obj: Any, verb: str,
                then: Callable[[BaseException | None], None]) -> None:
        key = identity(obj)
        self.in_flight.begin(key)

        def landed(error: BaseException | None) -> None:
            try:
                then(error)
            finally:
                self.in_flight.end(key)
        try:
            ticket: StoreTicket = writer.submit(obj, created=verb == "create")
        except Exception as exc:
            landed(exc)
            return
        ticket.when_stored(landed)

    def _compensate(self, deferral: Deferral) -> None:
        """An operation refused after storing changes: store them undone (nothing left behind)."""
        for obj, verb in deferral.take_stored():
            undo = "delete" if verb == "create" else "create"
            self._submit(deferral.writer, obj, undo, self._compensated)

    def _compensated(self, error: BaseException | None) -> None:
        if error is not None:
            self.namespace.note_store_failure(error)

