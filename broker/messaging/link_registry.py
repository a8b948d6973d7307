"""The AMQP 1.0 link registry of one virtual host (Broker-J's Link Registry design, v3).

A link is named by :class:`LinkKey`: the peer's container id, the link name
and the role of the broker's end (``sending``: the broker is the source;
``receiving``: the broker is the target).  The registry keeps one
:class:`Link` per key: the broker's :class:`~broker.messaging.link_terminus.Terminus`,
the unsettled map (delivery tag -> delivery state, opaque bytes the engine
encodes), and the link endpoint attached to it now, if any.  A link outlives
its endpoint: detached without ``closed`` it is *suspended* and may be
resumed, and an attach with a null source or target *recovers* its terminus
by the link name.

The engine drives it, on the event loop (no locks, no threads)::

    links = namespace.links
    links.attach(endpoint, LinkKey(container_id, name, LinkRole.SENDING), terminus)
        # -> endpoint.link_attached(Attachment(link, kind, ...)), now or once stolen
    links.record_unsettled(link, tag, state) / links.settled(link, tag)
    links.hold(link, tag, entry)                    # a suspended link keeps a delivery for its resume
    links.detach(link, endpoint, closed=False)      # suspend; closed=True destroys
    links.session_ended(session) / links.connection_closed(connection)

**Stealing** (AMQP 1.0 part 2.6.1): an attach for a link attached to another
endpoint -- on another session, perhaps another connection -- takes it over.
The registry asks the old endpoint to let go (``link_stolen``: the engine
sends ``detach`` with ``amqp:link:stolen`` and calls :meth:`LinkRegistry.detach`
with ``closed=False``) and hands the link to the new endpoint
(``link_attached``) only once the old one released it.  Nobody waits: each
step is a call on the one event loop, so two connections stealing links from
each other cannot deadlock (the design's worry about IO threads).  Further
attaches that arrive meanwhile queue up and steal in turn, as Broker-J's
``_thiefQueue``.  A pending attach is dropped if its own session ends first.

**Expiry** (3.5.6): the terminus's expiry policy names what starts its
timer -- the link detaching, the session or connection it was last attached
on ending -- and the registry removes it ``timeout`` seconds later unless it
was attached again (a terminus without a timeout gets the virtual host's
default, context variable ``deltamq.link_terminus_timeout``, 0 when unset).
Time comes from the namespace's clock; :meth:`next_deadline` and
:meth:`run_due` are driven by the virtual host's timer with the namespace's.
A link detached with ``closed=True`` is removed at once, whatever its policy.

**Persistence**: termini of durability ``configuration`` or
``unsettled-state`` are kept in the virtual host node's terminus store (the
``link_termini`` Delta table), the unsettled map only with
``unsettled-state``; written off the event loop (:class:`StoredTermini`),
removed with the link, and recovered when the virtual host opens.  A
recovered link is suspended; unless its policy is ``never`` its timer starts
then (the broker's stopping ended its session and connection).

**Held deliveries**: a sending link whose terminus keeps its unsettled state
keeps the queue entries it delivered unsettled acquired while it is suspended
(:meth:`LinkRegistry.hold`); the engine settles them when the link is resumed
(AMQP 1.0 part 2.6.13), and the registry requeues them when the link is
removed (closed or expired).

Subscriptions to an exchange get a queue of their own, named and kept as
Broker-J does (:mod:`broker.messaging.link_subscriptions`).
"""

from __future__ import annotations

import enum
import heapq
import logging
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from broker.errors import BrokerError, NotFound
from broker.messaging.link_subscriptions import Subscriptions
from broker.messaging.link_terminus import (SHARED_CAPABILITY, ExpiryPolicy, Terminus, terminus_from_record,
                                            terminus_record, unsettled_from_record, unsettled_record)
from broker.messaging.termini import LinkRole, StoredTermini, TerminusKey, TerminusRecord, TerminusStore

if TYPE_CHECKING:
    from broker.messaging.namespace import Namespace
    from broker.messaging.queue_entry import QueueEntry

