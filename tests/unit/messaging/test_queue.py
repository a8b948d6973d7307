from __future__ import annotations

import pytest

from broker.errors import AccessRefused
from broker.messaging import Queue, create_queue
from broker.messaging.queue import ACQUIRED, AVAILABLE, SETTLED

from .support import FakeClock, RecordingConsumer, drain, message


def fill(queue: Queue, *bodies: str) -> None:
    for body in bodies:
        assert queue.enqueue(message(body))


def test_fifo_order_and_counts() -> None:
    queue = Queue("q", vhost="v")
    fill(queue, "a", "b", "c")
    assert queue.message_count == 3 and queue.message_bytes == 3
    assert drain(queue) == [b"a", b"b", b"c"]
    assert queue.message_count == 0 and queue.message_bytes == 0


def test_get_acquires_until_settled() -> None:
    queue = Queue("q")
    fill(queue, "a", "b")
    entry = queue.get()
    assert entry is not None and entry.message.body == b"a" and entry.state == ACQUIRED
    assert entry.queue is queue and entry.delivery_count == 0 and entry.redelivered is False
    assert queue.message_count == 1 and queue.unacked_count == 1
    queue.settle(entry)
    assert entry.state == SETTLED and queue.unacked_count == 0
    queue.settle(entry)  # a second settle changes nothing
    assert queue.unacked_count == 0
    assert queue.get(no_ack=True) is not None and queue.unacked_count == 0
    assert queue.get() is None


def test_enqueue_with_waiting_consumer_delivers_immediately() -> None:
    queue = Queue("q")
    consumer = RecordingConsumer()
    queue.add_consumer(consumer)
    fill(queue, "a")
    assert consumer.bodies == [b"a"]
    assert queue.message_count == 0 and queue.unacked_count == 1
    assert consumer.entries[0].state == ACQUIRED


def test_add_consumer_does_not_deliver_until_dispatch() -> None:
    queue = Queue("q")
    fill(queue, "a", "b")
    consumer = RecordingConsumer()
    queue.add_consumer(consumer)
    assert consumer.entries == []
    queue.dispatch()
    assert consumer.bodies == [b"a", b"b"]


def test_round_robin_across_consumers() -> None:
    queue = Queue("q")
    first, second, third = RecordingConsumer("1"), RecordingConsumer("2"), RecordingConsumer("3")
    for consumer in (first, second, third):
        queue.add_consumer(consumer)
    fill(queue, *"abcdefg")
    assert first.bodies == [b"a", b"d", b"g"]
    assert second.bodies == [b"b", b"e"]
    assert third.bodies == [b"c", b"f"]


def test_consumer_without_credit_is_skipped_and_dispatch_resumes_on_credit() -> None:
    queue = Queue("q")
    busy = RecordingConsumer("busy", credit=0)
    free = RecordingConsumer("free", credit=2)
    queue.add_consumer(busy)
    queue.add_consumer(free)
    fill(queue, "a", "b", "c", "d")
    assert busy.bodies == [] and free.bodies == [b"a", b"b"]
    assert queue.message_count == 2
    busy.credit = 1
    queue.dispatch()
    assert busy.bodies == [b"c"]
    free.credit = 5
    queue.dispatch()
    assert free.bodies == [b"a", b"b", b"d"] and queue.message_count == 0


def test_no_ack_consumer_entries_are_settled_at_delivery() -> None:
    queue = Queue("q")
    consumer = RecordingConsumer(no_ack=True)
    queue.add_consumer(consumer)
    fill(queue, "a", "b")
    assert [entry.state for entry in consumer.entries] == [SETTLED, SETTLED]
    assert queue.unacked_count == 0 and queue.message_count == 0


