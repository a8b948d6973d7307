"""Operations: what management may ask an object to do besides changing attributes.

An operation is a method of a category decorated with :func:`operation`,
which declares its parameters the way attributes are declared (type,
default, mandatory, description), Broker-J's ``@ManagedOperation``::

    class Queue(ConfiguredObject):
        @operation(description="Remove every ready message; the number removed",
                   returns=int)
        def clear_queue(self) -> int: ...

A generic management layer lists them with :func:`declared_operations` and
calls :meth:`Operation.invoke` with JSON arguments; the REST API exposes
each as ``POST .../<object path>/<operationName>``, so a new operation
appears there without a route of its own.  Arguments are converted and
checked here, and a wrong one raises
:class:`~broker.errors.ConfigurationError` naming the parameter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar, overload

from broker.errors import ConfigurationError
from broker.model.attributes import Attribute, camel_case, convert_all

R = TypeVar("R")


class Operation(Generic[R]):
    """One declared operation of a category, usable as a descriptor (a method)."""

    def __init__(self, method: Callable[..., R], *, name: str | None, description: str,
                 parameters: Mapping[str, Attribute[Any]], changes: bool, returns: type) -> None:
        self.method = method
        self.name = name or ""
        self.description = description
        self.changes = changes
        self.returns = returns
        self.parameters: dict[str, Attribute[Any]] = {}
        for python_name, decl in parameters.items():
            decl.python_name = python_name
            decl.name = decl.name or camel_case(python_name)
            self.parameters[decl.name] = decl

    def __set_name__(self, owner: type, python_name: str) -> None:
        if not self.name:
            self.name = camel_case(python_name)

    @overload
    def __get__(self, obj: None, owner: type) -> Operation[R]: ...

    @overload
    def __get__(self, obj: object, owner: type) -> Callable[..., R]: ...

    def __get__(self, obj: object | None, owner: type) -> Any:
        if obj is None:
            return self
        return self.method.__get__(obj, owner)

    def invoke(self, obj: Any, arguments: Mapping[str, Any]) -> R:
        """Call the operation on ``obj`` with JSON ``arguments`` (by parameter name)."""
        owner = f"{obj.label} operation '{self.name}'"
        unknown = sorted(set(arguments) - set(self.parameters))
        if unknown:
            known = ", ".join(self.parameters) or "none"
            raise ConfigurationError(f"{owner}: unknown parameter"
                                     f" {', '.join(repr(n) for n in unknown)}; known: {known}")
        try:
            values = convert_all(self.parameters, arguments, owner, noun="parameter")
        except ConfigurationError as exc:
            raise ConfigurationError(str(exc.text).replace("attribute '", "parameter '", 1)) from None
        return self.method(obj, **{decl.python_name: values[name]
                                   for name, decl in self.parameters.items()})

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready metadata (the REST layer's operation description)."""
        return {"name": self.name, "description": self.description, "changes": self.changes,
                "returns": self.returns.__name__,
                "parameters": {name: decl.as_dict() for name, decl in self.parameters.items()}}

    def __repr__(self) -> str:
        return f"<Operation {self.name}({', '.join(self.parameters)})>"


def operation(*, description: str = "", name: str | None = None, changes: bool = True,
              returns: type = type(None),
              **parameters: Attribute[Any]) -> Callable[[Callable[..., R]], Operation[R]]:
    """Declare an operation; ``parameters`` are :func:`~broker.model.attributes.attribute` s.

    ``changes=False`` marks an operation that only reads (browsing
    messages); ``returns`` is the type of its JSON result.
    """
    def wrap(method: Callable[..., R]) -> Operation[R]:
        return Operation(method, name=name,
                         description=description or (method.__doc__ or "").strip(),
                         parameters=parameters, changes=changes, returns=returns)
    return wrap


def declared_operations(cls: type) -> dict[str, Operation[Any]]:
    """Every :class:`Operation` of ``cls`` by name, base classes first."""
    found: dict[str, Operation[Any]] = {}
    for klass in reversed(cls.__mro__):
        for value in vars(klass).values():
            if isinstance(value, Operation):
                found[value.name] = value
    return found
