"""Start the broker: load the model, open listeners, run until told to stop.

This is the composition root.  It owns the one event loop on which every
model and queue operation happens and gives the Broker its port activation
(:class:`broker.listeners.Listeners`): every AMQP Port of the model listens
with the TCP transport, every port that carries HTTP runs the management
plugin of its type (entry point group ``deltamq.management``, e.g.
``mgmt.plugin:HttpManagement`` for ``HTTP``: Broker-J's HttpManagement) --
at start-up, and from then on the moment a port is created over
management; a deleted port stops listening.  It also drives each virtual
host's timers (message TTL, queue expiry) and the resource alarms behind
connection.blocked (:mod:`broker.resource_alarms`), and on SIGINT/SIGTERM
stops management, then closes every connection with 320 CONNECTION_FORCED
before exiting.  Before it reads anything it claims the data directory
(:mod:`broker.data_directory`): one broker per directory, and a directory it
cannot write refuses the start with one line.
"""

from __future__ import annotations

import asyncio
import copy
import gc
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio
from anyio.abc import TaskGroup

from broker import __version__, cpu_placement, data_directory, errors
from broker.listeners import Listeners, ManagementPlugin
from broker.messaging.flow_to_disk import THRESHOLD_VARIABLE, FlowToDisk, threshold_from
from broker.protocol.detect import AmqpVersion
from broker.protocol.engine import ENGINES, Engine
from broker.resource_alarms import CHECK_INTERVAL, ResourceAlarms
from broker.security import external, scram_login
from broker.transport.connection_limits import per_user_limit
from broker.transport.tcp import AmqpProtocol, ConnectionRegistry
from broker.transport.tls import TlsSession, tls_session

log = logging.getLogger("deltamq")

#: how long management may take to finish the requests in flight at shutdown
MANAGEMENT_STOP_TIMEOUT = 5.0
GC_YOUNG_THRESHOLD = 50_000
#: seconds between looks at the journals' commits, for the loop's CPU placement (broker.cpu_placement)
PLACEMENT_CHECK_INTERVAL = 1.0
TIMER_RESOLUTION = 0.05


def _management_plugin(port: Any) -> ManagementPlugin:
    """The management plugin of a port that carries HTTP, chosen by the port's type."""
    from broker.model import registry

    factory = registry.load_plugin(registry.MANAGEMENT_GROUP, port.type, what="management plugin")
    plugin: ManagementPlugin = factory(port)
    return plugin


