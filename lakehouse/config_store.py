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
``attributes``        string (JSON)       its attributes (the last saved ones on ``remove``)
``op``                string              ``save`` or ``remove``
``changed_at``        timestamp[us, UTC]  when the change was made
====================  ==================  ==========================================

Commits are made by a writer (:mod:`lakehouse.config_writer`: a child
process, or with ``DELTAMQ_CONFIG_WRITER=thread`` a thread), which groups the
changes that arrive while a commit is in flight and writes the table's
checkpoints off the event loop.  :meth:`DeltaConfigurationStore.submit`
hands changes over without waiting (the event loop's way); ``save`` and
``remove`` return only once the Delta commit is durable (fsynced).

``storePath`` may also be an object storage URI (``s3://bucket/prefix``): the
node's tables (``config``, ``link_termini``, ``journal``) are then kept there,
one prefix each under it.  delta-rs takes the credentials and endpoint from
the standard environment variables (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, ``AWS_ENDPOINT_URL``,
``AWS_ALLOW_HTTP``, ...); see :mod:`lakehouse.delta_table`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from concurrent.futures import Future

import pyarrow as pa

from broker.errors import ConfigurationError
from broker.model.config_store import ConfigurationRecord, ordered

from .change_log import ChangeLog, Row, change_log_schema
from .config_writer import MODE, Change, WrittenInBackground
from .delta_table import AppendOnlyTable, Location, child_location, is_uri, local_path
from .journal import DeltaMessageJournal
from .termini_store import DeltaTerminusStore

CONFIG_SCHEMA = change_log_schema(
    pa.field("id", pa.string(), nullable=False),
    pa.field("category", pa.string(), nullable=False),
    pa.field("parent_id", pa.string()),
    pa.field("attributes", pa.string()),
)


def config_change_log(location: Location) -> ChangeLog:
    """The change log of a ``config`` table (the broker's, and the writer process's)."""
    return ChangeLog(location, CONFIG_SCHEMA, lambda row: row["id"], name="config")


class DeltaConfigurationStore(WrittenInBackground):
    """:class:`~broker.model.config_store.DurableConfigurationStore` over a Delta table."""

    def __init__(self, path: str | None = None) -> None:
        if not path:
            raise ConfigurationError("a virtual host node of type 'delta' needs a storePath")
        #: a local directory (Path), or an object storage URI (str, never a Path: ``s3://``)
        self.path: Location = path.rstrip("/") if is_uri(path) else local_path(path)
        self.log = config_change_log(child_location(self.path, "config"))
        self._init_writer(f"config-writer {self.path}")

    @property
    def table(self) -> AppendOnlyTable:
        return self.log.table

    def terminus_store(self) -> DeltaTerminusStore:
        """The node's AMQP 1.0 link termini, in ``<storePath>/link_termini``."""
        return DeltaTerminusStore(self.path)

    def message_journal(self, vhost: str) -> DeltaMessageJournal:
        """The node's message journal, in ``<storePath>/journal``."""
        return DeltaMessageJournal(child_location(self.path, "journal"), vhost)

    def open(self) -> None:
        self.log.open()
        self._start_writer(MODE)

    def recover(self) -> list[ConfigurationRecord]:
        """The current records, parents before children, as fresh copies."""
        return ordered([_record(row) for row in self.log.current.values()])

    def submit(self, records: Iterable[ConfigurationRecord] = (),
               remove: Iterable[str] = ()) -> Future[None]:
        """Save ``records`` and then remove ``remove`` (ids) in the writer's next group commit.

        Does not wait: the future is done once the change is durable, or
        failed (its exception: nothing of it was stored).  Safe to call from
        any thread; changes are committed in the order they were submitted.
        """
        changes: list[Change] = [("save", _row(r)) for r in records]
        changes += [("remove", record_id) for record_id in remove]
        return self.writer.submit(changes)

    def save(self, records: Iterable[ConfigurationRecord]) -> None:
        self.submit(records).result()

    def remove(self, ids: Iterable[str]) -> None:
        self.submit(remove=ids).result()

    def close(self) -> None:
        self._stop_writer()
        self.log.close()


def _row(record: ConfigurationRecord) -> Row:
    # serialised on the caller's side: what the model changes later is not what was stored
    return {"id": record.id, "category": record.category, "parent_id": record.parent_id,
            "attributes": json.dumps(dict(record.attributes), sort_keys=True, default=str)}


def _record(row: Row) -> ConfigurationRecord:
    return ConfigurationRecord(row["id"], row["category"], row["parent_id"], json.loads(row["attributes"]))