def test_release_returns_to_original_position_ahead_of_newer_messages() -> None:
    queue = Queue("q")
    fill(queue, *"abcde")
    a, b, c = queue.get(), queue.get(), queue.get()
    assert a and b and c
    fill(queue, "f")
    queue.release(c)
    queue.release(a)
    assert a.state == AVAILABLE and a.redelivered and a.delivery_count == 1
    assert queue.message_count == 5 and queue.unacked_count == 1
    order = []
    while (entry := queue.get()) is not None:
        order.append((entry.message.body, entry.redelivered))
    assert order == [(b"a", True), (b"c", True), (b"d", False), (b"e", False), (b"f", False)]


def test_release_redelivers_to_consumer_with_count() -> None:
    queue = Queue("q")
    consumer = RecordingConsumer()
    queue.add_consumer(consumer)
    fill(queue, "a")
    entry = consumer.entries[0]
    queue.release(entry)
    assert consumer.entries == [entry, entry]
    assert entry.redelivered and entry.delivery_count == 1 and entry.state == ACQUIRED


def test_release_many_keeps_order_and_dispatches_once() -> None:
    queue = Queue("q")
    fill(queue, *"abc")
    entries = [queue.get() for _ in range(3)]
    consumer = RecordingConsumer()
    queue.add_consumer(consumer)
    queue.release_many(reversed(entries))  # type: ignore[arg-type]
    assert consumer.bodies == [b"a", b"b", b"c"]


def test_reject_without_dlx_discards() -> None:
    queue = Queue("q")
    fill(queue, "a")
    entry = queue.get()
    assert entry is not None
    queue.reject(entry)
    assert entry.state == SETTLED and queue.message_count == 0 and queue.unacked_count == 0


def test_entry_methods_delegate_to_queue() -> None:
    queue = Queue("q")
    fill(queue, "a", "b")
    first, second = queue.get(), queue.get()
    assert first and second
    first.settle()
    second.release()
    assert first.state == SETTLED and second.state == AVAILABLE and second.acquired is False


def test_single_active_consumer_fails_over_in_registration_order() -> None:
    queue = create_queue("q", arguments={"x-single-active-consumer": True})
    first, second, third = RecordingConsumer("1"), RecordingConsumer("2"), RecordingConsumer("3")
    for consumer in (first, second, third):
        queue.add_consumer(consumer)
    fill(queue, "a", "b")
    assert first.bodies == [b"a", b"b"] and second.bodies == [] and third.bodies == []
    first.credit = 0
    fill(queue, "c")
    assert second.bodies == [] and queue.message_count == 1  # inactive consumers wait
    queue.remove_consumer(first)
    assert second.bodies == [b"c"]
    fill(queue, "d")
    assert second.bodies == [b"c", b"d"] and third.bodies == []


def test_exclusive_consumer_refuses_others() -> None:
    queue = Queue("q", vhost="v")
    owner = RecordingConsumer("owner")
    queue.add_consumer(owner, exclusive=True)
    with pytest.raises(AccessRefused) as caught:
        queue.add_consumer(RecordingConsumer("other"))
    assert caught.value.reply_text == "ACCESS_REFUSED - queue 'q' in vhost 'v' in exclusive use"
    with pytest.raises(AccessRefused):
        queue.add_consumer(RecordingConsumer("other"), exclusive=True)
    queue.remove_consumer(owner)
    queue.add_consumer(RecordingConsumer("next"))
    assert queue.consumer_count == 1


def test_exclusive_consumer_refused_when_any_consumer_exists() -> None:
    queue = Queue("q", vhost="v")
    queue.add_consumer(RecordingConsumer("plain"))
    with pytest.raises(AccessRefused) as caught:
        queue.add_consumer(RecordingConsumer("greedy"), exclusive=True)
    assert caught.value.text == "queue 'q' in vhost 'v' in exclusive use"
    assert queue.consumer_count == 1


