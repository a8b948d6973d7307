"""A namespace listener that stores in the background, answered when a test says so."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class ManualTicket:
    def __init__(self) -> None:
        self.callbacks: list[Callable[[BaseException | None], None]] = []

    def when_stored(self, callback: Callable[[BaseException | None], None]) -> None:
        self.callbacks.append(callback)


class ManualStore:
    """A :class:`~broker.messaging.stored_changes.StoreWriter`: changes wait in :attr:`in_flight`
    until :meth:`land` makes them durable (or fails them), in submission order."""

    def __init__(self) -> None:
        self.in_flight: list[tuple[str, dict[str, Any], ManualTicket]] = []
        #: what is durable: record key -> record
        self.records: dict[str, dict[str, Any]] = {}
        self.submitted = 0

    @staticmethod
    def key(record: dict[str, Any]) -> str:
        return repr(sorted((k, repr(v)) for k, v in record.items()
                           if k in ("object", "name", "source", "destination", "routing_key")))

    def can_submit(self) -> bool:
        return True

    def submit(self, obj: Any, *, created: bool) -> ManualTicket:
        ticket = ManualTicket()
        self.submitted += 1
        self.in_flight.append(("save" if created else "remove", dict(obj.to_record()), ticket))
        return ticket

    def land(self, error: BaseException | None = None) -> int:
        """Answer every change in flight now (a group commit): durable, or failed with ``error``."""
        group, self.in_flight = self.in_flight, []
        for op, record, _ in group:
            if error is None:
                if op == "save":
                    self.records[self.key(record)] = record
                else:
                    self.records.pop(self.key(record), None)
        for _, _, ticket in group:
            for callback in ticket.callbacks:
                callback(error)
        return len(group)

    def land_all(self) -> None:
        """Answer until nothing is in flight (a retry may submit more)."""
        while self.in_flight:
            self.land()

    # the synchronous listener interface (used when no background store may be used)
    def object_created(self, obj: Any) -> None:
        self.records[self.key(obj.to_record())] = dict(obj.to_record())

    def object_deleted(self, obj: Any) -> None:
        self.records.pop(self.key(obj.to_record()), None)
