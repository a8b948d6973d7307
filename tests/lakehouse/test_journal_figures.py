"""What the Delta message journal measures of its commits, as /metrics exports it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from broker.messaging.namespace import Namespace

from .test_journal import open_journal, persistent


def test_a_group_commit_is_measured_once_durable(tmp_path: Path) -> None:
    ns = Namespace("v")
    journal = open_journal(tmp_path / "journal", ns)
    queue = ns.declare_queue("q", durable=True)[0]

    async def main() -> tuple[int, int]:
        journal.attach_loop(asyncio.get_running_loop())
        for number in range(30):
            queue.enqueue(persistent(b"m%03d" % number))
        waiting = journal.pending_rows
        group = journal.pending
        assert group is not None
        durable = asyncio.Event()
        group.when_durable(durable.set)
        await asyncio.sleep(0)                          # handed off: in flight, still pending
        in_flight = journal.pending_rows
        assert journal.figures.in_flight_since is not None
        await asyncio.wait_for(durable.wait(), 10)
        return waiting, in_flight

    assert asyncio.run(main()) == (30, 30)
    figures = journal.figures
    assert journal.pending_rows == 0 and figures.in_flight_since is None
    assert figures.commit_seconds.count == 1 and figures.commit_seconds.sum > 0
    assert figures.group_rows.sum == 30
    assert figures.written_bytes > 30 * 4 and figures.failed_commits == 0
    journal.close()


def test_commits_made_in_process_are_measured_and_checkpoints_dated(tmp_path: Path) -> None:
    ns = Namespace("v")
    journal = open_journal(tmp_path / "journal", ns)
    queue = ns.declare_queue("q", durable=True)[0]
    assert journal.last_checkpoint_time() is None
    queue.enqueue(persistent(b"one"))
    queue.enqueue(persistent(b"two"))
    assert journal.pending_rows == 2
    journal.close()                                     # no loop: committed in this process
    assert journal.figures.commit_seconds.count == 1 and journal.figures.group_rows.sum == 2
    before = time.time()
    journal.table.open()
    journal.table.checkpoint()
    checkpointed = journal.last_checkpoint_time()
    assert checkpointed is not None and checkpointed >= before - 1
    journal.table.close()