class BrokerHost:
    """The :class:`~broker.protocol.host.ProtocolHost` of one AMQP port, over the model."""

    product = "DeltaMQ"
    version = __version__

    def __init__(self, broker: Any, port: Any, alarms: ResourceAlarms,
                 transport: str = "TCP") -> None:
        self.broker = broker
        self.port = port
        self.alarms = alarms
        self.transport = transport
        #: the TLS session of one connection (None: plain TCP, or the port's own host)
        self.tls: TlsSession | None = None

    def for_connection(self, layers: Sequence[object]) -> BrokerHost:
        """This host as one connection sees it: with its TLS session, if it has one."""
        session = tls_session(layers)
        if session is None:
            return self
        host = copy.copy(self)
        host.tls = session
        return host

    # the Broker's attributes as they are now: a change applies to the next connection
    @property
    def frame_max(self) -> int:
        return int(self.broker.max_frame_size)

    @property
    def channel_max(self) -> int:
        return int(self.broker.max_channels)

    @property
    def heartbeat(self) -> int:
        return int(self.broker.heartbeat_delay)

    @property
    def idle_timeout(self) -> int:
        return int(self.broker.idle_timeout)

    @property
    def max_message_size(self) -> int:
        return int(self.broker.max_message_size)

    @property
    def provider(self) -> Any:
        return self.port.provider

    def sasl_mechanisms(self, remote_host: str) -> list[str]:
        # Broker-J offers secure-only mechanisms on TLS connections only; EXTERNAL
        # only to a client that presented a verified certificate
        tls = self.tls
        return external.offered(self.provider.available_mechanisms(tls is not None),
                                tls.peer if tls is not None else None)

    def sasl_server(self, mechanism: str, remote_host: str) -> Any:
        """The exchange of a multi-step mechanism (SCRAM) with the port's provider."""
        return scram_login.sasl_server(self.provider, mechanism, remote_host)

    def authenticate_external(self, response: bytes, remote_host: str) -> Any:
        """SASL EXTERNAL: the user the client certificate names (:mod:`broker.security.external`)."""
        return external.authenticate(self.provider, self.tls.peer if self.tls is not None else None,
                                     response, remote_host,
                                     use_full_dn=bool(getattr(self.port, "use_full_dn", False)))

    def authenticate(self, username: str, password: str, remote_host: str) -> Any:
        return self.provider.authenticate(username, password, remote_host)

    def authenticate_anonymous(self, remote_host: str) -> Any:
        return self.provider.authenticate_anonymous(remote_host)

    def open_virtual_host(self, name: str, principal: Any) -> Any:
        self.broker.connection_limits.admit(self.port.name, int(self.port.max_open_connections),
                                            principal.name, per_user_limit(self.port.resolve),
                                            self.broker.access_control.groups_of(principal.name))
        vhost = self.broker.find_virtual_host(name)
        if vhost is None:
            # RabbitMQ answers an unknown vhost with 530 NOT_ALLOWED
            raise errors.NotAllowed(f"vhost {name} not found")
        if vhost.state.name != "ACTIVE":
            raise errors.ConnectionForced(f"vhost {vhost.name} is {vhost.state.name.lower()}")
        may_access = getattr(self.provider, "may_access", None)
        if may_access is not None and not may_access(principal, vhost.name):
            raise errors.ConnectionAccessRefused(
                f"access to vhost '{vhost.name}' refused for user '{principal.name}'")
        return vhost.namespace

    def access(self, principal: Any, vhost_name: str, remote_host: str) -> Any:
        """The ACL checks of a connection that opened ``vhost_name``: its subject (the user's
        groups looked up now) and ACCESS VIRTUALHOST checked (ConnectionAccessRefused)."""
        access = self.broker.access_control.connection_access(principal.name, remote_host,
                                                               vhost_name)
        access.check_access()
        return access

    def connection_opened(self, connection: Any) -> None:
        """Make the connection a runtime child of its port, associated with the virtual
        host it opened (visible to management)."""
        self.broker.connection_limits.opened(connection, self.port.name,
                                             getattr(connection.principal, "name", ""))
        vhost = self.broker.find_virtual_host(connection.virtual_host_name)
        if vhost is None:
            return
        props = connection.client_properties
        principal = connection.principal
        connection.model = vhost.register_connection(
            self.port,
            remote_address=f"{connection.remote_host}:{connection.remote_port}",
            protocol=getattr(connection, "port_protocol", None)
            or f"AMQP_{connection.version.value.replace('-', '_')}",
            principal=principal.name if principal is not None else "",
            transport="SSL" if self.tls is not None and self.transport == "TCP" else self.transport,
            client_id=_text(props.get("connection_name", "")),
            client_product=_text(props.get("product", "")),
            client_version=_text(props.get("version", "")),
            closer=lambda reason: connection.close(errors.ConnectionForced(reason)))
        connection.model.blocked_reason_source = lambda: str(getattr(connection, "blocked_reason", ""))

    def connection_closed(self, connection: Any) -> None:
        self.broker.connection_limits.closed(connection)
        model = getattr(connection, "model", None)
        if model is not None:
            model.unregister()
            connection.model = None

    @property
    def alarm_reason(self) -> str:
        return self.alarms.reason

    def manage(self, virtual_host: str | None, principal: Any, properties: Any, body: Any,
               answer: Callable[[int, str, Any], None]) -> None:
        """An AMQP management request to ``virtual_host``'s node (None: the broker's)."""
        from broker.model.management_node import ManagementRequest, start_request

        managed = self.broker if virtual_host is None else self.broker.find_virtual_host(virtual_host)
        if managed is None:
            answer(404, f"no virtual host '{virtual_host}'", None)
            return
        start_request(managed, ManagementRequest(properties, body), principal,
                      lambda response: answer(response.status, response.description, response.body))


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


