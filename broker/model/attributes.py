"""Attribute declarations: each category states its attributes once.

An :class:`Attribute` is a descriptor placed in a category's class body::

    class Port(ConfiguredObject):
        port = attribute(int, mandatory=True, description="TCP port number")

It is at the same time the attribute's metadata (name, type, default,
mandatory, mutable, secure, description), which a generic management layer
enumerates through :func:`declared_attributes` -- so a new attribute appears
in configuration, persistence and the REST API at once (Broker-J's
``@ManagedAttribute``, without the annotation processor).

Reading the descriptor on an object yields the *resolved* value (context
variables expanded, converted to the declared type); the value as given is
kept separately for persistence.  Conversion from JSON and from strings (the
result of ``${...}`` expansion) lives here too, raising
:class:`~broker.errors.ConfigurationError` that names the object, the attribute
and what was wrong.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from broker.errors import ConfigurationError

if TYPE_CHECKING:
    from broker.model.configured_object import ConfiguredObject

T = TypeVar("T")

_CAMEL_BOUNDARY = re.compile(r"_([a-z0-9])")


def camel_case(python_name: str) -> str:
    """``binding_address`` -> ``bindingAddress`` (the wire/JSON spelling)."""
    return _CAMEL_BOUNDARY.sub(lambda m: m.group(1).upper(), python_name)


class Attribute(Generic[T]):
    """One declared attribute of a category, usable as a descriptor."""

    def __init__(
        self,
        kind: type[T],
        *,
        name: str | None = None,
        default: Any = None,
        mandatory: bool = False,
        mutable: bool = True,
        secure: bool = False,
        persist: bool = True,
        description: str = "",
        of: type | None = None,
        choices: tuple[str, ...] | None = None,
        expand: bool = True,
        path: bool = False,
    ) -> None:
        self.kind: type = kind
        self.name: str = name or ""
        self.python_name: str = ""
        self.default = default
        self.mandatory = mandatory
        self.mutable = mutable
        self.secure = secure
        self.persist = persist
        self.description = description
        self.of = of
        self.choices = choices
        self.expand = expand
        #: a file or directory (or URI) the broker writes: management keeps it inside
        #: the data directory (:mod:`broker.model.confinement`)
        self.path = path

    def __set_name__(self, owner: type, python_name: str) -> None:
        self.python_name = python_name
        if not self.name:
            self.name = camel_case(python_name)

    @overload
    def __get__(self, obj: None, owner: type) -> Attribute[T]: ...

    @overload
    def __get__(self, obj: object, owner: type) -> T: ...

    def __get__(self, obj: object | None, owner: type) -> Any:
        if obj is None:
            return self
        return obj._values.get(self.name)  # type: ignore[attr-defined]

    def __set__(self, obj: ConfiguredObject, value: Any) -> None:
        obj.set_attributes({self.name: value})

    @property
    def type_name(self) -> str:
        """The type as the management layer shows it: ``int``, ``list[Protocol]``..."""
        base = self.kind.__name__
        return f"{base}[{self.of.__name__}]" if self.of is not None else base

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready metadata (the REST layer's attribute description)."""
        default = self.default
        if isinstance(default, enum.Enum):
            default = default.name
        description: dict[str, Any] = {
            "name": self.name,
            "type": self.type_name,
            "default": default,
            "mandatory": self.mandatory,
            "mutable": self.mutable,
            "secure": self.secure,
            "persist": self.persist,
            "description": self.description,
        }
        enum_type = self.of if self.of is not None else self.kind
        if self.choices is not None:
            description["choices"] = list(self.choices)
        elif isinstance(enum_type, type) and issubclass(enum_type, enum.Enum):
            description["choices"] = [member.name for member in enum_type]
        return description

    def __repr__(self) -> str:
        return f"<Attribute {self.name}: {self.type_name}>"


