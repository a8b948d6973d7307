"""Where the broker's two busiest threads run: the event loop on CPUs of its own, the journal's writer on others.

The journal's writer threads run under real-time scheduling
(:mod:`lakehouse.writer_priority`), so that a commit never waits for a core.
The kernel wakes a real-time thread on the CPU it last ran on and preempts
whatever normal thread runs there -- which, since the broker's event loop is
what wakes the writer (it writes the next group to the writer's pipe), was
very often the event loop itself.  Profiled at 21,000 durable AMQP 1.0
messages a second on 2 cores, the loop spent 31 % of its samples inside that
one ``write`` to the pipe: preempted, while the other core ran a client or
nothing.  The loop's reaction to the writer's answers (the deliveries and
dispositions of a durable group) waited for it too.

So, when the writer's threads may be real-time and the broker may use two
CPUs or more, the event loop's thread is kept on some of them while
journals commit (:class:`LoopPlacement`; on every CPU after
``DELTAMQ_CPU_PLACEMENT_IDLE_S``, 5 s, without a commit) and every
journal writer process on the others, with the upkeep process each writer
starts (checkpoints, compaction: at idle priority it takes what the writers
leave of their CPUs, and its files' writes keep off the loop's).  The
writer's real-time threads never run on the loop's CPUs, whatever they do.
Everything else the broker starts may run anywhere: its worker threads (TLS
handshakes, Delta and Spark work, the configuration store's) and its other
processes (the configuration writer, Spark's JVM) set themselves back to
all the CPUs the broker was given (:func:`release_this_thread`,
:func:`release_this_process`), since a thread or process inherits the CPUs
of the thread that started it.

Measured (docs/journal-commits.md, "The event loop and the writer on CPUs of
their own"): 1.0 durable messages at half the peak rate, p50 7.0-9.1 ->
5.3-6.4 ms; with the upkeep on every CPU instead, p50 6.2-7.0 ms.

``DELTAMQ_CPU_PLACEMENT``:

* ``auto`` (the default): on 2-8 CPUs the writers get the last one, on more
  one in eight (the last ones); the loop the others.  Nothing is placed on
  one CPU, or when the writer's threads may not be real-time (without root,
  ``CAP_SYS_NICE`` or an ``RLIMIT_RTPRIO``, or with
  ``DELTAMQ_JOURNAL_WRITER_PRIORITY`` set to a niceness);
* ``off``: nothing is placed;
* ``<loop CPUs>/<writer CPUs>``, each a list as ``taskset -c`` takes it
  (``0/1``, ``0-5/6,7``): these, whatever the writer's scheduling.  Both
  must be CPUs the broker may use, and must not overlap.

What the broker decided is passed to the processes it starts in
``DELTAMQ_CPU_PLAN`` (``<loop>/<writer>/<all>``); it is not a setting.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

__all__ = ["Placement", "LoopPlacement", "SETTING", "IDLE_SETTING", "IDLE_AFTER", "PLAN", "parse_cpu_list",
           "format_cpu_list", "plan", "plan_for_broker", "inherited", "place_writer_process", "writer_realtime",
           "stay_on_inherited_cpus", "release_this_thread", "release_this_process", "released"]

log = logging.getLogger(__name__)

#: the setting (environment variable), see the module's doc
SETTING = "DELTAMQ_CPU_PLACEMENT"
#: what the broker decided, for the processes it starts (not a setting)
PLAN = "DELTAMQ_CPU_PLAN"
#: seconds without a journal commit after which the loop's thread may run on every CPU again
IDLE_AFTER = 5.0
#: the setting for it (environment variable)
IDLE_SETTING = "DELTAMQ_CPU_PLACEMENT_IDLE_S"
#: the journal writers' scheduling setting (lakehouse.writer_priority; "rr" unless set)
WRITER_PRIORITY = "DELTAMQ_JOURNAL_WRITER_PRIORITY"

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class Placement:
    """The CPUs of the event loop, of the journal writers, and of everything else (all the broker's)."""

    loop: frozenset[int]
    writer: frozenset[int]
    everything: frozenset[int]

    def encode(self) -> str:
        return "/".join(format_cpu_list(cpus) for cpus in (self.loop, self.writer, self.everything))

    @classmethod
    def decode(cls, text: str) -> Placement:
        loop, writer, everything = (parse_cpu_list(part) for part in text.split("/"))
        return cls(loop, writer, everything)

    def describe(self) -> str:
        return (f"event loop on CPU {format_cpu_list(self.loop)} while journals commit, journal writers on CPU "
                f"{format_cpu_list(self.writer)} ({SETTING})")


def parse_cpu_list(text: str) -> frozenset[int]:
    """``"0-2,5"`` -> {0, 1, 2, 5}; ValueError naming what is wrong."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        first, dash, last = part.strip().partition("-")
        try:
            low, high = int(first), int(last if dash else first)
        except ValueError:
            raise ValueError(f"{part.strip()!r} is not a CPU number or range (as in 0-3,6)") from None
        if low < 0 or high < low:
            raise ValueError(f"{part.strip()!r} is not a CPU range (as in 0-3)")
        cpus.update(range(low, high + 1))
    return frozenset(cpus)


def format_cpu_list(cpus: Iterable[int]) -> str:
    """{0, 1, 2, 5} -> ``"0-2,5"``."""
    runs: list[list[int]] = []
    for cpu in sorted(cpus):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(low) if low == high else f"{low}-{high}" for low, high in runs)


def plan(setting: str, allowed: Iterable[int], realtime: bool) -> Placement | None:
    """The placement ``setting`` asks for, on the CPUs ``allowed``; None: nothing placed.

    ``realtime``: whether the journal writer's threads may run under real-time
    scheduling (``auto`` places nothing otherwise).  ValueError for a setting
    that cannot be followed, saying why.
    """
    everything = frozenset(allowed)
    setting = setting.strip().lower()
    if setting == "off":
        return None
    if setting in ("", "auto"):
        if len(everything) < 2 or not realtime:
            return None
        ordered = sorted(everything)
        writers = max(1, len(ordered) // 8)
        return Placement(frozenset(ordered[:-writers]), frozenset(ordered[-writers:]), everything)
    loop_text, slash, writer_text = setting.partition("/")
    if not slash:
        raise ValueError(f"{SETTING}={setting!r}: expected auto, off or <loop CPUs>/<writer CPUs> (as in 0/1)")
    loop, writer = parse_cpu_list(loop_text), parse_cpu_list(writer_text)
    if loop & writer:
        raise ValueError(f"{SETTING}={setting!r}: CPU {format_cpu_list(loop & writer)} is in both lists")
    outside = (loop | writer) - everything
    if outside:
        raise ValueError(f"{SETTING}={setting!r}: CPU {format_cpu_list(outside)} is not one this process "
                         f"may use ({format_cpu_list(everything)})")
    return Placement(loop, writer, everything)


def writer_realtime() -> bool:
    """Whether the journal writers' threads will be real-time (:mod:`lakehouse.writer_priority`): their
    setting asks for it and this process may (tried in a thread of its own, which ends at once)."""
    if os.environ.get(WRITER_PRIORITY, "rr").strip().lower() not in ("rr", "fifo"):
        return False
    permitted: list[bool] = []

    def attempt() -> None:
        try:
            os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(1))
            permitted.append(True)
        except (AttributeError, OSError):
            permitted.append(False)

    thread = threading.Thread(target=attempt, name="realtime-probe", daemon=True)
    thread.start()
    thread.join()
    return permitted == [True]


def plan_for_broker(realtime: bool, setting: str | None = None) -> Placement | None:
    """In the broker's process, before it starts anything: decide, and tell the processes it starts.

    Raises ValueError for a setting that cannot be followed.  The event loop's
    thread is placed later (:class:`LoopPlacement`), once start-up -- recovery,
    whose Delta reads start the worker threads of delta-rs's runtime -- is
    over, so that those threads keep every CPU, and while journals commit.
    """
    os.environ.pop(PLAN, None)
    placement = plan(os.environ.get(SETTING, "auto") if setting is None else setting,
                     os.sched_getaffinity(0), realtime)
    if placement is not None:
        os.environ[PLAN] = placement.encode()
    return placement


class LoopPlacement:
    """The event loop's thread on the loop's CPUs while journals commit, on all the broker's otherwise.

    Kept apart from the writers only while there is a writer to keep it from:
    with clients on the same machine, a loop held to one CPU of two delivered
    3-7 % fewer transient AMQP 1.0 messages a second, so with no commits for
    :data:`IDLE_AFTER` seconds the loop may run anywhere again.  Fed the
    journals' commit count once a second (:meth:`observe`, on the loop).
    """

    def __init__(self, placement: Placement, idle_after: float | None = None,
                 apply: Callable[[int, frozenset[int]], None] = os.sched_setaffinity) -> None:
        self.placement = placement
        self.idle_after = idle_after_setting() if idle_after is None else idle_after
        #: whether the loop's thread is on the loop's CPUs now
        self.placed = False
        self._apply = apply
        self._commits: int | None = None
        self._active_at: float | None = None
        self._refused = False

    def observe(self, commits: int, now: float) -> None:
        """The journals' commits so far, at ``now`` (monotonic seconds): place or free the loop's thread."""
        if self._commits is not None and commits != self._commits:
            self._active_at = now
        self._commits = commits
        wanted = self._active_at is not None and now - self._active_at < self.idle_after
        if wanted != self.placed and not self._refused:
            try:
                self._apply(0, self.placement.loop if wanted else self.placement.everything)
            except OSError as exc:               # a container's CPU set, say: said once
                log.warning("the event loop's CPU placement not applied (%s): %s", self.placement.describe(), exc)
                self._refused = True
                return
            self.placed = wanted


def idle_after_setting() -> float:
    """Seconds without commits after which the loop may run on every CPU (``DELTAMQ_CPU_PLACEMENT_IDLE_S``)."""
    try:
        return max(0.0, float(os.environ.get(IDLE_SETTING, IDLE_AFTER)))
    except ValueError:
        return IDLE_AFTER


def inherited() -> Placement | None:
    """The placement the broker decided (in a process it started), or None."""
    text = os.environ.get(PLAN)
    if not text:
        return None
    try:
        return Placement.decode(text)
    except ValueError:
        return None


def _set(cpus: frozenset[int], pid: int = 0) -> None:
    """``pid`` (0: the calling thread) on ``cpus``; a refusal leaves it where it is."""
    try:
        os.sched_setaffinity(pid, cpus)
    except OSError:
        pass


def place_writer_process(pid: int = 0) -> None:
    """A journal writer on the writers' CPUs: by the broker right after starting it (``pid``), before
    its imports start threads sized by the CPUs it may use, and by the writer itself at its start."""
    placement = inherited()
    if placement is not None:
        _set(placement.writer, pid)


def stay_on_inherited_cpus() -> None:
    """A writer's upkeep process: it and its threads stay on the writers' CPUs it inherited."""
    os.environ.pop(PLAN, None)              # nothing in it sets itself back, nothing it starts is placed


def release_this_process() -> None:
    """A process the broker started (not a writer's upkeep): back to all the broker's CPUs."""
    placement = inherited()
    if placement is not None:
        _set(placement.everything)


_released = threading.local()


def release_this_thread() -> None:
    """A worker thread started from the event loop's thread: back to all the broker's CPUs (once)."""
    if getattr(_released, "done", False):
        return
    _released.done = True
    placement = inherited()
    if placement is not None:
        _set(placement.everything)


def released(function: Callable[P, R]) -> Callable[P, R]:
    """``function``, which releases the thread it runs in first (for work handed to a worker thread)."""
    @functools.wraps(function)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        release_this_thread()
        return function(*args, **kwargs)
    return run
