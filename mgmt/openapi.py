"""The OpenAPI description of the REST API, generated from the model's metadata.

The API has one handler for every path (see :mod:`mgmt.rest`), so Litestar
cannot see its shape; this module writes it down per category -- list,
read, create, update, delete, each operation with its parameters -- and
one schema per category with its attributes (types, defaults, choices,
descriptions, read-only ones marked) and its statistics.  A category,
attribute or operation added to the model appears here by itself.
"""

from __future__ import annotations

import enum
import typing
from typing import Any

from litestar.openapi.spec import Components, OpenAPIMediaType, OpenAPIResponse, OpenAPIType, \
    Operation, Parameter, PathItem, Reference, RequestBody, Schema, SecurityScheme, Tag

from broker.model import registry
from broker.model.attributes import Attribute, DerivedAttribute, declared_attributes, \
    derived_attributes
from broker.model.operations import Operation as ModelOperation
from broker.model.operations import declared_operations
from mgmt.paths import CategoryPath, category_paths
from mgmt.security import CSRF_HEADER, SESSION_COOKIE

JSON = "application/json"
SECURITY_SCHEME = "basic"
SESSION_SCHEME = "session"
CSRF_SCHEME = "csrf"
#: HTTP Basic, or the console's session cookie with its CSRF token
SECURITY: list[dict[str, list[str]]] = [{SECURITY_SCHEME: []},
                                        {SESSION_SCHEME: [], CSRF_SCHEME: []}]

_TYPES: dict[type, OpenAPIType] = {
    bool: OpenAPIType.BOOLEAN, int: OpenAPIType.INTEGER, float: OpenAPIType.NUMBER,
    str: OpenAPIType.STRING, dict: OpenAPIType.OBJECT, list: OpenAPIType.ARRAY,
    bytes: OpenAPIType.STRING,
}

_ERROR = Schema(type=OpenAPIType.OBJECT, properties={"errorMessage": Schema(type=OpenAPIType.STRING)})


def _scalar(kind: type | None) -> Schema:
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return Schema(type=OpenAPIType.STRING, enum=[member.name for member in kind])
    return Schema(type=_TYPES.get(kind or str, OpenAPIType.STRING))


def attribute_schema(decl: Attribute[Any] | DerivedAttribute[Any]) -> Schema:
    """One attribute (or operation parameter) as a JSON schema."""
    if decl.kind is list:
        items = _scalar(getattr(decl, "of", None))
        if isinstance(decl, Attribute) and decl.choices and items.enum:
            items.enum = list(decl.choices)     # what may be named (a Port: the implemented)
        schema = Schema(type=OpenAPIType.ARRAY, items=items)
    else:
        schema = _scalar(decl.kind)
    schema.description = decl.description or None
    if isinstance(decl, Attribute):
        if decl.choices and decl.kind is not list:
            schema.enum = list(decl.choices)
        default = decl.default.name if isinstance(decl.default, enum.Enum) else decl.default
        if default is not None and not (isinstance(default, str) and "${" in default):
            schema.default = default
        if not decl.mutable:
            schema.description = (schema.description or "") + " (cannot be changed)"
        if decl.secure:
            schema.write_only = True
    else:
        schema.read_only = True
    return schema


def category_schema(target: CategoryPath) -> Schema:
    """A category's objects: its attributes, derived ones read-only, statistics apart."""
    info = registry.category(target.category)
    classes = [info.base] + [registry.specialisation(info.name, t) for t in _types(info)]
    properties: dict[str, Schema | Reference] = {}
    statistics: dict[str, Schema | Reference] = {}
    for cls in classes:
        for name, decl in declared_attributes(cls).items():
            properties.setdefault(name, attribute_schema(decl))
        for name, derived in derived_attributes(cls).items():
            if derived.statistic:
                statistics.setdefault(name, attribute_schema(derived))
                if derived.counter:
                    statistics.setdefault(name + "Rate", Schema(
                        type=OpenAPIType.NUMBER, read_only=True,
                        description=f"Change of {name} per second, between reads"))
            else:
                properties.setdefault(name, attribute_schema(derived))
    creation = getattr(info.base, "creation", {})
    for name, decl in creation.items():
        properties.setdefault(name, attribute_schema(decl))
    if statistics:
        properties["statistics"] = Schema(type=OpenAPIType.OBJECT, properties=statistics,
                                          read_only=True)
    return Schema(type=OpenAPIType.OBJECT, title=target.category, properties=properties,
                  description=f"A {target.category}; types: {', '.join(_types(info)) or '-'}")


