"""Paging waits for every enqueue row reported before it, dead letters kept from a failed
commit included: a message paged out before its row is on disk could not be read back.

The writer fails for real (RLIMIT_FSIZE, as in test_journal_failures.py).
"""

from __future__ import annotations

import asyncio
import resource
from pathlib import Path

import pytest

from broker.messaging.namespace import Namespace

from .test_journal import open_journal, persistent
from .test_journal_failures import limit_writer, settled

pytestmark = pytest.mark.timeout(120)


async def durable_answer(journal: object) -> bool:
    answers: list[bool] = []
    done = asyncio.Event()

    def answered(durable: bool) -> None:
        answers.append(durable)
        done.set()

    journal.page_reader.after_durable(answered)  # type: ignore[attr-defined]
    await asyncio.wait_for(done.wait(), 30)
    return answers[0]


def test_a_dead_letter_kept_from_a_failed_commit_holds_paging_back_until_committed(tmp_path: Path) -> None:
    ns = Namespace("v")
    journal = open_journal(tmp_path / "journal", ns)
    dlq = ns.declare_queue("dlq", durable=True)[0]
    dead = persistent(b"dead letter")

    async def main() -> None:
        journal.attach_loop(asyncio.get_running_loop())
        limit_writer(journal, 1)                        # every commit fails from now on
        journal.enqueued(dlq, dead, keep=True)          # in its queue already, row kept on failure
        failed = await settled(journal.pending)
        assert failed.error is not None and journal.failure is not None
        assert journal.pending is None and journal._in_flight is None
        assert not await durable_answer(journal)        # nothing open: but the dead letter waits

        limit_writer(journal, resource.RLIM_INFINITY)   # room again: the retry commits it
        dlq.enqueue(persistent(b"after"))
        assert journal.pending is not None
        assert await durable_answer(journal)
        assert not journal._kept_enqueues

    try:
        asyncio.run(main())
    finally:
        journal.close()
    ids = [r["message_id"] for r in journal.table.read("SELECT message_id FROM t WHERE event = 'enqueue'").to_pylist()]
    assert dead.journal_id in ids
