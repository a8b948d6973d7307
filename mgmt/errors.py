"""HTTP statuses for what goes wrong, with Broker-J's body ``{"errorMessage": "..."}``.

Bad input is never a 500: unknown objects are 404, a name that exists
already (or an object in a state that forbids the change) 409, invalid
attributes or parameters 422 with a message naming the attribute, malformed
JSON or query parameters 400, missing credentials 401, refused permission
403, a login refused while its source or user is blocked after failed
logins 429 (with ``Retry-After``).  Broker errors map by their AMQP meaning;
a change the store could not make durable (disk full, read-only) is 503 and
was not made.
"""

from __future__ import annotations

from typing import Any

from broker import errors

BAD_REQUEST = 400
UNAUTHORIZED = 401
FORBIDDEN = 403
NOT_FOUND = 404
METHOD_NOT_ALLOWED = 405
CONFLICT = 409
UNPROCESSABLE = 422
TOO_MANY_REQUESTS = 429
INTERNAL = 500
SERVICE_UNAVAILABLE = 503


class ApiError(Exception):
    """An answer other than success: status, message, extra headers."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}

    @property
    def body(self) -> dict[str, Any]:
        return {"errorMessage": self.message}


def from_broker_error(exc: errors.BrokerError, *, configuration_status: int = UNPROCESSABLE
                      ) -> ApiError:
    """The HTTP answer to a broker error.

    ``configuration_status`` is what a ConfigurationError means here: an
    invalid attribute (422) on create and update, a conflict with the
    object's state (409) on delete ("used by port ...").
    """
    text = exc.text or str(exc)
    if isinstance(exc, errors.ConfigurationError):
        return ApiError(configuration_status, text)
    if isinstance(exc, errors.NotFound):
        return ApiError(NOT_FOUND, text)
    if isinstance(exc, (errors.ResourceLocked, errors.PreconditionFailed)):
        return ApiError(CONFLICT, text)
    if isinstance(exc, (errors.AccessRefused, errors.NotAllowed, errors.ConnectionAccessRefused)):
        return ApiError(FORBIDDEN, text)
    if isinstance(exc, errors.StoreFailed):
        return ApiError(SERVICE_UNAVAILABLE, text)
    if isinstance(exc, errors.InternalError):
        return ApiError(INTERNAL, text)
    return ApiError(UNPROCESSABLE, text)
