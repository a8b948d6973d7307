"""The paged-queue model (see ``test_paged_model``) with what it leaves out: time and limits.

Besides publishing, consuming, basic.get, requeueing, acknowledging and
purging, these runs let time pass (message TTL, per-message expiration, the
timers of a paged queue), reject without requeue (dead-lettering), cancel
the consumer (its unacknowledged messages come back), browse, take lease grants, publish transient
messages among persistent ones, make reads back fail
for a while, overflow a ``drop-head`` limit with a dead-letter exchange, and
finally delete the queue.  The paged queue and the same queue in memory must
deliver and dead-letter the same messages in the same order and hold the
same counts after every operation.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.messaging.paged_storage import RETRY_SECONDS
from broker.messaging.queue import Queue

from .support import FakeClock, RecordingConsumer, message
from .test_paged_model import Side, sizes_made_tiny
from .test_paged_model import check_same as check_same_delivered
from .test_paged_model import run as run_model

#: (priority, per-message expiration in seconds or None[, persistent])
publish_op = st.tuples(st.just("publish"), st.lists(
    st.one_of(st.tuples(st.integers(0, 4), st.sampled_from([None, 1, 3])),
              st.tuples(st.integers(0, 4), st.sampled_from([None, 1, 3]), st.booleans())),
    min_size=1, max_size=20))
operations = st.lists(st.one_of(
    publish_op, publish_op,
    st.tuples(st.just("consume"), st.integers(1, 25)), st.tuples(st.just("get"), st.integers(1, 6)),
    st.tuples(st.just("release"), st.integers(1, 8)), st.tuples(st.just("reject"), st.integers(1, 8)),
    st.tuples(st.just("ack"), st.just(0)), st.tuples(st.just("purge"), st.just(0)),
    st.tuples(st.just("tick"), st.integers(0, 3)), st.tuples(st.just("cancel"), st.just(0)),
    st.tuples(st.just("fail"), st.just(0)), st.tuples(st.just("flow"), st.booleans()),
    st.tuples(st.just("midread"), st.sampled_from(["purge", "flow", "release", "publish", "get"])),
    st.tuples(st.just("browse"), st.integers(1, 8)), st.tuples(st.just("lease"), st.integers(1, 8))),
    max_size=40)


class TimedSide(Side):
    """A :class:`Side` with a clock, a dead-letter queue and the operations above."""

    def __init__(self, arguments: dict[str, Any]) -> None:
        super().__init__({**arguments, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
        self.clock: FakeClock = self.ns.clock  # type: ignore[assignment]
        self.dlq: Queue = self.ns.declare_queue("dlq")[0]

    def dead_lettered(self) -> dict[int, list[bytes]]:
        """What was dead-lettered since the last call, per priority (in order within a priority).

        Across priorities the order may differ: a paged priority queue reads
        one level back at a time, so when several levels' heads expire (or
        are dropped) while on disk, they are dead-lettered level by level
        as they land.
        """
        bodies: dict[int, list[bytes]] = {}
        while (entry := self.dlq.get(no_ack=True)) is not None:
            bodies.setdefault(entry.message.priority, []).append(entry.message.body)
        return bodies

    def timers(self) -> None:
        """Run the queue's timers until nothing is due now (reads landing in between)."""
        now = self.clock.now
        for _ in range(1000):
            deadline = self.queue.next_deadline()
            if deadline is None or deadline > now:
                return
            self.queue.run_due(now)
            self.drain()
        raise AssertionError("a timer is due for ever")

    def apply(self, op: str, value: Any, serial: int) -> None:
        queue = self.queue
        if op == "publish":
            for offset, (priority, expiration, *persistent) in enumerate(value):
                props: dict[str, Any] = {"delivery_mode": 2 if persistent in ([], [True]) else 1,
                                         "priority": priority}
                if expiration is not None:
                    props["expiration"] = str(expiration * 1000)
                queue.enqueue(message(b"m-%d-%d" % (serial, offset), arrival=self.clock.now, **props))
            self.journal.complete()
            self.drain()
            self.delivered()
        elif op == "reject":
            back, self.outstanding = self.outstanding[-value:], self.outstanding[:-value]
            for entry in back:
                queue.reject(entry)
            self.drain()
            self.delivered()
        elif op == "tick":
            self.clock.advance(value)
            self.timers()
            self.delivered()
        elif op == "cancel":
            credit = self.consumer.credit
            queue.remove_consumer(self.consumer)
            back, self.outstanding = self.outstanding, []
            queue.release_many(back)
            self.drain()
            self.consumer = RecordingConsumer(credit=credit)
            queue.add_consumer(self.consumer)
            queue.dispatch()
            self.drain()
            self.delivered()
        elif op == "midread":
            # basic.get asks for the head (a paged queue starts reading it back); before the read
            # lands, something else happens to the queue
            queue.held_until
            if value == "purge":
                queue.purge()
            elif value == "flow":
                self.flow.threshold = 1 << 40
                self.flow.check([queue])
            elif value == "release":
                back, self.outstanding = self.outstanding[-3:], self.outstanding[:-3]
                queue.release_many(reversed(back))
            elif value == "publish":
                queue.enqueue(message(b"m-%d" % serial, arrival=self.clock.now, delivery_mode=2, priority=4))
                self.journal.complete()
            else:
                self.apply("get", 2, serial)
            self.drain()
            self.delivered()
        elif op == "browse":
            queue.browse(limit=value)       # (a paged queue sees less: what it sees is not compared)
            self.drain()
            self.delivered()
        elif op == "lease":
            # a lease consumer's grant (runs of the window, else basic.get), asking again while the
            # head is being read back; settled at once
            wanted = value
            while wanted > 0:
                run = queue.take_run(wanted)
                if run is not None:
                    self.got += [(message.body, False) for message in run.messages]
                    queue.settle_run(run)
                    wanted -= len(run)
                    continue
                entry = queue.get(no_ack=True)
                if entry is None and queue.held_until is not None:
                    self.drain()
                    continue
                if entry is None:
                    break
                self.got.append((entry.message.body, entry.redelivered))
                wanted -= 1
            self.drain()
            self.delivered()
        elif op == "fail":
            # the reads in flight fail; the disk comes back a retry later
            reader = self.journal.page_reader
            reader.fail_with = OSError("disk gone")
            reader.finish()
            reader.fail_with = None
            self.clock.advance(RETRY_SECONDS)
            self.timers()
            self.drain()
            self.delivered()
        else:
            super().apply(op, value, serial)
        # the broker's timers run between operations: an expired head leaves the queue as soon as
        # it is at the head (a paged queue may expire it earlier, when a read back lands)
        self.timers()
        self.delivered()


