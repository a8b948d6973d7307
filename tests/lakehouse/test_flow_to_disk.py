"""Flow to disk with the Delta journal: paging after durable commits, reading back, paged recovery.

A real journal in a tmp directory, its writer process, the event loop; the
queue side in memory (broker.messaging.paged_queue), the reader is
lakehouse.page_reads over lakehouse.message_pages.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from broker.messaging.flow_to_disk import FlowToDisk
from broker.messaging.message import Message, MessageProperties
from broker.messaging.namespace import Namespace
from broker.messaging.paged_queue import PAGE_CHUNK, WINDOW, PagedPriorityQueue, PagedQueue
from broker.messaging.priority_queue import PriorityQueue
from broker.messaging.queue import Queue, QueueEntry
from broker.protocol.amqp0_9_1.properties import FORMAT, encode_properties
from broker.protocol.amqp1_0.message_format import message_from_transfer, transfer_payload
from broker.protocol.amqp1_0.sections import encode_sections
from broker.protocol.amqp1_0.types import ApplicationProperties, Data, Header, Properties
from lakehouse.journal import DeltaMessageJournal
from tests.waiting import wait_until_async


def message_0_9_1(index: int) -> Message:
    properties = MessageProperties(delivery_mode=2, message_id=f"m-{index}", headers={"i": index},
                                   content_type="text/plain")
    return Message(exchange="", routing_key="q", body=b"body %d " % index + b"x" * 200, properties=properties,
                   native=encode_properties(properties), format=FORMAT, arrival=time.monotonic())


def payload_1_0(index: int) -> bytes:
    return encode_sections([Header(durable=True), Properties(message_id=f"m-{index}"),
                            ApplicationProperties({"i": index}), Data(b"body %d " % index + b"y" * 200)])


def message_1_0(index: int) -> Message:
    return message_from_transfer(payload_1_0(index), exchange="", routing_key="q", arrival=time.monotonic())


def make(index: int) -> Message:
    return message_1_0(index) if index % 3 == 0 else message_0_9_1(index)


def check(entries: list[QueueEntry], count: int, start: int = 0) -> None:
    assert len(entries) == count
    for offset, entry in enumerate(entries):
        index = start + offset
        message = entry.message
        if index % 3 == 0:
            assert message.format_tag == "amqp-1.0"
            assert transfer_payload(message, delivery_count=0, first_acquirer=False) == payload_1_0(index)
        else:
            assert message.format_tag == FORMAT.tag
            assert message.body == b"body %d " % index + b"x" * 200
            assert message.properties.content_type == "text/plain"
        assert message.properties.message_id == f"m-{index}" and message.headers["i"] == index
        assert message.persistent and message.journal_id


class Taker:
    def __init__(self) -> None:
        self.tag = "t"
        self.no_ack = False
        self.entries: list[QueueEntry] = []

    def can_deliver(self, entry: QueueEntry) -> bool:
        return True

    def deliver(self, entry: QueueEntry) -> None:
        self.entries.append(entry)

    def queue_deleted(self, queue: Queue) -> None:
        pass


def open_journal(path: Path, ns: Namespace, threshold: int = 0) -> DeltaMessageJournal:
    journal = DeltaMessageJournal(path, "v")
    journal.open()
    journal.page_threshold = threshold
    ns.journal = journal
    return journal


async def consume(queue: Queue, count: int) -> list[QueueEntry]:
    taker = Taker()
    queue.add_consumer(taker)
    queue.dispatch()
    await wait_until_async(lambda: len(taker.entries) >= count, 60, what=f"{count} deliveries")
    for entry in taker.entries:
        queue.settle(entry)
    return taker.entries


def enqueue_made(journal: DeltaMessageJournal, queue: Queue, count: int) -> None:
    """On the running event loop: the journal uses it; ``count`` messages of :func:`make` into ``queue``."""
    journal.attach_loop(asyncio.get_running_loop())
    for index in range(count):
        queue.enqueue(make(index))


def test_a_lazy_queue_pages_after_commit_and_delivers_everything_read_back(tmp_path: Path) -> None:
    ns = Namespace("v")
    journal = open_journal(tmp_path / "journal", ns)
    queue = ns.declare_queue("q", durable=True, arguments={"x-queue-mode": "lazy"})[0]
    count = 3 * PAGE_CHUNK + 100

    paged: list[int] = []

    async def main() -> list[QueueEntry]:
        enqueue_made(journal, queue, count)
        # committed, then paged by whole chunks: fewer than a chunk stays in memory
        await wait_until_async(lambda: queue.paged_count > count - PAGE_CHUNK, 60, what="paged out")
        assert queue.message_count == count and type(queue) is PagedQueue
        paged.append(queue.paged_count)
        return await consume(queue, count)

    entries = asyncio.run(main())
    check(entries, count)
    assert journal.page_reader.reads >= 3 and journal.page_reader.messages_read == paged[0]
    assert queue.message_count == 0 and queue.paged_count == 0
    journal.close()


def test_the_threshold_pages_a_queue_that_is_consumed_in_order(tmp_path: Path) -> None:
    ns = Namespace("v")
    journal = open_journal(tmp_path / "journal", ns)
    queue = ns.declare_queue("q", durable=True)[0]
    count = 4 * WINDOW

    async def main() -> list[QueueEntry]:
        enqueue_made(journal, queue, count)
        await wait_until_async(lambda: queue.message_count == count, 60, what="durable arrivals")
        flow = FlowToDisk(threshold=10_000)
        assert flow.check(ns.queues.values())
        await wait_until_async(lambda: queue.paged_count == count - WINDOW, 60, what="paged out")
        return await consume(queue, count)

    check(asyncio.run(main()), count)
    journal.close()


def fill_and_close(path: Path, count: int, arguments: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Journal ``count`` messages on durable 'q' (and 'p', a priority queue), three delivered
    and released; the namespace's records."""
    ns = Namespace("v")
    journal = open_journal(path, ns)
    queue = ns.declare_queue("q", durable=True, arguments=arguments)[0]
    priority = ns.declare_queue("p", durable=True, arguments={"x-max-priority": 3})[0]
    for index in range(count):
        message = make(index)
        queue.enqueue(message)
        if index < 10:
            priority.enqueue(message)
    records = ns.records()
    journal.close()                                  # no loop: committed in-process here
    return records


