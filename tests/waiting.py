"""Waiting for something to happen: poll a condition instead of sleeping a fixed time.

A fixed sleep is either too short on a slow machine (a flaky test) or too long
everywhere else (a slow one).  :func:`wait_until` asks the condition until it
holds and fails naming what it waited for; :func:`wait_until_async` does the
same without blocking an event loop.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

__all__ = ["wait_until", "wait_until_async"]


def _timed_out(what: str, timeout: float, value: Any) -> AssertionError:
    return AssertionError(f"timed out after {timeout}s waiting for {what} (last: {value!r})")


def wait_until(predicate: Callable[[], Any], timeout: float = 5.0, interval: float = 0.05,
               what: str = "condition") -> Any:
    """Poll until ``predicate()`` is truthy; return its value or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timed_out(what, timeout, value)
        time.sleep(interval)


async def wait_until_async(predicate: Callable[[], Any], timeout: float = 5.0, interval: float = 0.02,
                           what: str = "condition") -> Any:
    """:func:`wait_until` for coroutines: the event loop keeps running between polls.

    ``predicate`` may be a plain function or return an awaitable (it is awaited).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timed_out(what, timeout, value)
        await asyncio.sleep(interval)
