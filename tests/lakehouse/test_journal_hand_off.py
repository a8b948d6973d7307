"""When the journal hands a group to its writer: the latency of everything that waits on a commit.

Under load a commit is always in flight and a message waits for the one in
flight, then for its own: the time between one commit's answer and the next
hand-off is paid by every message of the next group.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker.messaging.namespace import Namespace

from .test_journal import open_journal, persistent


def test_the_next_group_is_handed_off_in_the_turn_the_commit_finishes(tmp_path: Path) -> None:
    ns = Namespace("v")
    journal = open_journal(tmp_path / "journal", ns)
    queue = ns.declare_queue("q", durable=True)[0]

    async def main() -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()
        journal.attach_loop(loop)
        queue.enqueue(persistent(b"first"))
        first = journal.pending
        assert first is not None
        await asyncio.sleep(0)                    # the end of the turn: the first group goes to the writer
        queue.enqueue(persistent(b"second"))      # while the first group is in flight: the next group
        second = journal.pending
        assert second is not None and second is not first
        seen: list[bool] = []
        checked = asyncio.Event()

        def next_turn() -> None:
            # the group the waiters filled is with the writer already, not open
            seen.extend((journal.pending is None, second.done))
            checked.set()

        def on_durable() -> None:
            loop.call_soon(next_turn)             # runs before anything the waiters below schedule
            queue.enqueue(persistent(b"third"))   # a waiter's own journal event joins the open group

        first.when_durable(on_durable)
        await asyncio.wait_for(checked.wait(), 30)
        done = asyncio.Event()
        second.when_durable(done.set)
        await asyncio.wait_for(done.wait(), 30)
        return seen[0], seen[1]

    handed_off, second_done_early = asyncio.run(main())
    journal.close()
    assert handed_off and not second_done_early
