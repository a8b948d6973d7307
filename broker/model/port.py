"""The Port category: where the broker listens, and for which protocols.

The model holds no sockets: while the broker runs, the server gives the
Broker a :class:`PortActivation` (:class:`broker.listeners.Listeners`), and
from then on a port listens as soon as it opens -- at start-up, or the
moment management creates it -- and stops, closing the connections that
came in through it, when it is deleted (Broker-J's ports behave alike).  A
port that cannot bind (its number in use) fails to open: created over
management, it is not created at all.  Changes to ``port`` and
``bindingAddress`` of a listening port are stored and take effect at the
next start of the broker, as in Broker-J; ``pendingRestart`` says so, and
``boundPort`` is the number the port listens on now (the one the system
chose, for port 0).  ``protocols``, ``maxOpenConnections`` and
``authenticationProvider`` apply to the next connection.

``AMQP`` ports carry the AMQP versions in ``protocols`` (by default every
one the broker implements; the protocol engine is chosen by the 8-byte
header the client sends); ``HTTP`` ports serve the management plugin.
``protocols`` may name only what an engine implements
(:data:`broker.protocol.engine.ENGINES`): a port naming another is refused,
whether it comes from the configuration file, management or a context
variable.  One exception keeps stores written by earlier releases working:
a recovered port whose ``protocols`` is exactly the list those releases
configured by default (which named 0-10 and 1.0) is read as the default,
with a warning.  ``bindingAddress`` "" (or "*") means every
interface, IPv4 and IPv6 alike -- :attr:`Port.local_host` is then None.
"""

from __future__ import annotations

import enum
import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast

from broker.errors import ConfigurationError
from broker.model.attributes import attribute, derived
from broker.model.configured_object import ConfiguredObject, State
from broker.model.port_tls import TlsPortAttributes
from broker.protocol.engine import ENGINES

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
#: the AMQP protocols an engine implements (a port's default)
IMPLEMENTED_PROTOCOLS = [PortProtocol(name) for name in ENGINES.protocols]
#: the ``protocols`` earlier releases' default configuration gave every AMQP port
LEGACY_DEFAULT_PROTOCOLS = ["AMQP_0_8", "AMQP_0_9", "AMQP_0_9_1", "AMQP_0_10", "AMQP_1_0"]

log = logging.getLogger(__name__)


class Transport(enum.Enum):
    TCP = "TCP"
    SSL = "SSL"
    WS = "WS"
    WSS = "WSS"


_ALL_INTERFACES = ("", "*", "::")


class PortListener(Protocol):
    """A port listening (what :meth:`PortActivation.listen` gives)."""

    @property
    def bound_port(self) -> int:
        """The TCP port number it listens on; -1 once it no longer does."""

    @property
    def bound_host(self) -> str | None:
        """The host it bound (:attr:`Port.local_host` at the time)."""

    @property
    def requested_port(self) -> int:
        """The ``port`` attribute it was bound for (0: any)."""

    @property
    def connection_count(self) -> int: ...

    def reconfigure(self) -> None:
        """The port's attributes changed: apply those that apply to the next connection."""

    def close(self) -> None:
        """Stop listening and close the connections that came in through it."""


class PortActivation(Protocol):
    """Binds ports while the broker runs (the server's :class:`broker.listeners.Listeners`)."""

    def listen(self, port: Port) -> PortListener | None:
        """Listen on ``port`` now (None: nothing to listen for); OSError when it cannot bind."""


