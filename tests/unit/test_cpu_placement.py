"""broker.cpu_placement: which CPUs the event loop and the journal writers get, and what is set back."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from broker import cpu_placement
from broker.cpu_placement import PLAN, Placement, format_cpu_list, parse_cpu_list, plan


@pytest.mark.parametrize(("text", "cpus"), [
    ("0", {0}), ("0-3", {0, 1, 2, 3}), ("0-2,5", {0, 1, 2, 5}), (" 7 , 1-2 ", {1, 2, 7}), ("4-4", {4}),
])
def test_cpu_lists_are_read_as_taskset_writes_them(text: str, cpus: set[int]) -> None:
    assert parse_cpu_list(text) == cpus


@pytest.mark.parametrize("text", ["", "a", "1-", "3-1", "-1", "0,,1", "1.5"])
def test_a_cpu_list_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_cpu_list(text)


@pytest.mark.parametrize(("cpus", "text"), [({0}, "0"), ({0, 1, 2, 5}, "0-2,5"), ({3, 1, 7, 8}, "1,3,7-8")])
def test_cpu_lists_are_written_shortest(cpus: set[int], text: str) -> None:
    assert format_cpu_list(cpus) == text
    assert parse_cpu_list(text) == cpus


def test_auto_gives_the_writers_the_last_cpu_of_two_and_the_loop_the_other() -> None:
    assert plan("auto", {0, 1}, realtime=True) == Placement(frozenset({0}), frozenset({1}), frozenset({0, 1}))
    assert plan("", {2, 5, 9}, realtime=True) == Placement(frozenset({2, 5}), frozenset({9}), frozenset({2, 5, 9}))


def test_auto_gives_the_writers_one_cpu_in_eight_on_bigger_machines() -> None:
    placed = plan("auto", range(16), realtime=True)
    assert placed is not None
    assert placed.writer == {14, 15} and placed.loop == set(range(14)) and placed.everything == set(range(16))


@pytest.mark.parametrize(("allowed", "realtime"), [({0}, True), ({0, 1}, False), (range(8), False)])
def test_auto_places_nothing_on_one_cpu_or_without_real_time_writers(allowed: set[int], realtime: bool) -> None:
    assert plan("auto", allowed, realtime=realtime) is None


def test_off_places_nothing() -> None:
    assert plan("OFF", {0, 1, 2, 3}, realtime=True) is None


def test_explicit_lists_are_followed_whatever_the_writers_scheduling() -> None:
    assert plan("0-1/3", {0, 1, 2, 3}, realtime=False) == Placement(
        frozenset({0, 1}), frozenset({3}), frozenset({0, 1, 2, 3}))


@pytest.mark.parametrize(("setting", "says"), [
    ("0", "expected auto, off or <loop CPUs>/<writer CPUs>"),
    ("0-1/1", "CPU 1 is in both lists"),
    ("0/5", "CPU 5 is not one this process may use (0-3)"),
    ("x/1", "'x' is not a CPU number or range"),
])
def test_a_setting_that_cannot_be_followed_says_why(setting: str, says: str) -> None:
    with pytest.raises(ValueError) as caught:
        plan(setting, {0, 1, 2, 3}, realtime=True)
    assert says in str(caught.value)


def test_the_plan_passed_to_children_reads_back_as_it_was() -> None:
    placed = Placement(frozenset({0, 1, 2}), frozenset({6, 7}), frozenset(range(8)))
    assert placed.encode() == "0-2/6-7/0-7"
    assert Placement.decode(placed.encode()) == placed


needs_two_cpus = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="placement needs two CPUs")


def _in_a_thread(work: object) -> None:
    thread = threading.Thread(target=work)      # type: ignore[arg-type]
    thread.start()
    thread.join()


@needs_two_cpus
def test_the_broker_thread_is_placed_and_what_it_starts_is_set_back(monkeypatch: pytest.MonkeyPatch) -> None:
    everything = frozenset(os.sched_getaffinity(0))
    loop_cpu, writer_cpu = sorted(everything)[:2]
    seen: dict[str, set[int]] = {}

    def broker_thread() -> None:
        placed = cpu_placement.plan_for_broker(realtime=False, setting=f"{loop_cpu}/{writer_cpu}")
        assert placed is not None and os.environ[PLAN] == placed.encode()
        assert os.sched_getaffinity(0) == everything      # not yet: start-up's threads keep every CPU
        loop = cpu_placement.LoopPlacement(placed, idle_after=5)
        loop.observe(3, 100.0)
        loop.observe(4, 101.0)                             # a commit: placed
        assert loop.placed
        seen["loop"] = os.sched_getaffinity(0)
        with ThreadPoolExecutor(1, initializer=cpu_placement.release_this_thread) as pool:   # a worker
            seen["worker"] = pool.submit(os.sched_getaffinity, 0).result()
        inherited: list[set[int]] = []
        _in_a_thread(lambda: inherited.append(os.sched_getaffinity(0)))
        seen["plain thread"] = inherited[0]
        _in_a_thread(cpu_placement.released(lambda: seen.__setitem__("released", os.sched_getaffinity(0))))

        def writer() -> None:
            cpu_placement.place_writer_process()
            seen["writer"] = os.sched_getaffinity(0)
            cpu_placement.release_this_process()
            seen["writer's child"] = os.sched_getaffinity(0)
        _in_a_thread(writer)

    monkeypatch.setenv(PLAN, "")                      # removed again after the test
    _in_a_thread(broker_thread)
    assert seen["loop"] == {loop_cpu}
    assert seen["plain thread"] == {loop_cpu}          # what a thread inherits unless set back
    assert seen["worker"] == everything and seen["released"] == everything
    assert seen["writer"] == {writer_cpu}
    assert seen["writer's child"] == everything
    assert os.sched_getaffinity(0) == everything       # this thread was never placed


def test_without_a_plan_nothing_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PLAN, "")
    before = os.sched_getaffinity(0)
    seen: list[set[int]] = []

    def work() -> None:
        assert cpu_placement.plan_for_broker(realtime=True, setting="off") is None
        cpu_placement.place_writer_process()
        cpu_placement.release_this_thread()
        seen.append(os.sched_getaffinity(0))
    _in_a_thread(work)
    assert seen == [before] and PLAN not in os.environ      # plan_for_broker took the empty one away


class _Affinity:
    def __init__(self, refuse: bool = False) -> None:
        self.calls: list[set[int]] = []
        self.refuse = refuse

    def __call__(self, pid: int, cpus: frozenset[int]) -> None:
        assert pid == 0                                  # the calling thread: the loop's
        if self.refuse:
            raise OSError(22, "Invalid argument")
        self.calls.append(set(cpus))


PLACED = Placement(frozenset({0}), frozenset({1}), frozenset({0, 1}))


def test_the_loop_is_placed_while_journals_commit_and_freed_after_a_quiet_spell() -> None:
    affinity = _Affinity()
    loop = cpu_placement.LoopPlacement(PLACED, idle_after=5.0, apply=affinity)
    loop.observe(40, 0.0)                 # start-up's count (recovery's commits): not activity
    loop.observe(40, 1.0)
    assert not loop.placed and affinity.calls == []
    loop.observe(41, 2.0)                 # commits: on the loop's CPUs at once
    assert loop.placed and affinity.calls == [{0}]
    loop.observe(300, 3.0)                # the last commits seen
    loop.observe(300, 7.9)                # 4.9 s without one: still placed
    assert loop.placed and affinity.calls == [{0}]
    loop.observe(300, 8.0)                # 5 s: every CPU again
    assert not loop.placed and affinity.calls == [{0}, {0, 1}]
    loop.observe(301, 9.0)
    assert loop.placed and affinity.calls == [{0}, {0, 1}, {0}]


def test_a_refused_placement_is_said_once_and_not_tried_again(caplog: pytest.LogCaptureFixture) -> None:
    loop = cpu_placement.LoopPlacement(PLACED, idle_after=5.0, apply=_Affinity(refuse=True))
    for second, commits in enumerate([1, 2, 3, 4, 5]):
        loop.observe(commits, float(second))
    assert not loop.placed
    warnings = [record for record in caplog.records if "placement not applied" in record.getMessage()]
    assert len(warnings) == 1 and "Invalid argument" in warnings[0].getMessage()


@pytest.mark.parametrize(("value", "seconds"), [(None, 5.0), ("0.5", 0.5), ("soon", 5.0), ("-3", 0.0)])
def test_the_quiet_spell_is_a_setting(monkeypatch: pytest.MonkeyPatch, value: str | None, seconds: float) -> None:
    if value is None:
        monkeypatch.delenv("DELTAMQ_CPU_PLACEMENT_IDLE_S", raising=False)
    else:
        monkeypatch.setenv("DELTAMQ_CPU_PLACEMENT_IDLE_S", value)
    assert cpu_placement.LoopPlacement(PLACED).idle_after == seconds
