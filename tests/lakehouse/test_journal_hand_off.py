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


def test_the_next_group_goes_to_the_writer_before_the_waiters_of_a_commit_run(tmp_path: Path) -> None:
    ns = Namespace("v")
    journal = open_journal(tmp_path / "journal", ns)
    queue = ns.declare_queue("q", durable=True)[0]

    async def main() -> list[object]:
        journal.attach_loop(asyncio.get_running_loop())
        queue.enqueue(persistent(b"first"))
        first = journal.pending
        assert first is not None
        await asyncio.sleep(0)                    # the end of the turn: the first group goes to the writer
        queue.enqueue(persistent(b"second"))      # while the first is in flight: the next group
        second = journal.pending
        assert second is not None and second is not first
        seen: list[object] = []
        done = asyncio.Event()

        def on_durable() -> None:
            # the second group is with the writer already: nothing open, not yet durable
            seen.extend((journal.pending, second.done))
            queue.enqueue(persistent(b"third"))   # a waiter's own journal event: the group after
            third = journal.pending
            seen.append(third is not None and third is not second)
            assert third is not None
            third.when_durable(done.set)

        first.when_durable(on_durable)
        await asyncio.wait_for(done.wait(), 60)
        return seen

    assert asyncio.run(main()) == [None, False, True]
    journal.close()
    assert queue.message_count == 3
