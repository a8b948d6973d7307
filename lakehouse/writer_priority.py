"""The journal writer's threads scheduled ahead of normal work, so commits never queue for a core.

A durable message waits for its group's commit, and every message of the
group waits for the slowest step of it.  On a machine where the broker's
loop, its clients and other jobs keep every core busy, the writer's threads
waited for a core for 13-39 ms per group at the median (run-queue time, from
``/proc/thread-self/schedstat``) -- much longer than the 2 ms of CPU a
commit needs -- and that wait was the bulk of the latency tail.

So each of the writer's threads -- the stager (main thread), the publisher,
the fsync threads -- runs under the real-time round-robin policy at its
lowest priority (``SCHED_RR`` 1), when the process may (root, or
``CAP_SYS_NICE``, or an ``RLIMIT_RTPRIO`` above 0); otherwise it runs as
before.  What bounds it: the writer only works on the groups the broker
hands it (about 2 ms of CPU per commit, a fifth of a core at 20,000 durable
messages a second), it blocks on its pipe and its fsyncs, and the kernel
keeps 5 % of every core for normal tasks whatever real-time tasks do
(``sched_rt_runtime_us``).  ``SCHED_RESET_ON_FORK`` is set with it, so a
process the writer starts (the table's upkeep) runs at normal priority, not
real-time; threads are reset too, so every thread sets it for itself
(:func:`apply_to_thread`).

``DELTAMQ_JOURNAL_WRITER_PRIORITY``: ``rr`` (the default), ``fifo`` (the same
with ``SCHED_FIFO``), a niceness increment (``-5``: ahead of the broker's
loop within its session only; needs the same privilege), or ``0``: normal.
"""

from __future__ import annotations

import logging
import os

__all__ = ["WRITER_PRIORITY", "apply_to_thread", "enable_in_this_process", "normal_for_this_thread", "policy_name"]

log = logging.getLogger("lakehouse.journal_writer")

#: how the writer's threads are scheduled (see the module's doc)
WRITER_PRIORITY = os.environ.get("DELTAMQ_JOURNAL_WRITER_PRIORITY", "rr").strip().lower()

_settled = False                               # refused (said once), or a niceness set (threads inherit it)
_enabled = False                               # only in the writer process (enable_in_this_process)


def enable_in_this_process() -> bool:
    """The writer process's start: its threads apply the priority from now on, this one first."""
    global _enabled
    _enabled = True
    return apply_to_thread()


def apply_to_thread(priority: str | None = None) -> bool:
    """Schedule the calling thread as ``priority`` says (default :data:`WRITER_PRIORITY`); whether it did.

    Does nothing outside the writer process (see :func:`enable_in_this_process`) and never
    raises: without the privilege the thread stays as it is.
    """
    global _settled
    wanted = WRITER_PRIORITY if priority is None else priority
    if not _enabled or wanted in ("", "0", "normal") or _settled:
        return False
    try:
        if wanted in ("rr", "fifo"):
            policy = os.SCHED_RR if wanted == "rr" else os.SCHED_FIFO
            os.sched_setscheduler(0, policy | os.SCHED_RESET_ON_FORK, os.sched_param(1))
        else:
            os.nice(int(wanted))               # threads started later by this one inherit it
            _settled = True
        return True
    except (AttributeError, ValueError, OSError) as exc:
        _settled = True
        log.info("journal writer: scheduling %r not applied (%s); normal priority", wanted, exc)
        return False


def normal_for_this_thread() -> None:
    """Schedule the calling thread normally (a background thread of the writer: checksums, file pool).

    A thread started by a real-time one is reset already (``SCHED_RESET_ON_FORK``); this
    makes sure of it.  Never raises.
    """
    try:
        if os.sched_getscheduler(0) & ~getattr(os, "SCHED_RESET_ON_FORK", 0) in (os.SCHED_RR, os.SCHED_FIFO):
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    except (AttributeError, OSError):
        pass


def policy_name() -> str:
    """The calling thread's scheduling policy, as a name (for logs and tests)."""
    try:
        policy = os.sched_getscheduler(0) & ~getattr(os, "SCHED_RESET_ON_FORK", 0)
    except (AttributeError, OSError):
        return "unknown"
    names = {getattr(os, name): name[6:].lower() for name in ("SCHED_OTHER", "SCHED_RR", "SCHED_FIFO",
                                                                "SCHED_BATCH", "SCHED_IDLE") if hasattr(os, name)}
    return names.get(policy, str(policy))
