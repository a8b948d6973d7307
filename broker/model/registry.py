"""The broker model: which categories exist, how they nest, which types they have.

:data:`TREE` is the one place the category hierarchy is written down (Broker-J's
``BrokerModel``).  Category classes register themselves when defined; types
(category specialisations chosen by the ``type`` attribute), configuration
stores, management and commands are plugins found through Python entry points
only (Broker-J's ``ServiceLoader`` / ``@PluggableService``): the broker names
no module of ``lakehouse`` or ``mgmt``.  ``pyproject.toml`` declares them, so
``pip install -e .`` (``make install``) registers them; an entry point names a
module, which is imported from ``sys.path`` like any other (a checkout on
``PYTHONPATH`` over an editable install of another one loads its own code).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from broker.errors import ConfigurationError
from broker.model.attributes import Attribute, DerivedAttribute, declared_attributes, \
    derived_attributes

if TYPE_CHECKING:
    from broker.model.configured_object import ConfiguredObject

#: parent category -> child categories, in the order children are opened
#: (authentication providers before the ports that name them).
TREE: dict[str, tuple[str, ...]] = {
    "SystemConfig": ("Broker",),
    "Broker": ("AuthenticationProvider", "GroupProvider", "AccessControlProvider",
               "BrokerConnectionLimitProvider", "KeyStore", "TrustStore", "Port", "VirtualHostNode"),
    "AuthenticationProvider": ("User",),
    # access control (broker.model.access_control): asked in priority order
    "GroupProvider": (),
    "AccessControlProvider": (),
    "VirtualHostAccessControlProvider": (),
    # connection limit rules (broker.model.connection_limit_providers)
    "BrokerConnectionLimitProvider": (),
    "KeyStore": (),
    "TrustStore": (),
    # Runtime objects sit where Broker-J 7 puts them: a connection under the
    # port it came in on (its virtual host keeps it as an association, not a
    # child), sessions under their connection, a consumer under its queue
    # (its session keeps it as an association).  See broker.model.runtime.
    "Port": ("Connection",),
    "User": (),
    "VirtualHostNode": ("VirtualHost",),
    # Exchange and Queue are live views of the messaging layer's Namespace
    # (broker.model.messaging_objects); bindings are an attribute of exchanges.
    "VirtualHost": ("Exchange", "Queue", "VirtualHostAccessControlProvider"),
    "Exchange": (),
    "Queue": ("Consumer",),
    "Connection": ("Session",),
    "Session": (),
    "Consumer": (),
}

#: category -> entry point group naming its types.
TYPE_GROUPS: dict[str, str] = {
    "AuthenticationProvider": "deltamq.auth",
    "Port": "deltamq.ports",
}

STORE_GROUP = "deltamq.stores"
#: management plugins, one per port type that serves management (``HTTP``: mgmt)
MANAGEMENT_GROUP = "deltamq.management"
#: command-line commands contributed by other packages (``deltamq sql`` from lakehouse)
COMMAND_GROUP = "deltamq.commands"

#: categories whose ``type`` names a plugin of another kind than the category
#: itself (a VirtualHostNode's type is the store it keeps its data in).
TYPE_NAMED_BY: dict[str, str] = {"VirtualHostNode": STORE_GROUP}

_BASES: dict[str, type[ConfiguredObject]] = {}
#: types built into the broker for categories without an entry point group
#: (category -> type name -> class), registered by :func:`register_type`
_BUILT_IN_TYPES: dict[str, dict[str, type[ConfiguredObject]]] = {}


def register(cls: type[ConfiguredObject]) -> None:
    """Record ``cls`` as the base class of its category (called on class creation)."""
    if cls.category not in TREE:
        raise ConfigurationError(f"category '{cls.category}' is not part of the broker model")
    _BASES[cls.category] = cls


def register_type(cls: type[ConfiguredObject]) -> None:
    """Record ``cls`` as type ``cls.type_name`` of its category (one built into the broker)."""
    if cls.category in TYPE_GROUPS or not cls.type_name:
        raise ConfigurationError(f"{cls.__name__}: types of {cls.category} are plugins")
    _BUILT_IN_TYPES.setdefault(cls.category, {})[cls.type_name] = cls


@dataclass(frozen=True)
class Category:
    """What management needs to know about one category, without instances."""

    name: str
    base: type[ConfiguredObject]

    @property
    def parent(self) -> str | None:
        for parent, children in TREE.items():
            if self.name in children:
                return parent
        return None

    @property
    def children(self) -> tuple[str, ...]:
        return TREE[self.name]

    @property
    def plural(self) -> str:
        """The key holding children of this category in a configuration file."""
        return self.name.lower() + "s"

    def types(self) -> list[str]:
        """Known specialisations (installed entry points), without importing them."""
        group = TYPE_GROUPS.get(self.name) or TYPE_NAMED_BY.get(self.name)
        if group is None:
            return sorted(_BUILT_IN_TYPES.get(self.name, {}))
        return sorted(_entry_points(group))

    def attributes(self, type_name: str | None = None) -> dict[str, Attribute[Any]]:
        cls = specialisation(self.name, type_name) if type_name else self.base
        return declared_attributes(cls)

    def derived_attributes(self, type_name: str | None = None) -> dict[str, DerivedAttribute[Any]]:
        cls = specialisation(self.name, type_name) if type_name else self.base
        return derived_attributes(cls)

    def describe(self) -> dict[str, Any]:
        """JSON-ready description (REST ``/api/latest/metadata``-style)."""
        return {
            "category": self.name,
            "parent": self.parent,
            "children": list(self.children),
            "types": self.types(),
            "attributes": {name: a.as_dict() for name, a in self.attributes().items()},
            "derived": {name: a.as_dict() for name, a in self.derived_attributes().items()},
        }


def category(name: str) -> Category:
    """The category called ``name`` (case-insensitive, singular or plural)."""
    wanted = name.lower()
    for known, base in _BASES.items():
        if wanted in (known.lower(), known.lower() + "s"):
            return Category(known, base)
    raise ConfigurationError(f"unknown category '{name}'")


def categories() -> list[Category]:
    """Every registered category, in model (tree) order."""
    return [Category(name, _BASES[name]) for name in TREE if name in _BASES]


def specialisation(category_name: str, type_name: str | None) -> type[ConfiguredObject]:
    """The class implementing ``type_name`` of ``category_name``.

    Categories without types (or ``type_name`` None for them) give the base
    class.  An unknown type is a :class:`ConfigurationError` listing the known ones.
    """
    base = category(category_name).base
    group = TYPE_GROUPS.get(base.category)
    built_in = _BUILT_IN_TYPES.get(base.category)
    if group is None and built_in:
        key = _match(type_name or "", built_in)
        if key is None:
            raise ConfigurationError(f"{base.category}: unknown type '{type_name}'; known:"
                                     f" {', '.join(sorted(built_in))}")
        return built_in[key]
    if group is None:
        return base
    if not type_name:
        raise ConfigurationError(f"{base.category}: attribute 'type' is mandatory;"
                                 f" one of {', '.join(category(base.category).types())}")
    cls = load_plugin(group, type_name, what=f"{base.category} type")
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ConfigurationError(f"{base.category} type '{type_name}' is provided by {cls!r},"
                                 f" which is not a {base.__name__}")
    return cls


def plugin_names(group: str) -> list[str]:
    """Every installed plugin of entry point ``group``."""
    return sorted(_entry_points(group))


def load_plugin(group: str, name: str, *, what: str) -> Any:
    """Load plugin ``name`` of entry point ``group`` (case-insensitive name)."""
    installed = _entry_points(group)
    key = _match(name, installed)
    if key is None:
        if not installed:
            raise ConfigurationError(f"unknown {what} '{name}': no plugin of entry point group"
                                     f" '{group}' is installed; install DeltaMQ (pip install -e .,"
                                     " or make install) so its entry points are registered")
        raise ConfigurationError(f"unknown {what} '{name}'; known: {', '.join(sorted(installed))}")
    return installed[key].load()


def forget_plugins() -> None:
    """Read the entry points again on next use (after a distribution was installed at run time)."""
    _entry_points.cache_clear()


def _match(name: str, names: Iterable[str]) -> str | None:
    candidates = list(names)
    if name in candidates:
        return name
    for candidate in candidates:
        if candidate.lower() == name.lower():
            return candidate
    return None


@functools.cache
def _entry_points(group: str) -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=group)}
