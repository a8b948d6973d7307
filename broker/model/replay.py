"""Time-travel replay: publish again what a queue's journal says was enqueued on it.

The Queue operation ``replayMessages`` (REST ``POST .../queue/<node>/<vhost>/<queue>/replayMessages``,
``deltamq replay``, the console's replay form) runs :func:`replay_messages`:

1. it checks its parameters: the bounds (``fromTime``/``toTime``, ISO 8601;
   ``fromVersion``/``toVersion``, versions of the journal table) and where the
   messages go -- through an exchange (``exchange``, ``routingKey``; each
   defaults to the message's own), or straight into a queue (``destination``);
2. it reads the journal page by page, never on the event loop: the journal's
   ``history()`` (the delta store's reader, found on the virtual host's
   journal, so this package names no module of the lakehouse) reads in a
   child process, which a worker thread waits for;
3. on the event loop, it publishes each page as a publisher would -- routed
   through the exchange, each message keeping its format and native metadata,
   its body and properties, plus two annotations a 0-9-1 consumer sees as
   headers (:data:`REPLAY_OF`, :data:`REPLAYED_FROM`) -- as one journal
   transaction, and waits for that commit before reading the next page.

While the broker's memory or disk alarm is set -- when publishers are
blocked -- the replay waits before its next page, as a blocked publisher
does, and goes on once the alarm clears; after :data:`ALARM_WAIT_SECONDS`
of waiting it stops (503) saying how far it got.

So a page is replayed whole or not at all: its routes are all resolved before
anything is enqueued (an exchange deleted since makes the replay stop before
the page), and a commit that fails drops every message of the page (they were
held until it; see :mod:`broker.messaging.arrivals`).  Pages replayed before
a failure stay replayed; the error says how many there were.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import anyio

from broker.cpu_placement import released
from broker.errors import AccessRefused, ConfigurationError, NotFound, PreconditionFailed, StoreFailed
from broker.messaging.message import Message
from broker.messaging.message_format import MessageFormat, format_for
from broker.messaging.queue import enqueue_all

if TYPE_CHECKING:
    from broker.messaging.namespace import Namespace
    from broker.messaging.queue import Queue as LiveQueue
    from broker.model.messaging_objects import Queue

__all__ = ["ReplayRequest", "replay_messages", "REPLAY_OF", "REPLAYED_FROM"]

log = logging.getLogger(__name__)

#: annotation (a 0-9-1 header): the journal's id of the message this one replays
REPLAY_OF = "x-replay-of"
#: annotation (a 0-9-1 header): the queue whose history the message was replayed from
REPLAYED_FROM = "x-replayed-from"
#: the answer lists at most this many ids of each kind (the counts are always complete)
LISTED_IDS = 100_000
#: how long a replay waits for the broker's resource alarms to clear before a page
ALARM_WAIT_SECONDS = 120.0
#: how often it looks again meanwhile (the alarms are checked once a second)
ALARM_POLL_SECONDS = 0.25

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ReplayRequest:
    """The operation's parameters, as management gave them (None: not given)."""

    from_time: str | None = None
    to_time: str | None = None
    from_version: int | None = None
    to_version: int | None = None
    exchange: str | None = None
    routing_key: str | None = None
    destination: str | None = None
    limit: int = -1


class JournaledMessage(Protocol):
    """A message as the journal's history reader hands it over."""

    message_id: int
    exchange: str
    routing_key: str
    body: bytes
    message_format: str
    native: bytes


class QueueHistoryReader(Protocol):
    """One queue's history within the bounds (blocking: run in a worker thread)."""

    version: int
    committed: datetime | None
    missing: list[int]

    def open(self) -> int: ...

    def next_batch(self) -> Sequence[JournaledMessage]: ...

    def close(self) -> None: ...


@dataclass
class _Outcome:
    """What the replay did so far, for the answer (ids listed up to LISTED_IDS)."""

    replayed: int = 0
    ids: list[int] = field(default_factory=list)
    unroutable: list[int] = field(default_factory=list)
    refused: list[int] = field(default_factory=list)

    @staticmethod
    def note(found: list[int], message_id: int) -> None:
        if len(found) < LISTED_IDS:
            found.append(message_id)


