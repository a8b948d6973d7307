"""The Litestar application of one HTTP port: REST API, login, metrics, OpenAPI.

Routes:

- ``/api/latest/...`` and ``/api/v1/...``: the REST API (:mod:`mgmt.rest`);
- ``POST /service/login`` (HTTP Basic, or a JSON/form body with
  ``username`` and ``password``) sets the session cookie and answers the
  session's CSRF token, which every state-changing request authenticated by
  the cookie must send back in ``X-DeltaMQ-CSRF`` (:mod:`mgmt.security`);
  ``GET /service/session`` says who is logged in (and the token again, and
  whether the user is an administrator);
  ``/service/logout`` ends the session;
- ``GET /metrics``: Prometheus text (:mod:`mgmt.metrics`);
- ``/apidocs``: the OpenAPI description (:mod:`mgmt.openapi`), with
  ``/apidocs/openapi.json``;
- ``/``: the web console, its files under ``/console/`` (:mod:`mgmt.console`);
- ``/api/latest/sql``: read-only Spark SQL over the broker's history, on a
  Spark Connect server (:mod:`mgmt.sql_history`).

Every handler runs on the broker's event loop, where the model lives.
"""

from __future__ import annotations

import logging
import math
from typing import Any
from urllib.parse import parse_qs

from litestar import Litestar, MediaType, Request, Response, get, post, route
from litestar.enums import HttpMethod
from litestar.exceptions import HTTPException
from litestar.openapi import OpenAPIConfig
from prometheus_client.registry import Collector

from broker import __version__
from broker.model.configured_object import ConfiguredObject
from broker.model.message_views import Content
from broker.security.principal import Principal
from mgmt import apidocs, console, metrics, openapi, sql_history
from mgmt.errors import BAD_REQUEST, FORBIDDEN, INTERNAL, TOO_MANY_REQUESTS, UNAUTHORIZED, \
    ApiError
from mgmt.rest import Reply, RestApi, parse_object
from mgmt.security import CSRF_HEADER, REALM, SESSION_COOKIE, Action, Authenticated, \
    Authenticator, CsrfRefused, LoginBlocked, NotAuthenticated, Permissions, Sessions, \
    ManagementPermissions, check_csrf, check_site

log = logging.getLogger("deltamq.mgmt")

DOCS_PATH = "/apidocs"


class Management:
    """What the handlers share: the port's broker, authentication and the REST API."""

    def __init__(self, port: ConfiguredObject, permissions: Permissions | None = None) -> None:
        broker = port.parent
        if broker is None:
            raise ValueError(f"{port.label} is not part of a broker")
        self.broker = broker
        self.permissions: Permissions = permissions or ManagementPermissions()
        self.sessions = Sessions()
        self.authenticator = Authenticator(port, self.sessions)
        self.api = RestApi(broker, self.permissions)
        #: figures /metrics exports beside the model's, the journals' and the process's
        #: (a collector of failed logins, say): prometheus_client collectors
        self.metric_collectors: list[Collector] = []

    def administrator(self, principal: Principal) -> bool:
        """Is ``principal`` an administrator (for the console: what to offer)?"""
        provider = self.broker.child("AuthenticationProvider", principal.provider)
        is_administrator = getattr(provider, "is_administrator", None)
        return bool(is_administrator(principal)) if is_administrator is not None else False

    async def principal(self, request: Request[Any, Any, Any]) -> Principal:
        """Who asks; 401 without valid credentials, 403 for a request that may be forged."""
        return (await self.identify(request)).principal

    async def identify(self, request: Request[Any, Any, Any]) -> Authenticated:
        try:
            found = await self.authenticator.identify(
                request.headers.get("authorization"), request.cookies.get(SESSION_COOKIE),
                request.client.host if request.client else None)
        except LoginBlocked as exc:
            raise blocked(exc) from None
        except NotAuthenticated as exc:
            # no Basic challenge for the console's scripts: a browser would pop up its own
            # password dialog instead of letting the page show its login form
            scripted = request.headers.get("x-requested-with", "").lower() == "xmlhttprequest"
            raise ApiError(UNAUTHORIZED, str(exc), {} if scripted else
                           {"WWW-Authenticate": f'Basic realm="{REALM}"'}) from None
        try:
            check_csrf(request.method, found, request.headers.get(CSRF_HEADER),
                       request.headers.get("sec-fetch-site"))
        except CsrfRefused as exc:
            # the header says why to the console, which then fetches the token again
            raise ApiError(FORBIDDEN, str(exc), {CSRF_HEADER: "required"}) from None
        return found


def blocked(exc: LoginBlocked) -> ApiError:
    """429 for a login refused while its address or user is blocked, saying for how long."""
    return ApiError(TOO_MANY_REQUESTS, str(exc),
                    {"Retry-After": str(max(1, math.ceil(exc.retry_after)))})


def _query(request: Request[Any, Any, Any]) -> dict[str, list[str]]:
    params = request.query_params
    return {key: list(params.getall(key)) for key in params.keys()}


def _raw_path(request: Request[Any, Any, Any]) -> str:
    raw = request.scope.get("raw_path")
    if isinstance(raw, bytes):
        return raw.decode("latin-1")
    return str(request.scope["path"])


def _response(reply: Reply) -> Response[Any]:
    if isinstance(reply.body, Content):
        return Response(content=reply.body.data, status_code=reply.status,
                        media_type=reply.body.media_type, headers=reply.headers)
    if reply.body is None:
        return Response(content=b"", status_code=reply.status, headers=reply.headers)
    return Response(content=reply.body, status_code=reply.status, media_type=MediaType.JSON,
                    headers=reply.headers)