async def _drive_virtual_hosts(broker: Any) -> None:
    """Drive every virtual host's TTL and expiry deadlines (the messaging core has no timers).

    Virtual hosts are looked up on every round, so one created later (over
    management) is driven too, and its journal, if it has one, is given the
    event loop the moment it appears.
    """
    loop = asyncio.get_running_loop()
    while True:
        now = time.monotonic()
        soonest = now + TIMER_RESOLUTION
        for vhost in broker.virtual_hosts:
            journal = getattr(vhost, "journal", None)
            if journal is not None:
                journal.attach_loop(loop)               # once per journal: later calls do nothing
            namespace = getattr(vhost, "namespace", None)
            if namespace is None:
                continue
            deadline = namespace.next_deadline()
            if deadline is not None and deadline <= now:
                namespace.run_due(now)
                deadline = namespace.next_deadline()
            if deadline is not None:
                soonest = min(soonest, deadline)
        await anyio.sleep(min(max(soonest - time.monotonic(), 0.001), TIMER_RESOLUTION))


async def _watch_resources(broker: Any, alarms: ResourceAlarms) -> None:
    flow = broker.flow_to_disk = FlowToDisk()
    while True:
        alarms.set_limits(int(broker.memory_high_watermark), int(broker.disk_free_limit))
        alarms.check()
        flow.threshold = _flow_to_disk_threshold(broker)
        flow.check(alarms.queues())  # type: ignore[arg-type]   # every queue of every virtual host
        await anyio.sleep(CHECK_INTERVAL)


def _flow_to_disk_threshold(broker: Any) -> int:
    """``broker.flowToDiskThreshold`` as configured now (an unusable value: the default, said once)."""
    watermark = int(broker.memory_high_watermark)
    text = broker._lookup(THRESHOLD_VARIABLE)
    try:
        return threshold_from(broker.resolve(text) if text else None, watermark)
    except (ValueError, errors.BrokerError) as exc:
        if getattr(broker, "_flow_to_disk_warned", None) != text:
            broker._flow_to_disk_warned = text
            log.error("%s; using the default", exc)
        return threshold_from(None, watermark)


def _resource_alarms(broker: Any, data_dir: str | None) -> ResourceAlarms:
    """The memory and disk alarms over the broker's queues and data directory (the
    connections are added once the ports exist)."""

    def queues() -> Iterable[Any]:
        for vhost in broker.virtual_hosts:
            namespace = getattr(vhost, "namespace", None)
            if namespace is not None:
                yield from namespace.queues.values()

    return ResourceAlarms(int(broker.memory_high_watermark), int(broker.disk_free_limit),
                          data_dir=data_dir, queues=queues)


def _amqp_protocols(broker: Any, alarms: ResourceAlarms
                    ) -> Callable[[Any, ConnectionRegistry], Callable[[], AmqpProtocol]]:
    """What makes the protocol of each connection an AMQP port accepts."""

    def for_port(port: Any, registry: ConnectionRegistry) -> Callable[[], AmqpProtocol]:
        host = BrokerHost(broker, port, alarms, registry.transport)

        def protocol() -> AmqpProtocol:
            # the port's protocols as they are now: a change applies to the next connection
            # an HTTP port's WebSocket path serves every AMQP version the broker implements
            supported = ENGINES.versions([p.name for p in port.protocols if p.is_amqp]
                                         or ENGINES.protocols)
            layers = registry.layers()

            def engine_factory(version: AmqpVersion, remote_host: str, remote_port: int) -> Engine:
                control = broker.access_control
                if control.uses_hostnames:          # ACL from_hostname: look the client up now
                    control.host_names.look_up(remote_host)
                return ENGINES.factory(version)(host.for_connection(layers), version, remote_host,
                                                remote_port, port.name)
            return AmqpProtocol(engine_factory, supported, registry,
                                ENGINES.preferred_header(supported), layers=layers)
        return protocol
    return for_port


def _raise_descriptor_limit() -> None:
    """Every connection is a file descriptor: use all the hard limit allows."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 1 << 20, hard))
    except (ImportError, ValueError, OSError) as exc:
        log.warning("could not raise the open-files limit: %s", exc)


def _tune_garbage_collector() -> None:
    """Keep the cyclic collector's pauses short.

    Messages and queue entries are allocated at a high rate but rarely form
    cycles; collecting the young generation every 700 allocations (the
    default) traverses them over and over.  Everything built at start-up (the
    model tree, modules) is moved out of the collector's view for good.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, 20, 100)


