"""Objects of the model as the REST API shows them (Broker-J's ConfiguredObjectToMapConverter).

Generated from the model's metadata: every declared attribute (secure ones
never), every derived one, the statistics -- derived attributes marked
``statistic`` -- gathered under ``statistics`` with a rate per second for
each counter, and, ``depth`` levels down, the children under the lower-case
plural of their category (``queues``, ``virtualhostnodes``...).

Query options, as Broker-J names them: ``depth``, ``actuals`` (values as
configured, ``${...}`` unexpanded and defaults left out),
``excludeInheritedContext`` (``false``: ``context`` also holds the
ancestors' variables), ``oversize`` (strings longer than this are cut and
end with ``...``).
"""

from __future__ import annotations

import enum
import gc
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from broker.messaging.records import to_json_value
from broker.model.attributes import Attribute, DerivedAttribute, declared_attributes, \
    derived_attributes, to_json
from broker.model.configured_object import ConfiguredObject
from broker.model.registry import TREE
from mgmt.rates import RateBook, rate_name

TRUNCATED = "..."


class BadQuery(ValueError):
    """A query parameter has a value it cannot have (HTTP 400)."""


@dataclass(frozen=True, slots=True)
class ViewOptions:
    depth: int = 0
    actuals: bool = False
    exclude_inherited_context: bool = True
    oversize: int | None = None

    @classmethod
    def from_query(cls, query: Mapping[str, list[str]]) -> ViewOptions:
        return cls(depth=_integer(query, "depth", 0),
                   actuals=_boolean(query, "actuals", False),
                   exclude_inherited_context=_boolean(query, "excludeInheritedContext", True),
                   oversize=_integer(query, "oversize", None))


#: query parameters that are options, not attribute filters
OPTION_NAMES = frozenset({"depth", "actuals", "excludeInheritedContext", "oversize",
                          "extractInitialConfig"})


