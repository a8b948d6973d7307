"""The AuthenticationProvider and User categories.

The category base classes live in the model so that management can list
them before any provider type is loaded; the types themselves
(``PasswordFile``, ``Anonymous``, ...) are plugins of entry point group
``deltamq.auth`` in :mod:`broker.security`.

A protocol engine asks a provider three things: which SASL mechanisms it
offers (:attr:`AuthenticationProvider.sasl_mechanisms`), who a
user/password pair or an anonymous peer is (:meth:`authenticate`,
:meth:`authenticate_anonymous`, both raising
:class:`~broker.errors.AuthenticationFailed` with RabbitMQ's wording), and
whether that principal may open a virtual host (:meth:`may_access`).
Management asks one more: is the principal an administrator
(:meth:`is_administrator`)?

:meth:`authenticate` asks the broker's login throttle
(:mod:`broker.security.throttle`) before the type checks the credentials
(:meth:`check_credentials`), and tells it how that went: AMQP and HTTP
logins are throttled alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from broker.errors import AuthenticationFailed, ConfigurationError
from broker.model.attributes import attribute
from broker.model.configured_object import ConfiguredObject, State
from broker.security import mechanisms
from broker.security.addresses import is_loopback
from broker.security.principal import Principal
from broker.security.throttle import LoginThrottle

if TYPE_CHECKING:
    from broker.model.broker import Broker
    from broker.security.scram import ScramCredential


def refused(mechanism: str, why: str = "") -> AuthenticationFailed:
    """RabbitMQ's refusal text, with the reason when it is safe to tell."""
    text = f"Login was refused using authentication mechanism {mechanism}"
    return AuthenticationFailed(f"{text}. {why}" if why else
                                f"{text}. For details see the broker logfile.")


