"""What a management request is in ACL terms (Broker-J's ``LegacyAccessControlAdapter``).

:class:`~broker.model.permissions.ManagementPermissions` asks
:func:`acl_allows` before its own rules, for REST and for the AMQP 1.0
management node alike, and only when access control rules are in force.
Both must allow.

* Every request needs ``ACCESS MANAGEMENT``; reading needs nothing more
  (Broker-J: read permission for all objects is implicit).
* Queues, exchanges, virtual hosts, virtual host nodes and users: CREATE,
  UPDATE (with ``attribute_names``), DELETE of their own object type, with
  ``name``, ``virtualhost_name`` and the flags the object has; an operation
  is INVOKE with ``method_name`` (``clearQueue`` is PURGE QUEUE).
* What else sits directly under the broker (ports, authentication, group and
  access control providers, the broker itself): CONFIGURE BROKER; their
  operations INVOKE BROKER.
* A virtual host's own access control providers, its connections, sessions
  and consumers: UPDATE VIRTUALHOST.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from broker.model.configured_object import ConfiguredObject
from broker.model.permissions import Action
from broker.security.access_control import AccessControl
from broker.security.acl_rules import ObjectType, Operation, Property
from broker.security.principal import Principal

_OBJECT_TYPES = {"Queue": ObjectType.QUEUE, "Exchange": ObjectType.EXCHANGE,
                 "VirtualHost": ObjectType.VIRTUALHOST,
                 "VirtualHostNode": ObjectType.VIRTUALHOSTNODE, "User": ObjectType.USER}
_OPERATIONS = {Action.CREATE: Operation.CREATE, Action.UPDATE: Operation.UPDATE,
               Action.DELETE: Operation.DELETE, Action.INVOKE: Operation.INVOKE}
#: operations Broker-J checks as another action
_INVOKED_AS = {("Queue", "clearQueue"): Operation.PURGE}
_FLAGS = {"durable": Property.DURABLE, "autoDelete": Property.AUTO_DELETE,
          "exclusive": Property.EXCLUSIVE, "type": Property.TYPE}


def control_of(target: ConfiguredObject) -> AccessControl | None:
    control = getattr(target.ancestor("Broker"), "access_control", None)
    return control if isinstance(control, AccessControl) and control.active else None


def acl_allows(control: AccessControl, principal: Principal, action: Action,
               target: ConfiguredObject, category: str, attributes: Collection[str] = (),
               details: Mapping[str, Any] | None = None) -> bool:
    """May ``principal`` do this over management, as far as the ACL rules say?"""
    subject = control.subject(principal.name)
    if not control.allows(subject, Operation.ACCESS, ObjectType.MANAGEMENT, {}):
        return False
    if action is Action.READ:
        return True
    details = details or {}
    creating = action is Action.CREATE
    obj_category = category if creating else target.category
    vhost = target.ancestor("VirtualHost")
    vhost_name = str(vhost.name) if vhost is not None else None
    props: dict[Property, Any] = {}
    if vhost_name is not None:
        props[Property.VIRTUALHOST_NAME] = vhost_name
    operation = _OPERATIONS[action]
    object_type = _OBJECT_TYPES.get(obj_category)
    if object_type is None:
        if vhost is not None:                   # a vhost's ACL provider, connection, consumer
            operation, object_type = Operation.UPDATE, ObjectType.VIRTUALHOST
            props[Property.NAME] = vhost_name
        else:                                   # ports, providers, the broker itself
            object_type = ObjectType.BROKER
            operation = Operation.INVOKE if action is Action.INVOKE else Operation.CONFIGURE
    else:
        values = details if creating else target.attributes()
        props[Property.NAME] = values.get("name", "")
        for key, prop in _FLAGS.items():
            if values.get(key) is not None:
                props[prop] = values[key]
    if action is Action.INVOKE:
        method = str(details.get("method_name", ""))
        operation = _INVOKED_AS.get((obj_category, method), operation)
        props[Property.METHOD_NAME] = method
    if action is Action.UPDATE and attributes:
        props[Property.ATTRIBUTES] = frozenset(attributes)
    return control.allows(subject, operation, object_type, props, vhost_name)