def _single(query: Mapping[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    if not values:
        return None
    if len(values) > 1:
        raise BadQuery(f"query parameter '{name}' given {len(values)} times")
    return values[0]


def _integer(query: Mapping[str, list[str]], name: str, default: int | None) -> Any:
    text = _single(query, name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise BadQuery(f"query parameter '{name}' must be an integer; got '{text}'") from None
    if value < 0:
        raise BadQuery(f"query parameter '{name}' must not be negative; got {value}")
    return value


def _boolean(query: Mapping[str, list[str]], name: str, default: bool) -> bool:
    text = _single(query, name)
    if text is None:
        return default
    if text.lower() in ("true", "1", "yes", ""):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise BadQuery(f"query parameter '{name}' must be true or false; got '{text}'")


def matches_filters(obj: ConfiguredObject, query: Mapping[str, list[str]]) -> bool:
    """Broker-J's attribute filters: every other query parameter must equal one of its values."""
    filters = {name: values for name, values in query.items() if name not in OPTION_NAMES}
    if not filters:
        return True
    listed: dict[str, Any] | None = None
    for name, values in filters.items():
        if name == "id":
            value: Any = obj.id
        elif name == "name":
            value = obj.name
        else:
            if listed is None:
                listed = obj.attributes()
            if name not in listed:
                return False
            value = listed[name]
        if _as_text(value) not in values:
            return False
    return True


def _as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


class _Plan:
    """What :class:`Representer` reads of the objects of one class, and in which order.

    Built from the class's metadata once per request (not per object: a list
    of 10,000 queues walks the class hierarchy once), and never kept beyond
    it, so attributes added to a class at run time still show up.
    """

    __slots__ = ("fields", "statistics", "counters", "rates", "children", "shown", "measured")

    def __init__(self, kind: type, category: str) -> None:
        derived = derived_attributes(kind)
        # shown in this order: declared attributes, then derived ones (a derived
        # attribute of the same name replaces the declared one in its place);
        # each is (name, True, wire name to look up in _values) for a declared
        # attribute read as the descriptor reads it, else (name, False, compute)
        order: dict[str, tuple[bool, Any]] = {}
        for name, decl in declared_attributes(kind).items():
            if not decl.secure:
                plain = type(decl) is Attribute
                order[name] = (plain, decl.name if plain else _bound(decl, kind))
        for name, each in derived.items():
            if not each.statistic:
                order[name] = (False, _computed(each, kind))
        # "id" first, then "name", then the rest
        first = [name for name in ("id", "name") if name in order]
        self.fields: tuple[tuple[str, bool, Any], ...] = tuple(
            (name, *order[name]) for name in first + [n for n in order if n not in first])
        self.statistics: tuple[tuple[str, Callable[[Any], Any], bool], ...] = tuple(
            (name, _computed(each, kind), each.counter)
            for name, each in derived.items() if each.statistic)
        #: the counters among the statistics, and the names of their rates
        self.counters = tuple(name for name, _, counter in self.statistics if counter)
        self.rates = tuple(rate_name(name) for name in self.counters)
        self.children: tuple[str, ...] = TREE.get(category, ())
        # every key in place, to be copied and filled in: a dict that is not
        # grown one key at a time is built in a fraction of the time
        self.shown: dict[str, Any] = dict.fromkeys(name for name, _, _ in self.fields)
        if self.statistics:
            self.shown["statistics"] = None
        self.measured: dict[str, Any] = dict.fromkeys(name for name, _, _ in self.statistics)
        self.measured.update(dict.fromkeys(self.rates, 0.0))


def _computed(decl: DerivedAttribute[Any], kind: type) -> Callable[[Any], Any]:
    """obj -> the derived attribute's value (what ``decl.__get__(obj, kind)`` gives)."""
    if type(decl) is DerivedAttribute:
        return decl.compute
    return _bound(decl, kind)


def _bound(decl: Any, kind: type) -> Callable[[Any], Any]:
    def read(obj: Any) -> Any:
        return decl.__get__(obj, kind)
    return read


#: types msgspec/json write as they are: no conversion needed
_PLAIN = frozenset({str, int, float, bool, type(None)})


class Representer:
    """Turns objects into JSON-ready dicts; keeps the rate book between requests."""

    def __init__(self, rates: RateBook | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rates = rates if rates is not None else RateBook()
        self.clock = clock

    def represent(self, obj: ConfiguredObject, options: ViewOptions,
                  visible: Callable[[ConfiguredObject], bool] = lambda o: True) -> dict[str, Any]:
        return self.represent_all([obj], options, visible)[0]

    def represent_all(self, objects: Iterable[ConfiguredObject], options: ViewOptions,
                      visible: Callable[[ConfiguredObject], bool] = lambda o: True,
                      ) -> list[dict[str, Any]]:
        """Each object as :meth:`represent` shows it; the class metadata is read once per class."""
        plans: dict[type, _Plan] = {}
        now = self.clock()
        with _collector_paused():
            return [self._one(obj, options, visible, plans, now) for obj in objects]

    def _one(self, obj: ConfiguredObject, options: ViewOptions,
             visible: Callable[[ConfiguredObject], bool], plans: dict[type, _Plan],
             now: float) -> dict[str, Any]:
        kind = type(obj)
        plan = plans.get(kind)
        if plan is None:
            plan = plans[kind] = _Plan(kind, obj.category)
        shown: dict[str, Any]
        if options.actuals or options.oversize is not None or not options.exclude_inherited_context:
            shown = _with_options(obj, plan, options)
        else:
            # the common case, in one pass: JSON values as they are, the rest converted
            shown = plan.shown.copy()
            plain = _PLAIN
            values = obj._values
            for name, declared, source in plan.fields:
                value = values.get(source) if declared else source(obj)
                vtype = type(value)
                if vtype in plain:
                    shown[name] = value
                elif vtype is dict and not value:
                    shown[name] = {}
                else:
                    shown[name] = _json(value)
        if plan.statistics:
            shown["statistics"] = self._statistics(obj, plan, now, shown.get("id"))
        if options.depth > 0:
            deeper = ViewOptions(options.depth - 1, options.actuals,
                                 options.exclude_inherited_context, options.oversize)
            for category in plan.children:
                members = [self._one(child, deeper, visible, plans, now)
                           for child in obj.children(category) if visible(child)]
                if members:
                    shown[category.lower() + "s"] = members
        return shown

    def statistics(self, obj: ConfiguredObject) -> dict[str, Any]:
        """The object's statistics, with ``<counter>Rate`` for every counter."""
        return self._statistics(obj, _Plan(type(obj), obj.category), self.clock())

    def _statistics(self, obj: ConfiguredObject, plan: _Plan, now: float,
                    key: str | None = None) -> dict[str, Any]:
        found = plan.measured.copy()
        counts: list[int] = []
        plain = _PLAIN
        for name, compute, counter in plan.statistics:
            value = compute(obj)
            if counter:
                counts.append(int(value))
            found[name] = value if type(value) in plain else to_json_value(value)
        if counts:
            rates = self.rates.rates_of(key or obj.id, now, plan.counters, tuple(counts))
            if rates is not None:                   # else all 0.0, as ``measured`` has them
                for name, rate in zip(plan.rates, rates):
                    found[name] = rate
        return found


def _with_options(obj: ConfiguredObject, plan: _Plan, options: ViewOptions) -> dict[str, Any]:
    """The attributes shown with ``actuals``, ``excludeInheritedContext=false`` or ``oversize``."""
    shown: dict[str, Any]
    if options.actuals:
        shown = _ordered({"id": obj.id, **obj.attributes(actual=True)})
    else:
        shown = {}
        values = obj._values
        for name, declared, source in plan.fields:
            value = values.get(source) if declared else source(obj)
            shown[name] = value if type(value) in _PLAIN else to_json(value)
    if not options.exclude_inherited_context:
        shown["context"] = inherited_context(obj)
    if options.oversize is not None:
        limit = options.oversize
        shown = {key: _cut(value, limit) for key, value in shown.items()}
    return {key: value if type(value) in _PLAIN else to_json_value(value)
            for key, value in shown.items()}


def _json(value: Any) -> Any:
    """``to_json_value(to_json(value))``, with shortcuts for what most objects hold."""
    if isinstance(value, enum.Enum):
        return value.name
    if type(value) is dict and not value:
        return {}
    return to_json_value(to_json(value))


@contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while an answer is built.

    An answer is a tree of fresh dicts and lists (thousands for a list of
    queues) that holds no cycle and is freed by reference counting once sent;
    building it would otherwise set off collections that traverse every
    object of the broker -- more time than the answer itself takes.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _ordered(values: dict[str, Any]) -> dict[str, Any]:
    """``id`` first, then ``name``, then the rest in their order."""
    shown: dict[str, Any] = {"id": values.pop("id")}
    if "name" in values:
        shown["name"] = values.pop("name")
    shown.update(values)
    return shown


def inherited_context(obj: ConfiguredObject) -> dict[str, Any]:
    """Context variables visible to ``obj``: its ancestors', then its own (nearest wins)."""
    chain: list[ConfiguredObject] = []
    current: ConfiguredObject | None = obj
    while current is not None:
        chain.append(current)
        current = current.parent
    merged: dict[str, Any] = {}
    for each in reversed(chain):
        context = each.attributes(actual=True).get("context")
        if isinstance(context, Mapping):
            merged.update(context)
    return merged


def _cut(value: Any, limit: int) -> Any:
    if isinstance(value, str) and len(value) > limit:
        return value[:limit] + TRUNCATED
    if isinstance(value, list):
        return [_cut(item, limit) for item in value]
    if isinstance(value, dict):
        return {key: _cut(item, limit) for key, item in value.items()}
    return value
