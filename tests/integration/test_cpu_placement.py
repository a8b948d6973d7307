"""The broker started as a user starts it: its event loop and its journal writer on CPUs of their own.

broker.cpu_placement: the loop's thread on the loop's CPUs while the journal
commits (on every CPU again once it has not for a while), every thread of the
journal writer process and of the upkeep it starts on the writers', and
everything else -- the configuration writer, the broker's other threads --
on all the CPUs the broker was given.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pika
import pytest

from broker.cpu_placement import format_cpu_list, writer_realtime

from tests.waiting import wait_until

from .conftest import DeltaMQProcess, _serve_command

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

if os.environ.get("DELTAMQ_TEST_AMQP_URL"):
    pytest.skip("starts brokers of its own: DeltaMQ only", allow_module_level=True)

ALLOWED = sorted(os.sched_getaffinity(0))
needs_two_cpus = pytest.mark.skipif(len(ALLOWED) < 2, reason="placement needs two CPUs")


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _command(pid: int) -> str:
    return (Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")).decode()


def _threads(pid: int) -> dict[int, tuple[str, set[int]]]:
    """Each thread of ``pid``: its name and the CPUs it may run on."""
    threads = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            threads[int(task.name)] = ((task / "comm").read_text().strip(), os.sched_getaffinity(int(task.name)))
        except OSError:
            continue
    return threads


def _python_threads(pid: int) -> int:
    return sum(1 for name, _ in _threads(pid).values() if name.startswith("python"))


def _process(parent: int, module: str) -> int:
    (pid,) = [child for child in _children(parent) if f"-m {module} " in _command(child) + " "]
    return pid


def _pid(broker: DeltaMQProcess) -> int:
    assert broker.proc is not None
    return broker.proc.pid


def _placement_of(broker: DeltaMQProcess) -> dict[str, set[frozenset[int]]]:
    pid = _pid(broker)
    writer = _process(pid, "lakehouse.journal_writer")
    seen = {
        "loop": {frozenset(_threads(pid)[pid][1])},
        "writer's Python threads": {frozenset(cpus) for name, cpus in _threads(writer).values()
                                    if name.startswith("python")},
        "upkeep": {frozenset(cpus) for _, cpus in _threads(_process(writer, "lakehouse.journal_upkeep")).values()},
        "config writer": {frozenset(cpus) for _, cpus in _threads(_process(pid, "lakehouse.config_writer")).values()},
    }
    return seen


def _use(broker: DeltaMQProcess) -> None:
    """A durable message through the journal (its writer busy at least once), and a worker thread used."""
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.amqp_port))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("placed", durable=True)
        channel.basic_publish("", "placed", b"kept", pika.BasicProperties(delivery_mode=2))
        method, _, body = channel.basic_get("placed", auto_ack=True)
        assert body == b"kept"
    finally:
        connection.close()


@needs_two_cpus
def test_the_loop_and_the_journal_writer_run_on_the_cpus_they_are_given(monkeypatch: pytest.MonkeyPatch) -> None:
    loop_cpu, writer_cpu = ALLOWED[-2], ALLOWED[-1]
    monkeypatch.setenv("DELTAMQ_CPU_PLACEMENT", f"{loop_cpu}/{writer_cpu}")
    monkeypatch.setenv("DELTAMQ_CPU_PLACEMENT_IDLE_S", "2")
    everything = frozenset(ALLOWED)
    with DeltaMQProcess() as broker:
        _use(broker)
        # the loop is kept off the writers' CPUs while the journal commits (looked at once a second)
        wait_until(lambda: _placement_of(broker)["loop"] == {frozenset({loop_cpu})}, timeout=10,
                   what="the loop on its CPU")
        # the configuration writer sets itself back once its imports are done; the upkeep's
        # maintenance thread (its work) is started once it opened the table
        wait_until(lambda: _placement_of(broker)["config writer"] == {everything}, timeout=30,
                   what="the configuration writer on every CPU")
        wait_until(lambda: _python_threads(_process(_process(_pid(broker), "lakehouse.journal_writer"),
                                                    "lakehouse.journal_upkeep")) >= 2,
                   timeout=30, what="the upkeep's maintenance thread")
        seen = _placement_of(broker)
        log = broker.log_tail()
        # no commits for 2 s: the loop may run anywhere again; commits: placed again
        wait_until(lambda: _placement_of(broker)["loop"] == {everything}, timeout=15,
                   what="the idle loop on every CPU")
        _use(broker)
        wait_until(lambda: _placement_of(broker)["loop"] == {frozenset({loop_cpu})}, timeout=10,
                   what="the loop on its CPU again")
    assert seen["loop"] == {frozenset({loop_cpu})}
    assert seen["writer's Python threads"] == {frozenset({writer_cpu})}     # stager, publisher, fsync, ...
    assert seen["upkeep"] == {frozenset({writer_cpu})}
    assert seen["config writer"] == {everything}
    assert f"event loop on CPU {loop_cpu} while journals commit, journal writers on CPU {writer_cpu}" in log


@needs_two_cpus
@pytest.mark.skipif(not writer_realtime(), reason="auto places nothing when the writer may not be real-time")
def test_by_default_the_writer_gets_the_last_cpu_and_the_loop_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DELTAMQ_CPU_PLACEMENT", raising=False)
    writers = max(1, len(ALLOWED) // 8)
    with DeltaMQProcess() as broker:
        _use(broker)
        wait_until(lambda: _placement_of(broker)["loop"] == {frozenset(ALLOWED[:-writers])}, timeout=10,
                   what="the loop on its CPUs")
        seen = _placement_of(broker)
    assert seen["loop"] == {frozenset(ALLOWED[:-writers])}
    assert seen["writer's Python threads"] == {frozenset(ALLOWED[-writers:])}


def test_off_places_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DELTAMQ_CPU_PLACEMENT", "off")
    with DeltaMQProcess() as broker:
        _use(broker)
        seen = _placement_of(broker)
    assert seen["loop"] == seen["writer's Python threads"] == {frozenset(ALLOWED)}


def test_a_placement_that_cannot_be_followed_stops_the_start_with_one_line(tmp_path: Path) -> None:
    outside = max(ALLOWED) + 1
    env = {**os.environ, "DELTAMQ_CPU_PLACEMENT": f"{ALLOWED[0]}/{outside}"}
    done = subprocess.run(_serve_command() + ["--amqp-port", "0", "--http-port", "0", "--data-dir",
                                              str(tmp_path / "data")],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1
    assert (f"cannot start: DELTAMQ_CPU_PLACEMENT='{ALLOWED[0]}/{outside}': CPU {outside} is not one this "
            f"process may use ({format_cpu_list(ALLOWED)})") in errors[0]
