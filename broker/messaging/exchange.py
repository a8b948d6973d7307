"""Exchanges and bindings: where published messages are routed.

An exchange's :meth:`Exchange.route` answers, for one message, the
destinations its own bindings select: queues and (for exchange-to-exchange
bindings) exchanges, each once.  Following exchange destinations, alternate
exchanges and the default exchange is the :class:`~broker.messaging.namespace.Namespace`'s
job, because it needs the whole graph.

Each type keeps an index shaped for its matching rule, rebuilt on bind/unbind
so routing allocates nothing: direct maps routing key -> tuple of
destinations, fanout keeps one tuple, topic walks a trie (with a small cache
of answers per routing key), headers tests each binding's parsed match rule.
Bindings that differ only in arguments route to their destination once.

A binding may carry a message selector (Broker-J's ``x-filter-jms-selector``
binding argument): it then routes only the messages the selector matches.
Such a binding enters its type's index as a :class:`FilteredRoute` (its
destination and selector) instead of the bare destination, and routing
resolves those to the destinations whose selector matches; an exchange with
no selective binding never looks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Hashable, Sequence, Union

from broker.errors import PreconditionFailed
from broker.messaging.arguments import alternate_exchange_of
from broker.messaging.message import Message
from broker.messaging.records import to_json_value
from broker.messaging.selectors import Selector, selector_of
from broker.messaging.topic_trie import TopicTrie

if TYPE_CHECKING:
    from broker.messaging.queue import Queue

__all__ = ["Binding", "Exchange", "DirectExchange", "FanoutExchange", "TopicExchange",
           "HeadersExchange", "EXCHANGE_TYPES", "Destination", "FilteredRoute"]

Destination = Union["Queue", "Exchange"]


class FilteredRoute:
    """A selective binding's place in its exchange's index: where to, and for which messages."""

    __slots__ = ("destination", "selector")

    def __init__(self, destination: Destination, selector: Selector) -> None:
        self.destination = destination
        self.selector = selector

    def __repr__(self) -> str:
        return f"<FilteredRoute to {self.destination.name!r} where {self.selector.text!r}>"


Route = Union["Queue", "Exchange", FilteredRoute]


def _admitted(found: Sequence[Route], message: Message) -> tuple[Destination, ...]:
    """The destinations of ``found``, selective routes only when their selector matches, each once."""
    chosen: dict[Destination, None] = {}
    for route in found:
        if type(route) is FilteredRoute:
            destination = route.destination
            if destination not in chosen and route.selector.matches(message):
                chosen[destination] = None
        else:
            chosen[route] = None  # type: ignore[index]
    return tuple(chosen)


def _freeze(value: Any) -> Hashable:
    """A hashable stand-in for an argument value (bindings are identified by their arguments)."""
    if isinstance(value, dict):
        return tuple(sorted((str(key), _freeze(item)) for key, item in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(item) for item in value)
    if isinstance(value, bytearray):
        return bytes(value)
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value  # type: ignore[no-any-return]


class Binding:
    """A route from a source exchange to a queue or exchange."""

    __slots__ = ("source", "destination", "routing_key", "arguments", "identity", "selector", "route")

    def __init__(self, source: Exchange, destination: Destination, routing_key: str,
                 arguments: dict[str, Any] | None = None) -> None:
        self.source = source
        self.destination = destination
        self.routing_key = routing_key
        self.arguments: dict[str, Any] = dict(arguments or {})
        # (destination, key, arguments): RabbitMQ's notion of "the same binding"
        self.identity: Hashable = (id(destination), routing_key, _freeze(self.arguments))
        #: the x-filter-jms-selector argument compiled (SelectorError, 406, when it is no selector)
        self.selector = selector_of(self.arguments)
        #: what the exchange's index holds for this binding
        self.route: Route = destination if self.selector is None else FilteredRoute(destination, self.selector)

    @property
    def durable(self) -> bool:
        """Durable when both ends are (RabbitMQ)."""
        return self.source.durable and self.destination.durable

    @property
    def destination_type(self) -> str:
        return "exchange" if isinstance(self.destination, Exchange) else "queue"

    def to_record(self) -> dict[str, Any]:
        return {"object": "binding", "source": self.source.name,
                "destination": self.destination.name, "destination_type": self.destination_type,
                "routing_key": self.routing_key, "arguments": to_json_value(self.arguments)}

    def __repr__(self) -> str:
        return (f"<Binding {self.source.name!r} -> {self.destination_type} "
                f"{self.destination.name!r} key={self.routing_key!r}>")


class Exchange:
    """Base of the exchange types: bookkeeping of bindings; routing is per type."""

    type: ClassVar[str] = ""

    __slots__ = ("name", "vhost", "durable", "auto_delete", "internal", "arguments", "alternate",
                 "bindings", "bindings_in", "deleted", "_exchange_destinations", "_selective")

    def __init__(self, name: str, *, vhost: str = "", durable: bool = False,
                 auto_delete: bool = False, internal: bool = False,
                 arguments: dict[str, Any] | None = None) -> None:
        self.name = name
        self.vhost = vhost
        self.durable = durable
        self.auto_delete = auto_delete
        self.internal = internal
        self.arguments: dict[str, Any] = dict(arguments or {})
        #: name of the alternate exchange for messages this exchange cannot route
        self.alternate: str | None = alternate_exchange_of(self.arguments)
        #: bindings with this exchange as source, by identity
        self.bindings: dict[Hashable, Binding] = {}
        #: exchange-to-exchange bindings with this exchange as destination
        self.bindings_in: set[Binding] = set()
        self.deleted = False
        self._exchange_destinations = 0
        self._selective = 0   # bindings with a selector

    @property
    def routes_to_exchanges(self) -> bool:
        return self._exchange_destinations > 0

    def add_binding(self, binding: Binding) -> bool:
        """Add ``binding``; False (and no change) when an identical one exists."""
        if binding.identity in self.bindings:
            return False
        self._bind(binding)  # validates before anything is recorded
        self.bindings[binding.identity] = binding
        if isinstance(binding.destination, Exchange):
            self._exchange_destinations += 1
        if binding.selector is not None:
            self._selective += 1
        return True

    def find_binding(self, destination: Destination, routing_key: str,
                     arguments: dict[str, Any] | None = None) -> Binding | None:
        """The binding to ``destination`` with this key and arguments, if there is one."""
        return self.bindings.get((id(destination), routing_key, _freeze(dict(arguments or {}))))

    def remove_binding(self, binding: Binding) -> bool:
        """Remove ``binding``; False when it was not (or no longer) bound here."""
        if self.bindings.get(binding.identity) is not binding:
            return False
        del self.bindings[binding.identity]
        self._unbind(binding)
        if isinstance(binding.destination, Exchange):
            self._exchange_destinations -= 1
        if binding.selector is not None:
            self._selective -= 1
        return True

    def route(self, message: Message) -> Sequence[Destination]:
        """The destinations this exchange's own bindings select for ``message``, each once."""
        raise NotImplementedError

    def _bind(self, binding: Binding) -> None:
        raise NotImplementedError

    def _unbind(self, binding: Binding) -> None:
        raise NotImplementedError

    def to_record(self) -> dict[str, Any]:
        return {"object": "exchange", "name": self.name, "type": self.type,
                "durable": self.durable, "auto_delete": self.auto_delete,
                "internal": self.internal, "arguments": to_json_value(self.arguments)}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} bindings={len(self.bindings)}>"


