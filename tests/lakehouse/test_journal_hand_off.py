"""When the journal hands a group to its writer: the latency of everything that waits on a commit.

Under load a commit is always in flight and a message waits for the one in
flight, then for its own: the time between one commit's answer and the next
hand-off is paid by every message of the next group.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker.messaging.namespace import Namespace
from lakehouse.commit_pipeline import DURABLE, STAGED
from lakehouse.journal import JournalGroup

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


def test_a_staged_group_is_not_durable_and_the_next_goes_to_the_writer_then(tmp_path: Path) -> None:
    """The writer says *staged* before *durable*: only the second answer lets anything wait no more,
    and the first already brings it the next group, so it stages that one meanwhile."""
    ns = Namespace("v")
    journal = open_journal(tmp_path / "journal", ns)
    queue = ns.declare_queue("q", durable=True)[0]

    async def main() -> tuple[list[tuple[int, int, bool, list[int]]], list[int]]:
        journal.attach_loop(asyncio.get_running_loop())
        channel = journal._channel
        assert channel is not None
        groups: dict[int, JournalGroup] = {}
        answers: list[tuple[int, int, bool, list[int]]] = []
        answer = channel._on_answer

        def noting(number: int, status: int, error: BaseException | None) -> None:
            answer(number, status, error)
            # the group's state once the journal has taken the answer in, and what the writer has
            answers.append((number, status, groups[number].done, [g.number for g in journal._sent]))

        channel._on_answer = noting
        queue.enqueue(persistent(b"first"))
        first = journal.pending
        assert first is not None
        groups[first.number] = first
        await asyncio.sleep(0)                    # the end of the turn: the first group goes
        queue.enqueue(persistent(b"second"))      # the open group, until the first is staged
        second = journal.pending
        assert second is not None
        groups[second.number] = second
        done = asyncio.Event()
        second.when_durable(done.set)
        await asyncio.wait_for(done.wait(), 60)
        return answers, [first.number, second.number]

    answers, (first, second) = asyncio.run(main())
    journal.close()
    durable_seen: set[int] = set()
    for number, status, done, _sent in answers:
        if status == STAGED:
            assert done == (number in durable_seen)   # staged makes nothing durable
        elif status == DURABLE:
            assert done
            durable_seen.add(number)
    assert {(n, s) for n, s, _d, _w in answers} >= {(first, STAGED), (second, STAGED),
                                                    (first, DURABLE), (second, DURABLE)}
    first_staged = next(i for i, a in enumerate(answers) if a[:2] == (first, STAGED))
    first_durable = next(i for i, a in enumerate(answers) if a[:2] == (first, DURABLE))
    if first_staged < first_durable:              # as the writer answers unless it is preempted
        assert answers[first_staged][3] == [first, second]     # the second went with that answer
    assert queue.message_count == 2