class AuthenticationProvider(ConfiguredObject):
    """Base of every provider type: refuses everyone until a type says otherwise."""

    category = "AuthenticationProvider"

    type = attribute(str, mandatory=True, mutable=False,
                     description="Provider type: PasswordFile, Anonymous (deltamq.auth)")
    loopback_users = attribute(
        list, of=str, default=["guest"],
        description="Users who may only connect from the loopback interface"
                    " (RabbitMQ's loopback_users)")

    secure_only_mechanisms = attribute(
        list, of=str, default=[],
        description="Mechanisms offered only on secure (TLS) connections (Broker-J's"
                    " secureOnlyMechanisms; e.g. PLAIN, AMQPLAIN)")
    disabled_mechanisms = attribute(
        list, of=str, default=[],
        description="Mechanisms never offered (Broker-J's disabledMechanisms)")

    def __init__(self, parent: ConfiguredObject | None, attributes: Mapping[str, Any],
                 *, id: str | None = None) -> None:
        super().__init__(parent, attributes, id=id)
        self._own_throttle: LoginThrottle | None = None

    @property
    def sasl_mechanisms(self) -> list[str]:
        """Mechanisms the type knows, most preferred first."""
        return []

    def available_mechanisms(self, secure: bool) -> list[str]:
        """Mechanisms offered on a (non-)secure connection (see :mod:`broker.security.mechanisms`)."""
        return mechanisms.available(self.sasl_mechanisms, self.disabled_mechanisms,
                                    self.secure_only_mechanisms, secure)

    def scram_credential(self, username: str, mechanism: str) -> ScramCredential | None:
        """The stored SCRAM keys of ``username`` for ``mechanism``; None if there are none."""
        return None

    @property
    def allows_anonymous(self) -> bool:
        return False

    def authenticate(self, username: str, password: str, remote_host: str | None,
                     *, mechanism: str = "PLAIN") -> Principal:
        """The principal for correct credentials; AuthenticationFailed otherwise.

        A blocked source or user is refused before the credentials are
        looked at (:class:`~broker.security.throttle.LoginThrottled`).
        """
        throttle = self.login_throttle
        throttle.admit(username, remote_host, mechanism)
        try:
            principal = self.check_credentials(username, password, remote_host,
                                               mechanism=mechanism)
        except AuthenticationFailed:
            throttle.failed(username, remote_host)
            raise
        throttle.succeeded(username)
        return principal

    def check_credentials(self, username: str, password: str, remote_host: str | None,
                          *, mechanism: str = "PLAIN") -> Principal:
        """What a provider type decides: who these credentials are, else AuthenticationFailed."""
        raise refused(mechanism)

    @property
    def login_throttle(self) -> LoginThrottle:
        """The broker's throttle (one for every provider and port), else this provider's own."""
        broker = self.ancestor("Broker")
        throttle = getattr(broker, "login_throttle", None)
        if isinstance(throttle, LoginThrottle):
            return throttle
        if self._own_throttle is None:
            self._own_throttle = LoginThrottle()
        return self._own_throttle

    def is_administrator(self, principal: Principal) -> bool:
        """May ``principal`` manage the broker itself (ports, providers, nodes, users)?"""
        if principal.anonymous or principal.provider != self.name:
            return False
        user = self.user(principal.name)
        return user is not None and bool(user.administrator)

    def authenticate_anonymous(self, remote_host: str | None) -> Principal:
        if not self.allows_anonymous:
            raise refused("ANONYMOUS", f"{self.label} does not allow anonymous logins.")
        return Principal("anonymous", self.name, anonymous=True)

    def check_loopback(self, username: str, remote_host: str | None, mechanism: str) -> None:
        """RabbitMQ's rule: loopback users (``guest``) connect from localhost only."""
        if username in self.loopback_users and not is_loopback(remote_host):
            raise refused(mechanism, f"User '{username}' can only connect via localhost.")

    def may_access(self, principal: Principal, vhost_name: str) -> bool:
        """May ``principal`` open virtual host ``vhost_name``? ('/' and '' = default)."""
        if principal.anonymous:
            return True
        user = self.user(principal.name)
        if user is None:
            return False
        if not user.virtual_hosts:
            return True
        wanted = self._vhost_name(vhost_name)
        return any(self._vhost_name(allowed) == wanted for allowed in user.virtual_hosts)

    def _vhost_name(self, name: str) -> str:
        broker = cast("Broker | None", self.ancestor("Broker"))
        return broker.virtual_host_name(name) if broker is not None else name

    # -- users --------------------------------------------------------------------

    @property
    def users(self) -> list[User]:
        return cast("list[User]", self.children("User"))

    def user(self, name: str) -> User | None:
        return cast("User | None", self.child("User", name))

    def add_user(self, name: str, password: str,
                 virtual_hosts: list[str] | None = None) -> User:
        attributes: dict[str, Any] = {"name": name, "password": password}
        if virtual_hosts:
            attributes["virtualHosts"] = list(virtual_hosts)
        return cast(User, self.create_child("User", attributes))

    def encode_password(self, password: str) -> str:
        """The form a new password is kept in (a salted hash, for file providers)."""
        raise ConfigurationError(f"{self.label} does not keep users")

    def user_added(self, user: User) -> None:
        """Persist a new user (called from the user's creation)."""

    def user_changed(self, user: User) -> None:
        """Persist a changed user."""

    def user_removed(self, user: User) -> None:
        """Forget a deleted user."""

    def validate(self) -> None:
        super().validate()
        for port in self._ports():
            self.check_port(port.label, port.attributes().get("transports") or ["TCP"])

    def check_port(self, port_label: str, transports: list[Any]) -> None:
        """ConfigurationError if a port with ``transports`` would get no mechanism from here."""
        mechanisms.check_port(port_label, self.label, self.sasl_mechanisms,
                              self.disabled_mechanisms, self.secure_only_mechanisms, transports)

    def _ports(self) -> list[ConfiguredObject]:
        broker = self.parent
        if broker is None:
            return []
        return [port for port in broker.children("Port")
                if port.attributes().get("authenticationProvider") == self.name
                and port.attributes().get("type", "AMQP") == "AMQP"]

    def validate_delete(self) -> None:
        broker = self.parent
        if broker is None:
            return
        users = [port.name for port in broker.children("Port")
                 if port.attributes().get("authenticationProvider") == self.name]
        if users:
            raise ConfigurationError(f"{self.label} cannot be deleted: it is used by port(s)"
                                     f" {', '.join(users)}")


class User(ConfiguredObject):
    """A user of a provider that keeps users (its own storage, not the config store)."""

    category = "User"
    durable = False

    password = attribute(str, mandatory=True, secure=True, expand=False,
                         description="Password; kept hashed by the provider, never listed")
    virtual_hosts = attribute(
        list, of=str, default=[],
        description="Virtual hosts this user may open; empty for all")
    administrator = attribute(
        bool, default=False,
        description="May manage the broker itself: ports, authentication providers, virtual"
                    " host nodes, users (RabbitMQ's administrator tag)")

    @property
    def provider(self) -> AuthenticationProvider:
        return cast(AuthenticationProvider, self.parent)

    def on_create(self) -> None:
        encoded = self.provider.encode_password(self.password)
        self._actual["password"] = encoded
        self._values["password"] = encoded
        self.provider.user_added(self)

    def set_attributes(self, changes: Mapping[str, Any]) -> None:
        new_password = changes.get("password")
        if new_password is not None:
            if not isinstance(new_password, str) or not new_password:
                raise ConfigurationError(f"{self.label}: attribute 'password' must be a"
                                         " non-empty string")
            changes = {**changes, "password": self.provider.encode_password(new_password)}
        super().set_attributes(changes)
        if self.state is State.ACTIVE:
            self.provider.user_changed(self)

    def delete(self) -> None:
        """Delete this user and tell the provider (not when the provider itself goes)."""
        was_active = self.state is not State.DELETED
        super().delete()
        if was_active:
            self.provider.user_removed(self)
