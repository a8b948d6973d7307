"""AMQP 1.0 errors: the broker's errors as 1.0 error conditions, and the engine's own faults.

The messaging layer raises :class:`~broker.errors.BrokerError` subclasses
named after 0-9-1 reply codes; a 1.0 peer hears them as ``error`` values
(spec 2.8.14) whose condition is the nearest of the spec's (2.8.15-2.8.18).
Where an error closes what -- a link (``detach``), a session (``end``) or the
connection (``close``) -- the engine decides with :class:`ProtocolFault`,
which carries its condition and its scope.
"""

from __future__ import annotations

import enum

from broker import errors

from .definitions import (AmqpErrorCondition, ConnectionErrorCondition, Error, LinkErrorCondition,
                          SessionErrorCondition)

__all__ = ["Scope", "ProtocolFault", "condition_of", "error_of", "AmqpErrorCondition",
           "ConnectionErrorCondition", "SessionErrorCondition", "LinkErrorCondition"]

_CONDITIONS: dict[type[errors.BrokerError], str] = {
    errors.NotFound: AmqpErrorCondition.NOT_FOUND,
    errors.InvalidPath: AmqpErrorCondition.NOT_FOUND,
    errors.AccessRefused: AmqpErrorCondition.UNAUTHORIZED_ACCESS,
    errors.ConnectionAccessRefused: AmqpErrorCondition.UNAUTHORIZED_ACCESS,
    errors.AuthenticationFailed: AmqpErrorCondition.UNAUTHORIZED_ACCESS,
    errors.ResourceLocked: AmqpErrorCondition.RESOURCE_LOCKED,
    errors.PreconditionFailed: AmqpErrorCondition.PRECONDITION_FAILED,
    errors.ContentTooLarge: LinkErrorCondition.MESSAGE_SIZE_EXCEEDED,
    errors.ResourceError: AmqpErrorCondition.RESOURCE_LIMIT_EXCEEDED,
    errors.NotAllowed: AmqpErrorCondition.NOT_ALLOWED,
    errors.NotImplemented_: AmqpErrorCondition.NOT_IMPLEMENTED,
    errors.ConnectionForced: ConnectionErrorCondition.CONNECTION_FORCED,
    errors.FrameError: AmqpErrorCondition.DECODE_ERROR,
    errors.SyntaxError_: AmqpErrorCondition.DECODE_ERROR,
    errors.CommandInvalid: AmqpErrorCondition.ILLEGAL_STATE,
    errors.UnexpectedFrame: AmqpErrorCondition.ILLEGAL_STATE,
}


def condition_of(exc: errors.BrokerError) -> str:
    """The 1.0 error condition closest to ``exc`` (``amqp:internal-error`` when none is)."""
    for cls in type(exc).__mro__:
        condition = _CONDITIONS.get(cls)  # type: ignore[arg-type]
        if condition is not None:
            return condition
    return AmqpErrorCondition.INTERNAL_ERROR


def error_of(exc: errors.BrokerError) -> Error:
    return Error(condition=condition_of(exc), description=(exc.text or exc.reply_name)[:1000])


class Scope(enum.Enum):
    """What a fault ends: one link, its session, or the whole connection."""

    LINK = "link"
    SESSION = "session"
    CONNECTION = "connection"


class ProtocolFault(Exception):
    """The peer broke the protocol (or asked for what cannot be); ``condition`` says how,
    ``scope`` what it ends.  ``handle`` names the link of a link-scoped fault."""

    def __init__(self, condition: str, description: str, scope: Scope = Scope.CONNECTION,
                 handle: int | None = None) -> None:
        super().__init__(description)
        self.condition = condition
        self.description = description
        self.scope = scope
        self.handle = handle

    @property
    def error(self) -> Error:
        return Error(condition=self.condition, description=self.description[:1000])
