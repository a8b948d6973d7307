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

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from broker.messaging.records import to_json_value
from broker.model.attributes import declared_attributes, derived_attributes, to_json
from broker.model.configured_object import ConfiguredObject
from broker.model.registry import TREE
from mgmt.rates import RateBook

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


class Representer:
    """Turns objects into JSON-ready dicts; keeps the rate book between requests."""

    def __init__(self, rates: RateBook | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rates = rates if rates is not None else RateBook()
        self.clock = clock

    def represent(self, obj: ConfiguredObject, options: ViewOptions,
                  visible: Callable[[ConfiguredObject], bool] = lambda o: True) -> dict[str, Any]:
        kind = type(obj)
        derived = derived_attributes(kind)
        statistic_names = {name for name, d in derived.items() if d.statistic}
        if options.actuals:
            values = {"id": obj.id, **obj.attributes(actual=True)}
        else:
            # computed here rather than by obj.attributes(), which would also
            # compute every statistic, a second time
            values = {name: to_json(decl.__get__(obj, kind))
                      for name, decl in declared_attributes(kind).items() if not decl.secure}
            values.update({name: to_json(decl.__get__(obj, kind))
                           for name, decl in derived.items() if not decl.statistic})
        if not options.exclude_inherited_context:
            values["context"] = inherited_context(obj)
        shown: dict[str, Any] = {"id": values.pop("id", obj.id)}
        if "name" in values:
            shown["name"] = values.pop("name")
        shown.update(values)
        if statistic_names:
            shown["statistics"] = self.statistics(obj)
        if options.oversize is not None:
            shown = {key: _cut(value, options.oversize) if key != "statistics" else value
                     for key, value in shown.items()}
        if options.depth > 0:
            deeper = ViewOptions(options.depth - 1, options.actuals,
                                 options.exclude_inherited_context, options.oversize)
            for category in TREE.get(obj.category, ()):
                members = [child for child in obj.children(category) if visible(child)]
                if members:
                    shown[category.lower() + "s"] = [self.represent(child, deeper, visible)
                                                     for child in members]
        result: dict[str, Any] = to_json_value(shown)
        return result

    def statistics(self, obj: ConfiguredObject) -> dict[str, Any]:
        """The object's statistics, with ``<counter>Rate`` for every counter."""
        found: dict[str, Any] = {}
        counters: dict[str, int] = {}
        for name, decl in derived_attributes(type(obj)).items():
            if not decl.statistic:
                continue
            value = decl.__get__(obj, type(obj))
            found[name] = value
            if decl.counter:
                counters[name] = int(value)
        if counters:
            found.update(self.rates.rates(obj.id, self.clock(), counters))
        return found


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
