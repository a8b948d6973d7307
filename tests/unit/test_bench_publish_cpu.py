"""The flow-to-disk benchmark's CPU per confirmed publish, split by the broker's processes."""

from __future__ import annotations

import subprocess
import sys

from bench import procutil
from bench.flow_to_disk import cpu_per_message, tree_cpu_by_process
from tests.waiting import wait_until

#: a "broker" that starts a child running a module (as DeltaMQ starts its journal writer) and
#: then waits for its stdin to close; the child waits on a pipe the parent holds
_PARENT = ("import subprocess, sys\n"
           "child = subprocess.Popen([sys.executable, '-m', 'json.tool'], stdin=subprocess.PIPE,\n"
           "                         stderr=subprocess.DEVNULL)\n"
           "sum(i * i for i in range(300_000))\n"
           "sys.stdin.read()\n")


def test_cpu_per_message_is_microseconds_per_message_by_process() -> None:
    before = {"broker": 10.0, "lakehouse.journal_writer": 2.0, "lakehouse.journal_upkeep": 1.0}
    after = {"broker": 15.0, "lakehouse.journal_writer": 3.5, "started.meanwhile": 0.2}
    assert cpu_per_message(before, after, 100_000) == {
        "broker": 50.0, "lakehouse.journal_writer": 15.0, "started.meanwhile": 2.0}


def test_tree_cpu_by_process_names_the_broker_and_each_child_by_module() -> None:
    parent = subprocess.Popen([sys.executable, "-c", _PARENT], stdin=subprocess.PIPE)
    try:
        wait_until(lambda: len(procutil.tree(parent.pid)) == 2, timeout=30, what="the child process")
        wait_until(lambda: "json.tool" in tree_cpu_by_process(parent.pid), timeout=30,
                   what="the child's command line")
        cpu = tree_cpu_by_process(parent.pid)
        assert set(cpu) == {"broker", "json.tool"}
        assert cpu["broker"] > 0                # it computed something before waiting
    finally:
        assert parent.stdin is not None
        parent.stdin.close()
        parent.wait(30)
