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

The default configuration is ``conf/config.json`` at the top of the source
tree: the one file users read and copy.  The package reaches it through
``broker/model/default_config.json``, a symbolic link to it, so it is found
with :mod:`importlib.resources` from a checkout, an editable install, and a
wheel (which stores the link's target as a regular file).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any, cast

from broker.errors import ConfigurationError
from broker.model.attributes import attribute
from broker.model.broker import Broker, default_memory_high_watermark
from broker.model.config_store import ConfigurationRecord, DurableConfigurationStore, \
    MemoryConfigurationStore
from broker.model.configured_object import ConfiguredObject
from broker.model.context import environment_value
from broker.model.persistence import StoreBinding, records_from_tree, recover
from broker.model.virtualhost import NamespaceFactory

#: the lowest-precedence context values; callables are computed when first asked
BUILTIN_CONTEXT: dict[str, str | Callable[[], str]] = {
    "deltamq.data_dir": "./data",
    "deltamq.amqp_port": "5672",
    "deltamq.http_port": "8080",
    "deltamq.memory_high_watermark": default_memory_high_watermark,
}

DEFAULT_CONFIG_RESOURCE = "default_config.json"
REPOSITORY_CONFIG = Path(__file__).resolve().parents[2] / "conf" / "config.json"


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
        initial_records: Iterable[ConfigurationRecord] = (),
        namespace_factory: NamespaceFactory | None = None,
    ) -> None:
        super().__init__(None, attributes or {})
        #: ``-D`` context from the command line (wins over the environment)
        self.overrides: dict[str, str] = {k: str(v) for k, v in (overrides or {}).items()}
        self.store: DurableConfigurationStore = \
            store if store is not None else MemoryConfigurationStore()
        self.initial_records = list(initial_records)
        #: builds each virtual host's Namespace (None: the messaging layer's)
        self.namespace_factory = namespace_factory
        self._binding: StoreBinding | None = None

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

    # -- lifecycle ----------------------------------------------------------------------

    def on_open(self) -> None:
        self.store.open()
        records = self.store.recover()
        if not records and self.initial_records:
            self.store.save(self.initial_records)
            records = self.store.recover()
        recover(self, records)
        self._binding = StoreBinding(self, self.store)
        self._binding.attach()

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
    namespace_factory: NamespaceFactory | None = None,
) -> SystemConfig:
    """Read a configuration file (None: the default one) and open the tree.

    ``context`` holds the command line's ``-D`` values.  When ``store``
    already holds records, they are recovered and the file only contributes
    its context defaults (Broker-J's initial configuration is used once).
    Raises :class:`ConfigurationError` naming what is wrong.
    """
    data = read_configuration(config_path)
    defaults = data.pop("context", {})
    if not isinstance(defaults, Mapping):
        raise ConfigurationError("the configuration's 'context' must be an object")
    records = records_from_tree("Broker", data,
                                stop_at=frozenset({"VirtualHostNode", "AuthenticationProvider"}))
    system = SystemConfig({"context": {k: str(v) for k, v in defaults.items()}},
                          overrides=context, store=store, initial_records=records,
                          namespace_factory=namespace_factory)
    system.open()
    return system


def read_configuration(config_path: str | None) -> dict[str, Any]:
    """The JSON object in ``config_path``, or the default configuration."""
    if config_path is None:
        text, source = default_configuration_text(), "default configuration"
    else:
        try:
            text, source = Path(config_path).read_text(encoding="utf-8"), config_path
        except OSError as exc:
            raise ConfigurationError(f"cannot read configuration {config_path}:"
                                     f" {exc.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"{source}: invalid JSON at line {exc.lineno} column"
                                 f" {exc.colno}: {exc.msg}") from None
    if not isinstance(data, dict):
        raise ConfigurationError(f"{source}: the configuration must be a JSON object")
    return data


def default_configuration_text() -> str:
    """conf/config.json, through the package's link to it (see module docstring)."""
    packaged = resources.files("broker.model").joinpath(DEFAULT_CONFIG_RESOURCE)
    try:
        text = packaged.read_text(encoding="utf-8")
    except OSError:
        text = ""
    if text.lstrip().startswith("{"):
        return text
    # A checkout without symbolic links holds the link's target path as text.
    return REPOSITORY_CONFIG.read_text(encoding="utf-8")
