"""AMQP 1.0 link termini: what the link registry must remember about links.

Broker-J's Link Registry design (its "Link Registry Design" document):
the tuple (remote container id, link name) identifies a link on each side
(sending or receiving, from the broker's point of view); the terminus (the
broker's source for a sending link, its target for a receiving link) outlives
the link endpoint, so a detached ("suspended") link can be resumed and a
null-source attach can find its terminus by link name.  Termini with
durability ``configuration`` or ``unsettled-state`` are kept in a
:class:`TerminusStore`, separate from the configuration store, per the design.

The AMQP 1.0 engine (a later issue) will be the user; the store interface and
its Delta table exist now so the virtual host's storage is complete.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


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