def test_remove_consumer_keeps_round_robin_fair() -> None:
    queue = Queue("q")
    consumers = [RecordingConsumer(str(i)) for i in range(3)]
    for consumer in consumers:
        queue.add_consumer(consumer)
    fill(queue, "a", "b")  # to 0 and 1; next is 2
    queue.remove_consumer(consumers[0])
    fill(queue, "c", "d")
    assert consumers[2].bodies == [b"c"] and consumers[1].bodies == [b"b", b"d"]
    queue.remove_consumer(RecordingConsumer("stranger"))  # unknown consumer: no-op
    assert queue.consumer_count == 2


def test_purge_drops_ready_but_not_unacked() -> None:
    queue = Queue("q")
    fill(queue, "a", "b", "c")
    held = queue.get()
    assert queue.purge() == 2
    assert queue.message_count == 0 and queue.unacked_count == 1
    assert held is not None
    queue.release(held)
    assert drain(queue) == [b"a"]


def test_delete_cancels_consumers_and_refuses_enqueue() -> None:
    queue = Queue("q")
    consumer = RecordingConsumer(credit=1)
    queue.add_consumer(consumer)
    fill(queue, "a", "b")
    assert queue.delete() == 1
    assert consumer.cancelled_by == [queue] and queue.deleted and queue.consumer_count == 0
    assert queue.enqueue(message("late")) is False
    queue.release(consumer.entries[0])  # ignored
    assert queue.message_count == 0 and consumer.entries[0].state == SETTLED


def test_consumer_delivery_reentrancy_keeps_order() -> None:
    """A consumer that publishes to the same queue from deliver() must not jump the queue."""
    queue = Queue("q")

    class Echo(RecordingConsumer):
        def deliver(self, entry):  # type: ignore[no-untyped-def]
            super().deliver(entry)
            if entry.message.body == b"a":
                queue.enqueue(message("echo"))

    echo = Echo()
    fill(queue, "a", "b")
    queue.add_consumer(echo)
    queue.dispatch()
    assert echo.bodies == [b"a", b"b", b"echo"]


def test_last_consumer_leaving_restarts_expiry_clock() -> None:
    clock = FakeClock()
    queue = create_queue("q", arguments={"x-expires": 1000}, clock=clock)
    consumer = RecordingConsumer()
    queue.add_consumer(consumer)
    assert queue.next_deadline() is None
    clock.advance(5)
    queue.remove_consumer(consumer)
    assert queue.next_deadline() == pytest.approx(clock.now + 1)


def test_unacked_bytes_follow_deliveries_until_they_are_settled() -> None:
    # what the memory alarm counts besides the ready bytes
    queue = Queue("q")
    fill(queue, "aaaa", "bb", "c", "dddddddd")
    first, second, third = queue.get(), queue.get(), queue.get()
    assert first is not None and second is not None and third is not None
    assert queue.unacked_bytes == 7 and queue.message_bytes == 8
    queue.settle(first)
    assert queue.unacked_bytes == 3
    queue.release(second)                       # back to ready
    assert queue.unacked_bytes == 1 and queue.message_bytes == 10
    queue.reject(third)
    assert queue.unacked_bytes == 0
    consumer = RecordingConsumer()
    queue.add_consumer(consumer)
    queue.dispatch()                             # delivered to a consumer: unacked again
    assert queue.unacked_bytes == 10 and queue.message_bytes == 0
    queue.remove_consumer(consumer)
    queue.release_many(list(consumer.entries))
    assert queue.unacked_bytes == 0 and queue.message_bytes == 10


@pytest.mark.parametrize(("kind", "arguments"), [
    ("standard", {}), ("priority", {"x-max-priority": 3}), ("lvq", {"x-last-value-key": "k"}),
    ("sorted", {"qpid.queue_sort_key": "k"})])
def test_every_queue_kind_keeps_its_state_in_slots(kind: str, arguments: dict[str, object]) -> None:
    """The queue's parts (consumers, held arrivals) add no per-queue __dict__."""
    queue = create_queue("q", arguments=dict(arguments))
    assert queue.settings.kind == kind
    assert not hasattr(queue, "__dict__")