def _types(info: registry.Category) -> list[str]:
    found: list[str] = []
    for name in info.types():
        try:
            registry.specialisation(info.name, name)
        except Exception:           # a type whose plugin is not installed is left out
            continue
        found.append(name)
    return found if registry.TYPE_GROUPS.get(info.name) else []


def _path_parameters(chain: tuple[str, ...]) -> list[Parameter | Reference]:
    return [Parameter(name=category.lower(), param_in="path", required=True,
                      schema=Schema(type=OpenAPIType.STRING),
                      description=f"Name of the {category} ('*' for every one)")
            for category in chain]


def _template(target: CategoryPath, chain: tuple[str, ...]) -> str:
    names = "".join("/{" + category.lower() + "}" for category in chain)
    return f"/api/latest/{target.url_name}{names}"


def _json(schema: Schema | Reference, description: str) -> OpenAPIResponse:
    return OpenAPIResponse(description=description,
                           content={JSON: OpenAPIMediaType(schema=schema)})


def _errors(*statuses: int) -> dict[str, OpenAPIResponse]:
    texts = {400: "Malformed JSON or query parameter", 401: "Not authenticated",
             403: "Not allowed", 404: "No such object", 409: "The name exists already, or"
             " the object's state forbids it", 422: "An invalid attribute or parameter"}
    return {str(status): _json(_ERROR, texts[status]) for status in statuses}


_VIEW_PARAMETERS: list[Parameter | Reference] = [
    Parameter(name="depth", param_in="query", schema=Schema(type=OpenAPIType.INTEGER, default=0),
              description="How many levels of children to include"),
    Parameter(name="actuals", param_in="query", schema=Schema(type=OpenAPIType.BOOLEAN),
              description="Values as configured (${...} unexpanded, defaults left out)"),
    Parameter(name="excludeInheritedContext", param_in="query",
              schema=Schema(type=OpenAPIType.BOOLEAN, default=True),
              description="false: 'context' also holds the ancestors' variables"),
    Parameter(name="oversize", param_in="query", schema=Schema(type=OpenAPIType.INTEGER),
              description="Cut strings longer than this"),
    Parameter(name="id", param_in="query", schema=Schema(type=OpenAPIType.STRING),
              description="Only the object with this id (any attribute filters likewise)"),
]


def category_paths_items(target: CategoryPath) -> dict[str, PathItem]:
    """The path items of one category: list, object, create under parent, operations."""
    ref = Reference(ref=f"#/components/schemas/{target.category}")
    tag = [target.category]
    items: dict[str, PathItem] = {}
    listed = Operation(tags=tag, summary=f"List {target.category} objects",
                       operation_id=f"list{target.category}", parameters=_VIEW_PARAMETERS,
                       responses={"200": _json(Schema(type=OpenAPIType.ARRAY, items=ref),
                                               f"{target.category} objects"),
                                  **_errors(400, 401, 404)})
    items[_template(target, ())] = PathItem(get=listed)
    if target.depth > 1:
        parent = target.parent_chain
        created = Operation(
            tags=tag, summary=f"Create a {target.category} (its name in the body)",
            operation_id=f"create{target.category}", parameters=_path_parameters(parent),
            request_body=RequestBody(content={JSON: OpenAPIMediaType(schema=ref)}, required=True),
            responses={"201": _json(ref, "Created; Location names it"),
                       **_errors(400, 401, 403, 404, 409, 422)})
        items[_template(target, parent)] = PathItem(
            post=created, put=created,
            get=Operation(tags=tag, summary=f"List the {target.category} objects under this path",
                          operation_id=f"list{target.category}Under",
                          parameters=_path_parameters(parent) + _VIEW_PARAMETERS,
                          responses={"200": _json(Schema(type=OpenAPIType.ARRAY, items=ref),
                                                  f"{target.category} objects")}))
    object_path = _template(target, target.chain)
    params = _path_parameters(target.chain)
    write = Operation(tags=tag, summary=f"Update the {target.category}, or create it (201)",
                      operation_id=f"put{target.category}", parameters=params,
                      request_body=RequestBody(content={JSON: OpenAPIMediaType(schema=ref)},
                                               required=True),
                      responses={"200": _json(ref, "Updated"), "201": _json(ref, "Created"),
                                 **_errors(400, 401, 403, 404, 409, 422)})
    items[object_path] = PathItem(
        get=Operation(tags=tag, summary=f"Read one {target.category}",
                      operation_id=f"get{target.category}", parameters=params + _VIEW_PARAMETERS,
                      responses={"200": _json(ref, target.category), **_errors(401, 403, 404)}),
        put=write, post=write,
        delete=None if target.depth == 0 else Operation(
            tags=tag, summary=f"Delete the {target.category}",
            operation_id=f"delete{target.category}", parameters=params,
            responses={"200": OpenAPIResponse(description="Deleted"),
                       **_errors(401, 403, 404, 409)}))
    base = registry.category(target.category).base
    for name, op in declared_operations(base).items():
        items[f"{object_path}/{name}"] = _operation_item(target, op, params)
    return items


