"""getMessageInfo / getMessageContent on a lazy queue whose messages are all on disk.

The journal is :class:`~tests.unit.messaging.paging_fake.PagingJournal`: the
test lands the read back of the head's window, as the journal's worker
thread would on the event loop, while the operation waits.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from broker.errors import NotFound
from broker.messaging.message import Message, MessageProperties
from broker.messaging.paged_queue import PAGE_CHUNK
from broker.model import SystemConfig, VirtualHost, load_system_config
from broker.model import paged_head

from ..messaging.paging_fake import PagingJournal
from .conftest import minimal_config


@pytest.fixture
def vhost(tmp_path: Path) -> VirtualHost:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(minimal_config()))
    system: SystemConfig = load_system_config(str(path), {"deltamq.data_dir": str(tmp_path / "data")})
    vhost = system.broker.find_virtual_host("node")
    assert vhost is not None and vhost.namespace is not None
    return vhost


def _on_disk(vhost: VirtualHost) -> tuple[Any, PagingJournal]:
    """The model's view of lazy queue 'q' whose messages are all paged, and its journal."""
    journal = PagingJournal()
    ns = vhost.namespace
    ns.journal = journal  # type: ignore[assignment]
    queue = ns.declare_queue("q", durable=True, arguments={"x-queue-mode": "lazy"})[0]
    for index in range(PAGE_CHUNK):
        queue.enqueue(Message(exchange="", routing_key="q", body=b"m%d" % index,
                              properties=MessageProperties(delivery_mode=2), arrival=0.0))
    journal.complete()
    assert queue.paged_count == PAGE_CHUNK
    view = vhost.child("Queue", "q")
    assert view is not None
    return view, journal


def _land_soon(journal: PagingJournal, landed: list[int]) -> Any:
    async def land() -> None:
        await anyio.sleep(0.02)
        landed.append(journal.page_reader.finish())
    return land


def test_the_listing_waits_for_the_head_read_back_then_shows_it(vhost: VirtualHost) -> None:
    view, journal = _on_disk(vhost)
    landed: list[int] = []

    async def main() -> list[dict[str, Any]]:
        async with anyio.create_task_group() as group:
            group.start_soon(_land_soon(journal, landed))
            infos: list[dict[str, Any]] = await view.get_message_info(0, 2, False)
        return infos

    infos = anyio.run(main)
    assert landed == [1] and len(infos) == 3          # the loop ran the landing while the listing waited
    content = anyio.run(view.get_message_content, infos[1]["id"], -1, False)
    assert content.data == b"m1"
    wait = view.live_object._pages.wait
    assert wait is None or wait._callbacks == []


def test_the_listing_gives_up_waiting_after_a_bound_and_forgets_its_wait(
        vhost: VirtualHost, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paged_head, "HEAD_WAIT_SECONDS", 0.05)
    view, journal = _on_disk(vhost)
    assert anyio.run(view.get_message_info, -1, -1, False) == []      # the read never landed
    wait = view.live_object._pages.wait
    assert wait is not None and not wait.done and wait._callbacks == []
    with pytest.raises(NotFound):
        anyio.run(view.get_message_content, 1, -1, False)
    assert journal.page_reader.finish() == 1          # one read for both looks
    assert len(anyio.run(view.get_message_info, -1, -1, False)) == PAGE_CHUNK
