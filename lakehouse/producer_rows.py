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
(one aggregate over the table, whatever the watermark), and history retention
never removes these rows (:mod:`lakehouse.retention`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from broker.messaging.producer_sequences import PRODUCER_SEQUENCE

if TYPE_CHECKING:
    from .delta_table import AppendOnlyTable

__all__ = ["producer_row", "read_producer_sequences", "PRODUCER_SEQUENCE"]


def producer_row(producer: str, sequence: int, highest_message_id: int,
                 tx_id: int | None) -> tuple[str, str, int, float, int | None, int, None, None, None]:
    """The journal row (:data:`lakehouse.journal.Row`) recording ``producer``'s ``sequence``."""
    return (PRODUCER_SEQUENCE, producer, highest_message_id, time.time(), tx_id, sequence,
            None, None, None)


def read_producer_sequences(table: AppendOnlyTable) -> dict[str, int]:
    """Each producer's highest committed sequence in the journal ``table``."""
    result = table.read(f"SELECT queue AS producer, MAX(delivery_count) AS sequence FROM t"
                        f" WHERE event = '{PRODUCER_SEQUENCE}' GROUP BY queue")
    return dict(zip(result.column("producer").to_pylist(), result.column("sequence").to_pylist()))
