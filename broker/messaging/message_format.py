"""Message formats: how each protocol encodes a message's metadata, and the registry of them.

A :class:`~broker.messaging.message.Message` keeps its metadata the way its
protocol encoded it (its *native* bytes: for AMQP 0-9-1 the property flags
and values of the content header) together with the format's tag.  Anything
that needs a value out of it (routing on headers, dead-lettering, management,
the journal's readable columns) asks for the *common view*, a
:class:`~broker.messaging.message.MessageProperties` the format decodes on
demand; a consumer speaking another protocol gets bytes the target format
encodes from the common view (RabbitMQ's ``mc`` converts through its hub the
same way, Broker-J through its ``MessageConverter`` classes).

Formats are looked up by tag.  A protocol engine registers its format when
it is imported; a process that never imports the engine (the journal writer,
recovery tools, Spark helpers) finds it through the ``deltamq.message_formats``
entry point group, or the built-in table below when the package is run from
a source checkout.  This module names formats only as text: nothing in
``broker.messaging`` imports a protocol package.

Tags: ``amqp-0-9-1`` (also carries 0-8 and 0-9: the basic properties did not
change); ``amqp-1.0`` (sections as received, see
``broker/protocol/amqp1_0/message_format.py``); ``amqp-0-10`` is reserved.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Final, Protocol

if TYPE_CHECKING:
    from broker.messaging.message import MessageProperties

__all__ = ["MessageFormat", "UnknownMessageFormat", "FORMAT_GROUP", "DEFAULT_FORMAT",
           "AMQP_0_9_1", "AMQP_1_0", "BUILTIN_FORMATS", "register", "format_for", "known_formats"]

AMQP_0_9_1: Final = "amqp-0-9-1"
AMQP_1_0: Final = "amqp-1.0"
#: the format of messages made from a common view alone (management's publishMessage)
#: and of journal rows written before formats had a column (journal schema 1)
DEFAULT_FORMAT: Final = AMQP_0_9_1

FORMAT_GROUP: Final = "deltamq.message_formats"

#: tag -> "module:attribute", consulted when no installed distribution declares the tag
BUILTIN_FORMATS: dict[str, str] = {
    AMQP_0_9_1: "broker.protocol.amqp0_9_1.properties:FORMAT",
    AMQP_1_0: "broker.protocol.amqp1_0.message_format:FORMAT",
}


class MessageFormat(Protocol):
    """One protocol's encoding of message metadata (supplied by its engine).

    ``decode`` must accept whatever ``encode`` returns and whatever the
    engine keeps as native bytes; it raises ValueError on malformed input.
    ``annotations`` are the broker's annotations that travel with a message
    beyond exchange and routing key (``x-death`` and the ``x-first-death-*``
    / ``x-last-death-*`` values of dead-lettering); each format carries them
    where its clients look for them (0-9-1: application headers, RabbitMQ's
    convention; 1.0: message annotations).

    A format may also offer ``annotate(native, annotations) -> bytes``: its
    own native bytes with ``annotations`` added, everything else kept as
    received (AMQP 1.0 has it: properties it cannot express in the common
    view survive a replay that way); without it the common view is encoded.
    """

    @property
    def tag(self) -> str: ...

    def decode(self, native: bytes) -> MessageProperties: ...

    def encode(self, view: MessageProperties,
               annotations: Mapping[str, Any] | None = None) -> bytes: ...


class UnknownMessageFormat(LookupError):
    """No engine, entry point or built-in entry supplies a format with this tag."""


_formats: dict[str, MessageFormat] = {}


def register(fmt: MessageFormat) -> MessageFormat:
    """Make ``fmt`` the format of its tag (an engine does this when imported); returns it."""
    existing = _formats.get(fmt.tag)
    if existing is not None and existing is not fmt:
        raise ValueError(f"message format '{fmt.tag}' is already registered ({existing!r})")
    _formats[fmt.tag] = fmt
    return fmt


def format_for(tag: str) -> MessageFormat:
    """The format registered as ``tag``, importing its engine's module if need be."""
    fmt = _formats.get(tag)
    if fmt is not None:
        return fmt
    target = _declared(tag)
    if target is None:
        raise UnknownMessageFormat(f"unknown message format '{tag}'; known: "
                                   f"{', '.join(known_formats()) or 'none'}")
    module_name, _, attribute = target.partition(":")
    loaded = getattr(importlib.import_module(module_name), attribute)
    return _formats.get(tag) or register(loaded)


def known_formats() -> list[str]:
    """Tags that :func:`format_for` can resolve, without importing anything."""
    return sorted(set(_formats) | set(BUILTIN_FORMATS)
                  | {ep.name for ep in entry_points(group=FORMAT_GROUP)})


def _declared(tag: str) -> str | None:
    for ep in entry_points(group=FORMAT_GROUP):
        if ep.name == tag:
            return str(ep.value)
    return BUILTIN_FORMATS.get(tag)