log = logging.getLogger(__name__)

__all__ = ["LinkKey", "Link", "LinkEndpoint", "AttachKind", "Attachment", "LinkRegistry",
           "TIMEOUT_VARIABLE"]

#: context variable: expiry timeout (seconds) of a terminus that names none
TIMEOUT_VARIABLE = "deltamq.link_terminus_timeout"

#: what starts the expiry timer: the policies each event triggers
_DETACH = frozenset({ExpiryPolicy.LINK_DETACH})
_SESSION_END = frozenset({ExpiryPolicy.LINK_DETACH, ExpiryPolicy.SESSION_END})
_CONNECTION_CLOSE = frozenset({ExpiryPolicy.LINK_DETACH, ExpiryPolicy.SESSION_END,
                               ExpiryPolicy.CONNECTION_CLOSE})


class LinkKey(NamedTuple):
    remote_container_id: str
    link_name: str
    role: LinkRole          # the broker's end: SENDING (its source) or RECEIVING (its target)

    @property
    def terminus_key(self) -> TerminusKey:
        """The key of the link's row in the terminus store."""
        return (self.role, self.remote_container_id, self.link_name)


class LinkEndpoint(Protocol):
    """The engine's end of a link on one session: what the registry tells it.

    ``session`` and ``connection`` identify where it lives (any hashable
    objects, compared by equality: the engine's session and connection).
    The registry calls these on the event loop, possibly from within a call
    the engine made (an attach that needs no steal completes before
    :meth:`LinkRegistry.attach` returns).
    """

    @property
    def session(self) -> Hashable: ...

    @property
    def connection(self) -> Hashable: ...

    @property
    def connection_name(self) -> str: ...

    def link_attached(self, attachment: Attachment) -> None:
        """The link is this endpoint's now: answer the peer's attach."""
        ...

    def link_stolen(self, link: Link) -> None:
        """Another endpoint attaches this link: send ``detach`` with error
        ``amqp:link:stolen``, stop using the link, then call
        ``registry.detach(link, self, closed=False)``."""
        ...

    def attach_refused(self, error: BrokerError) -> None:
        """A pending attach cannot complete (its link went while it waited for a steal,
        and it asked to recover a terminus that is gone): refuse it (``amqp:not-found``)."""
        ...


class AttachKind(enum.Enum):
    ESTABLISHED = "established"   # no link of this key: the peer's terminus is the link's
    RESUMED = "resumed"           # a link was kept: its terminus and unsettled map go on
    RECOVERED = "recovered"       # a null source/target: the kept terminus is given back


@dataclass(frozen=True, slots=True)
class Attachment:
    link: Link
    kind: AttachKind
    #: the link was taken from another endpoint (which was told ``link_stolen``)
    stolen: bool
    #: the terminus the peer's attach carried (None: null source or target)
    requested: Terminus | None


@dataclass(slots=True)
class _Pending:
    """An attach waiting for a steal to complete."""

    endpoint: LinkEndpoint
    requested: Terminus | None


class Link:
    """One link of the registry: its terminus, unsettled map and current endpoint."""

    def __init__(self, key: LinkKey, terminus: Terminus) -> None:
        self.key = key
        self.terminus = terminus
        #: delivery tag -> delivery state, both as the engine encoded them
        self.unsettled: dict[bytes, bytes] = {}
        #: the endpoint attached now (None: suspended)
        self.endpoint: LinkEndpoint | None = None
        #: the session and connection it was last attached on (expiry follows them)
        self.session: Hashable | None = None
        self.connection: Hashable | None = None
        self.connection_name = ""
        #: clock time the terminus expires (None: no timer runs)
        self.expires_at: float | None = None
        #: the queue of a subscription to an exchange (sending links)
        self.subscription_queue: str | None = None
        self.pending: deque[_Pending] = deque()
        self.stealing_from: LinkEndpoint | None = None
        self.stored = False
        #: queue entries (by delivery tag) a suspended sending link keeps acquired for its
        #: resume (durability unsettled-state): released when the link is removed
        self.held: dict[bytes, QueueEntry] = {}

    @property
    def state(self) -> str:
        if self.stealing_from is not None:
            return "stealing"
        return "attached" if self.endpoint is not None else "suspended"

    def __repr__(self) -> str:
        return f"<Link {self.key.role.value} {self.key.remote_container_id!r}/{self.key.link_name!r} {self.state}>"


