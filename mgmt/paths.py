"""REST paths <-> objects of the model tree, Broker-J's way (sans-IO).

``/api/latest/<category>/<name1>/<name2>/...``: the category in lower case,
then the names of the object's ancestors below the Broker, then its own --
``queue/<virtualhostnode>/<virtualhost>/<queue>``, ``port/<port>``,
``connection/<port>/<connection>`` (a connection is a child of its port, as in
Broker-J 7), ``user/<authenticationprovider>/<user>``, ``broker`` for the
broker itself.
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
    #: the positions in ``names`` that were a bare ``*`` (``%2A`` is a name: a literal star)
    wildcards: frozenset[int] = frozenset()

    @property
    def full(self) -> bool:
        """Names every level down to one object (it may still hold wildcards)."""
        return len(self.names) == self.target.depth

    @property
    def wildcard(self) -> bool:
        return bool(self.wildcards)

    @property
    def names_parent(self) -> bool:
        """Names exactly the parent of an object of the category (where one is created)."""
        return len(self.names) == self.target.depth - 1


#: (the tree it was worked out from, category_paths())
_known: tuple[tuple[tuple[str, tuple[str, ...]], ...], dict[str, CategoryPath]] | None = None


def category_paths() -> dict[str, CategoryPath]:
    """Every category management shows, by URL name (SystemConfig stays hidden).

    Worked out again only when the registry's tree has changed since the
    last call (every request asks).
    """
    global _known
    tree = tuple(registry.TREE.items())
    if _known is None or _known[0] != tree:
        _known = (tree, _walk_tree())
    return dict(_known[1])


def _walk_tree() -> dict[str, CategoryPath]:
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
    raw = segments[1:]                                          # [0] is before the first "/"
    segments = [unquote(segment) for segment in raw]
    if len(segments) < 3 or segments[0] != "api":
        raise PathNotFound("expected /api/<version>/<category>/...")
    version, category_name, names = segments[1], segments[2].lower(), tuple(segments[3:])
    # only a star as sent is a wildcard: a queue may be called "*" (sent as %2A)
    wildcards = frozenset(i for i, segment in enumerate(raw[3:]) if segment == WILDCARD)
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
        if target.depth in wildcards:
            raise PathNotFound("an operation's name cannot be a wildcard")
        return ApiPath(version, target, names[:-1], operation=names[-1], wildcards=wildcards)
    return ApiPath(version, target, names, wildcards=wildcards)


def select(broker: ConfiguredObject, chain: Iterable[str], names: tuple[str, ...],
           wildcards: frozenset[int] = frozenset()) -> list[ConfiguredObject]:
    """The objects below ``broker`` along ``chain`` whose names match.

    A missing name, or one at a position in ``wildcards``, matches every object.
    """
    found = [broker]
    for level, category in enumerate(chain):
        wanted = names[level] if level < len(names) else WILDCARD
        if level >= len(names) or level in wildcards:
            found = [child for parent in found for child in parent.children(category)]
        else:
            # children are kept by name: look the one up rather than scan them all
            found = [child for parent in found
                     if (child := parent.child(category, wanted)) is not None
                     and child.name == wanted]
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