def test_recovery_restores_a_lazy_queue_as_ids_and_reads_it_back(tmp_path: Path) -> None:
    count = 2 * PAGE_CHUNK
    records = fill_and_close(tmp_path / "journal", count, {"x-queue-mode": "lazy"})
    ns = Namespace("v")
    journal = open_journal(tmp_path / "journal", ns)
    ns.restore(records)
    assert journal.recover(ns) == count + 10
    queue = ns.queues["q"]
    assert type(queue) is PagedQueue and queue.paged_count == count and queue.message_count == count
    assert queue.message_bytes == sum(len(make(i).body) for i in range(count))
    priority = ns.queues["p"]
    # the priority queue pages too (each message by its priority property), though it is not lazy
    assert type(priority) is PagedPriorityQueue and priority.message_count == priority.paged_count == 10
    got = []
    while (entry := queue.get()) is not None:       # no event loop: read back at once
        got.append(entry)
    check(got, count)
    # the 1.0 ones (of priority 4, the default) first, then the 0-9-1 ones (no priority: 0)
    bodies = []
    while (entry := priority.get()) is not None:
        bodies.append(entry.message.body)
    assert bodies == [make(i).body for i in (0, 3, 6, 9, 1, 2, 4, 5, 7, 8)]
    assert type(priority) is PriorityQueue          # read back to the end and not lazy: plain again
    journal.close()


def test_recovery_above_the_threshold_pages_and_keeps_redelivered_messages_in_memory(tmp_path: Path) -> None:
    count = PAGE_CHUNK
    path = tmp_path / "journal"
    records = fill_and_close(path, count, None)
    ns = Namespace("v")
    journal = open_journal(path, ns)
    ns.restore(records)
    journal.recover(ns)
    queue = ns.queues["q"]
    first = [queue.get() for _ in range(3)]
    for entry in first:
        assert entry is not None
        queue.release(entry)
    journal.close()

    ns = Namespace("v")
    journal = open_journal(path, ns, threshold=1)    # any backlog is above it
    ns.restore(records)
    journal.recover(ns)
    queue = ns.queues["q"]
    assert type(queue) is PagedQueue and queue.paged_count == count - 3 and queue.message_count == count

    async def main() -> list[QueueEntry]:
        journal.attach_loop(asyncio.get_running_loop())
        return await consume(queue, count)

    entries = asyncio.run(main())
    check(entries, count)
    assert [e.redelivered for e in entries[:4]] == [True, True, True, False]
    # read back to the end and not lazy: an ordinary queue again
    assert type(queue) is Queue
    journal.close()


def test_a_small_journal_below_the_threshold_recovers_in_memory(tmp_path: Path) -> None:
    records = fill_and_close(tmp_path / "journal", 20, None)
    ns = Namespace("v")
    journal = open_journal(tmp_path / "journal", ns, threshold=1 << 30)
    ns.restore(records)
    assert journal.recover(ns) == 30
    assert type(ns.queues["q"]) is Queue and ns.queues["q"].message_count == 20
    journal.close()