class LinkRegistry:
    """The links of one virtual host (``namespace.links``)."""

    def __init__(self, namespace: Namespace, *, wall_clock: Callable[[], float] = time.time) -> None:
        self.namespace = namespace
        self.clock = namespace.clock
        self._wall_clock = wall_clock
        #: expiry timeout (seconds) of a terminus without one
        self.default_timeout = 0
        self.stored = StoredTermini(None, namespace.vhost_name)
        self.subscriptions = Subscriptions(namespace)
        self._links: dict[LinkKey, Link] = {}
        self._by_session: dict[Hashable, set[LinkKey]] = {}
        self._by_connection: dict[Hashable, set[LinkKey]] = {}
        self._timers: list[tuple[float, int, LinkKey]] = []
        self._timer_seq = 0

    # -- opening: the store and what it kept ----------------------------------------------

    def open(self, store: TerminusStore | None, *, default_timeout: int = 0) -> None:
        """Use ``store`` (the node's terminus store, opened) and recover its termini."""
        self.default_timeout = default_timeout
        self.stored = StoredTermini(store, self.namespace.vhost_name)
        if store is None:
            return
        for record in store.recover():
            self._recover(record)

    def _recover(self, record: TerminusRecord) -> None:
        key = LinkKey(record.remote_container_id, record.link_name, record.role)
        try:
            terminus = terminus_from_record(record.terminus)
            unsettled = unsettled_from_record(record.terminus.get("unsettled") or [])
        except (ValueError, TypeError) as exc:
            log.error("virtual host '%s': link terminus %s left out: %s",
                      self.namespace.vhost_name, key, exc)
            return
        link = self._links[key] = Link(key, terminus)
        link.stored = True
        if terminus.keeps_unsettled:
            link.unsettled = unsettled
        queue = record.terminus.get("subscription-queue")
        link.subscription_queue = str(queue) if queue else None
        if terminus.expiry_policy is not ExpiryPolicy.NEVER:
            self._arm(link)               # its session and connection ended with the broker

    def close(self) -> None:
        """The virtual host closes: forget the links (the store keeps the persistent ones)."""
        self._links.clear()
        self._by_session.clear()
        self._by_connection.clear()
        self._timers.clear()

    # -- lookups ----------------------------------------------------------------------------

    def get(self, key: LinkKey) -> Link | None:
        return self._links.get(key)

    def __len__(self) -> int:
        return len(self._links)

    def __iter__(self) -> Iterator[Link]:
        return iter(list(self._links.values()))

    # -- attach ------------------------------------------------------------------------------

    def attach(self, endpoint: LinkEndpoint, key: LinkKey, terminus: Terminus | None) -> None:
        """The peer attached ``key`` on ``endpoint``'s session, with ``terminus`` (the
        broker's end: the attach's source for a sending link, its target for a
        receiving one; None when it was null).

        ``endpoint.link_attached`` is called once the link is the endpoint's:
        before this returns, unless the link is attached elsewhere (then
        after the steal).  Raises :class:`~broker.errors.NotFound` for a null
        terminus when no link of ``key`` is known (nothing to recover).
        """
        link = self._links.get(key)
        if link is None:
            if terminus is None:
                raise NotFound(self._unknown(key))
            link = self._links[key] = Link(key, terminus)
            self._save(link)
            self._grant(link, _Pending(endpoint, terminus), AttachKind.ESTABLISHED, stolen=False)
            return
        if link.endpoint is None or link.endpoint is endpoint:
            self._grant(link, _Pending(endpoint, terminus), _kind(terminus), stolen=False)
            return
        link.pending.append(_Pending(endpoint, terminus))
        self._steal_next(link)

    def _unknown(self, key: LinkKey) -> str:
        return (f"no {key.role.value} link '{key.link_name}' of container '{key.remote_container_id}'"
                f" in vhost '{self.namespace.vhost_name}' to recover a terminus from")

    def _grant(self, link: Link, pending: _Pending, kind: AttachKind, *, stolen: bool) -> None:
        endpoint = pending.endpoint
        link.endpoint = endpoint
        link.expires_at = None
        self._place(link, endpoint.session, endpoint.connection)
        link.connection_name = endpoint.connection_name
        endpoint.link_attached(Attachment(link, kind, stolen, pending.requested))

    def _steal_next(self, link: Link) -> None:
        """Ask the attached endpoint to let go for the first pending attach (one steal at a time)."""
        if link.stealing_from is not None or not link.pending:
            return
        old = link.endpoint
        if old is None:
            pending = link.pending.popleft()
            self._grant(link, pending, _kind(pending.requested), stolen=True)
            self._steal_next(link)        # the next one steals it from this one
            return
        link.stealing_from = old
        try:
            old.link_stolen(link)         # its detach comes back here, now or later
        except Exception as exc:          # old's code, in the stealer's turn: old's connection closes
            failed = getattr(old.connection, "failed", None)
            if failed is None:
                raise
            failed(exc)                   # (its session's end lets go of the link)

    # -- detach, session end, connection close ----------------------------------------------

    def detach(self, link: Link, endpoint: LinkEndpoint, *, closed: bool) -> None:
        """``endpoint`` detached ``link``: suspended (``closed=False``) or closed.

        A detach from an endpoint the link no longer has (stolen from it) or
        from one still waiting to steal it (its attach is dropped) changes
        nothing else.
        """
        if self._links.get(link.key) is not link:
            return
        if link.endpoint is not endpoint:
            self._drop_pending(link, lambda p: p.endpoint is endpoint)
            return
        stolen = link.stealing_from is endpoint
        link.endpoint = None
        link.stealing_from = None
        if closed and not stolen:
            self._remove(link)
            self._unsubscribe_shared(link)
        elif link.pending:
            self._steal_next(link)
        else:
            self._trigger(link, _DETACH)

    def session_ended(self, session: Hashable) -> None:
        """The session ended: its links are detached; termini expiring on link detach or
        session end start their timers; attaches it had waiting for a steal are dropped."""
        self._ended(self._by_session.pop(session, set()), _SESSION_END,
                    lambda p: p.endpoint.session == session)

    def connection_closed(self, connection: Hashable) -> None:
        """The connection closed (its sessions ended with it)."""
        keys = self._by_connection.pop(connection, set())
        for key in keys:
            link = self._links.get(key)
            if link is not None and link.session is not None:
                self._unindex(self._by_session, link.session, key)
        self._ended(keys, _CONNECTION_CLOSE, lambda p: p.endpoint.connection == connection)

    def _ended(self, keys: set[LinkKey], policies: frozenset[ExpiryPolicy],
               waiting: Callable[[_Pending], bool]) -> None:
        for stolen in [link for link in self._links.values() if link.pending]:
            self._drop_pending(stolen, waiting)
        for key in keys:
            link = self._links.get(key)
            if link is None:
                continue
            if link.endpoint is not None:
                link.endpoint = None
                link.stealing_from = None
                if link.pending:
                    self._steal_next(link)
                    continue
            self._trigger(link, policies)

    def _drop_pending(self, link: Link, which: Callable[[_Pending], bool]) -> None:
        link.pending = deque(p for p in link.pending if not which(p))

    # -- the terminus and the unsettled map ---------------------------------------------------

    def update_terminus(self, link: Link, terminus: Terminus) -> None:
        """The link's terminus is now ``terminus`` (say a resumed link's new source); stored
        or removed from the store as its durability says; the unsettled map is kept."""
        link.terminus = terminus
        self._save(link)

    def record_unsettled(self, link: Link, tag: bytes, state: bytes) -> None:
        """Delivery ``tag`` is unsettled, in ``state`` (the engine's encoding)."""
        link.unsettled[tag] = state
        if link.terminus.keeps_unsettled:
            self._save(link)

    def settled(self, link: Link, tag: bytes) -> None:
        if link.unsettled.pop(tag, None) is not None and link.terminus.keeps_unsettled:
            self._save(link)

    def settled_many(self, link: Link, tags: Iterable[bytes]) -> None:
        """:meth:`settled` for several tags, stored once."""
        pop = link.unsettled.pop
        if [tag for tag in tags if pop(tag, None) is not None] and link.terminus.keeps_unsettled:
            self._save(link)

    def replace_unsettled(self, link: Link, unsettled: Mapping[bytes, bytes]) -> None:
        """The whole unsettled map at once (after reconciling a resumed link's, 2.6.13)."""
        link.unsettled = dict(unsettled)
        if link.terminus.keeps_unsettled:
            self._save(link)

    def hold(self, link: Link, tag: bytes, entry: QueueEntry) -> None:
        """Keep ``entry`` (delivered as ``tag``, unsettled) acquired while ``link`` is
        suspended, for its resume; released if the link is removed first."""
        if self._links.get(link.key) is link:
            link.held[tag] = entry
        else:
            entry.queue.release(entry)

    def release_held(self, link: Link) -> None:
        """Requeue what ``link`` held (each queue dispatches again)."""
        held, link.held = link.held, {}
        for entry in held.values():
            entry.queue.release(entry)

    # -- subscriptions to an exchange -------------------------------------------------------------

    def subscribe(self, link: Link, exchange: str, binding_key: str,
                  done: Callable[[str | None, BrokerError | None], None]) -> None:
        """Give ``link`` (sending, its source an exchange) its subscription queue, bound to
        ``exchange`` with ``binding_key`` and the source's selector: created on the first
        attach, found again when resumed (made anew if the binding or selector changed).
        ``done(queue name, None)`` once stored, or ``done(None, error)``."""
        def subscribed(name: str | None, error: BrokerError | None) -> None:
            if name is not None and self._links.get(link.key) is link and link.subscription_queue != name:
                link.subscription_queue = name
                self._save(link)
            done(name, error)
        self.subscriptions.subscribe(link.key, link.terminus, link.subscription_queue, exchange,
                                     binding_key, subscribed)

    def _unsubscribe_shared(self, closed: Link) -> None:
        """A link of a shared subscription was closed (a JMS unsubscribe): the subscription's
        other links that are suspended go too, so its queue is deleted unless one is attached."""
        queue = closed.subscription_queue
        if queue is None or not closed.terminus.has_capability(SHARED_CAPABILITY):
            return
        sharing = [other for other in self._links.values() if other.subscription_queue == queue]
        if all(other.endpoint is None and not other.pending for other in sharing):
            for other in sharing:
                self._remove(other)

    # -- time ---------------------------------------------------------------------------------

    def _trigger(self, link: Link, policies: frozenset[ExpiryPolicy]) -> None:
        # a timer already running goes on (a link-detach terminus whose session ends later)
        if link.endpoint is None and link.expires_at is None and link.terminus.expiry_policy in policies:
            self._arm(link)

    def _arm(self, link: Link) -> None:
        timeout = link.terminus.timeout
        if timeout is None:
            timeout = self.default_timeout
        if timeout <= 0:
            self._remove(link)
            return
        link.expires_at = self.clock() + timeout
        self._timer_seq += 1
        heapq.heappush(self._timers, (link.expires_at, self._timer_seq, link.key))

    def _live_timer(self, entry: tuple[float, int, LinkKey]) -> Link | None:
        link = self._links.get(entry[2])
        if link is None or link.endpoint is not None or link.expires_at != entry[0]:
            return None
        return link

    def next_deadline(self) -> float | None:
        """When :meth:`run_due` next has a terminus to expire (clock seconds), or None."""
        while self._timers and self._live_timer(self._timers[0]) is None:
            heapq.heappop(self._timers)
        return self._timers[0][0] if self._timers else None

    def run_due(self, now: float) -> None:
        """Remove the termini whose expiry time has come."""
        while self._timers and self._timers[0][0] <= now:
            link = self._live_timer(heapq.heappop(self._timers))
            if link is not None:
                log.info("virtual host '%s': %s expired", self.namespace.vhost_name, link)
                self._remove(link)

    # -- removal and the store -------------------------------------------------------------------

    def _remove(self, link: Link) -> None:
        if self._links.get(link.key) is not link:
            return
        del self._links[link.key]
        link.expires_at = None
        if link.session is not None:
            self._unindex(self._by_session, link.session, link.key)
        if link.connection is not None:
            self._unindex(self._by_connection, link.connection, link.key)
        if link.stored or link.terminus.persistent:
            link.stored = False
            self.stored.remove(link.key.terminus_key)
        self.release_held(link)
        queue = link.subscription_queue
        if queue is not None and not any(other.subscription_queue == queue for other in self._links.values()):
            self.subscriptions.unsubscribe(queue)
        # attaches waiting to steal it: each is now the first of its key again
        waiting, link.pending = list(link.pending), deque()
        link.stealing_from = None
        for pending in waiting:
            try:
                self.attach(pending.endpoint, link.key, pending.requested)
            except BrokerError as exc:
                pending.endpoint.attach_refused(exc)

    @staticmethod
    def _unindex(index: dict[Hashable, set[LinkKey]], where: Hashable, key: LinkKey) -> None:
        keys = index.get(where)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del index[where]

    def _place(self, link: Link, session: Hashable, connection: Hashable) -> None:
        for index, old, new in ((self._by_session, link.session, session),
                                (self._by_connection, link.connection, connection)):
            if old is not None and old != new:
                self._unindex(index, old, link.key)
            index.setdefault(new, set()).add(link.key)
        link.session, link.connection = session, connection

    def _save(self, link: Link) -> None:
        key = link.key.terminus_key
        if not link.terminus.persistent:
            if link.stored:
                link.stored = False
                self.stored.remove(key)
            return
        link.stored = True
        self.stored.save(key, lambda: self._record(link))

    def _record(self, link: Link) -> TerminusRecord | None:
        """The row of ``link`` as it is now (None: it is gone, or no longer persistent)."""
        if self._links.get(link.key) is not link or not link.terminus.persistent:
            return None
        terminus: dict[str, Any] = terminus_record(link.terminus)
        if link.terminus.keeps_unsettled and link.unsettled:
            terminus["unsettled"] = unsettled_record(link.unsettled)
        if link.subscription_queue is not None:
            terminus["subscription-queue"] = link.subscription_queue
        key = link.key
        return TerminusRecord(key.role, key.remote_container_id, key.link_name, terminus)

    # -- management ------------------------------------------------------------------------------

    def describe(self) -> list[dict[str, Any]]:
        """Every link as management shows it (``getLinks``), by container, name, role."""
        now, wall = self.clock(), self._wall_clock()
        shown = []
        for link in sorted(self._links.values(), key=lambda l: (l.key.remote_container_id,
                                                                 l.key.link_name, l.key.role.value)):
            t = link.terminus
            expires = None if link.expires_at is None else int((wall + link.expires_at - now) * 1000)
            shown.append({
                "remoteContainerId": link.key.remote_container_id, "linkName": link.key.link_name,
                "role": link.key.role.value, "state": link.state,
                "connection": link.connection_name if link.endpoint is not None else None,
                "address": t.address, "durable": t.durable.name.lower().replace("_", "-"),
                "expiryPolicy": t.expiry_policy.value,
                "timeout": t.timeout if t.timeout is not None else self.default_timeout,
                "dynamic": t.dynamic, "distributionMode": t.distribution_mode,
                "selector": t.selector, "capabilities": list(t.capabilities),
                "unsettledCount": len(link.unsettled), "subscriptionQueue": link.subscription_queue,
                "expiresAt": expires, "stored": link.stored,
            })
        return shown


def _kind(requested: Terminus | None) -> AttachKind:
    return AttachKind.RECOVERED if requested is None else AttachKind.RESUMED
