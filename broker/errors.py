"""One root for every error the broker raises on purpose.

Errors that a client can cause carry the AMQP 0-9-1 reply code they map to
(spec section 1.8, "Constants") and whether they are *hard* (connection
exceptions: the whole connection is closed) or *soft* (channel exceptions:
only the channel is closed).  Other protocol families translate these codes
into their own terms (AMQP 1.0 error conditions, 0-10 execution exceptions).

The text of an error names what was wrong, RabbitMQ-style, e.g.
``NOT_FOUND - no queue 'orders' in vhost 'default'``: client libraries show
it to users verbatim.
"""

from __future__ import annotations

from typing import ClassVar


class BrokerError(Exception):
    """Root of every deliberate broker error."""

    reply_code: ClassVar[int] = 541
    reply_name: ClassVar[str] = "INTERNAL_ERROR"
    hard: ClassVar[bool] = True

    def __init__(self, text: str = "") -> None:
        super().__init__(text)
        self.text = text

    @property
    def reply_text(self) -> str:
        """The text sent to clients: ``<NAME> - <what was wrong>``."""
        return f"{self.reply_name} - {self.text}" if self.text else self.reply_name


# -- soft errors: close the channel -----------------------------------------

class ContentTooLarge(BrokerError):
    reply_code, reply_name, hard = 311, "CONTENT_TOO_LARGE", False


class NoRoute(BrokerError):
    reply_code, reply_name, hard = 312, "NO_ROUTE", False


class NoConsumers(BrokerError):
    reply_code, reply_name, hard = 313, "NO_CONSUMERS", False


class AccessRefused(BrokerError):
    reply_code, reply_name, hard = 403, "ACCESS_REFUSED", False


class NotFound(BrokerError):
    reply_code, reply_name, hard = 404, "NOT_FOUND", False


class ResourceLocked(BrokerError):
    reply_code, reply_name, hard = 405, "RESOURCE_LOCKED", False


class PreconditionFailed(BrokerError):
    reply_code, reply_name, hard = 406, "PRECONDITION_FAILED", False


# -- hard errors: close the connection --------------------------------------

class ConnectionForced(BrokerError):
    reply_code, reply_name, hard = 320, "CONNECTION_FORCED", True


class InvalidPath(BrokerError):
    reply_code, reply_name, hard = 402, "INVALID_PATH", True


class ConnectionAccessRefused(BrokerError):
    """403 raised during connection negotiation (authentication, vhost access)."""

    reply_code, reply_name, hard = 403, "ACCESS_REFUSED", True


class FrameError(BrokerError):
    reply_code, reply_name, hard = 501, "FRAME_ERROR", True


class SyntaxError_(BrokerError):
    reply_code, reply_name, hard = 502, "SYNTAX_ERROR", True


class CommandInvalid(BrokerError):
    reply_code, reply_name, hard = 503, "COMMAND_INVALID", True


class ChannelError(BrokerError):
    reply_code, reply_name, hard = 504, "CHANNEL_ERROR", True


class UnexpectedFrame(BrokerError):
    reply_code, reply_name, hard = 505, "UNEXPECTED_FRAME", True


class ResourceError(BrokerError):
    reply_code, reply_name, hard = 506, "RESOURCE_ERROR", True


class NotAllowed(BrokerError):
    reply_code, reply_name, hard = 530, "NOT_ALLOWED", True


class NotImplemented_(BrokerError):
    reply_code, reply_name, hard = 540, "NOT_IMPLEMENTED", True


class InternalError(BrokerError):
    reply_code, reply_name, hard = 541, "INTERNAL_ERROR", True


class StoreFailed(BrokerError):
    """A durable change could not be stored (disk full, read-only): it was not made.

    541 INTERNAL_ERROR, but on the channel only: the connection's other channels,
    and other connections, keep working (management answers 503).
    """

    reply_code, reply_name, hard = 541, "INTERNAL_ERROR", False


# -- configuration / model errors (not caused by a wire peer) ---------------

class ConfigurationError(BrokerError):
    """Invalid configuration: an unknown attribute, a bad value, a missing mandatory one."""

    reply_code, reply_name, hard = 406, "PRECONDITION_FAILED", False


class AuthenticationFailed(ConnectionAccessRefused):
    """SASL authentication failed (RabbitMQ closes with 403 ACCESS_REFUSED)."""
