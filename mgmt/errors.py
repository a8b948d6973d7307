"""HTTP statuses for what goes wrong, with Broker-J's body ``{"errorMessage": "..."}``.

Bad input is never a 500: unknown objects are 404, a name that exists
already (or an object in a state that forbids the change) 409, invalid
attributes or parameters 422 with a message naming the attribute, malformed
JSON or query parameters 400, missing credentials 401, refused permission
403, a login refused while its source or user is blocked after failed
logins 429 (with ``Retry-After``).  Broker errors map by their AMQP meaning;
a change the store could not make durable (disk full, read-only) is 503 and
was not made.

The error and the mapping are shared with the AMQP 1.0 management node, so
they live in :mod:`broker.model.management`; ``ApiError`` is its
:class:`~broker.model.management.ManagementError`.
"""

from __future__ import annotations

from broker.model.management import BAD_REQUEST as BAD_REQUEST, CONFLICT as CONFLICT, \
    FORBIDDEN as FORBIDDEN, INTERNAL as INTERNAL, METHOD_NOT_ALLOWED as METHOD_NOT_ALLOWED, \
    NOT_FOUND as NOT_FOUND, SERVICE_UNAVAILABLE as SERVICE_UNAVAILABLE, \
    TOO_MANY_REQUESTS as TOO_MANY_REQUESTS, UNAUTHORIZED as UNAUTHORIZED, \
    UNPROCESSABLE as UNPROCESSABLE, from_broker_error as from_broker_error
from broker.model.management import ManagementError as ApiError

__all__ = ["ApiError", "BAD_REQUEST", "CONFLICT", "FORBIDDEN", "INTERNAL", "METHOD_NOT_ALLOWED",
           "NOT_FOUND", "SERVICE_UNAVAILABLE", "TOO_MANY_REQUESTS", "UNAUTHORIZED",
           "UNPROCESSABLE", "from_broker_error"]
