"""``/metrics``: the statistics of the broker, its virtual hosts and queues for Prometheus.

Generated from the model's statistics metadata (derived attributes marked
``statistic``/``counter``), in the Prometheus text exposition format 0.0.4:
``deltamq_<category>_<statistic>`` in snake case, counters ending in
``_total``, labelled with the names of the object's path
(``virtualhostnode``, ``virtualhost``, ``queue``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from broker.model.attributes import DerivedAttribute, derived_attributes
from broker.model.configured_object import ConfiguredObject
from mgmt import paths

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: the categories exported: few objects each, or (queues) the ones dashboards need
EXPORTED = ("Broker", "VirtualHost", "Queue")

_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def snake_case(name: str) -> str:
    return _BOUNDARY.sub("_", name).lower()


def metric_name(category: str, statistic: DerivedAttribute[Any]) -> str:
    name = f"deltamq_{category.lower()}_{snake_case(statistic.name)}"
    return name + "_total" if statistic.counter else name


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(obj: ConfiguredObject, chain: tuple[str, ...]) -> str:
    names = paths.names_of(obj)
    pairs = [f'{category.lower()}="{_escape(name)}"' for category, name in zip(chain, names)]
    return "{" + ",".join(pairs) + "}" if pairs else ""


def exposition(broker: ConfiguredObject,
               visible: Any = lambda obj: True) -> str:
    """The text Prometheus scrapes, for every object of the exported categories."""
    lines: list[str] = []
    categories = paths.category_paths()
    for category in EXPORTED:
        target = categories[category.lower()]
        objects = [obj for obj in paths.select(broker, target.chain, ()) if visible(obj)]
        lines.extend(_family_lines(category, target.chain, objects))
    return "\n".join(lines) + "\n"


def _family_lines(category: str, chain: tuple[str, ...],
                  objects: Iterable[ConfiguredObject]) -> Iterator[str]:
    members = list(objects)
    if not members:
        return
    statistics = {name: d for name, d in derived_attributes(type(members[0])).items()
                  if d.statistic}
    for statistic in statistics.values():
        name = metric_name(category, statistic)
        yield f"# HELP {name} {_escape(statistic.description)}"
        yield f"# TYPE {name} {'counter' if statistic.counter else 'gauge'}"
        for obj in members:
            value = statistic.__get__(obj, type(obj))
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            yield f"{name}{_labels(obj, chain)} {value}"
