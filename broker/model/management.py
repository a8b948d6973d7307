"""Changing the model as management does it, whatever the channel (REST or AMQP 1.0).

The REST API (:mod:`mgmt.rest`) and the AMQP 1.0 management node
(:mod:`broker.model.management_node`) find objects their own way (paths,
names, ids) and answer in their own form (JSON, AMQP messages); between
the two they do the same things, written once here:

- :func:`create_child`, :func:`update_object`, :func:`delete_object`,
  :func:`invoke_operation`: the permission check (:mod:`broker.model.permissions`),
  the change, and the wait until whatever it journaled is durable -- as
  AMQP's ``tx.commit-ok`` is answered only then;
- :func:`stored`: a queue or exchange is declared or deleted through its
  virtual host's namespace, whose configuration writer makes it durable
  first; the caller waits, the event loop does not;
- :class:`ManagementError` with the status (HTTP's numbers, which the AMQP
  Management draft's ``statusCode`` uses too) and :func:`from_broker_error`.

Everything here runs on the event loop that owns the model.
"""

from __future__ import annotations

import inspect
from collections.abc import Collection, Iterable, Mapping
from typing import Any, Callable, TypeVar

import anyio

from broker import errors
from broker.errors import BrokerError
from broker.model.attributes import derived_attributes
from broker.model.configured_object import ConfiguredObject
from broker.model.operations import Operation, declared_operations
from broker.model.permissions import Action, Permissions
from broker.model.registry import TREE
from broker.security.principal import Principal

OK = 200
CREATED = 201
NO_CONTENT = 204
BAD_REQUEST = 400
UNAUTHORIZED = 401
FORBIDDEN = 403
NOT_FOUND = 404
METHOD_NOT_ALLOWED = 405
CONFLICT = 409
UNPROCESSABLE = 422
TOO_MANY_REQUESTS = 429
INTERNAL = 500
NOT_IMPLEMENTED = 501
SERVICE_UNAVAILABLE = 503