def _error_response(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    if isinstance(exc, ApiError):
        error = exc
    elif isinstance(exc, HTTPException):
        error = ApiError(exc.status_code, str(exc.detail), dict(exc.headers or {}))
    else:
        log.exception("management request %s %s failed", request.method, request.url.path)
        error = ApiError(INTERNAL, f"internal error: {type(exc).__name__}")
    return Response(content=error.body, status_code=error.status, media_type=MediaType.JSON,
                    headers=error.headers)


def create_app(port: ConfiguredObject, permissions: Permissions | None = None) -> Litestar:
    """The application serving ``port`` (an HTTP Port of the model)."""
    management = Management(port, permissions)

    @route(["/api/{version:str}/{rest:path}"],
           http_method=[HttpMethod.GET, HttpMethod.PUT, HttpMethod.POST, HttpMethod.DELETE],
           include_in_schema=False, status_code=200)
    async def rest_api(request: Request[Any, Any, Any]) -> Response[Any]:
        principal = await management.principal(request)
        body = await request.body() if request.method in ("PUT", "POST") else b""
        reply = await management.api.handle(request.method, _raw_path(request), _query(request),
                                            body, principal)
        return _response(reply)

    @post("/service/login", status_code=200, summary="Log in: sets the session cookie",
          tags=["Session"])
    async def login(request: Request[Any, Any, Any]) -> Response[Any]:
        try:
            check_site(request.method, request.headers.get("sec-fetch-site"))
        except CsrfRefused as exc:
            raise ApiError(FORBIDDEN, str(exc)) from None
        principal = await _login_principal(management, request)
        token = management.sessions.open(principal)
        session = management.sessions.session(token)
        response = Response(content={"user": principal.name,
                                     "csrfToken": session.csrf_token if session else None,
                                     "administrator": management.administrator(principal)},
                            media_type=MediaType.JSON)
        response.set_cookie(SESSION_COOKIE, token, httponly=True, samesite="strict", path="/",
                            secure=request.url.scheme == "https")   # HTTPS: never sent in clear
        return response

    @get("/service/session", summary="Who is logged in, and the session's CSRF token",
         description=f"csrfToken is null unless the session cookie authenticated the request;"
                     f" requests that change something send it back in {CSRF_HEADER}.",
         tags=["Session"])
    async def current_session(request: Request[Any, Any, Any]) -> Response[Any]:
        found = await management.identify(request)
        session = found.session
        return Response(content={"user": found.principal.name,
                                 "csrfToken": session.csrf_token if session else None,
                                 "administrator": management.administrator(found.principal)},
                        media_type=MediaType.JSON, headers={"Cache-Control": "no-store"})

    @route("/service/logout", http_method=[HttpMethod.GET, HttpMethod.POST], status_code=200,
           summary="Log out: ends the session", tags=["Session"])
    async def logout(request: Request[Any, Any, Any]) -> Response[Any]:
        token = request.cookies.get(SESSION_COOKIE)
        if token:
            management.sessions.close(token)
        response = Response(content=b"", status_code=200)
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response

    @get("/metrics", summary="Prometheus metrics of the broker, virtual hosts and queues",
         tags=["Metrics"], media_type=metrics.CONTENT_TYPE)
    async def prometheus(request: Request[Any, Any, Any]) -> Response[Any]:
        principal = await management.principal(request)

        def visible(obj: ConfiguredObject) -> bool:
            return management.permissions.allowed(principal, Action.READ, obj, obj.category)

        return Response(content=metrics.exposition(management.broker, visible,
                                                   management.metric_collectors),
                        media_type=metrics.CONTENT_TYPE)

    app = Litestar(
        route_handlers=[rest_api, login, current_session, logout, prometheus,
                        *console.route_handlers(), *sql_history.route_handlers(management)],
        exception_handlers={Exception: _error_response},
        openapi_config=OpenAPIConfig(
            title="DeltaMQ management", version=__version__, path=DOCS_PATH,
            description="Broker-J's REST API over DeltaMQ's model tree: /api/latest/<category>/"
                        "<name1>/<name2>/...; operations as POST .../<operationName>.",
            components=openapi.security_components(),
            security=openapi.SECURITY,
            render_plugins=apidocs.plugins()),
        request_max_body_size=16 * 1024 * 1024,
        logging_config=None,           # the broker configures logging, not the plugin
        debug=False)
    _describe_api(app)
    return app


def _describe_api(app: Litestar) -> None:
    """Add the generated REST paths to the OpenAPI description Litestar built."""
    schema = app.openapi_schema
    path_items, schemas, tags = openapi.api_description()
    schema.paths = {**path_items, **(schema.paths or {})}
    if schema.components.schemas is None:
        schema.components.schemas = {}
    schema.components.schemas.update(schemas)
    schema.tags = [*tags, *(schema.tags or [])]


async def _login_principal(management: Management, request: Request[Any, Any, Any]) -> Principal:
    if request.headers.get("authorization"):
        return await management.principal(request)          # Basic: the cookie is not asked
    body = await request.body()
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("application/x-www-form-urlencoded"):
        form = {key: values[0] for key, values in parse_qs(body.decode("utf-8", "replace")).items()}
    else:
        form = parse_object(body)
    user, password = form.get("username"), form.get("password")
    if not isinstance(user, str) or not isinstance(password, str):
        raise ApiError(BAD_REQUEST, "give 'username' and 'password'")
    provider = management.authenticator.provider
    if provider is None:
        raise ApiError(UNAUTHORIZED, "the HTTP port has no authentication provider")
    try:
        return await management.authenticator.check_password(
            provider, user, password, request.client.host if request.client else None)
    except LoginBlocked as exc:
        raise blocked(exc) from None
    except NotAuthenticated as exc:
        raise ApiError(UNAUTHORIZED, str(exc)) from None