@dataclass(frozen=True)
class _Target:
    """Where replayed messages go: through an exchange (None: each one's own), or into a queue."""

    exchange: str | None
    routing_key: str | None
    queue: LiveQueue | None

    def describe(self) -> str:
        if self.queue is not None:
            return f"queue '{self.queue.name}'"
        exchange = "each message's own exchange" if self.exchange is None else \
            f"exchange '{self.exchange}'" if self.exchange else "the default exchange"
        key = "" if self.routing_key is None else f" with routing key '{self.routing_key}'"
        return exchange + key


async def replay_messages(view: Queue, request: ReplayRequest) -> dict[str, Any]:
    """Replay ``view``'s journaled messages as ``request`` says; the answer of the operation."""
    label = view.label
    source: LiveQueue = view.live_object
    namespace = view.namespace
    journal = _journal(view)
    target = _target(label, namespace, request)
    if request.limit == 0 or request.limit < -1:
        raise ConfigurationError(f"{label}: parameter 'limit' must be -1 (no limit) or more than 0")
    history = journal.history()
    reader: QueueHistoryReader = history.queue(
        source.name, from_time=_moment(label, "fromTime", request.from_time),
        to_time=_moment(label, "toTime", request.to_time), from_version=request.from_version,
        to_version=request.to_version, limit=None if request.limit < 0 else request.limit)
    outcome = _Outcome()
    formats: dict[str, MessageFormat] = {}
    try:
        version = await _in_thread(label, reader.open)
        while True:
            batch = await _in_thread(label, reader.next_batch)
            if not batch:
                break
            await _unblocked(view, label, outcome.replayed)
            with view.journal_transaction():
                _publish(label, namespace, source.name, target, batch, formats, outcome)
            pending = journal.pending
            if pending is not None:
                await _durable(label, pending, outcome.replayed - len(batch), len(batch))
    finally:
        reader.close()
    committed = reader.committed
    log.info("%s: replayed %d messages (journal version %d) into %s", label, outcome.replayed,
             version, target.describe())
    return {
        "replayed": outcome.replayed, "messageIds": outcome.ids,
        "unroutable": outcome.unroutable, "refused": outcome.refused,
        "missing": reader.missing[:LISTED_IDS], "journalVersion": version,
        "journalVersionTime": None if committed is None else _iso(committed),
    }


def _journal(view: Queue) -> Any:
    """The journal of the queue's virtual host, if it can be read back (a ``delta`` node's)."""
    vhost = view.ancestor("VirtualHost")
    journal = getattr(vhost, "journal", None)
    if journal is None or not callable(getattr(journal, "history", None)):
        node = vhost.parent if vhost is not None else None
        kind = getattr(node, "type", "?")
        raise PreconditionFailed(
            f"{view.label}: no journal to replay: virtual host node '{getattr(node, 'name', '?')}'"
            f" is of type '{kind}', which keeps no message history; replay needs a 'delta' node")
    return journal


def _target(label: str, namespace: Namespace, request: ReplayRequest) -> _Target:
    if request.destination is not None:
        if request.exchange is not None or request.routing_key is not None:
            given = "exchange" if request.exchange is not None else "routingKey"
            raise ConfigurationError(f"{label}: parameter '{given}': replay either through an"
                                     " exchange (exchange, routingKey) or into a queue"
                                     " (destination), not both")
        queue = namespace.queues.get(request.destination)
        if queue is None:
            raise ConfigurationError(f"{label}: parameter 'destination': no queue"
                                     f" '{request.destination}' in vhost '{namespace.vhost_name}'")
        return _Target(None, None, queue)
    if request.exchange:
        exchange = namespace.exchanges.get(request.exchange)
        if exchange is None:
            raise ConfigurationError(f"{label}: parameter 'exchange': no exchange"
                                     f" '{request.exchange}' in vhost '{namespace.vhost_name}'")
        if exchange.internal:
            raise ConfigurationError(f"{label}: parameter 'exchange': exchange"
                                     f" '{request.exchange}' is internal: it takes messages only"
                                     " through exchange-to-exchange bindings")
    return _Target(request.exchange, request.routing_key, None)


