"""Durable configuration stores: where configured objects survive a restart.

A store keeps *records* -- id, category, parent id, attributes as given
(``${...}`` unexpanded) -- for the durable descendants of the object that
owns it (SystemConfig for the broker-wide objects, a VirtualHostNode for its
virtual host).  Records whose parent is the owner itself carry
``parent_id=None``.  Stores are plugins of entry point group
``deltamq.stores`` chosen by a ``type`` (``memory`` here; the lakehouse
provides ``delta``).  Calls happen on the event loop; a store that does slow
I/O hands it to a worker thread itself, and offers :meth:`BackgroundStore.submit`
so the loop can hand a change over and hear back (:class:`LoopTicket`)
instead of waiting for the commit.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from broker.messaging.termini import MemoryTerminusStore


@dataclass(frozen=True, slots=True)
class ConfigurationRecord:
    id: str
    category: str
    parent_id: str | None
    attributes: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "category": self.category, "parentId": self.parent_id,
                "attributes": copy.deepcopy(dict(self.attributes))}


@runtime_checkable
class DurableConfigurationStore(Protocol):
    """What the model needs from a configuration store.

    A store class is constructed as ``cls(path=...)`` (``path``: where a
    file-backed store keeps its data, e.g. a VirtualHostNode's ``storePath``;
    None for SystemConfig's default memory store), then opened.
    """

    def open(self) -> None:
        """Make the store usable (create it on first use)."""
        ...

    def recover(self) -> list[ConfigurationRecord]:
        """Every record, parents before children."""
        ...

    def save(self, records: Iterable[ConfigurationRecord]) -> None:
        """Insert or replace records (by id), atomically as one change."""
        ...

    def remove(self, ids: Iterable[str]) -> None:
        """Forget the records with these ids (unknown ids are ignored)."""
        ...

    def close(self) -> None:
        ...


@runtime_checkable
class BackgroundStore(Protocol):
    """A store that commits in the background: hand a change over, hear back later."""

    def submit(self, records: Iterable[ConfigurationRecord] = (),
               remove: Iterable[str] = ()) -> Future[None]:
        """Save ``records``, then remove the ids in ``remove``, as one durable change.

        The future is done once the change is durable, or has the exception
        when it failed (then nothing of it was stored).  Changes are stored
        in the order they were submitted.
        """
        ...


class LoopTicket:
    """A submitted change whose outcome is delivered on an event loop."""

    def __init__(self, future: Future[None], loop: asyncio.AbstractEventLoop) -> None:
        self.future = future
        self.loop = loop

    def when_stored(self, callback: Callable[[BaseException | None], None]) -> None:
        """``callback(None)`` once durable, ``callback(error)`` if not; on the loop, in submission order."""
        # not ``self.loop`` in the closure: the future keeps its callbacks, and a ticket the
        # callback reached would make a reference cycle (ticket, future, callback), and all
        # the callback reaches would wait for the cyclic garbage collector (long pauses)
        loop = self.loop

        def settled(future: Future[None]) -> None:
            try:
                loop.call_soon_threadsafe(callback, future.exception())
            except RuntimeError:
                pass                          # the loop is closed: nobody waits any more

        self.future.add_done_callback(settled)


class MemoryConfigurationStore:
    """Keeps records in a dict: for non-durable nodes and for tests.

    Records are deep-copied in and out, so what the model changes later never
    alters what was "persisted".
    """

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self._records: dict[str, ConfigurationRecord] = {}
        self.opened = False

    def open(self) -> None:
        self.opened = True

    def recover(self) -> list[ConfigurationRecord]:
        return ordered([_copy(record) for record in self._records.values()])

    def save(self, records: Iterable[ConfigurationRecord]) -> None:
        for record in records:
            self._records[record.id] = _copy(record)

    def remove(self, ids: Iterable[str]) -> None:
        for record_id in ids:
            self._records.pop(record_id, None)

    def terminus_store(self) -> MemoryTerminusStore:
        """AMQP 1.0 link termini of a memory node: kept only while the broker runs."""
        from broker.messaging.termini import MemoryTerminusStore

        return MemoryTerminusStore()

    def close(self) -> None:
        self.opened = False

    def __len__(self) -> int:
        return len(self._records)


def _copy(record: ConfigurationRecord) -> ConfigurationRecord:
    return ConfigurationRecord(record.id, record.category, record.parent_id,
                               copy.deepcopy(dict(record.attributes)))


def ordered(records: Iterable[ConfigurationRecord]) -> list[ConfigurationRecord]:
    """Records sorted so that every parent comes before its children.

    Records whose parent is missing (and is not the owner, ``None``) are kept
    at the end; recovery reports them.
    """
    pending = list(records)
    known: set[str | None] = {None}
    result: list[ConfigurationRecord] = []
    progress = True
    while pending and progress:
        progress = False
        remaining = []
        for record in pending:
            if record.parent_id in known:
                result.append(record)
                known.add(record.id)
                progress = True
            else:
                remaining.append(record)
        pending = remaining
    return result + pending
