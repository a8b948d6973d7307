"""Clients' host names for ACL rules with ``from_hostname``: reverse DNS off the event loop.

Broker-J matches ``from_hostname`` (regular expressions) against the name of
the address a client connects from.  Looking a name up blocks, and may take
seconds, so the broker never does it on the event loop, nor when no rule in
force needs it:

* when a connection is accepted and some rule uses ``from_hostname``
  (:attr:`~broker.security.access_control.AccessControl.uses_hostnames`),
  :meth:`HostNames.look_up` starts ``socket.gethostbyaddr`` on the address
  in :data:`WORKERS` daemon threads of its own (a slow name server cannot
  hold up the threads that verify passwords, nor the broker's exit); one
  look-up per address at a time, at most :data:`MAX_PENDING` handed to the
  threads and not yet answered -- one that timed out keeps its place until
  the resolver returns, so a name server that hangs while many new
  addresses connect cannot pile up work;
* the name must resolve back to the address (forward-confirmed, as Java's
  ``getCanonicalHostName``, Broker-J's look-up, checks): otherwise whoever
  runs the client's reverse zone could give it any name;
* an answer is kept per address for :data:`TTL` seconds, a failure (no
  name, an error, or no answer within :data:`TIMEOUT` seconds) for
  :data:`FAILED_TTL`; an answer that comes after the timeout is dropped;
* the connection's ACL subject takes the name known when it opens its
  virtual host; one whose look-up is still running takes it when it comes
  (:meth:`HostNames.when_known`).

Until a client's name is known -- and when it cannot be -- a rule that
needs it does not match, as in Broker-J: with the usual final ``DENY``, or
the default DENIED, what only such a rule would allow is refused.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import queue
import socket
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

TTL = 300.0
FAILED_TTL = 60.0
TIMEOUT = 5.0
MAX_PENDING = 64
WORKERS = 2


def reverse_lookup(address: str) -> str | None:
    """The host name of ``address`` (blocking; None when it has none, or when the name does
    not resolve back to ``address``)."""
    bare = address.split("%")[0]
    try:
        name = socket.gethostbyaddr(bare)[0]
        if not name:
            return None
        resolved = {_ip(info[4][0]) for info in socket.getaddrinfo(name, None)}
    except (OSError, UnicodeError, ValueError):
        return None
    ip = _ip(bare)
    if ip is None or ip not in resolved:
        log.info("host name %r of %s does not resolve back to it: from_hostname rules do not"
                 " match it", name, address)
        return None
    return name


def _ip(text: object) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``text`` as an address (an IPv4-mapped IPv6 one as IPv4; None if it is none)."""
    try:
        ip = ipaddress.ip_address(str(text).split("%")[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


class HostNames:
    """Reverse look-ups of client addresses, cached (see the module docstring)."""

    def __init__(self, resolve: Callable[[str], str | None] = reverse_lookup, *,
                 ttl: float = TTL, failed_ttl: float = FAILED_TTL, timeout: float = TIMEOUT,
                 max_pending: int = MAX_PENDING, clock: Callable[[], float] = time.monotonic) -> None:
        self._resolve = resolve
        self.ttl, self.failed_ttl, self.timeout = ttl, failed_ttl, timeout
        self.max_pending = max_pending
        self._clock = clock
        #: address -> (name or None, when the entry expires)
        self._known: dict[str, tuple[str | None, float]] = {}
        #: address -> callbacks waiting for its look-up
        self._pending: dict[str, list[Callable[[str | None], None]]] = {}
        #: (address, loop) for the worker threads; None tells one to stop
        self._work: queue.SimpleQueue[tuple[str, asyncio.AbstractEventLoop] | None] = \
            queue.SimpleQueue()
        self._workers: list[threading.Thread] = []
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self.lookups = 0
        self.failures = 0
        #: look-ups handed to the threads and not answered yet (timed out or not)
        self.running = 0

    def known(self, address: str) -> tuple[bool, str | None]:
        """(whether an unexpired answer is kept, the name it gives)."""
        entry = self._known.get(address)
        if entry is None:
            return False, None
        if entry[1] <= self._clock():
            del self._known[address]
            return False, None
        return True, entry[0]

    def pending(self, address: str) -> bool:
        return address in self._pending

    def look_up(self, address: str) -> None:
        """Start looking ``address`` up, unless known, already asked, or too many are running.
        Call on the event loop."""
        if not address or address in self._pending or self.known(address)[0]:
            return
        if self.running >= self.max_pending:
            log.debug("not looking up %s: %d look-ups already running", address, self.running)
            return
        loop = asyncio.get_running_loop()
        while len(self._workers) < WORKERS:
            worker = threading.Thread(target=self._worker, name="deltamq-hostname", daemon=True)
            worker.start()
            self._workers.append(worker)
        self._pending[address] = []
        self.lookups += 1
        self.running += 1
        self._timers[address] = loop.call_later(self.timeout, self._settle, address, None, True)
        self._work.put((address, loop))

    def _worker(self) -> None:
        while (job := self._work.get()) is not None:
            address, loop = job
            try:
                name = self._resolve(address)
            except Exception:            # a resolver that fails is a look-up without a name
                log.debug("looking up %s failed", address, exc_info=True)
                name = None
            try:
                loop.call_soon_threadsafe(self._answered, address, name)
            except RuntimeError:         # the loop is closed: nobody waits any more
                return

    def when_known(self, address: str, callback: Callable[[str | None], None]) -> bool:
        """Call ``callback`` with the name once the running look-up of ``address`` ends (None:
        it failed or timed out); False when none is running (nothing will be called)."""
        waiting = self._pending.get(address)
        if waiting is None:
            return False
        waiting.append(callback)
        return True

    def _answered(self, address: str, name: str | None) -> None:
        """A thread's answer (on the loop): its place is free again."""
        self.running -= 1
        self._settle(address, name, False)

    def _settle(self, address: str, name: str | None, timed_out: bool) -> None:
        waiting = self._pending.pop(address, None)
        if waiting is None:
            return                               # timed out before: the late answer is dropped
        timer = self._timers.pop(address, None)
        if timer is not None:
            timer.cancel()
        if name is None:
            self.failures += 1
            if timed_out:
                log.info("no host name for %s within %g s: from_hostname rules do not match it",
                         address, self.timeout)
        self._known[address] = (name, self._clock() + (self.ttl if name else self.failed_ttl))
        if len(self._known) > 10 * self.max_pending * 16:
            now = self._clock()
            self._known = {a: e for a, e in self._known.items() if e[1] > now}
        for callback in waiting:
            callback(name)

    def close(self) -> None:
        """Stop the worker threads (a look-up running on finishes first)."""
        for _ in self._workers:
            self._work.put(None)
        self._workers.clear()
