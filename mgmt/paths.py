"""REST paths <-> objects of the model tree, Broker-J's way (sans-IO).

``/api/latest/<category>/<name1>/<name2>/...``: the category in lower case,
then the names of the object's ancestors below the Broker, then its own --
``queue/<virtualhostnode>/<virtualhost>/<queue>``, ``port/<port>``,
``user/<authenticationprovider>/<user>``, ``broker`` for the broker itself.
Fewer names list everything under the ones given; ``*`` matches any name;
one name more than the category's depth names an operation.  Names are
percent-decoded segment by segment, so ``a%2Fb`` is one name holding a
slash.

Everything here is derived from :data:`broker.model.registry.TREE`: a new
category has a path the moment it is registered.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import quote, unquote

from broker.model import registry
from broker.model.configured_object import ConfiguredObject

#: ``/api/<version>``: Broker-J keeps the current API as ``latest`` and numbered versions
API_VERSIONS = ("latest", "v1")
ROOT_CATEGORY = "Broker"
WILDCARD = "*"


class PathNotFound(Exception):
    """The path names no category, version or object (HTTP 404)."""


@dataclass(frozen=True, slots=True)
class CategoryPath:
    """Where one category's objects live: the categories named on the way from the Broker."""

    category: str
    #: the categories whose names a full path holds, outermost first, ending with ``category``
    chain: tuple[str, ...]

    @property
    def url_name(self) -> str:
        return self.category.lower()

    @property
    def depth(self) -> int:
        return len(self.chain)

    @property
    def parent_chain(self) -> tuple[str, ...]:
        return self.chain[:-1]


@dataclass(frozen=True, slots=True)
class ApiPath:
    """One parsed request path."""

    version: str
    target: CategoryPath
    names: tuple[str, ...]
    #: the last segment when the path is one longer than the category's depth
    operation: str | None = None

    @property
    def full(self) -> bool:
        """Names every level down to one object (it may still hold wildcards)."""
        return len(self.names) == self.target.depth

    @property
    def wildcard(self) -> bool:
        return WILDCARD in self.names

    @property
    def names_parent(self) -> bool:
        """Names exactly the parent of an object of the category (where one is created)."""
        return len(self.names) == self.target.depth - 1


def category_paths() -> dict[str, CategoryPath]:
    """Every category management shows, by URL name (SystemConfig stays hidden)."""
    found: dict[str, CategoryPath] = {}

    def walk(category: str, chain: tuple[str, ...]) -> None:
        found[category.lower()] = CategoryPath(category, chain)
        for child in registry.TREE.get(category, ()):
            walk(child, chain + (child,))

    walk(ROOT_CATEGORY, ())
    return found


def parse(raw_path: str) -> ApiPath:
    """``/api/latest/queue/n/v/q`` (raw, still percent-encoded) -> :class:`ApiPath`."""
    segments = raw_path.split("?", 1)[0].split("/")
    while segments and segments[-1] == "":
        segments.pop()
    segments = [unquote(segment) for segment in segments[1:]]   # [0] is before the first "/"
    if len(segments) < 3 or segments[0] != "api":
        raise PathNotFound("expected /api/<version>/<category>/...")
    version, category_name, names = segments[1], segments[2].lower(), tuple(segments[3:])
    if version not in API_VERSIONS:
        raise PathNotFound(f"unknown API version '{version}'; known: {', '.join(API_VERSIONS)}")
    target = category_paths().get(category_name)
    if target is None:
        known = ", ".join(category_paths())
        raise PathNotFound(f"unknown category '{segments[2]}'; known: {known}")
    if len(names) > target.depth + 1:
        raise PathNotFound(f"too many names for category '{target.url_name}': it is"
                           f" {target.url_name}/{'/'.join('<' + c.lower() + '>' for c in target.chain)}")
    if len(names) == target.depth + 1:
        return ApiPath(version, target, names[:-1], operation=names[-1])
    return ApiPath(version, target, names)


def select(broker: ConfiguredObject, chain: Iterable[str],
           names: tuple[str, ...]) -> list[ConfiguredObject]:
    """The objects below ``broker`` along ``chain`` whose names match (missing names: all)."""
    found = [broker]
    for level, category in enumerate(chain):
        wanted = names[level] if level < len(names) else WILDCARD
        found = [child for parent in found for child in parent.children(category)
                 if wanted == WILDCARD or child.name == wanted]
    return found


def names_of(obj: ConfiguredObject) -> list[str]:
    """The names in ``obj``'s path: its ancestors' below the Broker, then its own."""
    names: list[str] = []
    current: ConfiguredObject | None = obj
    while current is not None and current.category != ROOT_CATEGORY:
        names.append(str(current.name))
        current = current.parent
    names.reverse()
    return names


def url_of(obj: ConfiguredObject, version: str = "latest") -> str:
    """The object's REST path, each name percent-encoded (slashes included)."""
    path = "/".join(quote(name, safe="") for name in names_of(obj))
    base = f"/api/{version}/{obj.category.lower()}"
    return f"{base}/{path}" if path else base
