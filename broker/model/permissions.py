"""Who may do what to the model: the permission check every management channel asks.

The REST API (:mod:`mgmt`) and the AMQP 1.0 management node
(:mod:`broker.model.management_node`) ask the same :class:`Permissions`
object (Broker-J's AccessControl ``authorise``) before acting.  When access
control rules are in force (:mod:`broker.model.access_control`), they are
asked first and must allow too (:mod:`broker.model.acl_management`); then
:class:`ManagementPermissions` applies Broker-J's management permissions:

* administrators (a User whose ``administrator`` attribute is true, see
  :meth:`AuthenticationProvider.is_administrator`; everyone an Anonymous
  provider lets in) may do everything;
* other users manage what is inside the virtual hosts they may open (all,
  or those their ``virtualHosts`` names) -- exchanges, queues, operations,
  the connections that opened them -- but not the virtual host itself
  (changing or deleting it);
* they read the broker-level objects (broker, ports, providers, nodes) and
  change none, nor the access control providers of virtual hosts; of the
  users they see only themselves, and change only their own password.

An object's virtual host is its ancestor, or, for a connection and its
sessions (children of a port), the virtual host the connection opened.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Mapping
from typing import Any, Protocol, cast

from broker.model.authentication import AuthenticationProvider
from broker.model.configured_object import ConfiguredObject
from broker.model.runtime import virtual_host_of
from broker.security.principal import Principal


class Action(enum.Enum):
    """What is asked (Broker-J's ``Operation``)."""

    READ = "READ"
    CREATE = "CREATE"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    INVOKE = "INVOKE_METHOD"


class Permissions(Protocol):
    """The permission check management asks before acting (to be filled by ACL rules)."""

    def allowed(self, principal: Principal, action: Action, target: ConfiguredObject,
                category: str, attributes: Collection[str] = (),
                details: Mapping[str, Any] | None = None) -> bool:
        """May ``principal`` do ``action`` on ``target`` (for CREATE: the parent of a new
        ``category`` object; for UPDATE, ``attributes`` names what would change)?
        ``details``: the new object's attributes (CREATE), ``method_name`` (INVOKE)."""
        ...


#: a virtual host's access control rules: only administrators change them
ACL_CATEGORY = "VirtualHostAccessControlProvider"

#: what users who are not administrators may change of their own User
OWN_USER_ATTRIBUTES = frozenset({"password"})


class ManagementPermissions:
    """Broker-J's management permissions: administrators manage the broker, other users
    the virtual hosts they may open (see the module docstring)."""

    def allowed(self, principal: Principal, action: Action, target: ConfiguredObject,
                category: str, attributes: Collection[str] = (),
                details: Mapping[str, Any] | None = None) -> bool:
        from broker.model.acl_management import acl_allows, control_of

        control = control_of(target)
        if control is not None and not acl_allows(control, principal, action, target, category,
                                                  attributes, details):
            return False
        provider = _provider_of(target, principal)
        if provider is not None and provider.is_administrator(principal):
            return True
        if action is not Action.READ and (target.category == ACL_CATEGORY
                                          or (action is Action.CREATE and category == ACL_CATEGORY)):
            return False                        # a virtual host's ACL rules are the broker's
        if target.category == "User" or (action is Action.CREATE and category == "User"):
            return action in (Action.READ, Action.UPDATE) and _is_own(target, principal) \
                and (action is Action.READ or set(attributes) <= OWN_USER_ATTRIBUTES)
        vhost = virtual_host_of(target)
        if vhost is not None:
            if target is vhost and action in (Action.UPDATE, Action.DELETE):
                return False                    # the virtual host itself is the broker's
            return provider is not None and provider.may_access(principal, str(vhost.name))
        return action is Action.READ


def _is_own(target: ConfiguredObject, principal: Principal) -> bool:
    provider = target.parent
    return target.category == "User" and target.name == principal.name \
        and provider is not None and provider.name == principal.provider


def _provider_of(target: ConfiguredObject, principal: Principal) -> AuthenticationProvider | None:
    broker = target.ancestor("Broker")
    if broker is None:
        return None
    found = broker.child("AuthenticationProvider", principal.provider)
    return cast("AuthenticationProvider | None", found)


def visibility(permissions: Permissions, principal: Principal
               ) -> Callable[[ConfiguredObject], bool]:
    """``obj -> may principal read it``, for filtering one answer's list of objects.

    The built-in policy decides for an object inside a virtual host by that
    virtual host alone: it is asked once per virtual host, not once for each
    of its 10,000 queues (for the answer at hand only).
    """
    if type(permissions) is not ManagementPermissions:
        def visible(obj: ConfiguredObject) -> bool:
            return permissions.allowed(principal, Action.READ, obj, obj.category)
        return visible

    decided: dict[int, bool] = {}

    def visible_in_vhost(obj: ConfiguredObject) -> bool:
        vhost = obj.ancestor("VirtualHost")
        if vhost is None:
            return permissions.allowed(principal, Action.READ, obj, obj.category)
        allowed = decided.get(id(vhost))
        if allowed is None:
            allowed = decided[id(vhost)] = permissions.allowed(principal, Action.READ, obj,
                                                               obj.category)
        return allowed
    return visible_in_vhost
