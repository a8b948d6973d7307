"""The configured-object model (Broker-J's "Model"), in Python.

The tree::

    SystemConfig
    └── Broker
        ├── AuthenticationProvider (type PasswordFile | Anonymous) ── User
        ├── GroupProvider (type GroupFile), AccessControlProvider (type AclFile | RuleBased)
        ├── Port (type AMQP | HTTP) ── Connection ── Session
        └── VirtualHostNode (type memory | delta) ── VirtualHost
                                                     ├── VirtualHostAccessControlProvider
                                                     ├── Exchange
                                                     └── Queue ── Consumer

(a connection is also associated with the virtual host it opened, a
consumer with its session: :mod:`broker.model.runtime`)

Each category declares its attributes once (:mod:`broker.model.attributes`);
:func:`category` / :func:`categories` describe them to a generic management
layer.  Values may use ``${context}`` variables (:mod:`broker.model.system_config`
gives the lookup order).  Start here::

    system = load_system_config(None, {"deltamq.amqp_port": "5673"})
    broker = system.broker
    for port in broker.ports("AMQP"):
        port.port, port.local_host, port.protocols, port.provider
    vhost = broker.find_virtual_host("/")
"""

from __future__ import annotations

from broker.model import access_control as _access_control  # noqa: F401  (registers its types)
from broker.model.attributes import Attribute, attribute, derived
from broker.model.authentication import AuthenticationProvider, User
from broker.model.broker import Broker
from broker.model.config_store import ConfigurationRecord, DurableConfigurationStore, \
    MemoryConfigurationStore
from broker.model.configured_object import ChangeListener, ConfiguredObject, State
from broker.model.port import AmqpPort, HttpPort, Port, PortProtocol, Transport
from broker.model.registry import Category, categories, category
from broker.model.runtime import Connection, Consumer, Session
from broker.model.system_config import SystemConfig, load_system_config
from broker.model.virtualhost import VirtualHost, VirtualHostNode

__all__ = [
    "AmqpPort", "Attribute", "AuthenticationProvider", "Broker", "Category", "ChangeListener",
    "ConfigurationRecord", "ConfiguredObject", "Connection", "Consumer",
    "DurableConfigurationStore", "HttpPort", "MemoryConfigurationStore", "Port",
    "PortProtocol", "Session", "State", "SystemConfig", "Transport", "User", "VirtualHost",
    "VirtualHostNode", "attribute", "categories", "category", "derived", "load_system_config",
]
