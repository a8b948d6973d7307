"""Paged queues: cases the model tests found, kept as plain tests (tiny sizes, see ``test_paged_model``)."""

from __future__ import annotations

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
