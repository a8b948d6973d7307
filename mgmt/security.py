"""Who is asking, and may they: HTTP Basic, session cookies, and the permission hook.

Management users are the users of the HTTP port's authentication provider
-- the same providers (and the same ``guest``-only-from-loopback rule) as
AMQP.  A request authenticates with HTTP Basic, or with the session cookie
``POST /service/login`` hands out (for the web console); a provider that
allows anonymous logins lets requests without credentials in as
``anonymous``.

What an authenticated user may do is asked of a :class:`Permissions`
object (Broker-J's AccessControl ``authorise``), the hook the ACL issue will
fill.  Until then :class:`VirtualHostScopedPermissions` applies: every
authenticated user may manage, except that a user limited to some virtual
hosts (its ``virtualHosts`` attribute) manages only inside those and may
only read the rest of the broker.
"""

from __future__ import annotations

import base64
import binascii
import enum
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, cast

import anyio

from broker.errors import AuthenticationFailed
from broker.model.authentication import AuthenticationProvider
from broker.model.configured_object import ConfiguredObject
from broker.security.principal import Principal

SESSION_COOKIE = "DELTAMQ_SESSION"
#: Broker-J's default HTTP session timeout
SESSION_IDLE_TIMEOUT = 600.0
REALM = "DeltaMQ"


class Action(enum.Enum):
    """What is asked (Broker-J's ``Operation``)."""

    READ = "READ"
    CREATE = "CREATE"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    INVOKE = "INVOKE_METHOD"


class NotAuthenticated(Exception):
    """No valid credentials (HTTP 401)."""


class Permissions(Protocol):
    """The permission check management asks before acting (to be filled by ACL rules)."""

    def allowed(self, principal: Principal, action: Action, target: ConfiguredObject,
                category: str) -> bool:
        """May ``principal`` do ``action`` on ``target`` (for CREATE: the parent of a new
        ``category`` object)?"""
        ...


class VirtualHostScopedPermissions:
    """Authenticated users may manage; users limited to virtual hosts, only those."""

    def allowed(self, principal: Principal, action: Action, target: ConfiguredObject,
                category: str) -> bool:
        provider = _provider_of(target, principal)
        vhost = target.ancestor("VirtualHost")
        if vhost is not None:
            return provider is None or provider.may_access(principal, str(vhost.name))
        if action is Action.READ:
            return True
        return not _limited(provider, principal)


def _provider_of(target: ConfiguredObject, principal: Principal) -> AuthenticationProvider | None:
    broker = target.ancestor("Broker")
    if broker is None:
        return None
    found = broker.child("AuthenticationProvider", principal.provider)
    return cast("AuthenticationProvider | None", found)


def _limited(provider: AuthenticationProvider | None, principal: Principal) -> bool:
    if provider is None or principal.anonymous:
        return False
    user = provider.user(principal.name)
    return user is not None and bool(user.virtual_hosts)


@dataclass(slots=True)
class _Session:
    principal: Principal
    last_used: float


class Sessions:
    """Session cookies: random tokens, forgotten after ``idle_timeout`` seconds unused."""

    def __init__(self, idle_timeout: float = SESSION_IDLE_TIMEOUT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.idle_timeout = idle_timeout
        self.clock = clock
        self._sessions: dict[str, _Session] = {}

    def open(self, principal: Principal) -> str:
        self._expire()
        token = secrets.token_urlsafe(32)
        self._sessions[token] = _Session(principal, self.clock())
        return token

    def principal(self, token: str) -> Principal | None:
        session = self._sessions.get(token)
        now = self.clock()
        if session is None or now - session.last_used > self.idle_timeout:
            self._sessions.pop(token, None)
            return None
        session.last_used = now
        return session.principal

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
        if session_token:
            principal = self.sessions.principal(session_token)
            if principal is not None:
                return principal
        provider = self.provider
        if provider is None:
            raise NotAuthenticated("the HTTP port has no authentication provider")
        if not authorization:
            if provider.allows_anonymous:
                return provider.authenticate_anonymous(remote_host)
            raise NotAuthenticated("authentication required")
        user, password = basic_credentials(authorization)
        return await self.check_password(provider, user, password, remote_host)

    async def check_password(self, provider: AuthenticationProvider, user: str, password: str,
                             remote_host: str | None) -> Principal:
        """Verify in a worker thread: password hashes are slow on purpose."""
        def verify() -> Principal:
            return provider.authenticate(user, password, remote_host)

        try:
            return await anyio.to_thread.run_sync(verify)
        except AuthenticationFailed as exc:
            raise NotAuthenticated(exc.text) from None
