"""Bookkeeping for durable changes stored in the background (see :meth:`Namespace.when_stored`).

A namespace operation (declare, bind, unbind, delete) whose durable change
must be stored first stops with :class:`MustStore`; the namespace hands the
change to the store's writer (a :class:`StoreWriter`), and once it is durable
runs the operation again, with a :class:`Deferral` that remembers what is
stored already.  :class:`InFlight` keeps, per object, the changes handed over
and not yet durable, and who waits for them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from broker.errors import StoreFailed

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
