"""In-memory AMQP 1.0 clients whose broker journals to a real Delta table: the set-up the
journal benchmarks (journal_commit.py, journal_floor.py, amqp1_0_journal_path.py) share."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lakehouse.journal import DeltaMessageJournal
    from tests.unit.protocol.amqp1_0.engine_client import Client10

WINDOW = 1 << 20


def journaled_host(table: Path) -> tuple[Client10, DeltaMessageJournal]:
    """A client of an in-memory broker whose namespace journals to ``table``, with the durable
    queue ``q`` declared; the client has not opened yet."""
    from lakehouse.journal import DeltaMessageJournal
    from tests.unit.protocol.amqp1_0.engine_client import Client10

    client = Client10()
    namespace = client.host.namespace
    journal = DeltaMessageJournal(table, "v")
    journal.open()
    namespace.journal = journal
    namespace.declare_queue("q", durable=True)
    return client, journal


def opened(client: Client10) -> Client10:
    """``client`` after open and begin with a wide incoming window."""
    client.handshake()
    client.begin(incoming_window=WINDOW)
    return client


def durable_sender(table: Path) -> tuple[Client10, DeltaMessageJournal]:
    """:func:`journaled_host` with the client opened and a sending link ``d`` (handle 0) on ``q``."""
    sender, journal = journaled_host(table)
    opened(sender).attach_sender("q", handle=0, name="d")
    return sender, journal
