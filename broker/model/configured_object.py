"""ConfiguredObject: attributes, context, children, state and lifecycle.

Every node of the model tree is a :class:`ConfiguredObject` (Broker-J's
``AbstractConfiguredObject``).  A category is a subclass that sets
``category`` and declares its attributes with
:func:`~broker.model.attributes.attribute`; a *type* of a category (a
specialisation chosen by the ``type`` attribute) is a further subclass.

Lifecycle, as in Broker-J:

* **create** (a new object, ``parent.create_child(...)``): resolve ->
  check its name and path attributes (:mod:`broker.model.confinement`: what
  management creates stays inside the data directory) -> validate -> register with the parent -> :meth:`on_create` -> :meth:`on_open`
  -> ACTIVE; the parent's listeners then hear ``child_added`` (which is when
  the store-owning ancestor persists it).  A failure anywhere leaves nothing
  registered and raises.
* **open** (an object recovered from a store, already attached): resolve ->
  validate -> :meth:`on_open` -> ACTIVE, then its recovered children are
  opened.  A :class:`~broker.errors.ConfigurationError` raises (the
  configuration is wrong: say so at start-up); any other failure in
  :meth:`on_open` leaves the object ERRORED, keeps the broker running and
  leaves its children unopened.
* **delete**: :meth:`validate_delete`, children first, :meth:`on_delete`,
  unregister, DELETED.  **close** (shutdown) releases resources without
  removing anything from the store.

Context variables resolve on the object, then up the tree, then through the
root's fallback (for :class:`~broker.model.system_config.SystemConfig`: command
line ``-D``, environment, configuration-file defaults, built-in defaults).

All of this runs on the one event loop that owns the model: no locks.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, TypeVar

from broker.errors import BrokerError, ConfigurationError
from broker.model import registry
from broker.model.attributes import Attribute, DerivedAttribute, attribute, convert, \
    declared_attributes, derived, derived_attributes, to_json
from broker.model.confinement import check_apart, check_name, check_path
from broker.model.context import environment_value, expand

log = logging.getLogger(__name__)

C = TypeVar("C", bound="ConfiguredObject")


class State(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    ACTIVE = "ACTIVE"
    STOPPED = "STOPPED"
    DELETED = "DELETED"
    ERRORED = "ERRORED"


class ChangeListener:
    """Told about changes to the objects it is added to (``obj.listeners``).

    Override what you need; the defaults ignore the event (Broker-J's
    ``AbstractConfigurationChangeListener``).
    """

    def state_changed(self, obj: ConfiguredObject, old: State, new: State) -> None:
        pass

    def attribute_set(self, obj: ConfiguredObject, name: str, old: Any, new: Any) -> None:
        pass

    def child_added(self, obj: ConfiguredObject, child: ConfiguredObject) -> None:
        pass

    def child_removed(self, obj: ConfiguredObject, child: ConfiguredObject) -> None:
        pass


class ConfiguredObject:
    """A node of the model tree (see the module docstring)."""

    category: ClassVar[str]
    #: the ``type`` value this class implements (None for a category's base class)
    type_name: ClassVar[str | None] = None
    #: persisted by the nearest ancestor that owns a configuration store
    durable: ClassVar[bool] = True
    #: owns a configuration store for its descendants (SystemConfig, VirtualHostNode)
    manages_children: ClassVar[bool] = False
    #: False for runtime objects, whose values come from peers: a client's
    #: product string must never be taken for a ``${...}`` reference
    resolves_context: ClassVar[bool] = True

    _declared: ClassVar[dict[str, Attribute[Any]]] = {}
    _derived: ClassVar[dict[str, DerivedAttribute[Any]]] = {}

    name = attribute(str, mandatory=True, mutable=False,
                     description="Unique among the siblings of the same category")
    description = attribute(str, default="", description="Free text for operators")
    context = attribute(dict, default={}, expand=False,
                        description="Context variables (name -> value) visible to this"
                                    " object and its descendants")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._declared = declared_attributes(cls)
        cls._derived = derived_attributes(cls)
        if "category" in vars(cls):
            registry.register(cls)

    def __init__(self, parent: ConfiguredObject | None, attributes: Mapping[str, Any],
                 *, id: str | None = None) -> None:
        self.parent = parent
        given = dict(attributes)
        self._id = str(id or given.pop("id", None) or uuid.uuid4())
        given.pop("id", None)
        self._actual: dict[str, Any] = given
        self._values: dict[str, Any] = {}
        self._state = State.UNINITIALIZED
        self._children: dict[str, dict[str, ConfiguredObject]] = {
            name: {} for name in registry.TREE[self.category]}
        self.listeners: list[ChangeListener] = []
        #: why on_open failed, for an ERRORED object
        self.last_error: BaseException | None = None

    # -- identity and derived attributes -----------------------------------

    @derived(str, description="Unique identifier (UUID)")
    def id(self) -> str:
        return self._id

    @derived(State, description="Lifecycle state")
    def state(self) -> State:
        return self._state

    @property
    def label(self) -> str:
        """How errors and logs name this object: ``Port 'amqp'``."""
        name = self._values.get("name") or self._actual.get("name") or self._id
        return f"{self.category} '{name}'"

    @property
    def root(self) -> ConfiguredObject:
        obj = self
        while obj.parent is not None:
            obj = obj.parent
        return obj

    def ancestor(self, category: str) -> ConfiguredObject | None:
        """The nearest ancestor (or self) of ``category``."""
        obj: ConfiguredObject | None = self
        while obj is not None and obj.category != category:
            obj = obj.parent
        return obj

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.label} {self._state.name}>"

    # -- attributes ---------------------------------------------------------

    def attributes(self, *, actual: bool = False) -> dict[str, Any]:
        """Attribute values as JSON, secure ones left out.

        Resolved values (context expanded, defaults applied, derived
        attributes included) by default; with ``actual=True`` the values as
        they were given (``${...}`` unexpanded, defaults absent).
        """
        if actual:
            return {name: to_json(value) for name, value in self._actual.items()
                    if name in self._declared and not self._declared[name].secure}
        listed = {name: to_json(self._values.get(name))
                  for name, decl in self._declared.items() if not decl.secure}
        listed.update({name: to_json(d.__get__(self, type(self)))
                       for name, d in self._derived.items()})
        return listed

    @property
    def actual_attributes(self) -> dict[str, Any]:
        """Everything as given, secure values included: what a store persists."""
        return {name: value for name, value in self._actual.items()
                if name in self._declared and self._declared[name].persist}

    def set_attributes(self, changes: Mapping[str, Any]) -> None:
        """Change attributes (a value of None reverts to the default).

        All changes are resolved and validated together before any is applied.
        """
        if self._state is State.DELETED:
            raise ConfigurationError(f"{self.label} has been deleted")
        for name in changes:
            decl = self._declared.get(name)
            if decl is None:
                raise self._unknown([name])
            if not decl.mutable and changes[name] != self._actual.get(name):
                raise ConfigurationError(f"{self.label}: attribute '{name}' cannot be changed")
        proposed = dict(self._actual)
        for name, value in changes.items():
            if value is None:
                proposed.pop(name, None)
            else:
                proposed[name] = value
        before_actual, before_values = self._actual, self._values
        self._actual = proposed
        try:
            self._values = self._resolve()
            self._confine_paths(before_values)
            self.validate()
            if "context" in changes:
                for below in self._descendants():
                    below._confine_paths(below._values, below._resolve())
        except BaseException:
            self._actual, self._values = before_actual, before_values
            raise
        for name in changes:
            old, new = before_values.get(name), self._values.get(name)
            if old != new or before_actual.get(name) != proposed.get(name):
                for listener in list(self.listeners):
                    listener.attribute_set(self, name, old, new)

    def _unknown(self, names: list[str]) -> ConfigurationError:
        known = ", ".join(sorted(self._declared))
        listed = ", ".join(f"'{n}'" for n in sorted(names))
        return ConfigurationError(f"{self.label}: unknown attribute {listed}; known: {known}")

    def _resolve(self) -> dict[str, Any]:
        unknown = [name for name in self._actual if name not in self._declared]
        if unknown:
            raise self._unknown(unknown)
        values: dict[str, Any] = {}
        for name, decl in self._declared.items():
            raw = self._actual.get(name, decl.default)
            if decl.expand and raw is not None and self.resolves_context:
                raw = expand(raw, self._lookup, f"{self.label}: attribute '{name}'")
            if raw is None or (raw == "" and decl.mandatory):
                if decl.mandatory:
                    raise ConfigurationError(f"{self.label}: attribute '{name}' is mandatory")
                values[name] = None
                continue
            values[name] = convert(decl, raw, self.label)
        return values

    # -- where management may make the broker write (broker.model.confinement) -----------

    @classmethod
    def _path_attributes(cls) -> list[str]:
        return [name for name, decl in cls._declared.items() if decl.path]

    def path_roots(self) -> list[str] | None:
        """Where management may put path attributes (None: anywhere); asked of the root."""
        return None

    def writes_to_paths(self) -> bool:
        """Does this object keep anything at its path attributes (a memory node does not)?"""
        return True

    def places_in_use(self, *, but: ConfiguredObject) -> dict[str, str]:
        """Every place a path attribute of this tree names (place -> which object's
        attribute), ``but``'s left out; the root adds its own store."""
        places: dict[str, str] = {}
        for obj in (self, *self._descendants()):
            if obj is but or not obj.writes_to_paths():
                continue
            for name in obj._path_attributes():
                value = obj._values.get(name)
                if value:
                    places[str(value)] = f"the {name} of {obj.label}"
        return places

    def _confine_paths(self, before: Mapping[str, Any] | None,
                       values: Mapping[str, Any] | None = None) -> None:
        """Refuse path attributes that ``values`` (default: the current ones) would move
        outside the path roots; those unchanged since ``before`` are left alone."""
        names = self._path_attributes()
        if not names or not self.resolves_context:
            return
        roots = self.root.path_roots()
        if roots is None:
            return
        now = self._values if values is None else values
        for name in names:
            value = now.get(name)
            if value is not None and (before is None or before.get(name) != value):
                check_path(str(value), roots, self.label, name)
                if self.writes_to_paths():
                    check_apart(str(value), self.root.places_in_use(but=self), self.label,
                                name)

    def _descendants(self) -> Iterator[ConfiguredObject]:
        """Every configured descendant (runtime objects, and what is below them, left out)."""
        for child in self.all_children():
            if child.resolves_context:
                yield child
                yield from child._descendants()

    # -- context variables -----------------------------------------------------

    def _explicit_context(self) -> Mapping[str, Any]:
        """Context variables set on this object (the root may treat its own differently)."""
        context = self._actual.get("context")
        return context if isinstance(context, Mapping) else {}

    def _lookup(self, name: str) -> str | None:
        if name.startswith("this:"):
            return self._own_attribute_text(name[5:])
        obj: ConfiguredObject | None = self
        while obj is not None:
            context = obj._explicit_context()
            if name in context:
                return str(to_json(context[name]))
            obj = obj.parent
        return self.root._fallback_context(name)

    def _own_attribute_text(self, attribute_name: str) -> str | None:
        decl = self._declared.get(attribute_name)
        if decl is None:
            return None
        raw = self._actual.get(attribute_name, decl.default)
        return None if raw is None else str(to_json(raw))

    def _fallback_context(self, name: str) -> str | None:
        """Where lookups end once the tree has no answer (the root overrides this)."""
        return environment_value(name)

    def resolve(self, text: str) -> str:
        """Expand ``${...}`` in ``text`` as this object's attributes would be."""
        result: str = expand(text, self._lookup, self.label)
        return result

    # -- children ---------------------------------------------------------------

    def children(self, category: str) -> list[ConfiguredObject]:
        """Children of ``category`` (any spelling :func:`registry.category` accepts)."""
        return list(self._children_of(category).values())

    def child(self, category: str, name: str) -> ConfiguredObject | None:
        return self._children_of(category).get(name)

    def all_children(self) -> Iterator[ConfiguredObject]:
        """Every child, categories in model order (the order they are opened in)."""
        for members in self._children.values():
            yield from list(members.values())

    def _children_of(self, category: str) -> dict[str, ConfiguredObject]:
        members = self._children.get(category)
        if members is None:
            wanted = registry.category(category).name
            if wanted not in self._children:
                raise ConfigurationError(f"{self.category} has no children of category '{wanted}'")
            members = self._children[wanted]
        return members

    def create_child(self, category: str, attributes: Mapping[str, Any]) -> ConfiguredObject:
        """Create, open and register a new child; persisted if durable."""
        wanted = registry.category(category).name
        if wanted not in self._children:
            raise ConfigurationError(f"a {wanted} cannot be a child of {self.label}")
        type_name = attributes.get("type")
        if isinstance(type_name, str):
            type_name = self.resolve(type_name)
        cls = registry.specialisation(wanted, type_name or default_type(wanted))
        child = cls(self, attributes)
        child.create()
        return child

    def _attach(self, child: ConfiguredObject) -> None:
        """Register ``child`` under its (resolved) name; names are unique per category."""
        raw_name = child._actual.get("name", child._declared["name"].default)
        if not isinstance(raw_name, str) or not raw_name:
            raise ConfigurationError(f"{child.category} under {self.label}: attribute 'name'"
                                     " is mandatory")
        name = child.resolve(raw_name) if child.resolves_context else raw_name
        members = self._children[child.category]
        if name in members and members[name] is not child:
            raise ConfigurationError(f"{self.label} already has a {child.category} named '{name}'")
        members[name] = child

    def _detach(self, child: ConfiguredObject) -> None:
        members = self._children[child.category]
        for name, member in list(members.items()):
            if member is child:
                del members[name]

    def _notify_child(self, child: ConfiguredObject, added: bool) -> None:
        for listener in list(self.listeners):
            if added:
                listener.child_added(self, child)
            else:
                listener.child_removed(self, child)

    # -- lifecycle ----------------------------------------------------------------

    def create(self) -> None:
        """Bring a new object into existence (see module docstring)."""
        if self.parent is None:
            raise ConfigurationError(f"{self.label} has no parent to be created in")
        self._values = self._resolve()
        if self.resolves_context:             # before validate(), which may use the paths
            check_name(str(self._values.get("name")), self.label,
                       joined_to_paths=bool(self._path_attributes()))
            self._confine_paths(None)
        self.validate()
        self.validate_on_create()
        self.parent._attach(self)
        try:
            self.on_create()
            self.on_open()
        except BaseException as exc:
            self.last_error = exc
            self.parent._detach(self)
            self._set_state(State.ERRORED)
            raise
        self._set_state(State.ACTIVE)
        self._open_children()                   # those on_open recovered (a node's virtual host)
        self.parent._notify_child(self, added=True)

    def open(self) -> None:
        """Open a recovered object, then its children (see module docstring)."""
        try:
            self._values = self._resolve()
            self.validate()
        except ConfigurationError:
            self._set_state(State.ERRORED)
            raise
        try:
            self.on_open()
        except ConfigurationError:
            self._set_state(State.ERRORED)
            raise
        except Exception as exc:  # the broker keeps running without this object
            # a deliberate error's text says it all; anything else gets its traceback
            log.error("%s could not be opened: %s", self.label, exc,
                      exc_info=not isinstance(exc, BrokerError))
            self.last_error = exc
            self._set_state(State.ERRORED)
            return
        self._set_state(State.ACTIVE)
        self._open_children()

    def _open_children(self) -> None:
        """Open the children still UNINITIALIZED (recovered, not yet opened)."""
        for child in self.all_children():
            if child._state is State.UNINITIALIZED:
                child.open()

    def delete(self) -> None:
        """Delete this object and its descendants (and their stored records)."""
        if self._state is State.DELETED:
            return
        self.validate_delete()
        self._delete_tree()

    def _delete_tree(self) -> None:
        for child in reversed(list(self.all_children())):
            child._delete_tree()
        try:
            if self._state is not State.UNINITIALIZED:
                self.on_delete()
        finally:
            if self.parent is not None:
                self.parent._detach(self)
            self._set_state(State.DELETED)
            if self.parent is not None:
                self.parent._notify_child(self, added=False)

    def close(self) -> None:
        """Release resources (shutdown); descendants first.  Nothing is unstored."""
        for child in reversed(list(self.all_children())):
            child.close()
        if self._state in (State.ACTIVE, State.ERRORED):
            try:
                self.on_close()
            finally:
                self._set_state(State.STOPPED)

    def _set_state(self, new: State) -> None:
        old, self._state = self._state, new
        if old is not new:
            for listener in list(self.listeners):
                listener.state_changed(self, old, new)

    # -- hooks for categories and types -----------------------------------------

    def validate(self) -> None:
        """Business rules on resolved values (on create, open and every change)."""

    def validate_on_create(self) -> None:
        """Rules only a new object must satisfy (e.g. a port number not yet in use)."""

    def validate_delete(self) -> None:
        """Raise ConfigurationError if this object may not be deleted now."""

    def on_create(self) -> None:
        """First-time work of a new object (before :meth:`on_open`)."""

    def on_open(self) -> None:
        """Acquire what the object needs to be ACTIVE (stores, files...)."""

    def on_close(self) -> None:
        """Release what :meth:`on_open` acquired."""

    def on_delete(self) -> None:
        """Undo what the object created outside the model (files...)."""
        self.on_close()


def default_type(category: str) -> str | None:
    """The ``type`` default of a category with types (e.g. Port: AMQP)."""
    base = registry.category(category).base
    decl = base._declared.get("type")
    return decl.default if decl is not None else None
