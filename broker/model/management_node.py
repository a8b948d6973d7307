"""The AMQP Management node over the model (the AMQP Management draft, as Broker-J does it).

A request is a message: its application properties say what to do --
``operation`` (``CREATE``, ``READ``, ``UPDATE``, ``DELETE``, a model
operation such as ``clearQueue``, or one of the node's own: ``QUERY``,
``GET-TYPES``, ``GET-ATTRIBUTES``, ``GET-OPERATIONS``, ``GET-MGMT-NODES``),
``type`` (``org.apache.qpid.Queue``; ``org.amqp.management`` for the node's
own), and which object: ``identity`` (its id), ``name`` (its path below the
managed object, ``/`` between names, ``\\/`` for a slash inside one) or
Broker-J's ``index: object-path`` with ``key: <path>``.  Its body (a map)
holds attributes (CREATE, UPDATE), ``attributeNames`` (QUERY) or operation
arguments (beside the other application properties).  The answer is a
:class:`ManagementResponse`: ``statusCode`` 200, 201 or 204 and a body, or an
error status with ``statusDescription``.

A node manages one object and everything below it: a virtual host (its
exchanges, queues and their consumers), or the broker (everything).  This
module knows nothing of a wire: the AMQP 1.0 engine
(:mod:`broker.protocol.amqp1_0.management`) turns messages into
:class:`ManagementRequest` and back.  What it does to the model is what the
REST API does (:mod:`broker.model.management`: the same permission checks,
changes and waits for the store).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.errors import BrokerError, ConfigurationError
from broker.messaging.records import to_json_value
from broker.model import management, registry
from broker.model.attributes import declared_attributes, derived_attributes
from broker.model.configured_object import ConfiguredObject
from broker.model.management import BAD_REQUEST, CREATED, NO_CONTENT, NOT_FOUND, NOT_IMPLEMENTED, OK, \
    ManagementError
from broker.model.message_views import Content
from broker.model.operations import declared_operations
from broker.model.permissions import Action, ManagementPermissions, Permissions, visibility
from broker.security.principal import Principal

log = logging.getLogger(__name__)

#: the type (and ``self`` the name) that addresses the node itself
MANAGEMENT_TYPE = "org.amqp.management"
SELF = "self"
TYPE_PREFIX = "org.apache.qpid."
#: application properties that say what to do, not operation arguments
RESERVED = frozenset({"operation", "type", "name", "identity", "index", "key", "entityType",
                      "offset", "count", "locales"})
#: what the representation adds to an object's attributes (Broker-J's names)
IDENTITY, QPID_TYPE, OBJECT_PATH = "identity", "qpid-type", "object-path"
STANDARD = ("CREATE", "READ", "UPDATE", "DELETE")
NODE_OPERATIONS = ("QUERY", "GET-TYPES", "GET-ATTRIBUTES", "GET-OPERATIONS", "GET-MGMT-NODES")
#: Broker-J's names of the types whose own name would not read as it (``lvq``)
_TYPE_WORDS = {("Queue", "lvq"): "LastValue"}


@dataclass(frozen=True, slots=True)
class ManagementRequest:
    """A request message as the node reads it: application properties and body."""

    properties: Mapping[str, Any]
    body: Any = None

    @property
    def operation(self) -> str:
        return str(self.properties.get("operation") or "")


@dataclass(slots=True)
class ManagementResponse:
    """The answer: ``statusCode``, ``statusDescription`` and the body."""

    status: int
    description: str = ""
    body: Any = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ManagedType:
    """One type the node names: a category, or one of its types (``org.apache.qpid.LastValueQueue``)."""

    name: str
    category: str
    #: the value of the ``type`` attribute this type stands for (None: the whole category)
    type_value: str | None = None


class ManagementNode:
    """The management node of ``managed`` (a virtual host, or the broker)."""

    def __init__(self, managed: ConfiguredObject, permissions: Permissions | None = None) -> None:
        self.managed = managed
        self.permissions: Permissions = permissions or ManagementPermissions()
        self.categories = _below(managed.category)
        self.types: dict[str, ManagedType] = {}
        for category in self.categories:
            self.types[TYPE_PREFIX + category] = ManagedType(TYPE_PREFIX + category, category)
            if category != managed.category:
                for value in _type_values(category):
                    word = _TYPE_WORDS.get((category, value)) or value[:1].upper() + value[1:]
                    name = f"{TYPE_PREFIX}{word}{category}"
                    self.types[name] = ManagedType(name, category, value)

    # -- the request ---------------------------------------------------------------------

    async def answer(self, request: ManagementRequest, principal: Principal) -> ManagementResponse:
        """The response to ``request``; never raises (a bug is a 500 with its text)."""
        try:
            return await self._perform(request, principal)
        except ManagementError as exc:
            # 422 and 405 are HTTP's; the draft's status for a request that cannot be done is 400
            status = BAD_REQUEST if exc.status in (management.UNPROCESSABLE,
                                                   management.METHOD_NOT_ALLOWED) else exc.status
            return ManagementResponse(status, exc.message)
        except BrokerError as exc:
            error = management.from_broker_error(exc, configuration_status=BAD_REQUEST)
            return ManagementResponse(error.status, error.message)
        except Exception as exc:
            log.exception("management request %s failed", dict(request.properties))
            return ManagementResponse(management.INTERNAL, f"internal error: {exc!r}")

    async def _perform(self, request: ManagementRequest, principal: Principal) -> ManagementResponse:
        properties, operation = request.properties, request.operation
        type_name = str(properties.get("type") or "")
        if not operation:
            raise ManagementError(BAD_REQUEST, "application property 'operation' is missing")
        if type_name == MANAGEMENT_TYPE or (not type_name and operation in NODE_OPERATIONS):
            return self._node_operation(request, principal)
        if not type_name:
            raise ManagementError(BAD_REQUEST, "application property 'type' is missing")
        managed_type = self._type(type_name)
        category = managed_type.category
        if operation == "CREATE" and category != self.managed.category:
            return await self._create(managed_type, request, principal)
        obj = self._find(category, properties)
        management.check(self.permissions, principal, Action.READ, obj, category)
        if operation == "READ":
            return ManagementResponse(OK, body=self.represent(obj, _actuals(request.body)))
        if operation == "UPDATE":
            data = _attributes(request.body, operation)
            for key in (IDENTITY, OBJECT_PATH, QPID_TYPE, "type"):
                data.pop(key, None)
            shown = self.represent(obj)
            await management.update_object(obj, data, principal, self.permissions, shown)
            return ManagementResponse(OK, body=self.represent(obj))
        if operation == "DELETE" and obj is not self.managed:
            await management.delete_object(obj, principal, self.permissions)
            return ManagementResponse(NO_CONTENT)
        if operation in declared_operations(type(obj)):
            arguments = {key: value for key, value in properties.items() if key not in RESERVED}
            if isinstance(request.body, Mapping):
                arguments.update({str(key): value for key, value in request.body.items()})
            result = await management.invoke_operation(obj, operation, arguments, principal,
                                                       self.permissions)
            return ManagementResponse(OK, body=self._result(result, principal))
        raise ManagementError(NOT_IMPLEMENTED, f"operation '{operation}' is not implemented for"
                                               f" type '{managed_type.name}'")

    async def _create(self, managed_type: ManagedType, request: ManagementRequest,
                      principal: Principal) -> ManagementResponse:
        data = _attributes(request.body, "CREATE")
        for key in (IDENTITY, "id"):
            if key in data:
                raise ManagementError(BAD_REQUEST, f"'{key}' cannot be given to CREATE")
        qpid_type = data.pop(QPID_TYPE, None)
        data.pop("type", None)                              # the AMQP type, never the model's
        if qpid_type is not None or managed_type.type_value is not None:
            data["type"] = qpid_type if qpid_type is not None else managed_type.type_value
        path = data.pop(OBJECT_PATH, None) or request.properties.get("name")
        names = split_path(str(path)) if path else [str(data.get("name") or "")]
        if not names[-1] and not data.get("name"):
            raise ManagementError(BAD_REQUEST, "CREATE needs the new object's 'name' (body)"
                                               f" or its '{OBJECT_PATH}'")
        data.setdefault("name", names[-1])
        category = managed_type.category
        parent = self._object_at(_parent_category(category), names[:-1], BAD_REQUEST)
        created = await management.create_child(parent, category, data, principal,
                                                self.permissions)
        return ManagementResponse(CREATED, body=self.represent(created))

    # -- finding objects -------------------------------------------------------------------

    def _type(self, name: str) -> ManagedType:
        found = self.types.get(name)
        if found is None:
            # a category's plain name is accepted too (queue, Queue)
            for each in self.types.values():
                if each.type_value is None and each.category.lower() == name.lower():
                    return each
            raise ManagementError(NOT_FOUND, f"unknown type '{name}'; known: "
                                             f"{', '.join(sorted(self.types))}")
        return found

    def _find(self, category: str, properties: Mapping[str, Any]) -> ConfiguredObject:
        """The object the request names by identity, name, or index/key (404 when none)."""
        if properties.get("identity") is not None:
            wanted = str(properties["identity"])
            for obj in self.objects(category):
                if obj.id == wanted:
                    return obj
            raise ManagementError(NOT_FOUND, f"no {category} with identity '{wanted}'")
        if properties.get("index") is not None:
            index = str(properties["index"])
            if index not in (OBJECT_PATH, "name"):
                raise ManagementError(BAD_REQUEST, f"unknown index '{index}': '{OBJECT_PATH}'"
                                                   " or 'name'")
            path = properties.get("key")
        else:
            path = properties.get("name")
        if path is None:
            if category == self.managed.category:
                return self.managed
            raise ManagementError(BAD_REQUEST, "name the object: application property 'identity',"
                                               f" 'name', or 'index' ({OBJECT_PATH}) with 'key'")
        if category == self.managed.category and str(path) in ("", self.managed.name):
            return self.managed
        return self._object_at(category, split_path(str(path)))

    def _object_at(self, category: str, names: list[str], mismatch: int = NOT_FOUND) -> ConfiguredObject:
        """The ``category`` object at path ``names``; ``mismatch`` is the status when the path
        has too few or too many names (404 for one looked up, 400 for a parent to create in)."""
        chain = self.categories.get(category)
        if chain is None:
            raise ManagementError(BAD_REQUEST, f"a {category} is not managed here")
        if len(names) != len(chain):
            form = "/".join(f"<{c.lower()}>" for c in chain) or "(empty)"
            raise ManagementError(mismatch, f"the path of a {category} here is {form}, not"
                                            f" '{join_path(names)}'")
        obj: ConfiguredObject | None = self.managed
        for level, name in zip(chain, names):
            obj = obj.child(level, name) if obj is not None else None
        if obj is None:
            raise ManagementError(NOT_FOUND, f"{category} '{join_path(names)}' not found")
        return obj

    def objects(self, category: str | None = None) -> Iterator[ConfiguredObject]:
        """Every object of ``category`` the node manages (all of them when None)."""
        wanted = [category] if category is not None else list(self.categories)
        for each in wanted:
            found = [self.managed]
            for level in self.categories[each]:
                found = [child for parent in found for child in parent.children(level)]
            yield from found

    def path_of(self, obj: ConfiguredObject) -> str:
        names: list[str] = []
        current: ConfiguredObject | None = obj
        while current is not None and current is not self.managed:
            names.append(str(current.name))
            current = current.parent
        return join_path(reversed(names))

    # -- answers ---------------------------------------------------------------------------

    def type_of(self, obj: ConfiguredObject, type_value: Any = None) -> str:
        """The AMQP type of ``obj`` (``type_value``: its ``type`` attribute, when known)."""
        if type_value is None:
            type_value = obj.attributes().get("type")
        for each in self.types.values():
            if each.category == obj.category and each.type_value is not None \
                    and each.type_value == type_value:
                return each.name
        return TYPE_PREFIX + obj.category

    def represent(self, obj: ConfiguredObject, actuals: bool = False) -> dict[str, Any]:
        """The object as the node shows it: ``identity``, ``type`` (the AMQP type),
        ``qpid-type`` (the model's), ``object-path``, then its attributes -- effective
        values, or as configured with ``actuals``."""
        effective = obj.attributes()
        attributes = {"name": obj.name, **obj.attributes(actual=True)} if actuals else effective
        shown: dict[str, Any] = {IDENTITY: obj.id,
                                 "type": self.type_of(obj, effective.get("type")),
                                 QPID_TYPE: plain_value(effective.get("type")),
                                 OBJECT_PATH: self.path_of(obj)}
        for key, value in attributes.items():
            if key not in ("id", "type"):
                shown[key] = plain_value(value)
        return shown

    def _result(self, result: Any, principal: Principal) -> Any:
        if isinstance(result, Content):
            return result.data
        if isinstance(result, ConfiguredObject):
            return self.represent(result)
        if isinstance(result, list) and result \
                and all(isinstance(each, ConfiguredObject) for each in result):
            visible = visibility(self.permissions, principal)
            return [self.represent(each) for each in result if visible(each)]
        return plain_value(result)

    # -- the node's own operations ---------------------------------------------------------

    def _node_operation(self, request: ManagementRequest, principal: Principal) -> ManagementResponse:
        operation = request.operation
        entity_type = request.properties.get("entityType")
        types = self._types_asked(None if entity_type is None else str(entity_type))
        if operation == "QUERY":
            return ManagementResponse(OK, body=self._query(request, types, principal))
        if operation == "GET-TYPES":
            body: dict[str, Any] = {t.name: [] if t.type_value is None
                                    else [TYPE_PREFIX + t.category] for t in types}
        elif operation == "GET-ATTRIBUTES":
            body = {t.name: _attribute_names(t.category) for t in types}
        elif operation == "GET-OPERATIONS":
            body = {t.name: self._operations_of(t) for t in types}
        elif operation == "GET-MGMT-NODES":
            return ManagementResponse(OK, body=[])
        else:
            raise ManagementError(NOT_IMPLEMENTED, f"the management node has no operation"
                                                   f" '{operation}'; known: {', '.join(NODE_OPERATIONS)}")
        if entity_type is None or entity_type == MANAGEMENT_TYPE:
            body[MANAGEMENT_TYPE] = {name: [] for name in NODE_OPERATIONS} \
                if operation == "GET-OPERATIONS" else []
        return ManagementResponse(OK, body=body)

    def _types_asked(self, entity_type: str | None) -> list[ManagedType]:
        if entity_type is None:
            return list(self.types.values())
        if entity_type == MANAGEMENT_TYPE:
            return []
        asked = self._type(entity_type)
        if asked.type_value is not None:
            return [asked]
        return [t for t in self.types.values() if t.category == asked.category]

    def _operations_of(self, managed_type: ManagedType) -> dict[str, list[str]]:
        category = managed_type.category
        standard = ("READ", "UPDATE") if category == self.managed.category else STANDARD
        found: dict[str, list[str]] = {name: [] for name in standard}
        base = _base(category)
        for name, operation in declared_operations(base).items() if base is not None else ():
            found[name] = list(operation.parameters)
        return found

    def _query(self, request: ManagementRequest, types: list[ManagedType],
               principal: Principal) -> dict[str, Any]:
        body = request.body if request.body is not None else {}
        if not isinstance(body, Mapping):
            raise ManagementError(BAD_REQUEST, "the body of a QUERY must be a map")
        names = body.get("attributeNames") or []
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ManagementError(BAD_REQUEST, "attributeNames must be a list of strings")
        visible = visibility(self.permissions, principal)
        entity_type = request.properties.get("entityType")
        categories = {t.category for t in types} if entity_type is not None else None
        values = {t.type_value for t in types if t.type_value is not None}
        objects = [obj for obj in self.objects() if visible(obj)
                   and (categories is None or obj.category in categories)]
        if len(types) == 1 and values:
            objects = [obj for obj in objects if self.type_of(obj) == types[0].name]
        objects.sort(key=lambda o: (o.category, str(o.name), o.id))
        objects = _window(objects, request.properties.get("offset"),
                          request.properties.get("count"))
        shown = [self.represent(obj) for obj in objects]
        if not names:
            names = [IDENTITY, "type", QPID_TYPE, OBJECT_PATH]
            for each in shown:
                names += [key for key in each if key not in names]
        return {"attributeNames": names, "results": [[each.get(n) for n in names] for each in shown]}


# -- helpers -------------------------------------------------------------------------------------

def _below(category: str) -> dict[str, list[str]]:
    """Every category at or below ``category`` -> the categories on the way to it (its own last)."""
    found: dict[str, list[str]] = {}

    def walk(name: str, chain: list[str]) -> None:
        found[name] = chain
        for child in registry.TREE.get(name, ()):
            walk(child, chain + [child])

    walk(category, [])
    return found


def _parent_category(category: str) -> str:
    for parent, children in registry.TREE.items():
        if category in children:
            return parent
    raise ManagementError(BAD_REQUEST, f"a {category} has no parent to be created in")


def _base(category: str) -> type[ConfiguredObject] | None:
    """The class of ``category``; None when no class of it is loaded."""
    try:
        return registry.category(category).base
    except ConfigurationError:
        return None


def _type_values(category: str) -> list[str]:
    """The values of a category's ``type`` attribute (queue kinds, exchange types, plugins)."""
    base = _base(category)
    if base is None:
        return []
    creation = getattr(base, "creation", None) or {}
    declared = creation.get("type") if isinstance(creation, Mapping) else None
    if declared is not None and getattr(declared, "choices", None):
        return [str(choice) for choice in declared.choices]
    return registry.category(category).types()


def _attribute_names(category: str) -> list[str]:
    base = _base(category)
    if base is None:
        return []
    names = [name for name, decl in declared_attributes(base).items() if not decl.secure]
    names += [name for name in derived_attributes(base) if name not in names]
    creation = getattr(base, "creation", None) or {}
    names += [name for name in creation if name not in names]
    return names


def _attributes(body: Any, operation: str) -> dict[str, Any]:
    if not isinstance(body, Mapping):
        raise ManagementError(BAD_REQUEST, f"the body of {operation} must be a map of attributes")
    return {str(key): value for key, value in body.items()}


def _actuals(body: Any) -> bool:
    value = body.get("actuals") if isinstance(body, Mapping) else None
    if isinstance(value, str):
        return value.lower() == "true"
    return bool(value)


def _window(objects: list[ConfiguredObject], offset: Any, count: Any) -> list[ConfiguredObject]:
    """Broker-J's ``offset`` and ``count``: a negative offset counts from the end."""
    try:
        start = int(offset) if offset is not None else 0
        size = int(count) if count is not None else None
    except (TypeError, ValueError):
        raise ManagementError(BAD_REQUEST, "offset and count must be integers") from None
    if start < 0:
        start = max(len(objects) + start, 0)
    objects = objects[start:]
    return objects if size is None or size < 0 else objects[:size]


def split_path(path: str) -> list[str]:
    """``a/b\\/c`` -> ``["a", "b/c"]``: names between slashes, ``\\`` escaping the next character."""
    names, current, escaped = [], [], False
    for char in path:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "/":
            names.append("".join(current))
            current = []
        else:
            current.append(char)
    names.append("".join(current))
    return names


def join_path(names: Any) -> str:
    return "/".join(str(name).replace("\\", "\\\\").replace("/", "\\/") for name in names)


def plain_value(value: Any) -> Any:
    """``value`` as plain data an AMQP message carries: maps with string keys, lists,
    numbers, strings, bytes; enums by name, anything else as JSON shows it."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, Mapping):
        return {str(key): plain_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_value(item) for item in value]
    return to_json_value(value)


# -- running requests on the loop ------------------------------------------------------------

_running: set[asyncio.Task[Any]] = set()


def start_request(managed: ConfiguredObject, request: ManagementRequest, principal: Principal,
                  answer: Callable[[ManagementResponse], None],
                  permissions: Permissions | None = None) -> None:
    """Answer ``request`` in a task of the running loop: ``answer`` is called with the
    response once whatever it changed is durable (it may be called later than now)."""
    async def run() -> None:
        try:
            node = ManagementNode(managed, permissions)
        except Exception as exc:
            log.exception("the management node of %s", managed.label)
            response = ManagementResponse(management.INTERNAL, f"internal error: {exc!r}")
        else:
            response = await node.answer(request, principal)
        try:
            answer(response)
        except Exception:               # the engine's callback: a bug there must not go unseen
            log.exception("answering management request %s", dict(request.properties))

    task = asyncio.get_running_loop().create_task(run())
    _running.add(task)
    task.add_done_callback(_running.discard)
