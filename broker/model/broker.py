"""The Broker category: broker-wide limits, the lookups the server needs, and its ports' listening."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from broker.errors import ConfigurationError
from broker.loop_lag import LoopLag
from broker.model.attributes import attribute, derived
from broker.model.configured_object import ConfiguredObject, State
from broker.resource_alarms import resident_memory
from broker.security.access_control import AccessControl
from broker.security.throttle import CONTEXT_DEFAULTS as THROTTLE_DEFAULTS
from broker.security.throttle import LoginThrottle, ThrottleSettings
from broker.transport.connection_limits import ConnectionLimits

if TYPE_CHECKING:
    from broker.messaging.flow_to_disk import FlowToDisk
    from broker.model.authentication import AuthenticationProvider
    from broker.model.port import Port, PortActivation
    from broker.model.virtualhost import VirtualHost, VirtualHostNode
    from broker.resource_alarms import ResourceAlarms

#: share of the memory available to the process above which publishers are
#: blocked (RabbitMQ's ``vm_memory_high_watermark`` of 0.4)
MEMORY_HIGH_WATERMARK_FRACTION = 0.4

#: the smallest frame AMQP 0-9-1 lets a peer negotiate (spec 4.2.3, frame-min-size)
MIN_FRAME_SIZE = 4096


class Broker(ConfiguredObject):
    """The single child of SystemConfig; parent of ports, providers and nodes."""

    category = "Broker"

    name = attribute(str, default="deltamq", mandatory=True, mutable=False,
                     description="Name of the broker, shown to clients and in management")
    default_virtual_host = attribute(
        str, default="default",
        description="Virtual host opened when a client asks for '/' or ''")
    heartbeat_delay = attribute(
        int, name="connection.heartbeatDelay", default=60,
        description="AMQP 0-8/0-9/0-9-1: heartbeat interval in seconds offered in"
                    " connection.tune (0: none); a client silent for two intervals is dropped")
    idle_timeout = attribute(
        int, name="connection.idleTimeout", default="${deltamq.amqp1_0_idle_timeout}",
        description="AMQP 1.0: idle-time-out in seconds offered in open (0: none, as Broker-J"
                    " offers); a client silent for twice it is closed. The client's own"
                    " idle-time-out is honoured either way, and TCP keepalive finds vanished"
                    " clients (deltamq.tcp_keepalive); default 0")
    max_frame_size = attribute(
        int, default="${deltamq.frame_max}",
        description="Largest frame, in bytes, the broker offers and accepts (0-9-1 tune"
                    " frame-max, 1.0 open max-frame-size); clients may negotiate it down;"
                    " default 131072")
    max_channels = attribute(
        int, default="${deltamq.channel_max}",
        description="Most channels (sessions) per connection (0-9-1 tune channel-max, 1.0"
                    " open channel-max); clients may negotiate it down; default 2047")
    max_message_size = attribute(
        int, default=104857600,
        description="Largest message body in bytes; larger ones are refused")
    memory_high_watermark = attribute(
        int, default="${deltamq.memory_high_watermark}",
        description="Bytes held by queues (message bodies, plus 256 per message) and"
                    " connection buffers above which publishing connections are blocked"
                    " (connection.blocked) until they fall below 90% of it; default 40% of"
                    " available memory")
    disk_free_limit = attribute(
        int, default="${deltamq.disk_free_limit}",
        description="Bytes free on the data directory's file system below which publishing"
                    " connections are blocked (connection.blocked) until 110% of it is free"
                    " again; 0: no disk alarm; default 50000000 (RabbitMQ's disk_free_limit)")

    def __init__(self, parent: ConfiguredObject | None, attributes: Mapping[str, Any],
                 *, id: str | None = None) -> None:
        super().__init__(parent, attributes, id=id)
        self.started_at = time.monotonic()
        #: binds ports while the broker runs (None: the model is not served, e.g. in tests)
        self.port_activation: PortActivation | None = None
        #: the memory and disk alarms while the broker runs (None: not served)
        self.resource_alarms: ResourceAlarms | None = None
        #: the flow-to-disk policy while the broker runs (None: not served)
        self.flow_to_disk: FlowToDisk | None = None
        #: failed logins of every provider and port (settings from context on open)
        self.login_throttle = LoginThrottle()
        #: open connections per port and per user, and the refusals past their limits
        self.connection_limits = ConnectionLimits()
        #: how late the event loop runs its timers (started by the server)
        self.loop_lag = LoopLag()
        #: the ACL decisions (broker.model.access_control hands it the rules in force)
        self.access_control = AccessControl()

    @derived(str, description="The version of DeltaMQ running (Broker-J's productVersion)")
    def product_version(self) -> str:
        from broker import __version__

        return __version__

    # -- statistics -----------------------------------------------------------------

    @derived(int, statistic=True, description="Milliseconds since the broker started")
    def uptime(self) -> int:
        return int((time.monotonic() - self.started_at) * 1000)

    @derived(int, statistic=True, description="The broker's process id")
    def process_pid(self) -> int:
        return os.getpid()

    @derived(int, statistic=True, description="Connections open on every virtual host")
    def connection_count(self) -> int:
        return self._summed_over_hosts("connection_count")

    @derived(int, counter=True, description="Messages published into every virtual host")
    def messages_in(self) -> int:
        return self._summed_over_hosts("messages_in")

    @derived(int, counter=True, description="Body bytes published into every virtual host")
    def bytes_in(self) -> int:
        return self._summed_over_hosts("bytes_in")

    @derived(int, counter=True, description="Deliveries from every queue")
    def messages_out(self) -> int:
        return self._summed_over_hosts("messages_out")

    @derived(int, counter=True, description="Body bytes delivered from every queue")
    def bytes_out(self) -> int:
        return self._summed_over_hosts("bytes_out")

    @derived(int, statistic=True,
             description="Bytes the memory alarm accounts: message bodies held by queues"
                         " (ready and unacknowledged) plus 256 per message, and connection"
                         " buffers")
    def memory_used(self) -> int:
        alarms = self.resource_alarms
        return (alarms.memory.value or 0) if alarms is not None else 0

    @derived(int, statistic=True,
             description="The broker process's resident set size in bytes (reported only:"
                         " it does not shrink when queues drain)")
    def resident_memory_size(self) -> int:
        return resident_memory()

    @derived(bool, statistic=True,
             description="True while the memory alarm blocks publishers (memoryUsed above"
                         " memoryHighWatermark, until below 90% of it)")
    def memory_alarm(self) -> bool:
        return self.resource_alarms is not None and self.resource_alarms.memory.set

    @derived(bool, statistic=True,
             description="True while queues hold more than broker.flowToDiskThreshold in memory"
                         " (until below 90% of it): persistent messages are paged out")
    def flowing_to_disk(self) -> bool:
        return self.flow_to_disk is not None and self.flow_to_disk.flowing

    @derived(int, statistic=True,
             description="Bytes free on the data directory's file system (-1: not known)")
    def disk_free(self) -> int:
        alarms = self.resource_alarms
        value = alarms.disk.value if alarms is not None else None
        return -1 if value is None else value

    @derived(bool, statistic=True,
             description="True while the disk alarm blocks publishers (diskFree below"
                         " diskFreeLimit, until 110% of it is free)")
    def disk_alarm(self) -> bool:
        return self.resource_alarms is not None and self.resource_alarms.disk.set

    @derived(int, counter=True, description="Logins refused for wrong credentials (AMQP and"
                                            " HTTP)")
    def login_failures(self) -> int:
        return self.login_throttle.failures

    @derived(int, counter=True, description="Logins refused unchecked because their source"
                                            " address or user was blocked after failures")
    def logins_throttled(self) -> int:
        return self.login_throttle.refused

    @derived(int, counter=True, description="Actions the access control rules refused (AMQP and"
                                            " management)")
    def access_denials(self) -> int:
        return self.access_control.denials

    @derived(int, counter=True, description="Connections refused at open: their port had"
                                            " maxOpenConnections open, or their user"
                                            " deltamq.connection_limit_per_user")
    def connections_refused(self) -> int:
        return self.connection_limits.refused_total

    @derived(dict, description="Open connections per user, on every port (what the connection"
                               " limit per user counts)")
    def connections_per_user(self) -> dict[str, int]:
        return dict(self.connection_limits.by_user)

    @derived(float, statistic=True,
             description="The longest the event loop was kept from running since the broker"
                         " started, in milliseconds (measured by a timer every 10 ms)")
    def event_loop_lag_max(self) -> float:
        return round(self.loop_lag.max_lag * 1000, 3)

    @derived(int, counter=True,
             description="Times the event loop was kept from running for more than 5 ms")
    def event_loop_stalls(self) -> int:
        return self.loop_lag.stalls

    def _summed_over_hosts(self, statistic: str) -> int:
        return sum(int(getattr(vhost, statistic)) for vhost in self.virtual_hosts)

    def validate(self) -> None:
        if self.heartbeat_delay < 0 or self.idle_timeout < 0:
            raise ConfigurationError(f"{self.label}: attributes 'connection.heartbeatDelay' and"
                                     " 'connection.idleTimeout' must not be negative")
        if self.max_frame_size < MIN_FRAME_SIZE:
            raise ConfigurationError(f"{self.label}: attribute 'maxFrameSize' must be at least"
                                     f" {MIN_FRAME_SIZE}")
        if not 1 <= self.max_channels <= 65535:
            raise ConfigurationError(f"{self.label}: attribute 'maxChannels' must be between"
                                     " 1 and 65535")
        if self.max_message_size <= 0 or self.memory_high_watermark <= 0:
            raise ConfigurationError(f"{self.label}: 'maxMessageSize' and 'memoryHighWatermark'"
                                     " must be positive")
        if self.disk_free_limit < 0:
            raise ConfigurationError(f"{self.label}: 'diskFreeLimit' must not be negative"
                                     " (0 turns the disk alarm off)")

    def on_open(self) -> None:
        def variable(name: str) -> str:
            found = self._lookup(name)          # the tree, then -D, environment, file, built-ins
            return self.resolve(found) if found is not None else THROTTLE_DEFAULTS[name]
        try:
            self.login_throttle.settings = ThrottleSettings.from_context(variable)
        except ValueError as exc:
            raise ConfigurationError(f"{self.label}: {exc}") from None

    # -- listening ----------------------------------------------------------------

    def start_listening(self, activation: PortActivation) -> None:
        """Have every open port listen, and every port opened from now on.

        Raises ConfigurationError for a port that cannot listen (its number in use).
        """
        self.port_activation = activation
        for port in self.ports():
            if port.state is State.ACTIVE:
                port.listen()

    def stop_listening(self) -> None:
        """No port listens any more (shutdown); their configuration is kept."""
        self.port_activation = None
        for port in self.ports():
            port.stop_listening()

    # -- lookups ------------------------------------------------------------------

    def ports(self, type: str | None = None) -> list[Port]:
        """Ports, optionally only those of ``type`` ("AMQP" or "HTTP")."""
        ports = cast("list[Port]", self.children("Port"))
        if type is None:
            return ports
        return [port for port in ports if port.type.lower() == type.lower()]

    def authentication_provider(self, name: str) -> AuthenticationProvider | None:
        return cast("AuthenticationProvider | None", self.child("AuthenticationProvider", name))

    @property
    def virtual_host_nodes(self) -> list[VirtualHostNode]:
        return cast("list[VirtualHostNode]", self.children("VirtualHostNode"))

    @property
    def virtual_hosts(self) -> list[VirtualHost]:
        return [vhost for node in self.virtual_host_nodes for vhost in node.virtual_hosts]

    def virtual_host_name(self, requested: str) -> str:
        """The name a client's request means: '/' and '' are the default virtual host."""
        if requested in ("", "/"):
            return self.default_virtual_host
        return requested

    def find_virtual_host(self, name: str) -> VirtualHost | None:
        """The virtual host a client asked for (connection.open's ``virtual-host``).

        An exact name wins; '/' and '' mean ``defaultVirtualHost``; a leading
        '/' is otherwise ignored ('/test' finds 'test'), as Broker-J does for
        clients that send vhost names as paths.  The virtual host may be in
        any state: the caller refuses one that is not ACTIVE.
        """
        hosts = {vhost.name: vhost for vhost in self.virtual_hosts}
        if name in hosts:
            return hosts[name]
        if name in ("", "/"):
            return hosts.get(self.default_virtual_host)
        if name.startswith("/"):
            return hosts.get(name[1:])
        return None


def available_memory() -> int:
    """Bytes of memory this process may use: physical RAM, or a smaller cgroup limit."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = 4 * 1024 ** 3
    for limit_file in ("/sys/fs/cgroup/memory.max",
                       "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < total:
            total = int(text)
    return total


def default_memory_high_watermark() -> str:
    return str(int(available_memory() * MEMORY_HIGH_WATERMARK_FRACTION))