class _CountedDestinations:
    """Destinations with how many bindings lead to each, as an always-current tuple."""

    __slots__ = ("counts", "members")

    def __init__(self) -> None:
        self.counts: dict[Route, int] = {}
        self.members: tuple[Route, ...] = ()

    def add(self, destination: Route) -> None:
        count = self.counts.get(destination, 0)
        self.counts[destination] = count + 1
        if not count:
            self.members = self.members + (destination,)

    def remove(self, destination: Route) -> None:
        count = self.counts.get(destination, 0)
        if count > 1:
            self.counts[destination] = count - 1
        elif count == 1:
            del self.counts[destination]
            self.members = tuple(member for member in self.members if member is not destination)


class DirectExchange(Exchange):
    """Routes on exact equality of routing key and binding key."""

    type: ClassVar[str] = "direct"

    __slots__ = ("_routes",)

    def __init__(self, name: str, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self._routes: dict[str, _CountedDestinations] = {}

    def route(self, message: Message) -> Sequence[Destination]:
        routes = self._routes.get(message.routing_key)
        if routes is None:
            return ()
        return _admitted(routes.members, message) if self._selective else routes.members  # type: ignore[return-value]

    def _bind(self, binding: Binding) -> None:
        routes = self._routes.get(binding.routing_key)
        if routes is None:
            routes = self._routes[binding.routing_key] = _CountedDestinations()
        routes.add(binding.route)

    def _unbind(self, binding: Binding) -> None:
        routes = self._routes.get(binding.routing_key)
        if routes is not None:
            routes.remove(binding.route)
            if not routes.counts:
                del self._routes[binding.routing_key]


class FanoutExchange(Exchange):
    """Routes to every bound destination."""

    type: ClassVar[str] = "fanout"

    __slots__ = ("_all",)

    def __init__(self, name: str, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self._all = _CountedDestinations()

    def route(self, message: Message) -> Sequence[Destination]:
        members = self._all.members
        return _admitted(members, message) if self._selective else members  # type: ignore[return-value]

    def _bind(self, binding: Binding) -> None:
        self._all.add(binding.route)

    def _unbind(self, binding: Binding) -> None:
        self._all.remove(binding.route)


class TopicExchange(Exchange):
    """Routes on dot-separated patterns with ``*`` and ``#`` (see :mod:`topic_trie`)."""

    type: ClassVar[str] = "topic"

    __slots__ = ("_trie", "_cache")

    CACHE_SIZE: ClassVar[int] = 1024

    def __init__(self, name: str, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self._trie: TopicTrie[Route] = TopicTrie()
        self._cache: dict[str, tuple[Route, ...]] = {}

    def route(self, message: Message) -> Sequence[Destination]:
        key = message.routing_key
        found = self._cache.get(key)
        if found is None:
            found = tuple(self._trie.match(key))
            cache = self._cache
            if len(cache) >= self.CACHE_SIZE:
                cache.clear()
            cache[key] = found
        return _admitted(found, message) if self._selective else found  # type: ignore[return-value]

    def _bind(self, binding: Binding) -> None:
        self._trie.add(binding.routing_key, binding.route)
        self._cache.clear()

    def _unbind(self, binding: Binding) -> None:
        self._trie.remove(binding.routing_key, binding.route)
        self._cache.clear()


# x-match modes: (require every pair, include x- keys)
_MATCH_MODES = {"all": (True, False), "any": (False, False),
                "all-with-x": (True, True), "any-with-x": (False, True)}


def _plain(value: Any) -> Any:
    return bytes(value).decode("utf-8", "replace") if isinstance(value, (bytes, bytearray)) else value


def _same_value(header: Any, wanted: Any) -> bool:
    header, wanted = _plain(header), _plain(wanted)
    if isinstance(header, bool) != isinstance(wanted, bool):
        return False
    return bool(header == wanted)


class _HeadersRule:
    __slots__ = ("destination", "match_all", "pairs")

    def __init__(self, destination: Route, match_all: bool,
                 pairs: tuple[tuple[str, Any], ...]) -> None:
        self.destination = destination
        self.match_all = match_all
        self.pairs = pairs

    def matches(self, headers: dict[str, Any]) -> bool:
        """A binding value of None (AMQP void) matches any value of a present header."""
        if self.match_all:
            for key, wanted in self.pairs:
                if key not in headers:
                    return False
                if wanted is not None and not _same_value(headers[key], wanted):
                    return False
            return True
        for key, wanted in self.pairs:
            if key in headers and (wanted is None or _same_value(headers[key], wanted)):
                return True
        return False


class HeadersExchange(Exchange):
    """Routes on message headers against binding arguments (``x-match``: all/any[-with-x])."""

    type: ClassVar[str] = "headers"

    __slots__ = ("_rules",)

    def __init__(self, name: str, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self._rules: dict[Binding, _HeadersRule] = {}

    def route(self, message: Message) -> Sequence[Destination]:
        rules = self._rules
        if not rules:
            return ()
        headers = message.properties.headers or {}
        found: dict[Route, None] = {}
        for rule in rules.values():
            if rule.destination not in found and rule.matches(headers):
                found[rule.destination] = None
        routes = tuple(found)
        return _admitted(routes, message) if self._selective else routes  # type: ignore[return-value]

    def _bind(self, binding: Binding) -> None:
        mode = _plain(binding.arguments.get("x-match", "all"))
        if mode not in _MATCH_MODES:
            raise PreconditionFailed(
                f"Invalid x-match field value '{mode}'; expected all, any, all-with-x, or any-with-x")
        match_all, with_x = _MATCH_MODES[mode]
        pairs = tuple((key, value) for key, value in binding.arguments.items()
                      if key != "x-match" and (with_x or not key.startswith("x-")))
        self._rules[binding] = _HeadersRule(binding.route, match_all, pairs)

    def _unbind(self, binding: Binding) -> None:
        self._rules.pop(binding, None)


EXCHANGE_TYPES: dict[str, type[Exchange]] = {
    cls.type: cls for cls in (DirectExchange, FanoutExchange, TopicExchange, HeadersExchange)}
