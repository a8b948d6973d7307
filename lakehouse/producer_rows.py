"""The journal's ``producer_sequence`` rows: what exactly-once producers committed.

A transaction of an exactly-once producer (the Spark sink; the rule is in
:mod:`broker.messaging.producer_sequences`) adds one row to the group commit
of its messages, so the sequence and the messages are durable together.  The
row uses the journal's columns (no column was added for it):

=================  =====================================================
column             on a ``producer_sequence`` row
=================  =====================================================
``event``          ``producer_sequence``
``queue``          the producer's id (``<query id>/<partition>`` for the sink)
``delivery_count`` the sequence it committed (the micro-batch id)
``tx_id``          the AMQP transaction that carried it
``message_id``     the highest message id issued so far, as on
                   ``queue_deleted`` rows: file statistics and the
                   recovery watermark stay about messages
``at``             when the broker committed it
=================  =====================================================

The broker reads each producer's highest sequence when it opens the journal
(one aggregate over the table, whatever the watermark).  History retention
(:mod:`lakehouse.retention`) removes a producer's rows older than its cut-off
except its highest one, which is all a replay is checked against: one row per
producer stays, however long it has been idle.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from broker.messaging.producer_sequences import PRODUCER_SEQUENCE

if TYPE_CHECKING:
    from .delta_table import AppendOnlyTable

__all__ = ["producer_row", "read_producer_sequences", "superseded_producer_rows", "superseded_mask",
           "PRODUCER_SEQUENCE"]


def producer_row(producer: str, sequence: int, highest_message_id: int,
                 tx_id: int | None) -> tuple[str, str, int, float, int | None, int, None, None, None, None]:
    """The journal row (:data:`lakehouse.journal.Row`) recording ``producer``'s ``sequence``."""
    return (PRODUCER_SEQUENCE, producer, highest_message_id, time.time(), tx_id, sequence,
            None, None, None, None)


def read_producer_sequences(table: AppendOnlyTable) -> dict[str, int]:
    """Each producer's highest committed sequence in the journal ``table``."""
    result = table.read(f"SELECT queue AS producer, MAX(delivery_count) AS sequence FROM t"
                        f" WHERE event = '{PRODUCER_SEQUENCE}' GROUP BY queue")
    return dict(zip(result.column("producer").to_pylist(), result.column("sequence").to_pylist()))


def superseded_producer_rows(table: AppendOnlyTable, cutoff: dt.datetime) -> pa.Table:
    """Producer rows older than ``cutoff`` below their producer's highest sequence (``queue``,
    ``delivery_count``, ``message_id``): nothing reads them any more."""
    stamp = cutoff.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")
    return table.read(f"""
    WITH p AS (
        SELECT queue, delivery_count, message_id, at FROM t WHERE event = '{PRODUCER_SEQUENCE}'
    ), top AS (
        SELECT queue, MAX(delivery_count) AS highest FROM p GROUP BY queue
    )
    SELECT p.queue, p.delivery_count, p.message_id FROM p JOIN top ON p.queue = top.queue
    WHERE p.delivery_count < top.highest AND p.at < TIMESTAMP '{stamp}'
    """)


def _keys(queues: pa.ChunkedArray | pa.Array, sequences: pa.ChunkedArray | pa.Array) -> pa.Array:
    # DataFusion answers string views, Parquet files plain strings: compare plain strings
    return pc.binary_join_element_wise(pc.cast(queues, pa.string()), pc.cast(sequences, pa.string()), "\n")


def superseded_mask(rows: pa.Table, superseded: pa.Table) -> pa.Array:
    """Which of ``rows`` (``event``, ``queue``, ``delivery_count``) are among ``superseded``."""
    wanted = _keys(superseded.column("queue"), superseded.column("delivery_count"))
    mask = pc.and_(pc.equal(rows.column("event"), PRODUCER_SEQUENCE),
                   pc.is_in(_keys(rows.column("queue"), rows.column("delivery_count")), value_set=wanted))
    return pc.fill_null(mask, False)
