"""A submitted change's ticket: its outcome on the loop, and nothing left for the cyclic collector."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator
from concurrent.futures import Future

import pytest

from broker.model.config_store import LoopTicket


class Waiter:
    """What a ticket's callback reaches (in the broker: the operation, its queue, its client)."""

    def __init__(self) -> None:
        self.heard: list[BaseException | None] = []

    def __call__(self, error: BaseException | None) -> None:
        self.heard.append(error)


@pytest.fixture
def no_cyclic_collector() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_the_callback_hears_success_and_failure_on_the_loop() -> None:
    async def scenario() -> list[BaseException | None]:
        loop = asyncio.get_running_loop()
        waiter = Waiter()
        ok: Future[None] = Future()
        failed: Future[None] = Future()
        LoopTicket(ok, loop).when_stored(waiter)
        LoopTicket(failed, loop).when_stored(waiter)
        ok.set_result(None)
        failed.set_exception(OSError("disk full"))
        assert waiter.heard == []                 # delivered by the loop, not in set_result
        await asyncio.sleep(0)
        return waiter.heard

    heard = asyncio.run(scenario())
    assert heard[0] is None and isinstance(heard[1], OSError)


def test_a_settled_ticket_is_freed_by_reference_counting(no_cyclic_collector: None) -> None:
    """No cycle through the future's callbacks: the future and all its callback reaches go at once."""

    async def scenario() -> tuple[weakref.ref[Future[None]], weakref.ref[Waiter], weakref.ref[LoopTicket]]:
        loop = asyncio.get_running_loop()
        future: Future[None] = Future()
        waiter = Waiter()
        ticket = LoopTicket(future, loop)
        ticket.when_stored(waiter)
        refs = weakref.ref(future), weakref.ref(waiter), weakref.ref(ticket)
        future.set_result(None)
        await asyncio.sleep(0)
        assert waiter.heard == [None]
        del future, waiter, ticket
        return refs

    refs = asyncio.run(scenario())
    assert [ref() for ref in refs] == [None, None, None]
