"""Who is asking, and may they: HTTP Basic, session cookies, and the permission hook.

Management users are the users of the HTTP port's authentication provider
-- the same providers (and the same ``guest``-only-from-loopback rule) as
AMQP.  A request authenticates with HTTP Basic, or with the session cookie
``POST /service/login`` hands out (for the web console); a provider that
allows anonymous logins lets requests without credentials in as
``anonymous``.  Credentials sent with HTTP Basic are used when present (the
cookie is then ignored).

A session has a CSRF token besides its cookie: login gives it, and so does
``GET /service/session``.  A request that changes something (any method but
GET and HEAD) and is authenticated by the cookie must carry the token in
header ``X-DeltaMQ-CSRF``, else it is refused with 403 -- a page elsewhere can
make a browser send the cookie, not read the token.  Requests with HTTP
Basic credentials (curl, scripts) need no token.  A browser's state-changing
request that says it comes from another site (``Sec-Fetch-Site: cross-site``
or ``same-site``) is refused whatever its credentials: a browser may replay
Basic credentials it has cached.

What an authenticated user may do is asked of a
:class:`~broker.model.permissions.Permissions` object, the one the AMQP 1.0
management node asks too (:mod:`broker.model.permissions`; re-exported here).
"""

from __future__ import annotations

import base64
import binascii
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import anyio

from broker.cpu_placement import released
from broker.errors import AuthenticationFailed
from broker.model.authentication import AuthenticationProvider
from broker.model.configured_object import ConfiguredObject
# the permission check is shared with the AMQP 1.0 management node: re-exported for mgmt
from broker.model.permissions import OWN_USER_ATTRIBUTES as OWN_USER_ATTRIBUTES, \
    Action as Action, ManagementPermissions as ManagementPermissions, \
    Permissions as Permissions
from broker.security.principal import Principal
from broker.security.throttle import LoginThrottled

SESSION_COOKIE = "DELTAMQ_SESSION"
#: the request header carrying a cookie session's CSRF token
CSRF_HEADER = "X-DeltaMQ-CSRF"
#: methods that change nothing, and so need no CSRF token
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: what browsers send in ``Sec-Fetch-Site`` for a request made by a page of another origin
FOREIGN_SITES = frozenset({"cross-site", "same-site"})
#: Broker-J's default HTTP session timeout
SESSION_IDLE_TIMEOUT = 600.0
REALM = "DeltaMQ"


class NotAuthenticated(Exception):
    """No valid credentials (HTTP 401)."""


class LoginBlocked(NotAuthenticated):
    """Too many failed logins from this address or for this user (HTTP 429)."""

    def __init__(self, text: str, retry_after: float) -> None:
        super().__init__(text)
        self.retry_after = retry_after


class CsrfRefused(Exception):
    """A state-changing request a browser may have been tricked into sending (HTTP 403)."""


@dataclass(slots=True)
class Session:
    """One console login: who, when last used, and the token its requests must echo."""

    principal: Principal
    last_used: float
    csrf_token: str


@dataclass(frozen=True, slots=True)
class Authenticated:
    """Who a request is from, and the session when its cookie said so."""

    principal: Principal
    #: set when the session cookie authenticated the request (None: Basic or anonymous)
    session: Session | None = None