def _operation_item(target: CategoryPath, op: ModelOperation[Any],
                    params: list[Parameter | Reference]) -> PathItem:
    body = Schema(type=OpenAPIType.OBJECT,
                  properties={name: attribute_schema(decl) for name, decl in op.parameters.items()},
                  required=[name for name, decl in op.parameters.items() if decl.mandatory] or None)
    result = _result_schema(op)
    invoked = Operation(tags=[target.category], summary=op.description,
                        operation_id=f"{op.name}{target.category}", parameters=params,
                        request_body=RequestBody(content={JSON: OpenAPIMediaType(schema=body)}),
                        responses={"200": _json(result, "The result"),
                                   **_errors(400, 401, 403, 404, 422)})
    if op.changes:
        return PathItem(post=invoked)
    query: list[Parameter | Reference] = [
        Parameter(name=name, param_in="query", schema=attribute_schema(decl),
                  required=decl.mandatory) for name, decl in op.parameters.items()]
    read = Operation(tags=[target.category], summary=op.description,
                     operation_id=f"{op.name}{target.category}Get", parameters=params + query,
                     responses=invoked.responses)
    return PathItem(post=invoked, get=read)


def _result_schema(op: ModelOperation[Any]) -> Schema:
    """What an operation answers: objects of a category (as a GET shows them) when its
    method says it returns them, ``list[Connection]``, else its declared type."""
    if op.returns is type(None):
        return Schema(type=OpenAPIType.NULL)
    try:
        hint = typing.get_type_hints(op.method).get("return")
    except Exception:                 # a hint that cannot be resolved: use the declared type
        hint = None
    item = typing.get_args(hint)[0] if typing.get_origin(hint) is list else None
    category = getattr(item, "category", None)
    if isinstance(category, str) and category in registry.TREE:
        return Schema(type=OpenAPIType.ARRAY,
                      items=Reference(ref=f"#/components/schemas/{category}"))
    return _scalar(op.returns)


def api_description() -> tuple[dict[str, PathItem], dict[str, Schema], list[Tag]]:
    """Path items, component schemas and tags for every category of the model."""
    path_items: dict[str, PathItem] = {}
    schemas: dict[str, Schema] = {}
    tags: list[Tag] = []
    for target in category_paths().values():
        schemas[target.category] = category_schema(target)
        path_items.update(category_paths_items(target))
        tags.append(Tag(name=target.category,
                        description=f"/api/latest/{target.url_name}/"
                                    + "/".join(f"<{c.lower()}>" for c in target.chain)))
    return path_items, schemas, tags


def security_components() -> Components:
    return Components(security_schemes={
        SECURITY_SCHEME: SecurityScheme(
            type="http", scheme="basic",
            description="A user of the HTTP port's authentication provider; needs no CSRF"
                        " token"),
        SESSION_SCHEME: SecurityScheme(
            type="apiKey", name=SESSION_COOKIE, security_scheme_in="cookie",
            description="The session cookie POST /service/login sets (the web console)"),
        CSRF_SCHEME: SecurityScheme(
            type="apiKey", name=CSRF_HEADER, security_scheme_in="header",
            description="The session's CSRF token (from POST /service/login or GET"
                        " /service/session): required with the session cookie on every"
                        " PUT, POST and DELETE, else 403"),
    })
