"""SystemConfig, the root of the tree, and loading the broker's configuration.

Context variables are looked up, in order:

1. the object's own ``context``, then each ancestor's (Broker included);
2. the command line: ``-D name=value`` (and the ``serve`` options that are
   shorthands for it) -- *SystemConfig.overrides*;
3. the process environment: the exact name, or ``DELTAMQ_AMQP_PORT`` for
   ``deltamq.amqp_port`` (see :func:`~broker.model.context.environment_value`);
4. the configuration file's top-level ``context`` -- defaults, kept as
   SystemConfig's own context;
5. built-in defaults (:data:`BUILTIN_CONTEXT`).

The command line comes before the environment on purpose: an option typed
for this run must win over a variable exported long ago.

SystemConfig owns the broker's configuration store (:mod:`.system_store`):
the Broker, its ports, authentication providers and virtual host nodes, kept
as given (``${...}`` unexpanded, so options and the environment apply at
every start).  The configuration file is only the *initial configuration*
(:mod:`.initial_config`): it seeds an empty store, or replaces what is stored
when asked to (``overwrite``); its ``context`` is read at every start.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, cast

from broker.errors import BrokerError, ConfigurationError
from broker.model import system_store
from broker.model.attributes import attribute
from broker.model.broker import Broker, default_memory_high_watermark
from broker.model.config_store import ConfigurationRecord, DurableConfigurationStore, \
    MemoryConfigurationStore
from broker.model.configured_object import ConfiguredObject, State
from broker.model.confinement import DATA_DIR_VARIABLE, PATH_ROOTS_VARIABLE, parse_roots
from broker.model.context import environment_value
from broker.model.initial_config import DEFAULT_CONFIG_RESOURCE, REPOSITORY_CONFIG, \
    InitialConfiguration, Seeding, default_configuration_text, read_configuration, \
    read_initial_configuration, seed
from broker.model.persistence import StoreBinding, recover
from broker.model.system_store import STORE_PATH_VARIABLE, STORE_TYPE_VARIABLE
from broker.model.virtualhost import NamespaceFactory, VirtualHostNode
from broker.resource_alarms import DEFAULT_DISK_FREE_LIMIT
from broker.security.throttle import CONTEXT_DEFAULTS as THROTTLE_DEFAULTS
from broker.transport.connection_limits import CONTEXT_DEFAULTS as CONNECTION_LIMIT_DEFAULTS
from broker.transport.keepalive import CONTEXT_DEFAULTS as KEEPALIVE_DEFAULTS
from broker.transport.websocket import CONTEXT_DEFAULTS as WEBSOCKET_DEFAULTS

log = logging.getLogger(__name__)

__all__ = ["BUILTIN_CONTEXT", "DEFAULT_CONFIG_RESOURCE", "REPOSITORY_CONFIG", "SystemConfig",
           "configure_system", "default_configuration_text", "load_system_config", "open_system",
           "read_configuration"]

#: the lowest-precedence context values; callables are computed when first asked
BUILTIN_CONTEXT: dict[str, str | Callable[[], str]] = {
    DATA_DIR_VARIABLE: "./data",
    PATH_ROOTS_VARIABLE: "",
    "deltamq.amqp_port": "5672",
    "deltamq.amqps_port": "5671",
    "deltamq.http_port": "8080",
    "deltamq.memory_high_watermark": default_memory_high_watermark,
    "deltamq.disk_free_limit": str(DEFAULT_DISK_FREE_LIMIT),
    # the Broker's maxFrameSize and maxChannels: what connections negotiate down from
    "deltamq.frame_max": "131072",
    "deltamq.channel_max": "2047",
    # the Broker's connection.idleTimeout: what AMQP 1.0's open offers (seconds; 0: none)
    "deltamq.amqp1_0_idle_timeout": "0",
    # seconds and counts of broker.transport.handshake
    "deltamq.connection_open_timeout": "10",
    "deltamq.max_opening_connections_per_address": "100",
    "deltamq.connection_close_timeout": "30",
    STORE_TYPE_VARIABLE: system_store.DEFAULT_STORE_TYPE,
    STORE_PATH_VARIABLE: system_store.DEFAULT_STORE_PATH,
    **THROTTLE_DEFAULTS,
    **CONNECTION_LIMIT_DEFAULTS,
    **WEBSOCKET_DEFAULTS,
    **KEEPALIVE_DEFAULTS,
}


class SystemConfig(ConfiguredObject):
    """The root: owns the broker-wide configuration store and the system context."""

    category = "SystemConfig"
    manages_children = True

    name = attribute(str, default="system", mandatory=True, mutable=False,
                     description="Name of the root object")

    def __init__(
        self,
        attributes: Mapping[str, Any] | None = None,
        *,
        overrides: Mapping[str, str] | None = None,
        store: DurableConfigurationStore | None = None,
        initial: InitialConfiguration | None = None,
        overwrite: bool = False,
        namespace_factory: NamespaceFactory | None = None,
    ) -> None:
        super().__init__(None, attributes or {})
        #: ``-D`` context from the command line (wins over the environment)
        self.overrides: dict[str, str] = {k: str(v) for k, v in (overrides or {}).items()}
        self.store: DurableConfigurationStore = \
            store if store is not None else MemoryConfigurationStore()
        #: what an empty store is seeded with (and, with ``overwrite``, any store)
        self.initial = initial
        self.overwrite = overwrite
        #: what opening did with the store (None before)
        self.seeding: Seeding | None = None
        #: builds each virtual host's Namespace (None: the messaging layer's)
        self.namespace_factory = namespace_factory
        self._binding: StoreBinding | None = None
        self._written: list[ConfigurationRecord] = []

    @property
    def broker(self) -> Broker:
        brokers = self.children("Broker")
        if not brokers:
            raise ConfigurationError("the configuration defines no broker")
        return cast(Broker, brokers[0])

    def find_by_id(self, object_id: str) -> ConfiguredObject | None:
        pending: list[ConfiguredObject] = [self]
        while pending:
            obj = pending.pop()
            if obj.id == object_id:
                return obj
            pending.extend(obj.all_children())
        return None

    # -- context ---------------------------------------------------------------------

    def _explicit_context(self) -> Mapping[str, Any]:
        return {}  # this object's context holds defaults: see _fallback_context

    def _fallback_context(self, name: str) -> str | None:
        if name in self.overrides:
            return self.overrides[name]
        found = environment_value(name)
        if found is not None:
            return found
        defaults = self._actual.get("context")
        if isinstance(defaults, Mapping) and name in defaults:
            return str(defaults[name])
        builtin = BUILTIN_CONTEXT.get(name)
        if callable(builtin):
            builtin = BUILTIN_CONTEXT[name] = builtin()
        return builtin

    def path_roots(self) -> list[str]:
        """The data directory and ``deltamq.path_roots``, from the operator's sources only
        (this object's lookups skip every object's ``context``, which management may set)."""
        return parse_roots(self.resolve("${" + DATA_DIR_VARIABLE + "}"),
                           self.resolve("${" + PATH_ROOTS_VARIABLE + "}"))

    def places_in_use(self, *, but: ConfiguredObject) -> dict[str, str]:
        places = super().places_in_use(but=but)
        where = self.store_location
        if where is not None:
            places[where] = f"the broker's configuration store ({STORE_PATH_VARIABLE})"
        return places

    # -- the configuration store ----------------------------------------------------------

    @property
    def store_location(self) -> str | None:
        """Where the store keeps the broker's configuration (None: in memory)."""
        return system_store.location(self.store)

    def check_node_store(self, node: VirtualHostNode, store_class: type) -> None:
        """Refuse a node whose data would land in the broker's own store."""
        where = self.store_location
        if where is None or not system_store.keeps_data(store_class):
            return
        how = system_store.clash(node.store_path, where)
        if how is not None:
            raise ConfigurationError(
                f"{node.label}: storePath '{node.store_path}' {how} the broker's configuration"
                f" store '{where}' ({STORE_PATH_VARIABLE}); give the node another storePath"
                " (or another name, if its storePath is the default"
                " ${deltamq.data_dir}/${this:name})")

    def _describe_store(self) -> str:
        where = self.store_location
        return f"the broker's configuration store '{where}'" if where is not None \
            else "the broker's configuration store (in memory)"

    # -- lifecycle ----------------------------------------------------------------------

    def open(self) -> None:
        """Open the store and the tree.  A configuration the broker cannot open is not
        kept: what this start wrote to the store is withdrawn, so the next start seeds
        again (from the corrected file)."""
        try:
            super().open()
        except ConfigurationError:
            if self._written and self.store_location is not None:
                self.store.remove([record.id for record in self._written])
                log.warning("%s: the configuration written from %s is withdrawn, as the"
                            " broker cannot start from it", self._describe_store(),
                            self.initial.source if self.initial else "the file")
            self._written = []
            raise

    def on_open(self) -> None:
        self.store.open()
        where = self._describe_store()
        result = seed(self.store, self.initial, overwrite=self.overwrite, where=where)
        self.seeding, self._written = result.seeding, result.written
        self._log_seeding(where, len(result.records))
        recover(self, result.records)
        self._binding = StoreBinding(self, self.store)
        self._binding.attach()

    def _log_seeding(self, where: str, count: int) -> None:
        source = self.initial.source if self.initial is not None else "no initial configuration"
        if self.seeding is Seeding.SEEDED:
            if self.store_location is None:
                log.info("%s: configuration from %s (kept in memory: what management changes"
                         " at broker level is lost at shutdown)", where, source)
            else:
                log.info("%s was empty: seeded from %s (%d objects)", where, source, count)
        elif self.seeding is Seeding.OVERWRITTEN:
            log.info("%s overwritten from %s (%d objects), as asked (--overwrite-config)",
                     where, source, count)
        elif self.seeding is Seeding.RECOVERED:
            log.info("configuration recovered from %s (%d objects); %s only supplies its"
                     " context defaults (--overwrite-config to start from it again)",
                     where, count, source)

    def on_close(self) -> None:
        if self._binding is not None:
            self._binding.detach()
            self._binding = None
        self.store.close()