class Sessions:
    """Session cookies: random tokens, forgotten after ``idle_timeout`` seconds unused."""

    def __init__(self, idle_timeout: float = SESSION_IDLE_TIMEOUT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.idle_timeout = idle_timeout
        self.clock = clock
        self._sessions: dict[str, Session] = {}

    def open(self, principal: Principal) -> str:
        self._expire()
        token = secrets.token_urlsafe(32)
        self._sessions[token] = Session(principal, self.clock(), secrets.token_urlsafe(32))
        return token

    def session(self, token: str) -> Session | None:
        """The live session of cookie ``token`` (its idle time restarts), else None."""
        session = self._sessions.get(token)
        now = self.clock()
        if session is None or now - session.last_used > self.idle_timeout:
            self._sessions.pop(token, None)
            return None
        session.last_used = now
        return session

    def principal(self, token: str) -> Principal | None:
        session = self.session(token)
        return session.principal if session is not None else None

    def close(self, token: str) -> None:
        self._sessions.pop(token, None)

    def _expire(self) -> None:
        now = self.clock()
        for token in [t for t, s in self._sessions.items() if now - s.last_used > self.idle_timeout]:
            del self._sessions[token]

    def __len__(self) -> int:
        return len(self._sessions)


def basic_credentials(header: str) -> tuple[str, str]:
    """``Basic <base64 user:password>`` -> (user, password); NotAuthenticated when malformed."""
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic" or not encoded:
        raise NotAuthenticated("only HTTP Basic authentication is supported")
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise NotAuthenticated("malformed HTTP Basic credentials") from None
    user, separator, password = decoded.partition(":")
    if not separator:
        raise NotAuthenticated("malformed HTTP Basic credentials")
    return user, password


class Authenticator:
    """Checks a request's credentials against the port's authentication provider."""

    def __init__(self, port: ConfiguredObject, sessions: Sessions | None = None) -> None:
        self.port = port
        self.sessions = sessions if sessions is not None else Sessions()

    @property
    def provider(self) -> AuthenticationProvider | None:
        try:
            return cast(AuthenticationProvider, getattr(self.port, "provider"))
        except Exception:                            # no provider configured: nobody gets in
            return None

    async def authenticate(self, authorization: str | None, session_token: str | None,
                           remote_host: str | None) -> Principal:
        return (await self.identify(authorization, session_token, remote_host)).principal

    async def identify(self, authorization: str | None, session_token: str | None,
                       remote_host: str | None) -> Authenticated:
        """Basic credentials when given, else the session cookie, else anonymous if allowed."""
        if not authorization and session_token:
            session = self.sessions.session(session_token)
            if session is not None:
                return Authenticated(session.principal, session)
        provider = self.provider
        if provider is None:
            raise NotAuthenticated("the HTTP port has no authentication provider")
        if not authorization:
            if provider.allows_anonymous:
                return Authenticated(provider.authenticate_anonymous(remote_host))
            raise NotAuthenticated("authentication required")
        user, password = basic_credentials(authorization)
        return Authenticated(await self.check_password(provider, user, password, remote_host))

    async def check_password(self, provider: AuthenticationProvider, user: str, password: str,
                             remote_host: str | None) -> Principal:
        """Verify in a worker thread: password hashes are slow on purpose."""
        def verify() -> Principal:
            return provider.authenticate(user, password, remote_host)

        try:
            return await anyio.to_thread.run_sync(released(verify))
        except LoginThrottled as exc:
            raise LoginBlocked(exc.text, exc.retry_after) from None
        except AuthenticationFailed as exc:
            raise NotAuthenticated(exc.text) from None


def check_csrf(method: str, authenticated: Authenticated, token: str | None,
               fetch_site: str | None = None) -> None:
    """Refuse (:class:`CsrfRefused`) a state-changing request that may be forged.

    ``token`` is the request's :data:`CSRF_HEADER`, ``fetch_site`` its
    ``Sec-Fetch-Site`` header.
    """
    method = method.upper()
    if method in SAFE_METHODS:
        return
    check_site(method, fetch_site)
    session = authenticated.session
    if session is None:
        return
    if not token:
        raise CsrfRefused(f"a {method} authenticated by the session cookie {SESSION_COOKIE}"
                          f" must carry the session's CSRF token in header {CSRF_HEADER}"
                          " (POST /service/login and GET /service/session give it),"
                          " or use HTTP Basic credentials instead")
    if not secrets.compare_digest(token.encode("utf-8", "replace"),
                                  session.csrf_token.encode("ascii")):
        raise CsrfRefused(f"header {CSRF_HEADER} does not hold this session's CSRF token"
                          " (GET /service/session gives the current one)")


def check_site(method: str, fetch_site: str | None) -> None:
    """Refuse a state-changing request a browser says a page of another site made."""
    if method.upper() not in SAFE_METHODS and fetch_site is not None \
            and fetch_site.lower() in FOREIGN_SITES:
        raise CsrfRefused(f"a {method.upper()} made by a page of another site is refused"
                          f" (Sec-Fetch-Site: {fetch_site})")
