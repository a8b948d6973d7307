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
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import pyarrow as pa

from broker.messaging.termini import LinkRole, TerminusKey, TerminusRecord

from .change_log import ChangeLog, Row, change_log_schema
from .delta_table import Location, child_location

TERMINI_SCHEMA = change_log_schema(
    pa.field("role", pa.string(), nullable=False),
    pa.field("remote_container_id", pa.string(), nullable=False),
    pa.field("link_name", pa.string(), nullable=False),
    pa.field("terminus", pa.string()),
)


def _key(row: Row) -> tuple[str, str, str]:
    return (row["role"], row["remote_container_id"], row["link_name"])


class DeltaTerminusStore:
    """:class:`~broker.messaging.termini.TerminusStore` over ``<path>/link_termini``.

    ``path`` is a local directory or an object storage URI (``s3://bucket/node``).
    """

    def __init__(self, path: Location, storage_options: dict[str, str] | None = None) -> None:
        self.log = ChangeLog(child_location(path, "link_termini"), TERMINI_SCHEMA, _key,
                             name="link_termini", storage_options=storage_options)

    def open(self) -> None:
        self.log.open()

    def recover(self) -> list[TerminusRecord]:
        return [TerminusRecord(LinkRole(row["role"]), row["remote_container_id"], row["link_name"],
                               json.loads(row["terminus"])) for row in self.log.current.values()]

    def save(self, records: Iterable[TerminusRecord]) -> None:
        self.log.save({"role": r.role.value, "remote_container_id": r.remote_container_id,
                       "link_name": r.link_name,
                       "terminus": json.dumps(dict(r.terminus), sort_keys=True, default=str)}
                      for r in records)

    def remove(self, keys: Iterable[TerminusKey]) -> None:
        self.log.remove((role.value, container, name) for role, container, name in keys)

    def close(self) -> None:
        self.log.close()