def attribute(
    kind: type[T],
    *,
    name: str | None = None,
    default: Any = None,
    mandatory: bool = False,
    mutable: bool = True,
    secure: bool = False,
    persist: bool = True,
    description: str = "",
    of: type | None = None,
    choices: tuple[str, ...] | None = None,
    expand: bool = True,
    path: bool = False,
) -> Attribute[T]:
    """Declare an attribute in a category's class body (see module docstring).

    ``name`` is the JSON/REST spelling (default: the Python name in camelCase);
    ``default`` may contain ``${context}`` references; ``of`` is the element
    type of a list; ``choices`` restricts a string (of a list of enum members: what
    metadata advertises, the category's ``validate`` refuses others with its own
    words -- a Port's protocols); ``persist=False`` keeps the
    attribute out of the configuration store; ``expand=False`` keeps
    ``${...}`` references as text (the ``context`` attribute itself, or
    configuration handed on to a child that resolves it in its own scope);
    ``path=True`` marks a place the broker writes to (a store, a file), which
    management may only set inside the data directory.
    """
    return Attribute(
        kind, name=name, default=default, mandatory=mandatory, mutable=mutable,
        secure=secure, persist=persist, description=description, of=of, choices=choices,
        expand=expand, path=path,
    )


def named(**declarations: Attribute[Any]) -> dict[str, Attribute[Any]]:
    """Attributes declared outside a class body, by wire name (keys are Python names)."""
    found: dict[str, Attribute[Any]] = {}
    for python_name, decl in declarations.items():
        decl.python_name = python_name
        decl.name = decl.name or camel_case(python_name)
        found[decl.name] = decl
    return found


class DerivedAttribute(Generic[T]):
    """A read-only attribute computed by the object (state, counters...).

    Listed by ``attributes()`` and described to management like a declared
    attribute, never configured nor persisted.
    """

    def __init__(self, kind: type[T], compute: Callable[[Any], T], description: str,
                 name: str | None, statistic: bool = False, counter: bool = False) -> None:
        self.kind: type = kind
        self.compute = compute
        self.description = description
        self.name = name or ""
        self.python_name = ""
        #: a measurement rather than a property (management lists it under ``statistics``)
        self.statistic = statistic or counter
        #: a statistic that only ever grows (management also reports its rate per second)
        self.counter = counter

    def __set_name__(self, owner: type, python_name: str) -> None:
        self.python_name = python_name
        if not self.name:
            self.name = camel_case(python_name)

    @overload
    def __get__(self, obj: None, owner: type) -> DerivedAttribute[T]: ...

    @overload
    def __get__(self, obj: object, owner: type) -> T: ...

    def __get__(self, obj: object | None, owner: type) -> Any:
        if obj is None:
            return self
        return self.compute(obj)

    def as_dict(self) -> dict[str, Any]:
        described = {"name": self.name, "type": self.kind.__name__, "derived": True,
                     "mutable": False, "secure": False, "description": self.description}
        if self.statistic:
            described["statistic"] = True
        if self.counter:
            described["counter"] = True
        return described


def derived(kind: type[T], *, description: str = "", name: str | None = None,
            statistic: bool = False,
            counter: bool = False) -> Callable[[Callable[[Any], T]], DerivedAttribute[T]]:
    """Decorate a method computing a read-only attribute.

    ``statistic=True`` marks a measurement (a queue's depth, a connection
    count), which management reports apart from the object's properties, as
    Broker-J's ``statistics``; ``counter=True`` a statistic that only grows
    (messages in), whose rate management reports too.
    """
    def wrap(compute: Callable[[Any], T]) -> DerivedAttribute[T]:
        return DerivedAttribute(kind, compute, description or (compute.__doc__ or "").strip(), name,
                                statistic, counter)
    return wrap


def declared_attributes(cls: type) -> dict[str, Attribute[Any]]:
    """Every :class:`Attribute` of ``cls`` by wire name, base classes first.

    A subclass may re-declare an attribute (same wire name) to change its
    default or description; the re-declaration replaces the inherited one.
    """
    found: dict[str, Attribute[Any]] = {}
    for klass in reversed(cls.__mro__):
        for value in vars(klass).values():
            if isinstance(value, Attribute):
                found[value.name] = value
    return found