def check_same(paged: TimedSide, plain: TimedSide) -> None:
    check_same_delivered(paged, plain)
    assert paged.dead_lettered() == plain.dead_lettered()


def run(operations: list[tuple[str, Any]], arguments: dict[str, Any], lazy: bool) -> None:
    paged, plain = run_model(operations, arguments, lazy, TimedSide, check_same)
    with sizes_made_tiny():
        for side in (paged, plain):                 # a deleted queue answers nothing, however asked
            side.apply("publish", [(1, None)] * 5, len(operations) + 1)
            side.consumer.credit = 0
            side.apply("publish", [(2, None)] * 9, len(operations) + 2)
            side.ns.delete_queue("q")
            side.drain()
            assert side.queue.get() is None and side.queue.held_until is None
            assert side.queue.message_count == 0 and side.queue.message_bytes == 0
        check_same(paged, plain)


@pytest.mark.parametrize(("arguments", "lazy"), [
    ({"x-message-ttl": 2000}, True), ({"x-message-ttl": 2000, "x-max-priority": 4}, True),
    ({"x-max-length": 6}, True), ({"x-max-length": 6, "x-max-priority": 4}, True),
    ({"x-message-ttl": 2000}, False), ({"x-max-length": 6, "x-max-priority": 4}, False),
    ({}, True), ({"x-max-priority": 4}, True)],
    ids=["lazy-ttl", "lazy-priority-ttl", "lazy-drop-head", "lazy-priority-drop-head", "threshold-ttl",
         "threshold-priority-drop-head", "lazy-expiration", "lazy-priority-expiration"])
@settings(max_examples=150, deadline=None)
@given(ops=operations)
def test_a_paged_queue_expires_drops_and_dead_letters_what_the_same_queue_in_memory_does(
        arguments: dict[str, Any], lazy: bool, ops: list[tuple[str, Any]]) -> None:
    run(ops, arguments, lazy)
