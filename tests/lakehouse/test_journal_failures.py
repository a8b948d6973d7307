"""The journal when its commits fail: nothing failed is enqueued, no settlement is lost.

The writer process is made to fail for real: its file size limit (RLIMIT_FSIZE,
set from outside with prlimit) makes every write of a commit fail with EFBIG,
as a full disk fails it with ENOSPC, without needing a file system to fill.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from pathlib import Path

import pytest

from broker.messaging.journal import Durability
from broker.messaging.namespace import Namespace
from broker.messaging.queue import Queue
from lakehouse.journal import DeltaMessageJournal

from .test_journal import open_journal, persistent

pytestmark = pytest.mark.timeout(120)


async def settled(group: Durability | None) -> Durability:
    """Wait until ``group``'s commit has finished (durably or not)."""
    assert group is not None
    done = asyncio.Event()
    group.when_durable(done.set)
    await asyncio.wait_for(done.wait(), 30)
    return group


def limit_writer(journal: DeltaMessageJournal, size: int) -> None:
    writer = journal._writer
    assert writer is not None
    resource.prlimit(writer.pid, resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))


def bodies(queue: Queue) -> list[bytes]:
    got = []
    while (entry := queue.get(no_ack=True)) is not None:
        got.append(entry.message.body)
    return got


def test_failed_enqueues_vanish_and_failed_acks_are_committed_later(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> None:
    ns = Namespace("v")
    journal = open_journal(tmp_path / "journal", ns)
    q = ns.declare_queue("q", durable=True)[0]

    async def main() -> None:
        journal.attach_loop(asyncio.get_running_loop())
        for body in (b"acked", b"unacked", b"bounced"):
            q.enqueue(persistent(body))
        await settled(journal.pending)
        acked, unacked, bounced = q.get(), q.get(), q.get()
        assert acked is not None and unacked is not None and bounced is not None

        limit_writer(journal, 1)                       # from now on every commit fails
        q.settle(acked)
        q.enqueue(persistent(b"nacked"))
        failed = await settled(journal.pending)
        assert isinstance(failed.error, OSError) and "File too large" in str(failed.error)
        assert q.message_count == 0 and q.held_count == 0     # "nacked" was never enqueued

        for _ in range(200):                          # a consumer bouncing a message, on and on
            q.release(bounced)
            bounced = q.get()
            assert bounced is not None
        q.release(bounced)
        await settled(journal.pending)
        assert journal.failure is not None
        assert journal.kept_rows == 2                 # acked's settle, bounced's last requeue

        limit_writer(journal, resource.RLIM_INFINITY)  # the disk has room again
        q.enqueue(persistent(b"later"))
        group = await settled(journal.pending)
        assert group.error is None and journal.failure is None and journal.kept_rows == 0
        assert bodies(q) == [b"bounced", b"later"]
        q.release(unacked)

    with caplog.at_level(logging.INFO, logger="lakehouse.journal"):
        asyncio.run(main())
    journal.close()
    states = [r.getMessage() for r in caplog.records if "commits" in r.getMessage()]
    assert len(states) == 2
    assert states[0].startswith("journal of virtual host 'v': commits failing: journal: ")
    assert "File too large" in states[0]
    assert states[1].startswith("journal of virtual host 'v': commits succeed again")
    assert "Traceback" not in capfd.readouterr().err   # nor from the writer process

    # after a restart: the ack made while commits failed holds, the failed publish never was
    ns2 = Namespace("v")
    ns2.declare_queue("q", durable=True)
    recovered = open_journal(tmp_path / "journal", ns2)
    recovered.recover(ns2)
    assert bodies(ns2.queues["q"]) == [b"unacked"]
    recovered.close()



def test_while_commits_fail_messages_are_not_sent_to_the_writer_again_and_again(tmp_path: Path) -> None:
    """Memory stays bounded: what arrives while commits fail waits for a small attempt and fails with it."""
    ns = Namespace("v")
    journal = open_journal(tmp_path / "journal", ns)
    q = ns.declare_queue("q", durable=True)[0]

    async def main() -> None:
        journal.attach_loop(asyncio.get_running_loop())
        limit_writer(journal, 1)
        q.enqueue(persistent(b"first"))
        assert (await settled(journal.pending)).error is not None     # commits fail from here on
        sent = journal.sent_rows
        for _ in range(5):
            for _ in range(1000):
                q.enqueue(persistent(b"x" * 1024))
            assert (await settled(journal.pending)).error is not None
        assert journal.sent_rows == sent                  # probes only: no message went to the writer
        assert q.held_count == 0 and q.message_count == 0
        limit_writer(journal, resource.RLIM_INFINITY)
        q.enqueue(persistent(b"room again"))
        assert (await settled(journal.pending)).error is None
        assert journal.sent_rows == sent + 1

    asyncio.run(main())
    journal.close()
