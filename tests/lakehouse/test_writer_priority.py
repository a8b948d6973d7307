"""The journal writer's threads run ahead of normal work; what it starts, and other processes, do not.

Each case runs in a child interpreter: scheduling policy is per thread and
inherited, and must not leak into the test process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

_PROBE = """
import json, os, subprocess, sys, threading
from lakehouse import writer_priority as w
from lakehouse.log_commit import fsync_together
seen = {"before": w.policy_name()}
if sys.argv[1] == "enable":
    seen["applied"] = w.enable_in_this_process()
else:
    seen["applied"] = w.apply_to_thread()
seen["main"] = w.policy_name()
def thread():
    seen["thread_started"] = w.policy_name()
    w.apply_to_thread()
    seen["thread_applied"] = w.policy_name()
t = threading.Thread(target=thread); t.start(); t.join()
fd = os.open(sys.argv[2], os.O_RDONLY)
fsync_together([fd, fd])                    # an fsync thread of the pool: applied by its initializer
os.close(fd)
from lakehouse.log_commit import _FSYNC_POOL
seen["fsync_thread"] = _FSYNC_POOL.submit(w.policy_name).result()
child = subprocess.run([sys.executable, "-c",
                        "from lakehouse import writer_priority as w; print(w.policy_name())"],
                       capture_output=True, text=True, check=True)
seen["child"] = child.stdout.strip()
print(json.dumps(seen))
"""


def _probe(mode: str, priority: str, tmp_path: Path) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "DELTAMQ_JOURNAL_WRITER_PRIORITY": priority}
    done = subprocess.run([sys.executable, "-c", _PROBE, mode, str(tmp_path)], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=60)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_outside_the_writer_process_nothing_changes(tmp_path: Path) -> None:
    seen = _probe("plain", "rr", tmp_path)
    assert seen["applied"] is False
    assert seen["main"] == seen["thread_applied"] == seen["fsync_thread"] == seen["before"]


def test_the_writer_threads_run_round_robin_and_what_it_starts_does_not(tmp_path: Path) -> None:
    seen = _probe("enable", "rr", tmp_path)
    if not seen["applied"]:
        pytest.skip("this user may not use real-time scheduling")
    assert seen["before"] == "other"
    assert seen["main"] == "rr"
    # reset on fork: a new thread starts as a normal one, then applies the priority itself
    assert seen["thread_started"] == "other" and seen["thread_applied"] == "rr"
    assert seen["fsync_thread"] == "rr"
    assert seen["child"] == "other"             # the upkeep process it starts is not real-time


def test_priority_zero_leaves_the_writer_as_it_was(tmp_path: Path) -> None:
    seen = _probe("enable", "0", tmp_path)
    assert seen["applied"] is False
    assert seen["main"] == seen["fsync_thread"] == seen["child"] == seen["before"]
