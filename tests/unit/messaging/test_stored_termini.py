"""StoredTermini: termini handed to a background store, one save in flight per link, in order.

The store here is a fake :class:`~broker.messaging.termini.BackgroundTerminusStore`
whose commits the test completes by hand, on a running event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from concurrent.futures import Future

import anyio
import pytest

from broker.messaging.termini import (BackgroundTerminusStore, LinkRole, MemoryTerminusStore, StoredTermini,
                                      TerminusKey, TerminusRecord)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

KEY: TerminusKey = (LinkRole.SENDING, "c", "l")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class HeldStore(MemoryTerminusStore):
    """Commits when the test says so: ``submitted`` holds what was handed over, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.submitted: list[tuple[list[TerminusRecord], list[TerminusKey], Future[None]]] = []

    def submit(self, records: Iterable[TerminusRecord] = (),
               remove: Iterable[TerminusKey] = ()) -> Future[None]:
        future: Future[None] = Future()
        self.submitted.append((list(records), list(remove), future))
        return future

    async def commit(self, number: int, error: BaseException | None = None) -> None:
        records, removals, future = self.submitted[number]
        if error is None:
            self.save(records)
            self.remove(removals)
            future.set_result(None)
        else:
            future.set_exception(error)
        await anyio.sleep(0.01)           # the answer reaches the loop


def record(version: int) -> TerminusRecord:
    return TerminusRecord(LinkRole.SENDING, "c", "l", {"address": "q", "version": version})


async def test_saves_of_one_link_coalesce_while_one_is_in_flight() -> None:
    store = HeldStore()
    assert isinstance(store, BackgroundTerminusStore)
    stored = StoredTermini(store, "v")
    current = {"version": 1}
    build = lambda: record(current["version"])       # noqa: E731 -- what the link is when written
    stored.save(KEY, build)
    for version in range(2, 6):
        current["version"] = version
        stored.save(KEY, build)
    assert len(store.submitted) == 1 and stored.busy  # the others wait for the first
    await store.commit(0)
    assert len(store.submitted) == 2                 # then one more, with what it is now
    assert store.submitted[1][0] == [record(5)]
    await store.commit(1)
    assert not stored.busy and [dict(r.terminus) for r in store.recover()] == [{"address": "q", "version": 5}]


async def test_a_removal_follows_the_save_in_flight_and_cancels_the_waiting_one() -> None:
    store = HeldStore()
    stored = StoredTermini(store, "v")
    stored.save(KEY, lambda: record(1))
    stored.save(KEY, lambda: record(2))              # waits
    stored.remove(KEY)
    assert [(len(r), rm) for r, rm, _ in store.submitted] == [(1, []), (0, [KEY])]
    await store.commit(0)
    await store.commit(1)
    assert len(store.submitted) == 2 and store.recover() == []


async def test_a_failing_store_is_logged_once_until_it_succeeds_again(
        caplog: pytest.LogCaptureFixture) -> None:
    store = HeldStore()
    stored = StoredTermini(store, "v")
    with caplog.at_level(logging.WARNING, logger="broker.messaging.termini"):
        for n in range(3):
            stored.save((LinkRole.SENDING, "c", f"l{n}"), lambda: record(n))
        for n in range(3):
            await store.commit(n, OSError(28, "No space left on device"))
        assert isinstance(stored.failure, OSError)
        stored.save(KEY, lambda: record(9))
        await store.commit(3)
    assert stored.failure is None
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["link termini of virtual host 'v': writes failing: [Errno 28] No space left on device",
                        "link termini of virtual host 'v': writes succeed again"]


def test_without_a_running_loop_changes_are_written_at_once() -> None:
    store = HeldStore()
    stored = StoredTermini(store, "v")
    stored.save(KEY, lambda: record(1))
    assert store.submitted == [] and [r.key for r in store.recover()] == [KEY]
    stored.remove(KEY)
    assert store.recover() == []
