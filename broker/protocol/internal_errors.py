"""When an engine's own code fails: one connection closes, the broker serves the others.

Malformed input and refused requests raise :class:`~broker.errors.BrokerError`,
and the engines answer them in the protocol's words.  Anything else that
raises while an engine handles input -- a method handler, the confirms and
dispositions sent after a read, a queue's dispatch -- is a bug.  The engine
then logs it once, with its traceback, and closes that connection with the
protocol's internal error (0-9-1: ``connection.close`` 541 INTERNAL_ERROR;
1.0: ``close`` with ``amqp:internal-error``); if even closing fails, the
connection is dropped without a word.  Nothing escapes to the transport, so
the listener and every other connection go on, and what the store confirmed
stays confirmed (a confirm is only sent after the store has the message; a
publisher whose connection closed before its confirm publishes again).

:func:`dispatch_pending` runs the queues an input made deliverable: one
whose dispatch fails does not stop the others (their consumers may be on
other connections), and the first failure is raised once they all ran.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Protocol

log = logging.getLogger(__name__)      # under "broker": the fuzz harnesses watch it


class _Dispatching(Protocol):
    _dispatch_pending: set[Any]


def dispatch_pending(engine: _Dispatching) -> None:
    """``queue.dispatch()`` for every queue the engine marked, until none is marked."""
    failed: Exception | None = None
    while engine._dispatch_pending:
        pending, engine._dispatch_pending = engine._dispatch_pending, set()
        for queue in pending:
            try:
                queue.dispatch()
            except Exception as exc:        # the others still get their turn
                failed = failed or exc
    if failed is not None:
        raise failed


def fail(connection_id: str, remote_host: str, exc: BaseException,
         close: Callable[[str], None], drop: Callable[[], None]) -> None:
    """Log the bug ``exc`` once and ``close`` the connection with the protocol's internal
    error (its text); ``drop`` it when closing raises too."""
    log.error("internal error on connection %s from %s; closing it", connection_id, remote_host,
              exc_info=exc)
    try:
        close(f"internal error: {exc!r}")
    except Exception as again:
        log.error("closing connection %s after its internal error failed as well (%r); dropping"
                  " it", connection_id, again)
        drop()
