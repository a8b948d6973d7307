"""Resource alarms: publishers are blocked while memory or free disk space runs short.

RabbitMQ's two alarms, checked together once a second (:data:`CHECK_INTERVAL`):

* **memory**: the bytes the broker holds for others -- the bodies of the
  messages its queues hold (ready and delivered-but-unsettled, counted once
  per queue, as Broker-J's queue depth in bytes; messages paged out to disk
  are not counted), :data:`MESSAGE_OVERHEAD` for each such message, and what the connections buffer (unsent output,
  input not yet parsed) -- against the broker's ``memoryHighWatermark``.
  The process's resident size is reported beside it but not used: the
  allocator keeps freed memory, so RSS does not fall when queues drain and
  an alarm on it would never clear;
* **disk**: the bytes free for the broker's user on the data directory's
  file system (``os.statvfs``) against ``diskFreeLimit``
  (``deltamq.disk_free_limit``, default 50 MB as RabbitMQ's
  ``disk_free_limit``; 0 turns the alarm off).

An alarm is set past its limit and cleared only once back past the limit by
:data:`HYSTERESIS` of it (memory below 90% of the watermark, free space above
110% of the limit), so a broker hovering at a limit does not flap.  While
either alarm is set, connections that publish get ``connection.blocked``
whose reason says which (``low on memory``, ``low on disk``, ``low on memory
& disk``, as RabbitMQ words it), and ``connection.unblocked`` once both are
clear.  Each change of an alarm is logged once.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from typing import Protocol

log = logging.getLogger("deltamq")

CHECK_INTERVAL = 1.0
#: share of a limit an alarm must move back past before it clears
HYSTERESIS = 0.1
#: bytes a held message costs besides its body: the Message object, its encoded
#: properties and the queue's slot (measured: ~200 bytes), a delivery's entry and record
MESSAGE_OVERHEAD = 256
#: RabbitMQ's default ``disk_free_limit`` (50 MB)
DEFAULT_DISK_FREE_LIMIT = 50_000_000

MEMORY = "memory"
DISK = "disk"


class HeldQueue(Protocol):
    """What the memory alarm reads of a queue (:class:`broker.messaging.queue.Queue`)."""

    @property
    def message_count(self) -> int: ...

    @property
    def message_bytes(self) -> int: ...

    @property
    def unacked_count(self) -> int: ...

    @property
    def unacked_bytes(self) -> int: ...


class BlockableConnections(Protocol):
    """The connections of one port (:class:`broker.transport.tcp.ConnectionRegistry`)."""

    def set_blocked(self, blocked: bool, reason: str = ...) -> None: ...

    @property
    def buffered_bytes(self) -> int: ...


class ResourceAlarm:
    """One resource's alarm: set past ``limit``, cleared once back past it by the hysteresis.

    ``when_below`` alarms on values under the limit (free disk space), else
    on values over it (memory in use).  A limit of 0 or less never alarms.
    """

    def __init__(self, resource: str, limit: int, *, when_below: bool = False) -> None:
        self.resource = resource
        self.limit = limit
        self.when_below = when_below
        self.set = False
        #: the last measurement (None: never measured, or it could not be)
        self.value: int | None = None

    @property
    def clear_at(self) -> int:
        """The value the alarm clears at, once set."""
        margin = int(self.limit * HYSTERESIS)
        return self.limit + margin if self.when_below else self.limit - margin

    def update(self, value: int | None) -> bool:
        """Take a measurement; True when the alarm was set or cleared by it."""
        self.value = value
        if self.limit <= 0:
            changed, self.set = self.set, False
            return changed
        if value is None:                      # not measurable now: the state stands
            return False
        if self.when_below:
            now = value < self.limit if not self.set else value < self.clear_at
        else:
            now = value > self.limit if not self.set else value > self.clear_at
        changed, self.set = now != self.set, now
        return changed


class ResourceAlarms:
    """The memory and disk alarms and the blocking of publishers they cause."""

    def __init__(self, memory_limit: int, disk_free_limit: int, *, data_dir: str | None,
                 queues: Callable[[], Iterable[HeldQueue]] = lambda: (),
                 registries: Callable[[], Iterable[BlockableConnections]] = lambda: ()) -> None:
        self.memory = ResourceAlarm(MEMORY, memory_limit)
        self.disk = ResourceAlarm(DISK, 0, when_below=True)
        #: every queue of every virtual host, as they are now
        self.queues = queues
        #: the directory whose file system's free space is watched (None: not watched)
        self.data_dir = data_dir
        #: the connections of every AMQP port, as they are now
        self.registries = registries
        self.set_limits(memory_limit, disk_free_limit)

    def set_limits(self, memory_limit: int, disk_free_limit: int) -> None:
        """The limits as configured now (management may change them): the next check uses them."""
        self.memory.limit = memory_limit
        self.disk.limit = disk_free_limit if self.data_dir is not None else 0

    @property
    def reason(self) -> str:
        """Why publishers are blocked ("low on memory & disk"), "" when they are not."""
        short = [alarm.resource for alarm in (self.memory, self.disk) if alarm.set]
        return "low on " + " & ".join(short) if short else ""

    def check(self) -> None:
        """Measure both resources; log and tell every connection when the outcome changes."""
        was = self.reason
        if self.memory.update(held_bytes(self.queues(), self.registries())):
            self._log_memory()
        if self.disk.update(free_disk_space(self.data_dir)):
            self._log_disk()
        reason = self.reason
        if reason != was:
            for registry in self.registries():
                registry.set_blocked(bool(reason), reason)

    def _log_memory(self) -> None:
        alarm = self.memory
        if alarm.set:
            log.warning("memory alarm set: queues and connections hold %d bytes, above the"
                        " memoryHighWatermark of %d; publishers are blocked",
                        alarm.value, alarm.limit)
        else:
            log.warning("memory alarm cleared: queues and connections hold %d bytes (clears"
                        " below %d)", alarm.value, alarm.clear_at)

    def _log_disk(self) -> None:
        alarm = self.disk
        if alarm.set:
            log.warning("disk alarm set: %d bytes free on the file system of %s, below the"
                        " diskFreeLimit of %d; publishers are blocked",
                        alarm.value, self.data_dir, alarm.limit)
        else:
            log.warning("disk alarm cleared: %s bytes free on the file system of %s (clears"
                        " at %d)", alarm.value, self.data_dir, alarm.clear_at)


def held_bytes(queues: Iterable[HeldQueue], registries: Iterable[BlockableConnections]) -> int:
    """The memory the alarm accounts: queued and unsettled messages, connection buffers."""
    total = 0
    for queue in queues:
        # messages paged out to disk (flow to disk) hold no memory: not counted
        paged = getattr(queue, "paged_count", 0)
        total += (queue.message_bytes + queue.unacked_bytes - getattr(queue, "paged_bytes", 0)
                  + (queue.message_count + queue.unacked_count - paged) * MESSAGE_OVERHEAD)
    for registry in registries:
        total += registry.buffered_bytes
    return total


def free_disk_space(path: str | None) -> int | None:
    """Bytes an unprivileged user may still write on ``path``'s file system (None: unknown)."""
    if path is None:
        return None
    try:
        stats = os.statvfs(path)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


def resident_memory() -> int:
    """The process's resident set size in bytes (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