def derived_attributes(cls: type) -> dict[str, DerivedAttribute[Any]]:
    found: dict[str, DerivedAttribute[Any]] = {}
    for klass in reversed(cls.__mro__):
        for value in vars(klass).values():
            if isinstance(value, DerivedAttribute):
                found[value.name] = value
    return found


# -- conversion ---------------------------------------------------------------

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def convert_all(decls: Mapping[str, Attribute[Any]], given: Mapping[str, Any], owner: str, *,
                noun: str = "attribute") -> dict[str, Any]:
    """``given``'s values (each declaration's default where missing) converted, keyed like ``decls``.

    A missing mandatory one raises ConfigurationError naming it as a ``noun``.
    """
    values: dict[str, Any] = {}
    for key, decl in decls.items():
        raw = given.get(key, decl.default)
        if raw is None:
            if decl.mandatory:
                raise ConfigurationError(f"{owner}: {noun} '{key}' is mandatory")
            values[key] = None
            continue
        values[key] = convert(decl, raw, owner)
    return values


def convert(decl: Attribute[Any], value: Any, owner: str) -> Any:
    """Convert ``value`` (JSON or an expanded string) to ``decl``'s type.

    ``owner`` names the object in errors, e.g. ``Port 'amqp'``.
    """
    try:
        if decl.kind is list:
            items = _as_list(value)
            converted: Any = [_convert_item(decl, item) for item in items] \
                if decl.of is not None else list(items)
        else:
            converted = _convert_one(decl.kind, value)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"{owner}: attribute '{decl.name}' {exc}") from None
    if decl.choices is not None and decl.kind is not list and converted not in decl.choices:
        raise ConfigurationError(
            f"{owner}: attribute '{decl.name}' must be one of {', '.join(decl.choices)};"
            f" got {value!r}")
    return converted


def _convert_item(decl: Attribute[Any], item: Any) -> Any:
    """One element of a list; an unknown one is told the choices, if the list has them."""
    try:
        return _convert_one(decl.of, item)
    except ValueError:
        if decl.choices is None:
            raise
        raise ValueError(f"may name {', '.join(decl.choices)}; got {item!r}") from None


def _convert_one(kind: type | None, value: Any) -> Any:
    if kind is None:
        return value
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return _as_enum(kind, value)
    if kind is bool:
        return _as_bool(value)
    if kind is int:
        return _as_int(value)
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TypeError(f"must be a number; got {value!r}")
        try:
            return float(value)
        except ValueError:
            raise ValueError(f"must be a number; got {value!r}") from None
    if kind is str:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise TypeError(f"must be a string; got {value!r}")
        return str(value)
    if kind is dict:
        return _as_dict(value)
    if kind is list:
        return list(_as_list(value))
    if isinstance(value, kind):
        return value
    raise TypeError(f"must be of type {kind.__name__}; got {value!r}")


def _as_int(value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError(f"must be an integer; got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise ValueError(f"must be an integer; got {value!r}")


def _as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
    raise ValueError(f"must be true or false; got {value!r}")


def _as_enum(kind: type[enum.Enum], value: Any) -> enum.Enum:
    if isinstance(value, kind):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text in kind.__members__:
            return kind[text]
        for member in kind:
            if member.name.lower() == text.lower() or member.value == text:
                return member
    names = ", ".join(kind.__members__)
    raise ValueError(f"must be one of {names}; got {value!r}")


def _as_list(value: Any) -> list[Any]:
    """A JSON list, a JSON list in a string, or a comma-separated string."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                parsed = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"is not a valid JSON list ({exc.msg}); got {value!r}") from None
            if isinstance(parsed, list):
                return parsed
        return [part.strip() for part in text.split(",") if part.strip()]
    raise TypeError(f"must be a list; got {value!r}")


def _as_dict(value: Any) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return {}
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"is not a valid JSON object ({exc.msg}); got {value!r}") from None
        if isinstance(parsed, dict):
            return parsed
    raise TypeError(f"must be an object (mapping); got {value!r}")


def to_json(value: Any) -> Any:
    """A resolved value as JSON (enums by name), for listings and records."""
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, list):
        return [to_json(item) for item in value]
    if isinstance(value, dict):
        return {key: to_json(item) for key, item in value.items()}
    return value