def test_a_lazy_priority_queue_pages_by_level_and_is_recovered_by_level(tmp_path: Path) -> None:
    """Every message is paged whatever its priority; delivered highest first, FIFO within a priority,
    before and after a restart (recovery reads each message's priority without its body)."""
    path = tmp_path / "journal"
    ns = Namespace("v")
    journal = open_journal(path, ns)
    arguments = {"x-queue-mode": "lazy", "x-max-priority": 5}
    queue = ns.declare_queue("q", durable=True, arguments=arguments)[0]
    count = 3 * PAGE_CHUNK

    def published(index: int) -> Message:
        message = make(index)
        if index % 3:                                 # the 0-9-1 ones: priorities 0..2; the 1.0 ones: 4
            message = message_0_9_1(index)
            properties = MessageProperties(delivery_mode=2, message_id=f"m-{index}", headers={"i": index},
                                           content_type="text/plain", priority=index % 3)
            message = Message(exchange="", routing_key="q", body=message.body, properties=properties,
                              native=encode_properties(properties), format=FORMAT, arrival=time.monotonic())
        return message

    def level(index: int) -> int:
        return 4 if index % 3 == 0 else index % 3

    order = sorted(range(count), key=lambda i: (-level(i), i))

    async def first_half() -> list[QueueEntry]:
        journal.attach_loop(asyncio.get_running_loop())
        for index in range(count):
            queue.enqueue(published(index))
        await wait_until_async(lambda: queue.paged_count == count, 60, what="every level paged")
        assert type(queue) is PagedPriorityQueue and queue.message_count == count
        taker = Taker()
        queue.add_consumer(taker)
        queue.dispatch()
        await wait_until_async(lambda: len(taker.entries) >= count // 2, 60, what="half the deliveries")
        queue.remove_consumer(taker)
        for entry in taker.entries[:count // 2]:
            queue.settle(entry)
        return taker.entries

    first = asyncio.run(first_half())
    assert [e.message.properties.message_id for e in first[:count // 2]] == [f"m-{i}" for i in order[:count // 2]]
    records = ns.records()
    journal.close()                                   # the rest (delivered, not settled) comes back redelivered

    ns = Namespace("v")
    journal = open_journal(path, ns)
    ns.restore(records)
    assert journal.recover(ns) == count - count // 2
    queue = ns.queues["q"]
    assert type(queue) is PagedPriorityQueue

    async def second_half() -> list[QueueEntry]:
        journal.attach_loop(asyncio.get_running_loop())
        return await consume(queue, count - count // 2)

    rest = asyncio.run(second_half())
    assert sorted(e.message.properties.message_id for e in rest) == sorted(f"m-{i}" for i in order[count // 2:])
    fresh = [e for e in rest if not e.redelivered]
    fresh_order = [i for i in order[count // 2:] if f"m-{i}" in {e.message.properties.message_id for e in fresh}]
    assert [e.message.properties.message_id for e in fresh] == [f"m-{i}" for i in fresh_order]
    assert queue.message_count == 0 and queue.paged_count == 0
    journal.close()


def test_a_read_back_that_fails_is_tried_again_by_the_timer(tmp_path: Path) -> None:
    """The journal's files are gone while a consumer waits (a disk unmounted): nothing is delivered,
    nothing is lost; once they are back, the queue's timer reads them and the consumer gets everything."""
    path = tmp_path / "journal"
    ns = Namespace("v")
    journal = open_journal(path, ns)
    queue = ns.declare_queue("q", durable=True, arguments={"x-queue-mode": "lazy"})[0]
    count = 2 * PAGE_CHUNK

    async def main() -> list[QueueEntry]:
        enqueue_made(journal, queue, count)
        await wait_until_async(lambda: queue.paged_count == count, 60, what="paged out")
        hidden = [data.rename(data.with_suffix(".hidden")) for data in sorted(path.glob("*.parquet"))]
        assert hidden
        taker = Taker()
        queue.add_consumer(taker)
        queue.dispatch()
        await wait_until_async(lambda: queue.next_deadline() is not None, 60, what="the read failing")
        assert taker.entries == [] and queue.paged_count == count and queue.message_count == count
        for data in hidden:
            data.rename(data.with_suffix(".parquet"))
        ns.run_due(time.monotonic() + 1.5)          # the broker's timer, a retry interval later
        await wait_until_async(lambda: len(taker.entries) == count, 60, what="deliveries after the retry")
        return taker.entries

    check(asyncio.run(main()), count)
    journal.close()
