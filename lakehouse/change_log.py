"""A keyed change log in an append-only Delta table.

Stores that keep "the current value of each key" (configured objects, AMQP 1.0
link termini) write every change as a row — ``op`` is ``save`` or ``remove``,
``seq`` orders them — and fold the rows on open.  The table's history is the
history of the store, queryable from Spark; nothing is ever updated in place,
so a Delta streaming reader never meets a data-changing removal.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from typing import Any

import pyarrow as pa

from .delta_table import AppendOnlyTable, Location

Row = dict[str, Any]


def change_log_schema(*fields: pa.Field) -> pa.Schema:
    """``seq`` and ``op`` first, the store's own columns, ``changed_at`` last."""
    return pa.schema([
        pa.field("seq", pa.int64(), nullable=False),
        *fields,
        pa.field("op", pa.string(), nullable=False),
        pa.field("changed_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ])


class ChangeLog:
    """The rows of one store: ``key(row)`` names what a row is about."""

    def __init__(self, path: Location, schema: pa.Schema, key: Callable[[Row], Any], *, name: str,
                 storage_options: dict[str, str] | None = None) -> None:
        self.table = AppendOnlyTable(path, schema, name=name, storage_options=storage_options)
        self.schema = schema
        self.key = key
        self.current: dict[Any, Row] = {}
        self._seq = 0

    def open(self) -> None:
        """Open (or create) the table and fold its rows into :attr:`current`."""
        self.table.open()
        self.current = {}
        for row in self.table.read("SELECT * FROM t ORDER BY seq").to_pylist():
            self._seq = max(self._seq, int(row["seq"]))
            self._apply(row)

    def save(self, rows: Iterable[Row]) -> None:
        self._write([{**row, "op": "save"} for row in rows])

    def remove(self, keys: Iterable[Any]) -> None:
        self.change([("remove", key) for key in keys])

    def change(self, changes: Iterable[tuple[str, Any]]) -> None:
        """Saves (``("save", row)``) and removals (``("remove", key)``) in order, one commit.

        A removal of a key saved earlier in the same call removes that save's
        row (the last saved attributes are what a ``remove`` row carries).
        """
        self._write(self.rows(changes))

    def fold(self, changes: Iterable[tuple[str, Any]]) -> None:
        """Take ``changes`` into :attr:`current` without writing (another process committed them)."""
        for row in self.rows(changes):
            self._apply(row)

    def rows(self, changes: Iterable[tuple[str, Any]]) -> list[Row]:
        """The rows that record ``changes`` (see :meth:`change`), without ``seq`` and time."""
        rows: list[Row] = []
        latest: dict[Any, Row | None] = {}
        for op, item in changes:
            if op == "save":
                row = {**item, "op": "save"}
                latest[self.key(row)] = row
                rows.append(row)
            else:
                last = latest[item] if item in latest else self.current.get(item)
                if last is not None:
                    rows.append({**last, "op": "remove"})
                latest[item] = None
        return rows

    def _write(self, rows: list[Row]) -> None:
        """One Delta commit for all of ``rows``, durable (fsynced, or PUT) before returning."""
        if not rows:
            return
        now = dt.datetime.now(dt.timezone.utc)
        for row in rows:
            self._seq += 1
            row["seq"], row["changed_at"] = self._seq, now
        self.table.append(pa.Table.from_pylist(rows, schema=self.schema))
        for row in rows:
            self._apply(row)

    def _apply(self, row: Row) -> None:
        if row["op"] == "remove":
            self.current.pop(self.key(row), None)
        else:
            self.current[self.key(row)] = row

    def close(self) -> None:
        self.table.close()