def _moment(label: str, name: str, text: str | None) -> datetime | None:
    """An ISO 8601 time (UTC when it names no offset)."""
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigurationError(f"{label}: parameter '{name}': '{text}' is not an ISO 8601 time"
                                 " (such as 2026-11-24T10:00:00Z)") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


async def _in_thread(label: str, work: Callable[[], T]) -> T:
    """Run ``work`` (a journal read) in a worker thread; its errors as management's."""
    try:
        return await anyio.to_thread.run_sync(released(work))
    except ValueError as exc:              # bounds the table contradicts (a version it lacks)
        parameter = getattr(exc, "parameter", None)
        where = f"parameter '{parameter}': " if parameter else ""
        raise ConfigurationError(f"{label}: {where}{exc}") from None
    except OSError as exc:
        raise StoreFailed(f"{label}: reading the journal failed: {exc}") from None


def _publish(label: str, namespace: Namespace, source: str, target: _Target,
             batch: Sequence[JournaledMessage], formats: dict[str, MessageFormat],
             outcome: _Outcome) -> None:
    """Publish one page; every route is found before anything is enqueued (all or nothing)."""
    clock = namespace.clock
    routed: list[tuple[JournaledMessage, Message, list[LiveQueue]]] = []
    if target.queue is not None and target.queue.deleted:
        raise NotFound(f"{label}: replay stopped after {outcome.replayed} messages: queue"
                       f" '{target.queue.name}' was deleted")
    for journaled in batch:
        fmt = formats.get(journaled.message_format)
        if fmt is None:
            fmt = formats[journaled.message_format] = format_for(journaled.message_format)
        exchange = journaled.exchange if target.exchange is None else target.exchange
        key = journaled.routing_key if target.routing_key is None else target.routing_key
        message = Message.annotated(
            {REPLAY_OF: journaled.message_id, REPLAYED_FROM: source}, exchange=exchange,
            routing_key=key, body=journaled.body, native=journaled.native, format=fmt,
            arrival=clock())
        if target.queue is not None:
            routed.append((journaled, message, [target.queue]))
            continue
        try:
            routed.append((journaled, message, namespace.route(exchange, message)))
        except (NotFound, AccessRefused) as exc:
            raise type(exc)(
                f"{label}: replay stopped after {outcome.replayed} messages: message"
                f" {journaled.message_id} cannot be published to exchange '{exchange}' ({exc.text});"
                " give 'exchange' or 'destination' to replay elsewhere") from None
    for journaled, message, queues in routed:
        outcome.replayed += 1
        outcome.note(outcome.ids, journaled.message_id)
        if not queues:
            outcome.note(outcome.unroutable, journaled.message_id)
        elif not enqueue_all(message, queues):
            outcome.note(outcome.refused, journaled.message_id)


def _alarm(view: Queue) -> str:
    """Why publishers are blocked now ("low on memory"), "" when they are not."""
    alarms = getattr(view.ancestor("Broker"), "resource_alarms", None)
    return str(alarms.reason) if alarms is not None else ""


async def _unblocked(view: Queue, label: str, replayed: int) -> None:
    """Return once no resource alarm blocks publishers; StoreFailed after :data:`ALARM_WAIT_SECONDS`."""
    reason = _alarm(view)
    if not reason:
        return
    log.warning("%s: replay waits after %d messages: the broker is %s", label, replayed, reason)
    with anyio.move_on_after(ALARM_WAIT_SECONDS):
        while reason := _alarm(view):
            await anyio.sleep(ALARM_POLL_SECONDS)
    if reason:
        raise StoreFailed(f"{label}: replay stopped after {replayed} messages: the broker has been {reason}"
                          f" for {ALARM_WAIT_SECONDS:g} s (publishers are blocked); replay the rest once"
                          " the alarm clears")
    log.info("%s: replay goes on: the alarm cleared", label)


async def _durable(label: str, group: Any, before: int, size: int) -> None:
    """Wait for the journal group holding a page; StoreFailed (nothing of the page kept) if it failed."""
    done = anyio.Event()
    group.when_durable(done.set)
    await done.wait()
    if group.error is not None:
        raise StoreFailed(f"{label}: replay stopped after {before} messages: the journal could"
                          f" not commit the next {size} (none of them was replayed):"
                          f" {group.error}")


def _iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
