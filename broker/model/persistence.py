"""Keeping a configuration store in step with the model, and recovering from it.

An object that ``manages_children`` (SystemConfig, VirtualHostNode) owns a
:class:`~broker.model.config_store.DurableConfigurationStore` for its durable
descendants -- down to, and including, the next object that owns a store of
its own.  :class:`StoreBinding` is the change listener that writes every
creation, change and deletion through (Broker-J's
``ConfigurationChangeListener`` on a ``DurableConfigurationStore``);
:func:`recover` rebuilds the objects from the records, unopened.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from broker.errors import ConfigurationError
from broker.model import registry
from broker.model.config_store import ConfigurationRecord, DurableConfigurationStore, ordered
from broker.model.configured_object import ChangeListener, ConfiguredObject, State, \
    default_type

log = logging.getLogger(__name__)


class StoreBinding(ChangeListener):
    """Writes the durable descendants of ``owner`` through to ``store``."""

    def __init__(self, owner: ConfiguredObject, store: DurableConfigurationStore) -> None:
        self.owner = owner
        self.store = store

    def attach(self) -> None:
        """Start listening to the owner and to every durable descendant it manages."""
        for obj in self._managed(self.owner, include_self=True):
            if self not in obj.listeners:
                obj.listeners.append(self)

    def detach(self) -> None:
        for obj in self._managed(self.owner, include_self=True):
            if self in obj.listeners:
                obj.listeners.remove(self)

    def record(self, obj: ConfiguredObject) -> ConfigurationRecord:
        parent = obj.parent
        parent_id = None if parent is None or parent is self.owner else parent.id
        return ConfigurationRecord(obj.id, obj.category, parent_id, obj.actual_attributes)

    def _managed(self, obj: ConfiguredObject, *, include_self: bool) -> Iterator[ConfiguredObject]:
        """``obj`` and its durable descendants, not looking inside other store owners."""
        if include_self:
            yield obj
        if obj.manages_children and obj is not self.owner:
            return
        for child in obj.all_children():
            if child.durable:
                yield from self._managed(child, include_self=True)

    # -- ChangeListener ----------------------------------------------------------

    def _owns(self, parent: ConfiguredObject, child: ConfiguredObject) -> bool:
        """Is ``child`` kept in this store (not in the store of another owner)?"""
        return child.durable and (parent is self.owner or not parent.manages_children)

    def child_added(self, obj: ConfiguredObject, child: ConfiguredObject) -> None:
        if not self._owns(obj, child):
            return
        added = list(self._managed(child, include_self=True))
        self.store.save([self.record(each) for each in added])
        for each in added:
            if self not in each.listeners:
                each.listeners.append(self)

    def child_removed(self, obj: ConfiguredObject, child: ConfiguredObject) -> None:
        if not self._owns(obj, child):
            return
        self.store.remove([child.id])
        if self in child.listeners:
            child.listeners.remove(self)

    def attribute_set(self, obj: ConfiguredObject, name: str, old: Any, new: Any) -> None:
        if obj is self.owner or obj.state is State.DELETED:
            return
        self.store.save([self.record(obj)])


def recover(owner: ConfiguredObject, records: Iterable[ConfigurationRecord]) -> list[ConfiguredObject]:
    """Rebuild ``owner``'s stored descendants, attached but not opened.

    The owner's :meth:`~ConfiguredObject.open` then opens them, parents first.
    A record whose parent is unknown is logged and skipped, as Broker-J does
    with an unresolvable record.
    """
    objects: dict[str | None, ConfiguredObject] = {None: owner}
    recovered: list[ConfiguredObject] = []
    for record in ordered(records):
        parent = objects.get(record.parent_id)
        if parent is None:
            log.warning("%s: ignoring stored %s %s whose parent %s is unknown",
                        owner.label, record.category, record.id, record.parent_id)
            continue
        type_name = record.attributes.get("type")
        if isinstance(type_name, str):
            type_name = parent.resolve(type_name)
        cls = registry.specialisation(record.category, type_name or default_type(record.category))
        obj = cls(parent, record.attributes, id=record.id)
        parent._attach(obj)
        objects[obj.id] = obj
        recovered.append(obj)
    return recovered


def records_from_tree(category: str, data: Mapping[str, Any],
                      parent_id: str | None = None,
                      stop_at: frozenset[str] = frozenset()) -> list[ConfigurationRecord]:
    """Records for a nested configuration (a config file's object and its children).

    Children are listed under the lower-case plural of their category
    (``ports``, ``authenticationproviders``, ``virtualhostnodes``...).
    Categories in ``stop_at`` become records but their children are refused,
    because they belong to another store.
    """
    info = registry.category(category)
    child_keys = {registry.category(child).plural: child for child in info.children}
    attributes = {key: value for key, value in data.items() if key not in child_keys}
    record_id = str(attributes.pop("id", None) or uuid.uuid4())
    records = [ConfigurationRecord(record_id, info.name, parent_id, attributes)]
    for key, child_category in child_keys.items():
        members = data.get(key)
        if members is None:
            continue
        if info.name in stop_at:
            raise ConfigurationError(f"{info.name} '{data.get('name')}': '{key}' cannot be given"
                                     " here; they are kept in the node's own store")
        if not isinstance(members, list):
            raise ConfigurationError(f"{info.name} '{data.get('name')}': '{key}' must be a list")
        for member in members:
            if not isinstance(member, Mapping):
                raise ConfigurationError(f"{info.name} '{data.get('name')}': each of '{key}'"
                                         " must be an object")
            records.extend(records_from_tree(child_category, member, record_id, stop_at))
    return records
