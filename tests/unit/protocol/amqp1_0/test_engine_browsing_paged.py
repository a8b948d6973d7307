"""Browsing (distribution-mode copy) a paged queue whose messages are all on disk (flow to disk).

The queue is lazy over :class:`~tests.unit.messaging.paging_fake.PagingJournal`:
the test decides when the read back of the head's window lands, as the
journal's worker thread would on the event loop.
"""

from __future__ import annotations

from typing import Any

from broker.messaging.paged_queue import PAGE_CHUNK
from broker.messaging.queue import Queue
from broker.protocol.amqp1_0.definitions import Attach, Detach, Flow, Source, Target, Transfer
from broker.protocol.amqp1_0.sections import MessageSections
from broker.protocol.amqp1_0.values import Described, Symbol

from ...messaging.paging_fake import PagingJournal
from ...messaging.support import message
from .engine_client import Client10

COPY = Symbol("copy")
SELECTOR = Symbol("apache.org:selector-filter:string")


def _on_disk(count: int = PAGE_CHUNK) -> tuple[Client10, PagingJournal, Queue]:
    """A logged-in client with a session, and lazy queue 'q' whose ``count`` messages are all paged."""
    client = Client10()
    journal = PagingJournal()
    client.host.namespace.journal = journal  # type: ignore[assignment]
    queue = client.host.namespace.declare_queue("q", durable=True, arguments={"x-queue-mode": "lazy"})[0]
    for index in range(count):
        queue.enqueue(message(b"m%d" % index, delivery_mode=2, headers={"n": index}))
    journal.complete()
    assert queue.paged_count == count and queue.message_count == count
    client.handshake()
    client.begin()
    client.take()
    return client, journal, queue


def _browser(client: Client10, handle: int = 1, **source: Any) -> None:
    client.send(Attach(name=f"browser-{handle}", handle=handle, role=True, snd_settle_mode=1,
                       source=Source(address="q", distribution_mode=COPY, **source), target=Target(address="c")))
    client.take()


def _land(client: Client10, journal: PagingJournal) -> list[Any]:
    """The reads in flight land (on the event loop): what the broker sent then."""
    assert journal.page_reader.finish() == 1
    client._read()
    return [(value, payload) for _c, value, payload in client.take()]


def _bodies(frames: list[Any]) -> list[bytes]:
    return [b"".join(MessageSections(p).body()) for v, p in frames if isinstance(v, Transfer)]


def _flows(frames: list[Any]) -> list[Flow]:
    return [v for v, _p in frames if isinstance(v, Flow)]


def _waiting(queue: Queue) -> int:
    wait = queue._pages.wait  # type: ignore[attr-defined]
    return 0 if wait is None else len(wait._callbacks)


def test_a_draining_browser_gets_the_window_read_back_then_the_drain_answer() -> None:
    client, journal, queue = _on_disk()
    _browser(client)
    credit = PAGE_CHUNK + 5
    client.credit(1, credit, drain=True, incoming_window=5000)   # Qpid JMS's QueueBrowser: is there more?
    assert client.take() == []                         # not "empty": the head is on its way back
    assert queue.consumer_count == 0 and _waiting(queue) == 1
    frames = _land(client, journal)
    assert _bodies(frames) == [b"m%d" % i for i in range(PAGE_CHUNK)]
    drained = _flows(frames)
    assert len(drained) == 1 and drained[0].drain
    assert (drained[0].link_credit, drained[0].delivery_count) == (0, credit)
    assert [v for v, _p in frames][-1] is drained[0]   # answered after the messages
    assert queue.message_count == PAGE_CHUNK and queue.unacked_count == 0 and _waiting(queue) == 0
    client.credit(1, 5, delivery_count=credit, drain=True, incoming_window=5000)
    frames = [(v, p) for _c, v, p in client.take()]    # in memory now, all seen: answered at once
    assert _bodies(frames) == [] and _flows(frames)[-1].drain and _flows(frames)[-1].link_credit == 0
    assert journal.page_reader.pending == []


def test_a_browser_holding_credit_gets_the_window_when_it_lands_without_another_flow() -> None:
    client, journal, queue = _on_disk()
    _browser(client)
    client.credit(1, 3)
    assert client.take() == []
    frames = _land(client, journal)
    assert _bodies(frames) == [b"m0", b"m1", b"m2"] and _flows(frames) == []
    assert queue.message_count == PAGE_CHUNK


def test_a_selector_applies_to_the_window_read_back() -> None:
    client, journal, queue = _on_disk()
    _browser(client, filter={Symbol("jms-selector"): Described(SELECTOR, "n >= 1020")})
    client.credit(1, 10, drain=True)
    frames = _land(client, journal)
    assert _bodies(frames) == [b"m1020", b"m1021", b"m1022", b"m1023"]
    assert _flows(frames)[-1].drain and _flows(frames)[-1].delivery_count == 10


def test_a_browser_detached_while_the_head_is_read_back_forgets_its_wait() -> None:
    client, journal, queue = _on_disk()
    _browser(client)
    client.credit(1, 10, drain=True)
    assert _waiting(queue) == 1
    client.send(Detach(handle=1, closed=True))
    client.take()
    assert _waiting(queue) == 0                        # no callback left on the queue
    assert _land(client, journal) == []
    consumer_client = client
    consumer_client.attach_receiver("q", handle=2)
    consumer_client.take()
    consumer_client.credit(2, 3)
    assert _bodies([(v, p) for _c, v, p in consumer_client.take()]) == [b"m0", b"m1", b"m2"]


def test_a_queue_deleted_while_its_head_is_read_back_answers_the_drain_with_nothing() -> None:
    client, journal, queue = _on_disk()
    _browser(client)
    client.credit(1, 10, drain=True)
    wait = queue._pages.wait  # type: ignore[attr-defined]
    client.host.namespace.delete_queue("q")
    client._read()
    frames = [(v, p) for _c, v, p in client.take()]
    assert _bodies(frames) == [] and _flows(frames)[-1].drain and _flows(frames)[-1].link_credit == 0
    assert wait.done and wait._callbacks == []
    assert journal.page_reader.finish() == 1           # the read lands for nobody
    client._read()
    assert client.take() == []


def test_a_failed_read_back_answers_the_drain_with_nothing() -> None:
    client, journal, queue = _on_disk()
    journal.page_reader.fail_with = OSError("disk gone")
    _browser(client)
    client.credit(1, 10, drain=True)
    assert client.take() == []
    frames = _land(client, journal)
    assert _bodies(frames) == [] and _flows(frames)[-1].drain and _flows(frames)[-1].link_credit == 0
    assert queue.message_count == PAGE_CHUNK


def test_a_browser_waiting_for_the_head_is_not_one_of_the_queue_consumers() -> None:
    client, journal, queue = _on_disk()
    _browser(client)
    client.credit(1, 10, drain=True)
    assert queue.consumer_count == 0
    client.attach_receiver("q", handle=2)              # the queue's only consumer
    client.take()
    assert queue.consumer_count == 1 and _waiting(queue) == 1