class ManagementError(Exception):
    """An answer other than success: status, message, and extra headers (HTTP's ``Retry-After``)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}

    @property
    def body(self) -> dict[str, Any]:
        return {"errorMessage": self.message}


def from_broker_error(exc: errors.BrokerError, *, configuration_status: int = UNPROCESSABLE
                      ) -> ManagementError:
    """The management answer to a broker error.

    ``configuration_status`` is what a ConfigurationError means here: an
    invalid attribute (422) on create and update, a conflict with the
    object's state (409) on delete ("used by port ...").
    """
    text = exc.text or str(exc)
    if isinstance(exc, errors.ConfigurationError):
        return ManagementError(configuration_status, text)
    if isinstance(exc, errors.NotFound):
        return ManagementError(NOT_FOUND, text)
    if isinstance(exc, (errors.ResourceLocked, errors.PreconditionFailed)):
        return ManagementError(CONFLICT, text)
    if isinstance(exc, (errors.AccessRefused, errors.NotAllowed, errors.ConnectionAccessRefused)):
        return ManagementError(FORBIDDEN, text)
    if isinstance(exc, errors.StoreFailed):
        return ManagementError(SERVICE_UNAVAILABLE, text)
    if isinstance(exc, errors.InternalError):
        return ManagementError(INTERNAL, text)
    return ManagementError(UNPROCESSABLE, text)


def check(permissions: Permissions, principal: Principal, action: Action, target: ConfiguredObject,
          category: str, changes: Collection[str] = (),
          details: Mapping[str, Any] | None = None) -> None:
    """403 unless ``principal`` may do ``action`` (see :meth:`Permissions.allowed`)."""
    if not permissions.allowed(principal, action, target, category, changes, details):
        what = f"a {category} in {target.label}" if action is Action.CREATE else target.label
        also = f" (attributes {', '.join(sorted(changes))})" if changes else ""
        raise ManagementError(FORBIDDEN, f"user '{principal.name}' may not {action.name.lower()}"
                                         f" {what}{also}")


# -- the changes -------------------------------------------------------------------------

async def create_child(parent: ConfiguredObject, category: str, data: Mapping[str, Any],
                       principal: Principal, permissions: Permissions) -> ConfiguredObject:
    """Create a ``category`` child of ``parent`` from ``data`` (its attributes, ``name`` given)."""
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise ManagementError(UNPROCESSABLE, f"{category}: attribute 'name' is mandatory"
                                             " (a non-empty string)")
    if parent.child(category, name) is not None:
        raise ManagementError(CONFLICT, f"{parent.label} already has a {category}"
                                        f" named '{name}'")
    check(permissions, principal, Action.CREATE, parent, category, details=data)
    attributes = dict(data)
    created = await stored(parent, lambda: parent.create_child(category, attributes),
                           category in NAMESPACE_CATEGORIES)
    await wait_durable([created])
    return created


async def update_object(obj: ConfiguredObject, data: Mapping[str, Any], principal: Principal,
                        permissions: Permissions, current: Mapping[str, Any]) -> None:
    """Change the attributes ``data`` names; those equal to ``current`` (the object as the
    caller shows it, so that what was read may be sent back whole) are left alone."""
    derived = derived_attributes(type(obj))
    children = {category.lower() + "s" for category in TREE.get(obj.category, ())}
    changes: dict[str, Any] = {}
    for key, value in data.items():
        if key == "statistics" or (key in current and current[key] == value):
            continue
        if key == "id" or key in derived or key in children:
            raise ManagementError(UNPROCESSABLE, f"{obj.label}: attribute '{key}' cannot be"
                                                 " changed")
        changes[key] = value
    check(permissions, principal, Action.UPDATE, obj, obj.category, changes)
    if changes:
        obj.set_attributes(changes)
        await wait_durable([obj])


async def delete_object(obj: ConfiguredObject, principal: Principal,
                        permissions: Permissions) -> None:
    """Delete ``obj``; 409 when its state forbids it ("used by port ...")."""
    await delete_objects([obj], principal, permissions)


async def delete_objects(objects: list[ConfiguredObject], principal: Principal,
                         permissions: Permissions) -> None:
    """Delete every one of ``objects``, once the principal may delete each."""
    for obj in objects:
        check(permissions, principal, Action.DELETE, obj, obj.category)
    for obj in objects:
        try:
            await stored(obj, obj.delete, obj.category in NAMESPACE_CATEGORIES)
        except BrokerError as exc:
            raise from_broker_error(exc, configuration_status=CONFLICT) from None
    await wait_durable(objects)


def find_operation(obj: ConfiguredObject, name: str) -> Operation[Any]:
    """The declared operation ``name`` of ``obj``; 404 naming the known ones."""
    found: Operation[Any] | None = declared_operations(type(obj)).get(name)
    if found is None:
        known = ", ".join(declared_operations(type(obj))) or "none"
        raise ManagementError(NOT_FOUND, f"{obj.label} has no operation '{name}'; known: {known}")
    return found


async def invoke_operation(obj: ConfiguredObject, name: str, arguments: Mapping[str, Any],
                           principal: Principal, permissions: Permissions, *,
                           changes_allowed: bool = True) -> Any:
    """Run operation ``name`` of ``obj`` with ``arguments``; its result as the model gives it
    (a value, a :class:`ConfiguredObject`, a list of them, a message's content).

    ``changes_allowed=False`` (REST's GET) refuses an operation that changes the broker.
    """
    found = find_operation(obj, name)
    if found.changes and not changes_allowed:
        raise ManagementError(METHOD_NOT_ALLOWED, f"operation '{name}' changes the broker:"
                                                  " invoke it with POST")
    check(permissions, principal, Action.INVOKE if found.changes else Action.READ, obj,
          obj.category, details={"method_name": name})
    result = await stored(obj, lambda: found.invoke(obj, arguments),
                          found.changes and obj.category in NAMESPACE_CATEGORIES)
    if inspect.isawaitable(result):         # an operation that waits (replayMessages)
        result = await result
    if found.changes:
        await wait_durable([obj])
    return result


# -- waiting for the store ------------------------------------------------------------------

#: categories whose objects live in a virtual host's namespace (declared, bound, deleted there)
NAMESPACE_CATEGORIES = frozenset({"Queue", "Exchange"})
T = TypeVar("T")


async def stored(obj: ConfiguredObject, change: Callable[[], T], in_namespace: bool) -> T:
    """Make ``change`` to a queue or exchange (``in_namespace``) once it is stored.

    The namespace of ``obj``'s virtual host runs it through its configuration
    store's writer (:meth:`~broker.messaging.namespace.Namespace.when_stored`):
    the request waits, the event loop does not.  Other changes are made at once.
    """
    vhost = obj.ancestor("VirtualHost")
    when_stored = getattr(getattr(vhost, "namespace", None), "when_stored", None)
    if not in_namespace or when_stored is None:
        return change()
    done = anyio.Event()
    outcome: list[tuple[Any, BrokerError | None, Any]] = []

    def settled(result: Any, error: BrokerError | None) -> None:
        # what the change journaled (a deleted queue's event) is in this group: noted now,
        # before the loop hands it to the journal's writer
        journal = getattr(vhost, "journal", None)
        outcome.append((result, error, journal.pending if journal is not None else None))
        done.set()

    when_stored(change, settled)
    if not outcome:                         # answered at once: no yield (see wait_durable)
        await done.wait()
    result, error, group = outcome[0]
    if error is not None:
        raise error
    if group is not None:
        await _durable(group)
    return result  # type: ignore[no-any-return]


async def wait_durable(objects: Iterable[ConfiguredObject]) -> None:
    """Return once what these objects' virtual hosts journaled so far is on disk."""
    journals: dict[int, Any] = {}
    for obj in objects:
        vhost = obj.ancestor("VirtualHost")
        journal = getattr(vhost, "journal", None) if vhost is not None else None
        if journal is not None:
            journals[id(journal)] = journal
    for journal in journals.values():
        pending = journal.pending
        if pending is not None:
            await _durable(pending)


async def _durable(group: Any) -> None:
    """Wait for a journal group; 503 when it could not be made durable."""
    done = anyio.Event()
    group.when_durable(done.set)
    await done.wait()
    if group.error is not None:
        raise ManagementError(SERVICE_UNAVAILABLE, f"the change could not be made durable:"
                                                   f" {group.error}")
