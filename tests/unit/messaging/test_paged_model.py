"""A paged queue delivers exactly what the same queue in memory delivers, whatever happens to it.

Random runs of publishing (random priorities), consuming with credit,
basic.get, requeueing, acknowledging, purging, and the broker starting and
stopping to flow to disk, against two queues given the same operations: one
that pages (lazy, or paged by the threshold) and one that never does.
After each operation every read back has landed, and both must have
delivered the same messages in the same order with the same redelivered
flags, and hold the same counts: nothing lost, nothing twice, nothing out of
order at any transition (window, segments, tails, reads, requeues, paging
starting and stopping).  The sizes (window, chunk, segment, spill step) are
made tiny so that a short run crosses every boundary many times.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any, Callable
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import broker.messaging.page_segments as page_segments
import broker.messaging.paged_priority_queue as paged_priority_queue
import broker.messaging.paged_queue as paged_queue
import broker.messaging.paged_storage as paged_storage
from broker.messaging.flow_to_disk import FlowToDisk
from broker.messaging.namespace import Namespace
from broker.messaging.paged_storage import PagedStorage
from broker.messaging.queue import Queue, QueueEntry

from .paging_fake import PagingJournal
from .support import FakeClock, RecordingConsumer, message

publish_op = st.tuples(st.just("publish"), st.lists(st.integers(0, 4), min_size=1, max_size=30))
consume_op = st.tuples(st.just("consume"), st.integers(1, 25))
get_op = st.tuples(st.just("get"), st.integers(1, 6))
release_op = st.tuples(st.just("release"), st.integers(1, 8))
operations = st.lists(st.one_of(
    publish_op, publish_op, consume_op, get_op, release_op,
    st.tuples(st.just("ack"), st.just(0)), st.tuples(st.just("purge"), st.just(0)),
    st.tuples(st.just("flow"), st.booleans())), max_size=40)


class Side:
    """One queue, its journal, its consumer and what it was handed."""

    def __init__(self, arguments: dict[str, Any]) -> None:
        self.ns = Namespace("v", FakeClock())
        self.journal = PagingJournal()
        self.ns.journal = self.journal  # type: ignore[assignment]
        self.queue: Queue = self.ns.declare_queue("q", durable=True, arguments=arguments)[0]
        self.consumer = RecordingConsumer(credit=0)
        self.queue.add_consumer(self.consumer)
        self.got: list[tuple[bytes, bool]] = []
        self.outstanding: list[QueueEntry] = []
        self.flow = FlowToDisk()

    def drain(self) -> None:
        reader = self.journal.page_reader
        for _ in range(10_000):
            if not reader.finish():
                return
        raise AssertionError("reads never stop")

    def delivered(self) -> None:
        for entry in self.consumer.entries:
            self.got.append((entry.message.body, entry.redelivered))
            self.outstanding.append(entry)
        self.consumer.entries.clear()

    def apply(self, op: str, value: Any, serial: int) -> None:
        queue = self.queue
        if op == "publish":
            for offset, priority in enumerate(value):
                queue.enqueue(message(b"m-%d-%d" % (serial, offset), delivery_mode=2, priority=priority))
            self.journal.complete()
        elif op == "consume":
            self.consumer.credit = (self.consumer.credit or 0) + value
            queue.dispatch()
        elif op == "get":
            for _ in range(value):
                entry = queue.get()
                while entry is None and queue.held_until is not None:
                    self.drain()                # basic.get waits for the read of the head
                    entry = queue.get()
                if entry is None:
                    break
                self.got.append((entry.message.body, entry.redelivered))
                self.outstanding.append(entry)
        elif op == "release":
            back, self.outstanding = self.outstanding[-value:], self.outstanding[:-value]
            queue.release_many(reversed(back))
        elif op == "ack":
            for entry in self.outstanding:
                queue.settle(entry)
            self.outstanding = []
        elif op == "purge":
            queue.purge()
        elif op == "flow":
            self.flow.threshold = 1 if value else 1 << 40
            self.flow.check([queue])
        self.drain()
        self.delivered()


def sizes_made_tiny() -> ExitStack:
    stack = ExitStack()
    for module, name, value in ((paged_storage, "WINDOW", 3), (paged_storage, "PAGE_CHUNK", 4),
                                (paged_queue, "PAGE_CHUNK", 4), (paged_priority_queue, "PAGE_CHUNK", 4),
                                (paged_storage, "SPILL_CHUNK", 5), (page_segments, "SEGMENT_SIZE", 7)):
        stack.enter_context(mock.patch.object(module, name, value))
    return stack


def check_same(paged: Side, plain: Side) -> None:
    assert paged.got == plain.got
    assert paged.queue.message_count == plain.queue.message_count
    assert paged.queue.message_bytes == plain.queue.message_bytes
    assert paged.queue.unacked_count == plain.queue.unacked_count
    assert 0 <= paged.queue.paged_count <= paged.queue.message_count


def run(operations: list[tuple[str, Any]], arguments: dict[str, Any], lazy: bool,
        side: Callable[[dict[str, Any]], Side] = Side,
        check: Callable[[Any, Any], None] = check_same) -> tuple[Side, Side]:
    """Apply ``operations`` to a paged and a plain queue, checking after each; both sides."""
    with sizes_made_tiny():
        paged = side({**arguments, "x-queue-mode": "lazy"} if lazy else arguments)
        plain = side(arguments)
        assert isinstance(paged.queue, PagedStorage) == lazy
        for serial, (op, value) in enumerate(operations):
            if op == "flow" and lazy:
                continue
            paged.apply(op, value, serial)
            if op != "flow":
                plain.apply(op, value, serial)
            check(paged, plain)
        for each in (paged, plain):                 # in the end, everything left is delivered
            each.apply("consume", 10_000, len(operations))
        check(paged, plain)
        assert paged.queue.message_count == 0 and paged.queue.paged_count == 0
    return paged, plain


@pytest.mark.parametrize(("arguments", "lazy"), [({}, True), ({"x-max-priority": 4}, True), ({}, False),
                                               ({"x-max-priority": 4}, False)],
                         ids=["lazy", "lazy-priority", "threshold", "threshold-priority"])
@settings(max_examples=150, deadline=None)
@given(ops=operations)
def test_a_paged_queue_delivers_what_the_same_queue_in_memory_delivers(
        arguments: dict[str, Any], lazy: bool, ops: list[tuple[str, Any]]) -> None:
    run(ops, arguments, lazy)
