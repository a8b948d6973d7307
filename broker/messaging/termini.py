"""AMQP 1.0 link termini: what the link registry must remember about links.

Broker-J's Link Registry design (its "Link Registry Design" document):
the tuple (remote container id, link name) identifies a link on each side
(sending or receiving, from the broker's point of view); the terminus (the
broker's source for a sending link, its target for a receiving link) outlives
the link endpoint, so a detached ("suspended") link can be resumed and a
null-source attach can find its terminus by link name.  Termini with
durability ``configuration`` or ``unsettled-state`` are kept in a
:class:`TerminusStore`, separate from the configuration store, per the design.

The link registry (:mod:`broker.messaging.link_registry`) is the user: it
writes through :class:`StoredTermini`, which hands changes to a store that
commits in the background (``submit``, the Delta store's writer) so the event
loop never waits for a commit, and coalesces the saves of one link (its
unsettled map may change with every delivery) to one commit in flight.
"""

from __future__ import annotations

import asyncio
import copy
import enum
import logging
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

log = logging.getLogger(__name__)


class LinkRole(enum.Enum):
    SENDING = "sending"       # the broker sends: the stored terminus is its source
    RECEIVING = "receiving"   # the broker receives: the stored terminus is its target


@dataclass(frozen=True, slots=True)
class TerminusRecord:
    role: LinkRole
    remote_container_id: str
    link_name: str
    terminus: Mapping[str, Any] = field(default_factory=dict)   # address, durable, expiry-policy, ...

    @property
    def key(self) -> tuple[LinkRole, str, str]:
        return (self.role, self.remote_container_id, self.link_name)


TerminusKey = tuple[LinkRole, str, str]


class TerminusStore(Protocol):
    def open(self) -> None: ...

    def recover(self) -> list[TerminusRecord]: ...

    def save(self, records: Iterable[TerminusRecord]) -> None: ...

    def remove(self, keys: Iterable[TerminusKey]) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class BackgroundTerminusStore(Protocol):
    """A terminus store that commits in a thread (or process) of its own."""

    def submit(self, records: Iterable[TerminusRecord] = (),
               remove: Iterable[TerminusKey] = ()) -> Future[None]:
        """Save ``records``, then remove ``remove``, as one durable change; committed in
        submission order; the future is done once durable (or has the error)."""
        ...


class MemoryTerminusStore:
    """Termini of a memory virtual host node: kept until the broker stops."""

    def __init__(self) -> None:
        self._records: dict[TerminusKey, TerminusRecord] = {}

    def open(self) -> None:
        pass

    def recover(self) -> list[TerminusRecord]:
        return [_copy(r) for r in self._records.values()]

    def save(self, records: Iterable[TerminusRecord]) -> None:
        for r in records:
            self._records[r.key] = _copy(r)

    def remove(self, keys: Iterable[TerminusKey]) -> None:
        for key in keys:
            self._records.pop(key, None)

    def close(self) -> None:
        pass


def _copy(record: TerminusRecord) -> TerminusRecord:
    return TerminusRecord(record.role, record.remote_container_id, record.link_name,
                          copy.deepcopy(dict(record.terminus)))


class StoredTermini:
    """Writes a registry's persistent termini to its store without the event loop waiting.

    :meth:`save` takes a function building the record *when it is written*,
    so a link whose save is already in flight is saved once more, with what
    it is then, after that one lands (one commit in flight per link, however
    often its unsettled map changes).  :meth:`remove` goes to the store at
    once; the store commits in submission order, so it follows any save
    handed over before it.  With a store that cannot commit in the
    background, or no running event loop (start-up, tests), changes are
    written synchronously.  A failure is logged, once until writes succeed again.
    """

    def __init__(self, store: TerminusStore | None, vhost_name: str = "") -> None:
        self.store = store
        self.vhost_name = vhost_name
        #: why the last write failed, until one succeeds again
        self.failure: BaseException | None = None
        self._in_flight: set[TerminusKey] = set()
        self._again: dict[TerminusKey, Callable[[], TerminusRecord | None]] = {}
        self._pending = 0                 # changes handed over, not yet landed

    def save(self, key: TerminusKey, build: Callable[[], TerminusRecord | None]) -> None:
        """Store what ``build()`` gives (None: nothing to store any more)."""
        if self.store is None:
            return
        if key in self._in_flight:
            self._again[key] = build
            return
        record = build()
        if record is not None:
            self._write(key, [record], [])

    def remove(self, key: TerminusKey) -> None:
        if self.store is None:
            return
        self._again.pop(key, None)
        self._write(None, [], [key])

    def _write(self, key: TerminusKey | None, records: list[TerminusRecord],
               removals: list[TerminusKey]) -> None:
        store = self.store
        assert store is not None
        loop = _running_loop()
        if loop is None or not isinstance(store, BackgroundTerminusStore):
            try:
                if records:
                    store.save(records)
                if removals:
                    store.remove(removals)
            except Exception as exc:
                self._landed(None, exc)
            else:
                self._landed(None, None)
            return
        if key is not None:
            self._in_flight.add(key)
        self._pending += 1
        try:
            future = store.submit(records, removals)
        except Exception as exc:
            self._pending -= 1
            self._landed(key, exc)
            return

        def on_loop(error: BaseException | None) -> None:
            self._pending -= 1
            self._landed(key, error)

        def settled(done: Future[None]) -> None:
            try:
                loop.call_soon_threadsafe(on_loop, done.exception())
            except RuntimeError:
                pass                      # the loop is closed: nobody waits any more
        future.add_done_callback(settled)

    def _landed(self, key: TerminusKey | None, error: BaseException | None) -> None:
        if error is None:
            if self.failure is not None:
                log.warning("link termini of virtual host '%s': writes succeed again",
                            self.vhost_name)
            self.failure = None
        else:
            if self.failure is None:
                log.error("link termini of virtual host '%s': writes failing: %s",
                          self.vhost_name, error)
            self.failure = error
        if key is not None:
            self._in_flight.discard(key)
            again = self._again.pop(key, None)
            if again is not None:
                self.save(key, again)

    @property
    def busy(self) -> bool:
        """Whether a change is handed over and not yet landed."""
        return self._pending > 0


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
