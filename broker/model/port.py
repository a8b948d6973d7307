"""The Port category: where the broker listens, and for which protocols.

A port is configuration only: the transport layer binds it.  ``AMQP`` ports
carry every AMQP version the broker speaks (the protocol engine is chosen by
the 8-byte header the client sends); ``HTTP`` ports serve the management
plugin.  ``bindingAddress`` "" (or "*") means every interface, IPv4 and IPv6
alike -- :attr:`Port.local_host` is then None, which is what anyio's
``create_tcp_listener(local_host=None)`` takes to listen on both families.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from broker.errors import ConfigurationError
from broker.model.attributes import attribute, derived
from broker.model.configured_object import ConfiguredObject, State

if TYPE_CHECKING:
    from broker.model.authentication import AuthenticationProvider


class PortProtocol(enum.Enum):
    """What a port speaks (Broker-J's ``Protocol``)."""

    AMQP_0_8 = "AMQP_0_8"
    AMQP_0_9 = "AMQP_0_9"
    AMQP_0_9_1 = "AMQP_0_9_1"
    AMQP_0_10 = "AMQP_0_10"
    AMQP_1_0 = "AMQP_1_0"
    HTTP = "HTTP"

    @property
    def is_amqp(self) -> bool:
        return self is not PortProtocol.HTTP


AMQP_PROTOCOLS = [p for p in PortProtocol if p.is_amqp]


class Transport(enum.Enum):
    TCP = "TCP"
    SSL = "SSL"
    WS = "WS"
    WSS = "WSS"


_ALL_INTERFACES = ("", "*", "::")


class Port(ConfiguredObject):
    category = "Port"

    type = attribute(str, default="AMQP", mutable=False,
                     description="AMQP or HTTP (entry point group deltamq.ports)")
    port = attribute(int, mandatory=True,
                     description="TCP port number; 0 lets the system choose one")
    binding_address = attribute(
        str, default="",
        description="Address to listen on; '' or '*' for every interface, IPv4 and IPv6")
    protocols = attribute(list, of=PortProtocol, default=[p.name for p in AMQP_PROTOCOLS],
                          description="Protocols accepted on this port")
    authentication_provider = attribute(
        str, default="", description="Name of the authentication provider for this port")
    max_open_connections = attribute(
        int, default=-1, description="Connections accepted at once; -1 for no limit")
    transports = attribute(list, of=Transport, default=["TCP"],
                           description="Transports on this port: TCP, SSL, WS, WSS")

    def __init__(self, parent: ConfiguredObject | None, attributes: Mapping[str, Any],
                 *, id: str | None = None) -> None:
        super().__init__(parent, attributes, id=id)
        self._open_connections = 0

    @derived(int, statistic=True, description="Connections currently open on this port")
    def connection_count(self) -> int:
        return self._open_connections

    @property
    def local_host(self) -> str | None:
        """The host to bind, None meaning every interface (IPv4 and IPv6)."""
        address = self.binding_address.strip()
        if address in _ALL_INTERFACES:
            return None
        return address.strip("[]")

    @property
    def provider(self) -> AuthenticationProvider:
        """The authentication provider named by ``authenticationProvider``."""
        found = self._find_provider()
        if found is None:
            raise ConfigurationError(f"{self.label}: no authentication provider is configured")
        return found

    def _find_provider(self) -> AuthenticationProvider | None:
        if not self.authentication_provider or self.parent is None:
            return None
        return cast("AuthenticationProvider | None",
                    self.parent.child("AuthenticationProvider", self.authentication_provider))

    # -- connection admission (the transport asks before handing a socket on) --

    def admit_connection(self) -> bool:
        """Count a newly accepted connection; False (and not counted) when full."""
        if 0 <= self.max_open_connections <= self._open_connections:
            return False
        self._open_connections += 1
        return True

    def connection_closed(self) -> None:
        """Uncount a connection that :meth:`admit_connection` admitted."""
        self._open_connections = max(0, self._open_connections - 1)

    # -- validation -----------------------------------------------------------------

    def validate(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigurationError(f"{self.label}: attribute 'port' must be between 0 and"
                                     f" 65535; got {self.port}")
        if self.max_open_connections < -1:
            raise ConfigurationError(f"{self.label}: attribute 'maxOpenConnections' must be"
                                     " -1 (no limit) or more")
        if not self.protocols:
            raise ConfigurationError(f"{self.label}: attribute 'protocols' must not be empty")
        if not self.transports:
            raise ConfigurationError(f"{self.label}: attribute 'transports' must not be empty")
        if self.authentication_provider and self._find_provider() is None:
            raise ConfigurationError(f"{self.label}: authentication provider"
                                     f" '{self.authentication_provider}' does not exist")
        self._check_port_free()

    def _check_port_free(self) -> None:
        if self.port == 0 or self.parent is None:
            return
        for other in self.parent.children("Port"):
            if other is self or other.state is State.DELETED or not other._values:
                continue
            sibling = cast(Port, other)
            if sibling.port != self.port:
                continue
            mine, theirs = self.local_host, sibling.local_host
            if mine is None or theirs is None or mine == theirs:
                raise ConfigurationError(f"{self.label}: port {self.port} is already used by"
                                         f" {sibling.label}")


class AmqpPort(Port):
    type_name = "AMQP"

    def validate(self) -> None:
        super().validate()
        others = [p.name for p in self.protocols if not p.is_amqp]
        if others:
            raise ConfigurationError(f"{self.label}: an AMQP port cannot carry {', '.join(others)}")
        if not self.authentication_provider:
            raise ConfigurationError(f"{self.label}: attribute 'authenticationProvider' is"
                                     " mandatory for an AMQP port")


class HttpPort(Port):
    type_name = "HTTP"

    protocols = attribute(list, of=PortProtocol, default=["HTTP"],
                          description="Protocols accepted on this port (HTTP)")

    def validate(self) -> None:
        super().validate()
        if self.protocols != [PortProtocol.HTTP]:
            raise ConfigurationError(f"{self.label}: an HTTP port carries HTTP only")
