"""The ``delta`` configuration store: durable configured objects in a Delta table.

A virtual host node of ``"type": "delta"`` keeps its durable configuration
(the virtual host, its durable exchanges, queues and bindings, ...) in the
Delta table ``<storePath>/config``.  The table is append-only and versioned:
every change is a row (``op`` = ``save`` with the object's attributes, or
``remove``), so the history of the configuration is itself queryable; the
current configuration is the last row of each id.

Schema of ``config``:

====================  ==================  ==========================================
column                type                meaning
====================  ==================  ==========================================
``seq``               int64               order of the change within the store
``id``                string              the configured object's id
``category``          string              its category (VirtualHost, Exchange, ...)
``parent_id``         string (nullable)   its parent's id (null: the node itself)
``op``                string              ``save`` or ``remove``
``attributes``        string (JSON)       its attributes (null on ``remove``)
``changed_at``        timestamp[us, UTC]  when the change was made
====================  ==================  ==========================================

``save``/``remove`` return only once the Delta commit is fsynced.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import pyarrow as pa

from broker.errors import ConfigurationError
from broker.model.config_store import ConfigurationRecord, ordered

from .delta_table import AppendOnlyTable

CONFIG_SCHEMA = pa.schema([
    pa.field("seq", pa.int64(), nullable=False),
    pa.field("id", pa.string(), nullable=False),
    pa.field("category", pa.string(), nullable=False),
    pa.field("parent_id", pa.string()),
    pa.field("op", pa.string(), nullable=False),
    pa.field("attributes", pa.string()),
    pa.field("changed_at", pa.timestamp("us", tz="UTC"), nullable=False),
])


class DeltaConfigurationStore:
    """:class:`~broker.model.config_store.DurableConfigurationStore` over a Delta table."""

    def __init__(self, path: str | None = None) -> None:
        if not path:
            raise ConfigurationError("a virtual host node of type 'delta' needs a storePath")
        self.path = Path(path)
        self.table = AppendOnlyTable(self.path / "config", CONFIG_SCHEMA, name="config")
        self._current: dict[str, ConfigurationRecord] = {}
        self._seq = 0

    def open(self) -> None:
        self.table.open()
        rows = self.table.read("SELECT seq, id, category, parent_id, op, attributes FROM t ORDER BY seq")
        current: dict[str, ConfigurationRecord] = {}
        for row in rows.to_pylist():
            self._seq = max(self._seq, int(row["seq"]))
            if row["op"] == "remove":
                current.pop(row["id"], None)
            else:
                current[row["id"]] = ConfigurationRecord(
                    row["id"], row["category"], row["parent_id"], json.loads(row["attributes"]))
        self._current = current

    def recover(self) -> list[ConfigurationRecord]:
        """The current records, parents before children, as copies."""
        return ordered([ConfigurationRecord(r.id, r.category, r.parent_id, json.loads(json.dumps(r.attributes)))
                        for r in self._current.values()])

    def save(self, records: Iterable[ConfigurationRecord]) -> None:
        records = list(records)
        if not records:
            return
        rows = [(r.id, r.category, r.parent_id, "save",
                 json.dumps(dict(r.attributes), sort_keys=True, default=str)) for r in records]
        self._append(rows)
        for r, row in zip(records, rows):    # keep what was written, not the caller's object
            self._current[r.id] = ConfigurationRecord(r.id, r.category, r.parent_id, json.loads(row[4] or "{}"))

    def remove(self, ids: Iterable[str]) -> None:
        known = [i for i in ids if i in self._current]
        if not known:
            return
        self._append([(i, self._current[i].category, self._current[i].parent_id, "remove", None)
                      for i in known])
        for i in known:
            del self._current[i]

    def _append(self, rows: Sequence[tuple[str, str, str | None, str, str | None]]) -> None:
        now = dt.datetime.now(dt.timezone.utc)
        first = self._seq + 1
        self._seq += len(rows)
        self.table.append(pa.table({
            "seq": list(range(first, first + len(rows))),
            "id": [r[0] for r in rows],
            "category": [r[1] for r in rows],
            "parent_id": [r[2] for r in rows],
            "op": [r[3] for r in rows],
            "attributes": [r[4] for r in rows],
            "changed_at": [now] * len(rows),
        }, schema=CONFIG_SCHEMA))

    def close(self) -> None:
        self.table.close()
