"""The ``journal`` table: every persistent message on a durable queue, and what became of it.

One table per virtual host node, at ``<storePath>/journal``, append-only
(``delta.appendOnly=true``).  Each group commit of the broker is one Delta
commit, so everything in it (a publish routed to many queues, a transaction's
publishes and acks) becomes durable, and visible to Spark, at once.

A row is one *event* of one message in one queue:

=====================  =====================  ================================================
column                 type                   meaning
=====================  =====================  ================================================
``vhost``              string                 the virtual host
``at``                 timestamp[us, UTC]     when the event happened (broker wall clock)
``event``              string                 ``enqueue``, ``deliver``, ``requeue``, ``settle``
                                              or ``queue_deleted``
``queue``              string                 the queue
``message_id``         int64                  the message, numbered per virtual host in
                                              publish order (``queue_deleted``: the highest
                                              id issued when the queue was deleted)
``tx_id``              int64 (nullable)       the AMQP transaction the event belongs to
``delivery_count``     int32 (nullable)       ``requeue``/``settle``/``deliver``: deliveries
                                              of the message from this queue so far
``outcome``            string (nullable)      ``settle`` only: ``acked``, ``rejected``,
                                              ``dead_lettered``, ``expired``, ``dropped``
                                              (max-length or delivery limit, no DLX),
                                              ``purged`` or ``replaced`` (last-value queue)
``reason``             string (nullable)      why it left without an ack, in RabbitMQ's
                                              x-death terms: ``rejected``, ``expired``,
                                              ``maxlen``, ``delivery_limit``; ``transient``
                                              for a transient message recovery dropped.
                                              An ``acked`` row: null, or
                                              ``consumer:<name>`` when a lease consumer (a
                                              Spark job) settled it
``exchange``           string (nullable)      \\
``routing_key``        string (nullable)       |  the message itself: present on exactly one
``published_at``       timestamp[us, UTC]      |  row per message, the ``enqueue`` into the
``body``               binary (nullable)       |  first queue it reached (bodies are stored
``properties``         map<string, string>     |  once, whatever the fan-out).  ``properties``
``headers``            string (JSON)           |  is the message's common view as text (the
``properties_raw``     binary (nullable)       |  AMQP basic-property names, whatever the
``message_format``     string (nullable)       |  format), ``headers`` the application headers
``native``             binary (nullable)      /   (and dead-lettering's x-death) as JSON;
                                                  ``message_format`` tags ``native``, the
                                                  metadata in its protocol's encoding as
                                                  received (what the broker recovers from).
                                                  ``properties_raw`` is schema 1's name for
                                                  the 0-9-1 native bytes: null in rows of
                                                  schema 2, which write ``native``.
``first_message_id``   int64 (nullable)       schema 3: set on a *range row*, a ``deliver``
                                              or ``settle`` row standing for every message
                                              of the queue with an id from
                                              ``first_message_id`` to ``message_id`` (both
                                              included), all with the row's other values.
                                              A lease consumer's grant (a Spark job) is
                                              journaled so, one row per run of
                                              consecutive ids, and so is its settlement.
                                              Null: the row is about ``message_id`` alone
=====================  =====================  ================================================

Range rows.  The ids of a range are exactly the messages the event happened
to (a grant's ids are cut into runs of consecutive ids), so expanding a range
row into one row per id gives the rows an older release would have written.
Readers expand them: recovery and the watermark with DataFusion
(:data:`RANGE_IDS_DATAFUSION`), the snapshot job and the Spark views with
Spark (:data:`RANGE_IDS_SPARK`), the snapshot's tail with Arrow.  The row's
``message_id`` is the range's *last* id, so the file statistics on
``message_id`` and the recovery watermark (every message below it has ended)
keep skipping only what they may.

Schema versions.  Schema 1 (releases before message formats) ends at
``properties_raw``.  Schema 2 appends the last two columns, both nullable, so
a table of schema 1 becomes schema 2 by one metadata-only Delta commit (ADD
COLUMN; :func:`lakehouse.delta_table.add_missing_columns`) made the first time
a release of schema 2 opens it; its old rows read the new columns as null, and
readers treat them as: ``message_format`` null -> ``amqp-0-9-1``, ``native``
null -> ``properties_raw`` (:data:`NATIVE_SQL`).  Releases of schema 1 cannot recover
messages written by schema 2 (their ``properties_raw`` is null).  Schema 3
appends ``first_message_id`` the same way (:func:`upgrade_note` names what an
upgrade added); old rows read it as null, i.e. as rows of one message each.
Releases of schema 2 read a range row as an event of its last message only,
so they must not recover a journal schema 3 wrote range rows to.

Transient messages and non-durable queues are not journaled, with one
exception: a transient message granted to a lease consumer (a Spark job, which
reads bodies from this table; :mod:`broker.messaging.leases`) is journaled
when granted, and recovery settles it as ``dropped`` (reason ``transient``)
instead of bringing it back.

A message is *live* in a queue when it has an ``enqueue`` row there, no
``settle`` row there, and no later ``queue_deleted`` row for that queue (one
whose ``message_id`` is at least the message's).  It was *delivered* when it
has a ``deliver`` or ``requeue`` row.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

__all__ = ["JOURNAL_SCHEMA", "JOURNAL_SCHEMA_VERSION", "ENQUEUE", "DELIVER", "REQUEUE", "SETTLE",
           "QUEUE_DELETED", "TRANSIENT", "OUTCOMES", "TIMESTAMP", "FORMAT_SQL", "NATIVE_SQL",
           "RANGE_IDS_DATAFUSION", "RANGE_IDS_SPARK", "upgrade_note"]

ENQUEUE: Final = "enqueue"
DELIVER: Final = "deliver"
REQUEUE: Final = "requeue"
SETTLE: Final = "settle"
QUEUE_DELETED: Final = "queue_deleted"

#: the ``reason`` of the settle row recovery writes for a transient message (see above)
TRANSIENT: Final = "transient"

#: the values of ``outcome`` on ``settle`` rows
OUTCOMES: Final = ("acked", "rejected", "dead_lettered", "expired", "dropped", "purged", "replaced")

TIMESTAMP: Final = pa.timestamp("us", tz="UTC")

JOURNAL_SCHEMA: Final = pa.schema([
    pa.field("vhost", pa.string(), nullable=False),
    pa.field("at", TIMESTAMP, nullable=False),
    pa.field("event", pa.string(), nullable=False),
    pa.field("queue", pa.string(), nullable=False),
    pa.field("message_id", pa.int64(), nullable=False),
    pa.field("tx_id", pa.int64()),
    pa.field("delivery_count", pa.int32()),
    pa.field("outcome", pa.string()),
    pa.field("reason", pa.string()),
    pa.field("exchange", pa.string()),
    pa.field("routing_key", pa.string()),
    pa.field("published_at", TIMESTAMP),
    pa.field("body", pa.binary()),
    pa.field("properties", pa.map_(pa.string(), pa.string())),
    pa.field("headers", pa.string()),
    pa.field("properties_raw", pa.binary()),
    # schema 2
    pa.field("message_format", pa.string()),
    pa.field("native", pa.binary()),
    # schema 3
    pa.field("first_message_id", pa.int64()),
])

JOURNAL_SCHEMA_VERSION: Final = 3

#: the columns each schema version added
_ADDED_BY: Final = {2: ("message_format", "native"), 3: ("first_message_id",)}

#: SQL for a row's message format and native bytes, whichever schema wrote the row
FORMAT_SQL: Final = "COALESCE(message_format, 'amqp-0-9-1')"
NATIVE_SQL: Final = "COALESCE(native, properties_raw)"

#: a range row's message ids, one output row each, for the select list: DataFusion ...
RANGE_IDS_DATAFUSION: Final = "unnest(generate_series(first_message_id, message_id))"
#: ... and Spark SQL
RANGE_IDS_SPARK: Final = "explode(sequence(first_message_id, message_id))"


def upgrade_note(added: list[str]) -> str:
    """What the log says of an upgrade that added the columns ``added``: ``schema 1 -> 3, added ...``."""
    names = set(added)
    older = min((version - 1 for version, columns in _ADDED_BY.items() if names & set(columns)),
                default=JOURNAL_SCHEMA_VERSION)
    return f"schema {older} -> {JOURNAL_SCHEMA_VERSION}, added columns {', '.join(added)}"
