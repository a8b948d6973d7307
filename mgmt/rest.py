"""The REST API over the model tree, independent of the HTTP server.

:meth:`RestApi.handle` takes a method, the raw path, the query, the body and
who is asking, and returns a :class:`Reply` or raises
:class:`~mgmt.errors.ApiError`.  Everything is generic over the model's
metadata (:mod:`mgmt.paths`, :mod:`mgmt.representation`,
:func:`broker.model.operations.declared_operations`), so a new category,
attribute or operation needs no change here.  What it does to the model --
permission checks, creating, updating, deleting, invoking, waiting for the
store -- is :mod:`broker.model.management`, which the AMQP 1.0 management
node calls too; this module finds objects by path and answers in JSON.

As Broker-J:

- ``GET`` one object (a full path) or a list (fewer names, ``*``, or
  attribute filters such as ``?id=<uuid>``); ``GET .../<operation>`` runs an
  operation that changes nothing, its parameters from the query.
- ``PUT``/``POST`` to a full path updates the object (200) or creates it
  (201 + ``Location``); to the parent's path, creates the object the body
  names; ``POST .../<operation>`` runs an operation with a JSON body.
- ``DELETE`` a full path, or the objects ``?id=`` selects.
- An operation that returns objects of the model (a virtual host's
  ``getConnections``) answers them as a GET lists them, leaving out those
  the user may not read.

An answer to a change is given once whatever the change journaled is
durable (the journal group of its virtual host is committed), as AMQP's
``tx.commit-ok`` is.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.errors import BrokerError
from broker.messaging.records import to_json_value
from broker.model import management
from broker.model.configured_object import ConfiguredObject
from broker.model.message_views import Content
from broker.model.permissions import visibility
from broker.security.principal import Principal
from mgmt import paths
from mgmt.errors import BAD_REQUEST, METHOD_NOT_ALLOWED, NOT_FOUND, UNPROCESSABLE, ApiError, \
    from_broker_error
from mgmt.representation import OPTION_NAMES, BadQuery, Representer, ViewOptions, \
    matches_filters
from mgmt.security import Action, Permissions, ManagementPermissions

Query = Mapping[str, list[str]]


@dataclass(slots=True)
class Reply:
    status: int
    #: JSON-ready data, :class:`~broker.model.message_views.Content` (sent as is) or None
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


class RestApi:
    def __init__(self, broker: ConfiguredObject, permissions: Permissions | None = None,
                 representer: Representer | None = None) -> None:
        self.broker = broker
        self.permissions: Permissions = permissions or ManagementPermissions()
        self.representer = representer or Representer()

    async def handle(self, method: str, raw_path: str, query: Query, body: bytes,
                     principal: Principal) -> Reply:
        try:
            path = paths.parse(raw_path)
        except paths.PathNotFound as exc:
            raise ApiError(NOT_FOUND, str(exc)) from None
        try:
            if method in ("GET", "HEAD"):
                return await self.get(path, query, principal)
            if method in ("PUT", "POST"):
                return await self.write(method, path, query, body, principal)
            if method == "DELETE":
                return await self.delete(path, query, principal)
        except BadQuery as exc:
            raise ApiError(BAD_REQUEST, str(exc)) from None
        except BrokerError as exc:
            raise from_broker_error(exc) from None
        raise ApiError(METHOD_NOT_ALLOWED, f"method {method} is not supported")

    # -- reading ---------------------------------------------------------------------

    async def get(self, path: paths.ApiPath, query: Query, principal: Principal) -> Reply:
        if path.operation is not None:
            arguments = {name: values[0] if len(values) == 1 else values
                         for name, values in query.items()}
            return await self.invoke(path, arguments, principal, changes_allowed=False)
        options = ViewOptions.from_query(query)
        visible = self._visible(principal)
        if self._single(path, query):
            obj = self._one(path, principal, Action.READ)
            return Reply(200, self.representer.represent(obj, options, visible))
        found = [obj for obj in self._select(path, query) if visible(obj)]
        return Reply(200, self.representer.represent_all(found, options, visible))

    def _visible(self, principal: Principal) -> Any:
        return visibility(self.permissions, principal)

    @staticmethod
    def _single(path: paths.ApiPath, query: Query) -> bool:
        filters = set(query) - OPTION_NAMES
        return path.full and not path.wildcard and not filters

    def _select(self, path: paths.ApiPath, query: Query) -> list[ConfiguredObject]:
        found = paths.select(self.broker, path.target.chain, path.names, path.wildcards)
        if not set(query) - OPTION_NAMES:
            return found
        return [obj for obj in found if matches_filters(obj, query)]

    def _one(self, path: paths.ApiPath, principal: Principal, action: Action) -> ConfiguredObject:
        """The one object a full path names; 404 when missing, 403 when not allowed."""
        if not path.full or path.wildcard:
            raise ApiError(NOT_FOUND if path.operation else UNPROCESSABLE,
                           f"the path must name one {path.target.url_name}:"
                           f" {path.target.url_name}/"
                           f"{'/'.join('<' + c.lower() + '>' for c in path.target.chain)}")
        found = paths.select(self.broker, path.target.chain, path.names, path.wildcards)
        if not found:
            raise ApiError(NOT_FOUND, f"{path.target.category} '{'/'.join(path.names)}'"
                                      " not found")
        obj = found[0]
        self._check(principal, action, obj, obj.category)
        return obj

    def _check(self, principal: Principal, action: Action, target: ConfiguredObject,
               category: str, changes: Collection[str] = ()) -> None:
        management.check(self.permissions, principal, action, target, category, changes)

    # -- creating and updating ----------------------------------------------------------

    async def write(self, method: str, path: paths.ApiPath, query: Query, body: bytes,
                    principal: Principal) -> Reply:
        if path.operation is not None:
            if method != "POST":
                raise ApiError(METHOD_NOT_ALLOWED, "operations are invoked with POST")
            return await self.invoke(path, parse_object(body, allow_empty=True), principal,
                                     changes_allowed=True)
        data = parse_object(body)
        target = path.target
        if path.full and not path.wildcard:
            existing = paths.select(self.broker, target.chain, path.names, path.wildcards)
            if existing:
                return await self.update(existing[0], data, principal)
            if target.depth == 0:
                raise ApiError(NOT_FOUND, f"no {target.category}")
            name = path.names[-1]
            if data.get("name", name) != name:
                raise ApiError(UNPROCESSABLE, f"attribute 'name' is '{data.get('name')}' but the"
                                              f" path names '{name}'")
            data = {**data, "name": name}
            parent_names = path.names[:-1]
        elif set(query) & {"id"}:
            found = [obj for obj in self._select(path, query)]
            if not found:
                raise ApiError(NOT_FOUND, f"no {target.category} with id"
                                          f" {', '.join(query['id'])}")
            return await self.update(found[0], data, principal)
        elif path.names_parent and not path.wildcard:
            parent_names = path.names
        else:
            raise ApiError(UNPROCESSABLE, f"to create a {target.category}, name its parent:"
                                          f" {target.url_name}/"
                                          f"{'/'.join('<' + c.lower() + '>' for c in target.parent_chain)}")
        return await self.create(path, parent_names, data, principal)

    async def create(self, path: paths.ApiPath, parent_names: tuple[str, ...],
                     data: dict[str, Any], principal: Principal) -> Reply:
        target = path.target
        parents = paths.select(self.broker, target.parent_chain, parent_names)
        if not parents:
            raise ApiError(NOT_FOUND, f"{target.parent_chain[-1]} '{'/'.join(parent_names)}'"
                                      " not found")
        created = await management.create_child(parents[0], target.category, data, principal,
                                                 self.permissions)
        return Reply(201, self.representer.represent(created, ViewOptions()),
                     {"Location": paths.url_of(created, path.version)})

    async def update(self, obj: ConfiguredObject, data: dict[str, Any],
                     principal: Principal) -> Reply:
        current = self.representer.represent(obj, ViewOptions())
        await management.update_object(obj, data, principal, self.permissions, current)
        return Reply(200, self.representer.represent(obj, ViewOptions()))

    # -- deleting -------------------------------------------------------------------------

    async def delete(self, path: paths.ApiPath, query: Query, principal: Principal) -> Reply:
        if path.operation is not None:
            raise ApiError(METHOD_NOT_ALLOWED, "operations are invoked with POST")
        if path.target.depth == 0:
            raise ApiError(METHOD_NOT_ALLOWED, "the broker cannot be deleted")
        if not (path.full or "id" in query):
            raise ApiError(UNPROCESSABLE, f"DELETE needs the full path of a"
                                          f" {path.target.category}, or ?id=<id>")
        if path.wildcard:
            raise ApiError(UNPROCESSABLE, "DELETE takes one object: a path without wildcards"
                                          " (a name that is a star is sent as %2A)")
        found = self._select(path, query)
        if not found:
            raise ApiError(NOT_FOUND, f"{path.target.category} '{'/'.join(path.names)}'"
                                      " not found")
        await management.delete_objects(found, principal, self.permissions)
        return Reply(200)

    # -- operations ----------------------------------------------------------------------

    async def invoke(self, path: paths.ApiPath, arguments: Mapping[str, Any],
                     principal: Principal, *, changes_allowed: bool) -> Reply:
        obj = self._one(path, principal, Action.READ)
        result = await management.invoke_operation(obj, path.operation or "", arguments,
                                                   principal, self.permissions,
                                                   changes_allowed=changes_allowed)
        if isinstance(result, Content):
            return Reply(200, result)
        if isinstance(result, ConfiguredObject):
            return Reply(200, self.representer.represent(result, ViewOptions()))
        if isinstance(result, list) and result \
                and all(isinstance(each, ConfiguredObject) for each in result):
            visible = self._visible(principal)
            return Reply(200, self.representer.represent_all(
                [each for each in result if visible(each)], ViewOptions(), visible))
        return Reply(200, to_json_value(result))


def parse_object(body: bytes, *, allow_empty: bool = False) -> dict[str, Any]:
    """The JSON object in a request body: 400 when it is not JSON, 422 when not an object."""
    if not body.strip():
        if allow_empty:
            return {}
        raise ApiError(BAD_REQUEST, "the request body must be a JSON object")
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ApiError(BAD_REQUEST, f"malformed JSON in the request body: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError(UNPROCESSABLE, "the request body must be a JSON object, not"
                                      f" {type(data).__name__}")
    return data