def load_system_config(
    config_path: str | None,
    context: Mapping[str, str],
    *,
    store: DurableConfigurationStore | None = None,
    store_type: str | None = "memory",
    overwrite: bool = False,
    namespace_factory: NamespaceFactory | None = None,
) -> SystemConfig:
    """Read a configuration file (None: the default one) and open the tree.

    ``context`` holds the command line's ``-D`` values.  The broker-level
    configuration is kept in ``store``, else in a new store of ``store_type``
    (a ``deltamq.stores`` plugin) at ``${deltamq.config_store_path}``;
    ``store_type=None`` takes the type from ``${deltamq.config_store_type}``
    (what ``deltamq serve`` does; default ``delta``).  The default ``memory``
    keeps it for this process only (tests, embedding).  An empty store is
    seeded from the file; one that holds a configuration is used as it is,
    the file contributing only its context defaults, unless ``overwrite``
    (Broker-J's initial configuration, and its "overwrite store" option).
    Raises :class:`ConfigurationError` naming what is wrong.
    """
    system = configure_system(config_path, context, store=store, store_type=store_type,
                              overwrite=overwrite, namespace_factory=namespace_factory)
    open_system(system)
    return system


def configure_system(
    config_path: str | None,
    context: Mapping[str, str],
    *,
    store: DurableConfigurationStore | None = None,
    store_type: str | None = "memory",
    overwrite: bool = False,
    namespace_factory: NamespaceFactory | None = None,
) -> SystemConfig:
    """The first half of :func:`load_system_config`: the tree's root with its context and
    store, nothing read from the store yet (the server claims its data directory between)."""
    initial = read_initial_configuration(config_path)
    system = SystemConfig({"context": dict(initial.context)}, overrides=context, store=store,
                          initial=initial, overwrite=overwrite,
                          namespace_factory=namespace_factory)
    if store is None:
        type_name = system.resolve(store_type if store_type is not None
                                   else "${" + STORE_TYPE_VARIABLE + "}")
        system.store = system_store.create_store(
            type_name, system.resolve("${" + STORE_PATH_VARIABLE + "}"))
    return system


def open_system(system: SystemConfig) -> None:
    """Open the store and the tree (the second half of :func:`load_system_config`)."""
    try:
        system.open()
        if system.state is State.ERRORED:
            # the root's store could not be opened (e.g. a Delta table DeltaMQ must not
            # write): nothing runs without it, so say why rather than "no broker"
            error = system.last_error
            if isinstance(error, BrokerError):
                raise error
            raise ConfigurationError(f"{system.label} could not be opened: {error}") from error
    except BaseException:
        system.close()
        raise