class Port(ConfiguredObject):
    category = "Port"

    type = attribute(str, default="AMQP", mutable=False,
                     description="AMQP or HTTP (entry point group deltamq.ports)")
    port = attribute(int, mandatory=True,
                     description="TCP port number; 0 lets the system choose one")
    binding_address = attribute(
        str, default="",
        description="Address to listen on; '' or '*' for every interface, IPv4 and IPv6")
    protocols = attribute(list, of=PortProtocol, default=[p.name for p in IMPLEMENTED_PROTOCOLS],
                          choices=(*(p.name for p in IMPLEMENTED_PROTOCOLS), "HTTP"),
                          description="Protocols accepted on this port (an AMQP port: those"
                                      " the broker implements; an HTTP port: HTTP)")
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
        self._listener: PortListener | None = None

    @derived(int, statistic=True, description="Connections currently open on this port")
    def connection_count(self) -> int:
        if self._listener is not None:
            return self._listener.connection_count
        return self._open_connections

    @derived(int, counter=True, description="Connections refused at open on this port:"
                                            " maxOpenConnections reached, or their user's"
                                            " connection limit (deltamq.connection_limit_per_user)")
    def connections_refused(self) -> int:
        limits = getattr(self.parent, "connection_limits", None)
        return int(limits.refused[self.name]) if limits is not None else 0

    @derived(int, description="TCP port number the port listens on now (the one the system"
                              " chose for port 0); -1 when it does not listen")
    def bound_port(self) -> int:
        return self._listener.bound_port if self._listener is not None else -1

    @derived(str, description="Changes to 'port' or 'bindingAddress' that take effect at the"
                              " next broker restart, while the port goes on listening where"
                              " it does; empty when there are none")
    def pending_restart(self) -> str:
        listener = self._listener
        if listener is None or listener.bound_port < 0:
            return ""
        changed = []
        if self.port != listener.requested_port:
            changed.append(f"'port' {self.port}")
        if self.local_host != listener.bound_host:
            changed.append(f"'bindingAddress' '{self.binding_address}'")
        if not changed:
            return ""
        return (f"{' and '.join(changed)} take{'s' if len(changed) == 1 else ''} effect after a"
                f" broker restart; listening on {listener.bound_host or '*'}:"
                f"{listener.bound_port} until then")

    # -- listening (while the broker runs) -------------------------------------------

    def listen(self) -> None:
        """Listen now if the broker runs (it gave its parent a ``port_activation``).

        A port number in use is a ConfigurationError naming the port and the address.
        """
        activation = cast("PortActivation | None", getattr(self.parent, "port_activation", None))
        if activation is None or self._listener is not None:
            return
        try:
            self._listener = activation.listen(self)
        except OSError as exc:
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            raise ConfigurationError(f"{self.label}: cannot listen on {self.local_host or '*'}:"
                                     f"{self.port}: {reason}") from exc

    def stop_listening(self) -> None:
        """Stop listening and close the connections that came in here."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()

    def on_open(self) -> None:
        self.listen()

    def on_close(self) -> None:
        self.stop_listening()

    def set_attributes(self, changes: Mapping[str, Any]) -> None:
        super().set_attributes(changes)
        if self._listener is not None:
            self._listener.reconfigure()

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


class AmqpPort(TlsPortAttributes, Port):
    type_name = "AMQP"

    protocols = attribute(list, of=PortProtocol, default=[p.name for p in IMPLEMENTED_PROTOCOLS],
                          choices=tuple(p.name for p in IMPLEMENTED_PROTOCOLS),
                          description="AMQP versions accepted on this port (those the broker"
                                      " implements)")

    def open(self) -> None:
        if self._actual.get("protocols") == LEGACY_DEFAULT_PROTOCOLS:
            implemented = [p.name for p in IMPLEMENTED_PROTOCOLS]
            missing = sorted(set(LEGACY_DEFAULT_PROTOCOLS) - set(implemented))
            log.warning("%s: 'protocols' names %s, which %s not implemented; serving %s",
                        self.label, ", ".join(missing), "is" if len(missing) == 1 else "are",
                        ", ".join(implemented))
            self._actual["protocols"] = implemented
        super().open()

    def validate(self) -> None:
        super().validate()
        others = [p.name for p in self.protocols if not p.is_amqp]
        if others:
            raise ConfigurationError(f"{self.label}: an AMQP port cannot carry {', '.join(others)}")
        missing = [p.name for p in self.protocols if p not in IMPLEMENTED_PROTOCOLS]
        if missing:
            raise ConfigurationError(
                f"{self.label}: attribute 'protocols' names {', '.join(missing)}, which"
                f" {'is' if len(missing) == 1 else 'are'} not implemented; this broker implements"
                f" {', '.join(p.name for p in IMPLEMENTED_PROTOCOLS)}")
        if not self.authentication_provider:
            raise ConfigurationError(f"{self.label}: attribute 'authenticationProvider' is"
                                     " mandatory for an AMQP port")
        self._validate_websocket_transports()
        self.provider.check_port(self.label, list(self.transports))
        self.validate_tls()                     # keyStore, trustStores, client auth (port_tls)

    def _validate_websocket_transports(self) -> None:
        """WebSocket ports serve WebSocket only (as in Broker-J): WS, or WSS (over TLS)."""
        transports = set(self.transports)
        for ws in (Transport.WS, Transport.WSS):
            if ws in transports and transports - {ws}:
                others = ", ".join(t.name for t in self.transports if t is not ws)
                raise ConfigurationError(f"{self.label}: a WebSocket port (transport {ws.name})"
                                         f" cannot also carry {others}; give it a port of its own")


class HttpPort(TlsPortAttributes, Port):
    type_name = "HTTP"

    protocols = attribute(list, of=PortProtocol, default=["HTTP"], choices=("HTTP",),
                          description="Protocols accepted on this port (HTTP)")

    def validate(self) -> None:
        super().validate()
        if self.protocols != [PortProtocol.HTTP]:
            raise ConfigurationError(f"{self.label}: an HTTP port carries HTTP only")
        if self.transports not in ([Transport.TCP], [Transport.SSL]):
            raise ConfigurationError(f"{self.label}: an HTTP port's 'transports' are [\"TCP\"]"
                                     " (HTTP) or [\"SSL\"] (HTTPS); got"
                                     f" {[t.name for t in self.transports]}")
        self.validate_tls()                     # HTTPS: keyStore, trustStores (port_tls)
