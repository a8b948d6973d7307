from __future__ import annotations

import datetime
from typing import Any

import pytest

from broker.messaging import Message, Namespace, Queue

from .support import FakeClock, message

WALL = 1_700_000_000.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(50.0)


@pytest.fixture
def wall() -> FakeClock:
    return FakeClock(WALL)


@pytest.fixture
def namespace(clock: FakeClock, wall: FakeClock) -> Namespace:
    return Namespace("v", clock, wall_clock=wall)


def reject_one(queue: Queue) -> None:
    entry = queue.get()
    assert entry is not None
    queue.reject(entry)


def take(queue: Queue) -> Message:
    entry = queue.get(no_ack=True)
    assert entry is not None
    return entry.message


def test_rejected_message_gets_rabbitmq_x_death(namespace: Namespace, clock: FakeClock) -> None:
    namespace.declare_exchange("dlx", "direct")
    namespace.declare_queue("dead")
    namespace.bind_queue("dead", "dlx", "orders.created")
    work, _, _ = namespace.declare_queue("work", arguments={"x-dead-letter-exchange": "dlx"})
    namespace.bind_queue("work", "amq.direct", "orders.created")
    original = message("order", exchange="amq.direct", routing_key="orders.created",
                       headers={"CC": ["audit"], "app": 1}, content_type="text/plain")
    for queue in namespace.route("amq.direct", original):
        queue.enqueue(original)
    clock.advance(3)
    reject_one(work)
    dead = take(namespace.queue("dead"))
    headers = dead.headers
    assert headers["x-death"] == [{
        "count": 1, "reason": "rejected", "queue": "work",
        "time": datetime.datetime.fromtimestamp(int(WALL), datetime.timezone.utc),
        "exchange": "amq.direct", "routing-keys": ["orders.created", "audit"],
    }]
    assert headers["x-first-death-reason"] == "rejected"
    assert headers["x-first-death-queue"] == "work"
    assert headers["x-first-death-exchange"] == "amq.direct"
    assert headers["app"] == 1 and dead.properties.content_type == "text/plain"
    assert dead.exchange == "dlx" and dead.routing_key == "orders.created"
    assert dead.body == b"order" and dead.arrival == clock.now


def test_dead_letter_routing_key_overrides(namespace: Namespace) -> None:
    namespace.declare_queue("parking")
    work, _, _ = namespace.declare_queue("work", arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "parking"})
    work.enqueue(message("m", routing_key="work"))
    reject_one(work)
    dead = take(namespace.queue("parking"))
    assert dead.routing_key == "parking"
    assert dead.headers["x-death"][0]["routing-keys"] == ["work"]


def test_repeat_deaths_increment_count_and_move_to_front(namespace: Namespace, wall: FakeClock) -> None:
    """work -(rejected)-> retry -(expired)-> work -(rejected)-> retry ..."""
    work, _, _ = namespace.declare_queue("work", arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "retry"})
    retry, _, _ = namespace.declare_queue("retry", arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "work", "x-message-ttl": 0})
    work.enqueue(message("job", routing_key="work"))
    reject_one(work)  # -> retry, which expires it at once (TTL 0) -> back to work
    assert retry.message_count == 0 and work.message_count == 1
    wall.advance(60)
    reject_one(work)
    assert work.message_count == 1
    deaths = take(work).headers["x-death"]
    assert [(d["queue"], d["reason"], d["count"]) for d in deaths] == [
        ("retry", "expired", 2), ("work", "rejected", 2)]
    # the time of an entry is when it was first recorded
    assert deaths[1]["time"] == datetime.datetime.fromtimestamp(int(WALL), datetime.timezone.utc)


def test_first_death_headers_are_never_changed(namespace: Namespace) -> None:
    one, _, _ = namespace.declare_queue("one", arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "two"})
    two, _, _ = namespace.declare_queue("two", arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "three", "x-max-length": 0})
    namespace.declare_queue("three")
    one.enqueue(message("m", routing_key="one", exchange="origin"))
    reject_one(one)  # -> two, over its max length at once -> three
    headers = take(namespace.queue("three")).headers
    assert headers["x-first-death-reason"] == "rejected" and headers["x-first-death-queue"] == "one"
    assert headers["x-first-death-exchange"] == "origin"
    assert headers["x-last-death-reason"] == "maxlen" and headers["x-last-death-queue"] == "two"
    assert [d["reason"] for d in headers["x-death"]] == ["maxlen", "rejected"]


def test_expiry_cycle_back_to_same_queue_is_dropped(namespace: Namespace, clock: FakeClock) -> None:
    queue, _, _ = namespace.declare_queue("loop", arguments={
        "x-dead-letter-exchange": "", "x-message-ttl": 10})
    queue.enqueue(message("m", routing_key="loop", arrival=clock.now))
    namespace.run_due(clock.advance(1))
    assert queue.message_count == 0


def test_rejection_cycle_back_to_same_queue_is_allowed(namespace: Namespace) -> None:
    queue, _, _ = namespace.declare_queue("loop", arguments={"x-dead-letter-exchange": ""})
    queue.enqueue(message("m", routing_key="loop"))
    reject_one(queue)
    again = take(queue)
    assert again.headers["x-death"][0]["count"] == 1


def test_missing_dead_letter_exchange_drops_message(namespace: Namespace) -> None:
    queue, _, _ = namespace.declare_queue("q", arguments={"x-dead-letter-exchange": "nowhere"})
    queue.enqueue(message("m"))
    reject_one(queue)
    assert queue.message_count == 0 and queue.unacked_count == 0


def test_dead_letter_follows_exchange_bindings_and_fans_out(namespace: Namespace) -> None:
    namespace.declare_exchange("dlx", "fanout")
    namespace.declare_exchange("inner", "fanout", internal=True)
    namespace.bind_exchange("inner", "dlx", "")
    for name in ("d1", "d2"):
        namespace.declare_queue(name)
        namespace.bind_queue(name, "inner", "")
    queue, _, _ = namespace.declare_queue("q", arguments={"x-dead-letter-exchange": "dlx"})
    queue.enqueue(message("m"))
    reject_one(queue)
    first, second = take(namespace.queue("d1")), take(namespace.queue("d2"))
    assert first is second  # one dead-lettered copy, shared


def test_existing_x_death_from_wire_bytes_is_understood(namespace: Namespace) -> None:
    queue, _, _ = namespace.declare_queue("q", arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"})
    namespace.declare_queue("dead")
    earlier: dict[str, Any] = {"count": 4, "reason": b"rejected", "queue": b"q", "exchange": b"",
                               "routing-keys": [b"q"]}
    queue.enqueue(message("m", headers={"x-death": [earlier], "x-first-death-reason": b"rejected"}))
    reject_one(queue)
    deaths = take(namespace.queue("dead")).headers["x-death"]
    assert len(deaths) == 1 and deaths[0]["count"] == 5
