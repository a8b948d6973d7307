"""What a protocol engine needs from the broker, as one narrow interface.

Engines are sans-IO and must not import the model: the server hands each
engine a :class:`ProtocolHost` (an adapter over the configured-object tree)
that answers the few questions a connection asks — who is this user, which
virtual host may they open, what limits apply — and takes note of the
connections, sessions and consumers that come and go, so management can list
them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from broker.messaging.namespace import Namespace
    from broker.security.sasl_exchange import SaslServer
    from broker.security.access_control import ConnectionAccess


class Principal(Protocol):
    name: str


class ProtocolHost(Protocol):
    product: str
    version: str

    @property
    def frame_max(self) -> int:
        """The largest frame the broker accepts/offers (bytes)."""

    @property
    def channel_max(self) -> int: ...

    @property
    def heartbeat(self) -> int:
        """Seconds offered in connection.tune (0 = off)."""

    @property
    def idle_timeout(self) -> int:
        """Seconds offered as AMQP 1.0's idle-time-out (0 = none)."""

    @property
    def max_message_size(self) -> int:
        """Bytes; larger bodies are refused with 406."""

    def sasl_mechanisms(self, remote_host: str) -> list[str]: ...

    def authenticate(self, username: str, password: str, remote_host: str) -> Principal: ...

    def authenticate_anonymous(self, remote_host: str) -> Principal: ...

    def sasl_server(self, mechanism: str, remote_host: str) -> SaslServer:
        """The exchange of a mechanism other than PLAIN, AMQPLAIN and ANONYMOUS
        (:mod:`broker.security.sasl_exchange`)."""
        ...

    def authenticate_external(self, response: bytes, remote_host: str) -> Principal:
        """SASL EXTERNAL: who the connection's TLS client certificate names."""
        ...

    def open_virtual_host(self, name: str, principal: Principal) -> Namespace:
        """The namespace of virtual host ``name`` (``/`` and "" mean the default).

        Raises :class:`~broker.errors.InvalidPath` (unknown) or
        :class:`~broker.errors.ConnectionAccessRefused` (not permitted)."""
        ...

    def access(self, principal: Principal, vhost_name: str, remote_host: str) -> ConnectionAccess:
        """The ACL checks of a connection that opened ``vhost_name`` (ACCESS VIRTUALHOST is
        checked here: :class:`~broker.errors.ConnectionAccessRefused`)."""
        ...

    def connection_opened(self, connection: Any) -> None: ...

    def connection_closed(self, connection: Any) -> None: ...

    @property
    def alarm_reason(self) -> str:
        """Why publishers are blocked now (``low on memory``, ...); "" when they are not."""
        ...
