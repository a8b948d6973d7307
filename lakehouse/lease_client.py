"""The Spark consumer's side of a lease: the broker's Queue operations over REST.

The planner of a Spark stream (:mod:`lakehouse.spark_source`) is a lease
consumer of one queue (:mod:`broker.messaging.leases`): it asks the broker
to grant, claim, settle and release messages through the Queue operations
``POST /api/latest/queue/<node>/<vhost>/<queue>/<operation>`` (JSON in and
out, HTTP basic authentication).  Plain :mod:`urllib`: the planner runs in
a Python process Spark starts, where nothing else is needed.

Message ids travel as ``[first, last]`` ranges both ways.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

__all__ = ["BrokerUnavailable", "LeaseClient", "LeaseRefused", "expand"]


class LeaseRefused(RuntimeError):
    """The broker refused the call (4xx): the message says what to fix."""


class BrokerUnavailable(RuntimeError):
    """The broker did not answer (down, restarting) or failed the call (5xx)."""


def expand(ranges: list[list[int]]) -> list[int]:
    """The ids of ``[first, last]`` ranges (as the broker answered them)."""
    return [message_id for first, last in ranges for message_id in range(first, last + 1)]


@dataclass
class LeaseClient:
    """One lease consumer (``consumer``, in planner process ``session``) of one queue."""

    url: str
    node: str
    vhost: str
    queue: str
    consumer: str
    session: str
    user: str
    password: str
    lease_seconds: int
    timeout: float = 60.0

    def grant(self, max_messages: int) -> dict[str, Any]:
        """Up to ``max_messages`` messages (0: renew the lease): the broker's answer."""
        return self._call("grantMessages", {"consumer": self.consumer, "session": self.session,
                                            "max": max_messages, "leaseSeconds": self.lease_seconds})

    def claim(self, ranges: list[list[int]]) -> dict[str, Any]:
        return self._call("claimMessages", {"consumer": self.consumer, "session": self.session,
                                            "messageIds": ranges, "leaseSeconds": self.lease_seconds})

    def settle(self, ranges: list[list[int]]) -> dict[str, Any]:
        return self._call("settleMessages", {"consumer": self.consumer, "session": self.session,
                                             "messageIds": ranges, "leaseSeconds": self.lease_seconds})

    def release(self, ranges: list[list[int]] | None = None) -> dict[str, Any]:
        """Return ``ranges`` to the queue (None: everything held, and detach the consumer)."""
        body: dict[str, Any] = {"consumer": self.consumer}
        if ranges is not None:
            body["messageIds"] = ranges
        return self._call("releaseMessages", body)

    def journal_location(self) -> dict[str, Any]:
        return self._call("getJournalLocation", None)

    @property
    def queue_url(self) -> str:
        names = "/".join(quote(name, safe="") for name in (self.node, self.vhost, self.queue))
        return f"{self.url.rstrip('/')}/api/latest/queue/{names}"

    def _call(self, operation: str, body: dict[str, Any] | None) -> dict[str, Any]:
        target = f"{self.queue_url}/{operation}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(target, data=data, method="GET" if body is None else "POST")
        request.add_header("Content-Type", "application/json")
        token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                answer = json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            text = _error_text(exc)
            where = f"queue '{self.queue}' in virtual host '{self.vhost}' (node '{self.node}') at {self.url}"
            if exc.code == 404:
                raise LeaseRefused(f"{operation} on {where}: {text} -- check the options"
                                   " 'queue', 'vhost' and 'node'") from None
            if exc.code in (401, 403):
                raise LeaseRefused(f"{operation} on {where}: {text} -- check the options"
                                   " 'user' and 'password'") from None
            if exc.code >= 500:
                raise BrokerUnavailable(f"{operation} on {where}: {text}") from None
            raise LeaseRefused(f"{operation} on {where}: {text}") from None
        except (OSError, ValueError) as exc:
            raise BrokerUnavailable(f"{operation}: no answer from the broker at {self.url}: {exc}") from None
        if not isinstance(answer, dict):
            raise BrokerUnavailable(f"{operation}: the broker at {self.url} answered {answer!r}")
        return answer


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(exc.read() or b"{}")
    except (OSError, ValueError):
        return f"HTTP {exc.code}"
    if isinstance(body, dict):
        return f"HTTP {exc.code}: {body.get('errorMessage') or body.get('detail') or body}"
    return f"HTTP {exc.code}: {body}"
