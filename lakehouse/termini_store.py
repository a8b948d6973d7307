"""The ``link_termini`` Delta table: AMQP 1.0 link termini of a virtual host node.

Schema of ``link_termini`` (a keyed change log, see :mod:`.change_log`):

========================  ==================  ========================================
column                    type                meaning
========================  ==================  ========================================
``seq``                   int64               order of the change within the table
``role``                  string              ``sending`` or ``receiving`` (broker's side)
``remote_container_id``   string              the peer's container id
``link_name``             string              the link's name
``terminus``              string (JSON)       source/target: address, durable, expiry-policy, ...
``op``                    string              ``save`` or ``remove``
``changed_at``            timestamp[us, UTC]  when it changed
========================  ==================  ========================================

``terminus`` holds the fields of :func:`broker.messaging.link_terminus.terminus_record`
(``address``, ``durable``, ``expiry-policy``, ``timeout``, ``dynamic``,
``distribution-mode``, ``selector``, ``capabilities``), and beside them
``unsettled`` (``[[tag, state], ...]``, base64; durability ``unsettled-state``
only) and ``subscription-queue`` (the queue of a subscription to an exchange).

Commits are made as the ``config`` table's are (:mod:`.config_writer`): the
event loop hands a change over (:meth:`DeltaTerminusStore.submit`) and hears
back; a thread groups what arrives while a commit is in flight, and commits
it in the writer process (``DELTAMQ_CONFIG_WRITER=process``, the default,
shared with the configuration stores) or in the thread itself.  ``save`` and
``remove`` wait for the commit (start-up, tests).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from concurrent.futures import Future

import pyarrow as pa

from broker.messaging.termini import LinkRole, TerminusKey, TerminusRecord

from .change_log import ChangeLog, Row, change_log_schema
from .config_writer import MODE, Change, WrittenInBackground
from .delta_table import Location, child_location

#: the table's directory under a node's ``storePath``
TABLE = "link_termini"

TERMINI_SCHEMA = change_log_schema(
    pa.field("role", pa.string(), nullable=False),
    pa.field("remote_container_id", pa.string(), nullable=False),
    pa.field("link_name", pa.string(), nullable=False),
    pa.field("terminus", pa.string()),
)


def _key(row: Row) -> tuple[str, str, str]:
    return (row["role"], row["remote_container_id"], row["link_name"])


def termini_change_log(location: Location, storage_options: dict[str, str] | None = None) -> ChangeLog:
    """The change log of a ``link_termini`` table (the broker's, and the writer process's)."""
    return ChangeLog(location, TERMINI_SCHEMA, _key, name=TABLE, storage_options=storage_options)


class DeltaTerminusStore(WrittenInBackground):
    """:class:`~broker.messaging.termini.TerminusStore` over ``<path>/link_termini``.

    ``path`` is a local directory or an object storage URI (``s3://bucket/node``).
    Also a :class:`~broker.messaging.termini.BackgroundTerminusStore`.
    """

    def __init__(self, path: Location, storage_options: dict[str, str] | None = None) -> None:
        self.log = termini_change_log(child_location(path, TABLE), storage_options)
        #: explicit storage options are this process's: its writer thread commits, not the process
        self._own_options = bool(storage_options)
        self._init_writer(f"termini-writer {path}")

    def open(self) -> None:
        self.log.open()

    def recover(self) -> list[TerminusRecord]:
        return [TerminusRecord(LinkRole(row["role"]), row["remote_container_id"], row["link_name"],
                               json.loads(row["terminus"])) for row in self.log.current.values()]

    def submit(self, records: Iterable[TerminusRecord] = (),
               remove: Iterable[TerminusKey] = ()) -> Future[None]:
        """Save ``records``, then remove ``remove``, in the writer's next group commit (no wait)."""
        changes: list[Change] = [("save", _row(r)) for r in records]
        changes += [("remove", (role.value, container, name)) for role, container, name in remove]
        if not self.writer.running:
            # started with the first change: a node whose termini are only read needs no writer
            self._start_writer("thread" if self._own_options else MODE)
        return self.writer.submit(changes)

    def save(self, records: Iterable[TerminusRecord]) -> None:
        self.submit(records).result()

    def remove(self, keys: Iterable[TerminusKey]) -> None:
        self.submit(remove=keys).result()

    def close(self) -> None:
        self._stop_writer()
        self.log.close()


def _row(record: TerminusRecord) -> Row:
    # serialised on the caller's side: what the registry changes later is not what was stored
    return {"role": record.role.value, "remote_container_id": record.remote_container_id,
            "link_name": record.link_name,
            "terminus": json.dumps(dict(record.terminus), sort_keys=True, default=str)}