async def _main(system: Any, data_dir: str | None, placement: cpu_placement.Placement | None) -> None:
    _raise_descriptor_limit()
    _tune_garbage_collector()
    # TLS handshakes, name lookups: worker threads on all the broker's CPUs, not the loop's alone
    asyncio.get_running_loop().set_default_executor(
        ThreadPoolExecutor(thread_name_prefix="deltamq-worker", initializer=cpu_placement.release_this_thread))
    broker = system.broker
    alarms = broker.resource_alarms = _resource_alarms(broker, data_dir)
    failure: errors.BrokerError | None = None
    async with anyio.create_task_group() as tg:
        listeners = Listeners(tg, _amqp_protocols(broker, alarms), _management_plugin)
        alarms.registries = listeners.registries
        try:
            broker.start_listening(listeners)
        except errors.BrokerError as exc:       # a port cannot listen (its number in use)
            failure = exc
        else:
            await listeners.wait_started()
            await _run(broker, alarms, tg, placement)
        await listeners.shutdown(MANAGEMENT_STOP_TIMEOUT)
        broker.stop_listening()
        tg.cancel_scope.cancel()
    if failure is not None:
        raise failure


async def _run(broker: Any, alarms: ResourceAlarms, tg: TaskGroup,
               placement: cpu_placement.Placement | None) -> None:
    """Drive timers and the resource alarms until SIGINT or SIGTERM."""
    for vhost in broker.virtual_hosts:
        if getattr(vhost, "journal", None) is not None:
            vhost.journal.attach_loop(asyncio.get_running_loop())
    tg.start_soon(_drive_virtual_hosts, broker)
    tg.start_soon(_watch_resources, broker, alarms)
    if placement is not None:
        tg.start_soon(_place_loop_while_journals_commit, broker, cpu_placement.LoopPlacement(placement))
    broker.loop_lag.start(asyncio.get_running_loop())
    log.info("DeltaMQ %s ready", __version__)
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.info("received %s: shutting down", signal.Signals(signum).name)
            break


async def _place_loop_while_journals_commit(broker: Any, placing: cpu_placement.LoopPlacement) -> None:
    """Once a second: this (the loop's) thread kept from the journal writers' CPUs while they commit."""
    while True:
        commits = sum(getattr(getattr(vhost, "journal", None), "commits", 0) for vhost in broker.virtual_hosts)
        placing.observe(commits, time.monotonic())
        await anyio.sleep(PLACEMENT_CHECK_INTERVAL)


def _backend_options() -> dict[str, Any]:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return {}
    return {"use_uvloop": True}


def serve(config_path: str | None, context: dict[str, str], log_level: str = "INFO", *,
          overwrite_config: bool = False) -> int:
    """Run the broker in the foreground until SIGINT/SIGTERM; return the exit code.

    The broker-level configuration is kept in the store that
    ``deltamq.config_store_type`` names (``delta`` unless told otherwise),
    seeded from ``config_path`` when empty, or replaced by it with
    ``overwrite_config`` (see :mod:`broker.model.initial_config`).  The data
    directory (``deltamq.data_dir``) is claimed first and held until the end:
    exit code 1 when another broker holds it, 2 when it cannot be written.
    """
    from broker.model.system_config import configure_system, open_system

    logging.basicConfig(level=getattr(logging, log_level.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:                # before the journal writers start (they place themselves)
        placement = cpu_placement.plan_for_broker(cpu_placement.writer_realtime())
    except ValueError as exc:
        log.error("cannot start: %s", exc)
        return 2
    lock: data_directory.DataDirectoryLock | None = None
    try:
        system = configure_system(config_path, context, store_type=None,
                                  overwrite=overwrite_config)
        lock = data_directory.claim(system.resolve("${deltamq.data_dir}"))
        open_system(system)
    except data_directory.DataDirectoryInUse as exc:
        log.error("cannot start: %s", exc.text)
        return 1
    except errors.BrokerError as exc:
        log.error("cannot start: %s", exc.text or exc)
        if lock is not None:
            lock.release()
        return 2
    if placement is not None:
        log.info("%s", placement.describe())
    try:
        anyio.run(_main, system, None if lock is None else str(lock.path), placement,
                  backend="asyncio", backend_options=_backend_options())
    except OSError as exc:
        log.error("cannot start: %s", exc)
        return 1
    except errors.BrokerError as exc:           # e.g. a port whose management plugin is missing
        log.error("cannot start: %s", exc.text or exc)
        return 1 if isinstance(exc.__cause__, OSError) else 2      # 1: a port in use
    finally:
        close = getattr(system, "close", None)
        if close is not None:
            close()
        if lock is not None:
            lock.release()          # after the journal writers have ended
    log.info("DeltaMQ stopped")
    return 0
