"""Where the broker keeps its own configuration (Broker-J's system configuration store).

The Broker and what sits directly under it -- ports, authentication
providers, virtual host nodes -- are kept in a configuration store of their
own, chosen by two context variables (``-D``, the environment, or the
configuration file's ``context``):

* ``deltamq.config_store_type`` (``--store-type``; environment
  ``DELTAMQ_CONFIG_STORE_TYPE``): a plugin of entry point group
  ``deltamq.stores`` -- ``delta`` (the default of ``deltamq serve``: the
  Delta table ``<path>/config``) or ``memory`` (nothing survives a restart);
* ``deltamq.config_store_path``: default ``${deltamq.data_dir}/broker``.

A virtual host node keeps its store at its ``storePath``,
``${deltamq.data_dir}/<node name>`` by default, so a node named ``broker``
would meet the broker's store there: :func:`clash` finds that, and the node
is refused with an error saying so.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

from broker.errors import ConfigurationError
from broker.model import registry
from broker.model.config_store import DurableConfigurationStore, MemoryConfigurationStore

STORE_TYPE_VARIABLE = "deltamq.config_store_type"
STORE_PATH_VARIABLE = "deltamq.config_store_path"
DEFAULT_STORE_TYPE = "delta"
DEFAULT_STORE_PATH = "${deltamq.data_dir}/broker"


def create_store(type_name: str, path: str) -> DurableConfigurationStore:
    """A new, unopened store of ``type_name`` (a ``deltamq.stores`` plugin) at ``path``."""
    store_class = registry.load_plugin(registry.STORE_GROUP, type_name,
                                       what="configuration store type")
    if not path.strip() and keeps_data(store_class):
        raise ConfigurationError(f"{STORE_PATH_VARIABLE} is empty: the broker's '{type_name}'"
                                 " configuration store needs a directory (or URI)")
    return cast(DurableConfigurationStore, store_class(path=path))


def keeps_data(store_class: type) -> bool:
    """Does a store of this class keep anything at its path?  (Memory stores do not.)"""
    return not issubclass(store_class, MemoryConfigurationStore)


def location(store: DurableConfigurationStore) -> str | None:
    """Where ``store`` keeps its data: a directory or URI, None if it keeps it in memory."""
    path = getattr(store, "path", None)
    if path is None or not keeps_data(type(store)):
        return None
    return str(path)


def clash(node_path: str, store_path: str) -> str | None:
    """How a node's ``storePath`` meets the broker's store path, or None if it does not.

    The same place, or a place inside the broker's store, clash.  Local paths
    are compared absolute (relative ones from the working directory), URIs as
    written (without a trailing slash).
    """
    if "://" in node_path or "://" in store_path:
        node, store = node_path.rstrip("/"), store_path.rstrip("/")
        if node == store:
            return "is"
        return "is inside" if node.startswith(store + "/") else None
    node_dir, store_dir = Path(node_path).resolve(), Path(store_path).resolve()
    if node_dir == store_dir:
        return "is"
    return "is inside" if store_dir in node_dir.parents else None
