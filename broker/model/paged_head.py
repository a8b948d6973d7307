"""Management's looks at a paged queue whose head is entirely on disk (flow to disk).

A paged queue keeps a window of its head in memory, read back from the
journal by a worker thread.  When nothing of the head is in memory, a look
(``getMessageInfo``, ``getMessageContent``) starts that read and waits for
it on the event loop -- the request waits, the loop does not -- for at most
:data:`HEAD_WAIT_SECONDS`, then answers with what is in memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

from broker.messaging.paged_storage import head_landing

if TYPE_CHECKING:
    from broker.messaging.queue import Queue

__all__ = ["HEAD_WAIT_SECONDS", "head_read_back"]

#: how long a look waits for the head of a paged queue to be read back (seconds)
HEAD_WAIT_SECONDS = 5.0


async def head_read_back(queue: Queue) -> None:
    """Return once ``queue``'s head is in memory, its read failed, or :data:`HEAD_WAIT_SECONDS` passed."""
    landing = head_landing(queue)
    if landing is None:
        return
    landed = anyio.Event()
    callback = landed.set
    landing.when_durable(callback)
    try:
        with anyio.move_on_after(HEAD_WAIT_SECONDS):
            await landed.wait()
    finally:
        landing.forget(callback)
