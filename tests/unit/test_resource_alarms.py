"""The memory and disk alarms (broker.resource_alarms): accounting, hysteresis, blocking."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from broker.messaging import Queue
from broker.resource_alarms import MESSAGE_OVERHEAD, ResourceAlarm, ResourceAlarms, \
    free_disk_space, held_bytes

from .messaging.support import message


@dataclass
class Registry:
    """A port's connections, as the alarms see them: what they buffer, what they were told."""

    buffered_bytes: int = 0
    told: list[tuple[bool, str]] = field(default_factory=list)

    def set_blocked(self, blocked: bool, reason: str = "low on memory") -> None:
        self.told.append((blocked, reason))


@pytest.mark.parametrize(("limit", "when_below", "values", "states"), [
    # memory: set above the limit, cleared only at or below 90% of it
    (1000, False, [900, 1001, 950, 901, 900, 1000, 1001],
     [False, True, True, True, False, False, True]),
    # disk: set below the limit, cleared only at or above 110% of it
    (1000, True, [1000, 999, 1050, 1099, 1100, 1000, 999],
     [False, True, True, True, False, False, True]),
    # a limit of 0 never alarms
    (0, True, [0, 5], [False, False]),
])
def test_an_alarm_clears_only_past_its_hysteresis(limit: int, when_below: bool, values: list[int],
                                                  states: list[bool]) -> None:
    alarm = ResourceAlarm("r", limit, when_below=when_below)
    seen = []
    for value in values:
        alarm.update(value)
        seen.append(alarm.set)
    assert seen == states


def test_an_unknown_value_keeps_the_alarm_as_it_is() -> None:
    alarm = ResourceAlarm("disk", 1000, when_below=True)
    alarm.update(10)
    assert alarm.update(None) is False and alarm.set


def test_held_bytes_are_queued_and_unacknowledged_bodies_and_connection_buffers() -> None:
    queue = Queue("q")
    for body in (b"a" * 100, b"b" * 50, b"c" * 10):
        queue.enqueue(message(body))
    queue.get()                                   # 100 bytes unacknowledged
    assert held_bytes([queue], [Registry(7), Registry(3)]) == 160 + 3 * MESSAGE_OVERHEAD + 10
    while (entry := queue.get()) is not None:
        queue.settle(entry)
    assert held_bytes([queue], []) == 100 + MESSAGE_OVERHEAD     # the first is still unsettled


def test_memory_alarm_is_set_by_queued_messages_and_cleared_when_they_are_consumed(
        caplog: pytest.LogCaptureFixture) -> None:
    queue, registry = Queue("q"), Registry()
    alarms = ResourceAlarms(10_000, 0, data_dir=None, queues=lambda: [queue],
                            registries=lambda: [registry])
    caplog.set_level(logging.WARNING, "deltamq")
    for _ in range(20):
        queue.enqueue(message(b"x" * 1000))
    alarms.check()
    alarms.check()
    assert alarms.memory.set and alarms.reason == "low on memory"
    assert registry.told == [(True, "low on memory")]
    while (entry := queue.get()) is not None:
        queue.settle(entry)
    alarms.check()
    alarms.check()
    assert not alarms.memory.set and registry.told[-1] == (False, "")
    assert [r.message.split(":")[0] for r in caplog.records] == ["memory alarm set",
                                                                 "memory alarm cleared"]


def test_disk_alarm_measures_the_data_directory_and_combines_with_memory(tmp_path: Path) -> None:
    free = free_disk_space(str(tmp_path))
    assert free is not None and free > 0
    stats = os.statvfs(tmp_path)
    assert free == stats.f_bavail * stats.f_frsize
    queue, registry = Queue("q"), Registry()
    alarms = ResourceAlarms(1, 0, data_dir=str(tmp_path), queues=lambda: [queue],
                            registries=lambda: [registry])
    alarms.set_limits(1, free * 2)                # more than this file system has free
    alarms.check()
    assert alarms.disk.set and alarms.disk.value is not None
    assert registry.told == [(True, "low on disk")]
    queue.enqueue(message(b"m"))
    alarms.check()
    assert alarms.reason == "low on memory & disk"
    alarms.set_limits(1, 1)                       # plenty free now
    alarms.check()
    assert registry.told[-1] == (True, "low on memory")
    queue.get(no_ack=True)
    alarms.check()
    assert registry.told[-1] == (False, "") and alarms.reason == ""


def test_without_a_local_data_directory_there_is_no_disk_alarm() -> None:
    alarms = ResourceAlarms(1 << 30, 1 << 62, data_dir=None)
    alarms.check()
    assert not alarms.disk.set and alarms.disk.value is None
    alarms.set_limits(1 << 30, 1 << 62)
    assert alarms.disk.limit == 0


def test_changed_limits_apply_at_the_next_check(tmp_path: Path) -> None:
    alarms = ResourceAlarms(1 << 30, 0, data_dir=str(tmp_path))
    alarms.check()
    assert alarms.reason == ""
    alarms.set_limits(1 << 30, 1 << 62)          # diskFreeLimit raised over management
    alarms.check()
    assert alarms.reason == "low on disk"
