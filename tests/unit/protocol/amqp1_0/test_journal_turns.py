"""AMQP 1.0 over the real Delta journal, on a real event loop: what waits for a commit, and for how long.

A durable transfer is accepted, and reaches a receiver, in the turn of the
event loop in which its journal commit is reported -- not a turn or a timer
later -- and a transient transfer is accepted at once, never behind a commit
still in flight for an earlier durable one.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from broker.protocol.amqp1_0.definitions import Accepted, Disposition, Transfer
from lakehouse.journal import DeltaMessageJournal

from .engine_client import Client10, message_payload


def _clients(tmp_path: Path) -> tuple[Client10, Client10, DeltaMessageJournal]:
    sender = Client10()
    journal = DeltaMessageJournal(tmp_path / "journal", "v")
    journal.open()
    sender.host.namespace.journal = journal
    sender.host.namespace.declare_queue("durable", durable=True)
    receiver = Client10(sender.host)
    for client in (sender, receiver):
        client.handshake()
        client.begin()
    sender.attach_sender("durable", handle=0, name="d")
    receiver.attach_receiver("durable", handle=1)
    receiver.credit(1, 10)
    sender.take()
    receiver.take()
    return sender, receiver, journal


def _accepted(client: Client10) -> list[tuple[int, int | None]]:
    client._read()
    return [(v.first, v.last) for _c, v, _p in client.received
            if isinstance(v, Disposition) and isinstance(v.state, Accepted)]


def _deliveries(client: Client10) -> list[bytes]:
    client._read()
    return [payload for _c, v, payload in client.received if isinstance(v, Transfer)]


def test_a_durable_transfer_is_accepted_and_delivered_in_the_turn_its_commit_is_reported(tmp_path: Path) -> None:
    sender, receiver, journal = _clients(tmp_path)

    async def main() -> dict[str, Any]:
        journal.attach_loop(asyncio.get_running_loop())
        sender.transfer(0, 0, message_payload(b"kept", durable=True))
        group = journal.pending
        assert group is not None
        seen: dict[str, Any] = {"before": (_accepted(sender), len(_deliveries(receiver)))}
        reported = asyncio.Event()

        def on_durable() -> None:            # a waiter of the same commit, registered after the engine's
            seen["in the turn"] = (_accepted(sender), len(_deliveries(receiver)))
            reported.set()

        group.when_durable(on_durable)
        await asyncio.wait_for(reported.wait(), 60)
        return seen

    seen = asyncio.run(main())
    journal.close()
    assert seen["before"] == ([], 0)                      # nothing before the commit
    assert seen["in the turn"] == ([(0, None)], 1)        # both as the commit is reported


def test_a_transient_transfer_is_accepted_at_once_while_a_commit_is_pending(tmp_path: Path) -> None:
    sender, _receiver, journal = _clients(tmp_path)

    async def main() -> tuple[list[Any], bool, list[Any]]:
        journal.attach_loop(asyncio.get_running_loop())
        sender.transfer(0, 0, message_payload(b"kept", durable=True))
        group = journal.pending
        assert group is not None
        sender.transfer(0, 1, message_payload(b"passing", durable=False))
        transient, pending = _accepted(sender), not group.done
        sender.take()
        done = asyncio.Event()
        group.when_durable(done.set)
        await asyncio.wait_for(done.wait(), 60)
        return transient, pending, _accepted(sender)

    transient, pending, durable = asyncio.run(main())
    journal.close()
    assert pending and transient == [(1, None)]       # the transient one: at once, the commit still out
    assert durable == [(0, None)]                     # the durable one: once its commit is reported
