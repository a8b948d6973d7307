"""Paged queues: cases the model tests found, kept as plain tests (tiny sizes, see ``test_paged_model``)."""

from __future__ import annotations

from .support import message
from .test_paged_model_more import run


def test_a_durable_wait_answered_after_paging_stopped_is_ignored() -> None:
    # the threshold pages a priority queue, then stops; the queue becomes plain again while the
    # journal still holds the wait for its tails: answering it must not fail (nor touch the queue)
    ops = [("publish", [(0, None)] * 7), ("flow", True), ("flow", False)]
    run(ops, {"x-max-length": 6, "x-max-priority": 4}, lazy=False)
    run(ops, {"x-max-length": 6}, lazy=False)


def test_a_message_with_its_own_expiration_paged_when_paging_started_expires_without_a_consumer() -> None:
    # the message was in memory when the threshold started paging the queue: paged by the spill,
    # not by an arrival, it must still be read back to expire (and be dead-lettered) on time
    ops = [("publish", [(1, None), (0, 1)]), ("flow", True), ("publish", [(0, None)]), ("tick", 1)]
    run(ops, {"x-max-priority": 4}, lazy=False)
    run([("publish", [(0, None), (0, 1)]), ("flow", True), ("tick", 1)], {}, lazy=False)


def test_a_read_landing_after_a_purge_and_the_end_of_paging_is_ignored() -> None:
    from broker.messaging.paged_storage import PagedStorage

    from .test_paged_model_more import TimedSide, sizes_made_tiny

    with sizes_made_tiny():
        side = TimedSide({})
        side.apply("publish", [(0, None)] * 12, 0)
        side.apply("flow", True, 1)
        queue = side.queue
        assert isinstance(queue, PagedStorage) and queue.paged_count
        side.consumer.credit = 3                        # the window is taken, the next one is being read
        queue.dispatch()
        reads = len(side.journal.page_reader.pending)
        assert reads == 1
        queue.purge()
        assert queue.held_until is None and queue.message_count == 0
        side.flow.threshold = 1 << 40                   # the broker no longer flows to disk
        side.flow.check([queue])
        side.consumer.entries.clear()
        for index in range(2):
            queue.enqueue(message(b"late-%d" % index, delivery_mode=2))
        side.journal.complete()
        side.consumer.credit = 100
        queue.dispatch()
        assert not isinstance(queue, PagedStorage)      # plain again
        assert len(side.journal.page_reader.pending) == reads
        side.drain()                                    # the read the purge voided lands: ignored
        assert side.consumer.bodies == [b"late-0", b"late-1"]
        assert queue.message_count == 0 and queue.unacked_count == 5


def test_a_lease_grant_taking_the_window_as_a_run_reads_the_next_one_ahead() -> None:
    # a lease consumer takes the window's messages as one run; the next grant must not find the
    # head on disk with no read asked for (it would come back empty while the queue holds messages)
    from broker.messaging.paged_queue import WINDOW

    from .test_paged_queue import publish, setup

    _, journal, queue = setup({"x-queue-mode": "lazy"})
    publish(journal, queue, 3 * WINDOW)
    assert queue.get() is None and journal.page_reader.finish() == 1     # basic.get: the first window is in
    run = queue.take_run(WINDOW)
    assert run is not None and len(run) == WINDOW
    assert len(journal.page_reader.pending) == 1                        # the next window is on its way
    journal.page_reader.finish()
    run = queue.take_run(WINDOW)
    assert run is not None and len(run) == WINDOW and run.messages[0].body == b"body-%d" % WINDOW
