"""The configuration store's writer thread: group commit, failures to every waiter, order."""

from __future__ import annotations

import asyncio
import errno
import threading
import uuid
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from broker.errors import BrokerError
from broker.messaging.namespace import Namespace
from broker.model.config_store import ConfigurationRecord
from broker.model.messaging_objects import NamespaceRecords
from lakehouse.config_store import DeltaConfigurationStore
from lakehouse.config_writer import Change, ConfigurationWriter

WAIT = 30.0


class GatedCommits:
    """A commit function that blocks until the test opens the gate, recording every group."""

    def __init__(self) -> None:
        self.groups: list[list[Change]] = []
        self.entered = threading.Semaphore(0)
        self.gate = threading.Event()
        self.fail: BaseException | None = None
        self.events: list[str] = []

    def __call__(self, changes: list[Change]) -> None:
        self.groups.append(list(changes))
        self.entered.release()
        assert self.gate.wait(WAIT)
        self.events.append("commit")
        if self.fail is not None:
            raise self.fail


@pytest.fixture
def commits() -> GatedCommits:
    return GatedCommits()


@pytest.fixture
def writer(commits: GatedCommits) -> Any:
    w = ConfigurationWriter(commits, lambda: commits.events.append("checkpoint"))
    w.start()
    yield w
    commits.gate.set()
    w.stop()


def test_changes_arriving_during_a_commit_go_into_the_next_one(writer: ConfigurationWriter,
                                                               commits: GatedCommits) -> None:
    first = writer.submit([("save", 1)])
    assert commits.entered.acquire(timeout=WAIT)            # the first commit is in flight
    later = [writer.submit([("save", n)]) for n in (2, 3)] + [writer.submit([("remove", 1)])]
    commits.gate.set()
    for future in [first, *later]:
        assert future.result(WAIT) is None
    assert commits.groups == [[("save", 1)], [("save", 2), ("save", 3), ("remove", 1)]]
    assert (writer.commits, writer.changes) == (2, 4)


def test_a_failed_commit_fails_every_waiter_of_its_group_and_the_next_group_succeeds(
        writer: ConfigurationWriter, commits: GatedCommits) -> None:
    blocker = writer.submit([("save", 0)])
    assert commits.entered.acquire(timeout=WAIT)
    group = [writer.submit([("save", n)]) for n in (1, 2)]
    commits.fail = OSError(28, "No space left on device")
    commits.gate.set()
    for future in [blocker, *group]:
        with pytest.raises(OSError, match="No space left"):
            future.result(WAIT)
    commits.fail = None
    assert writer.submit([("save", 3)]).result(WAIT) is None
    assert writer.commits == 1


def test_a_checkpoint_comes_after_the_waiters_are_answered(writer: ConfigurationWriter,
                                                           commits: GatedCommits) -> None:
    answered = threading.Event()
    commits.gate.set()

    def commit_and_ask_for_a_checkpoint(changes: list[Change]) -> None:
        writer.checkpoint_due()

    writer._commit = commit_and_ask_for_a_checkpoint
    future = writer.submit([("save", 1)])
    future.add_done_callback(lambda _f: (commits.events.append("answered"), answered.set()))
    assert answered.wait(WAIT)
    writer.stop()
    assert commits.events == ["answered", "checkpoint"]


def test_submitting_to_a_stopped_writer_fails_at_once() -> None:
    writer = ConfigurationWriter(lambda changes: None, lambda: None)
    with pytest.raises(RuntimeError):
        writer.submit([("save", 1)]).result(0)


def test_the_delta_store_groups_saves_and_removals_and_keeps_their_order(tmp_path: Path) -> None:
    store = DeltaConfigurationStore(str(tmp_path))
    store.open()
    try:
        futures: list[Future[None]] = [
            store.submit([ConfigurationRecord("q1", "Queue", None, {"name": "a"})]),
            store.submit([ConfigurationRecord("q2", "Queue", None, {"name": "b"})]),
            store.submit(remove=["q1"]),
            store.submit([ConfigurationRecord("q1", "Queue", None, {"name": "a", "v": 2})]),
        ]
        for future in futures:
            future.result(WAIT)
        assert store.writer.commits <= len(futures)
    finally:
        store.close()
    again = DeltaConfigurationStore(str(tmp_path))
    again.open()
    try:
        assert {r.id: dict(r.attributes) for r in again.recover()} == {
            "q2": {"name": "b"}, "q1": {"name": "a", "v": 2}}
    finally:
        again.close()


def test_checkpoints_are_written_by_the_writer_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("lakehouse.config_store.MODE", "thread")
    store = DeltaConfigurationStore(str(tmp_path))
    threads: list[str] = []
    real = store.log.table.checkpoint

    def checkpoint() -> None:
        threads.append(threading.current_thread().name)
        real()

    store.writer._checkpoint = checkpoint
    store.open()
    try:
        for n in range(store.log.table.checkpoint_interval + 1):
            store.save([ConfigurationRecord(f"q{n}", "Queue", None, {"name": f"q{n}"})])
        assert threads and all(name.startswith("config-writer") for name in threads)
        assert threading.current_thread().name not in threads
    finally:
        store.close()


def test_the_writer_process_commits_and_checkpoints_and_the_broker_does_neither(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("lakehouse.config_store.MODE", "process")
    store = DeltaConfigurationStore(str(tmp_path))
    in_broker: list[str] = []
    monkeypatch.setattr(store.log.table, "append", lambda *a, **k: in_broker.append("append"))
    monkeypatch.setattr(store.log.table, "checkpoint", lambda: in_broker.append("checkpoint"))
    store.open()
    try:
        for n in range(store.log.table.checkpoint_interval + 1):
            store.save([ConfigurationRecord(f"q{n}", "Queue", None, {"name": f"q{n}"})])
        store.remove(["q0"])
        assert sorted(r.id for r in store.recover()) == sorted(f"q{n}" for n in range(1, 21))
    finally:
        store.close()
    assert in_broker == []
    assert list((tmp_path / "config" / "_delta_log").glob("*.checkpoint.parquet"))
    assert stored_ids(tmp_path) == sorted(f"q{n}" for n in range(1, 21))


def test_a_writer_process_that_died_is_started_again_and_one_dying_under_a_commit_fails_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("lakehouse.config_store.MODE", "process")
    store = DeltaConfigurationStore(str(tmp_path))
    store.open()
    try:
        store.save([ConfigurationRecord("q1", "Queue", None, {"name": "a"})])
        assert store.process is not None and store.process._child is not None
        child = store.process._child
        child.kill()
        child.wait()
        store.save([ConfigurationRecord("q3", "Queue", None, {"name": "c"})])
        assert store.process._child is not child
        # one that dies under a commit fails it: nothing of it is taken for stored
        second = store.process._child
        second.kill()
        second.wait()
        monkeypatch.setattr(second, "poll", lambda: None)     # it dies after the writer looked
        with pytest.raises(OSError) as info:
            store.save([ConfigurationRecord("q2", "Queue", None, {"name": "b"})])
        assert info.value.errno == errno.EIO
        assert sorted(r.id for r in store.recover()) == ["q1", "q3"]
    finally:
        store.close()
    assert stored_ids(tmp_path) in (["q1", "q3"], ["q1", "q2", "q3"])


def stored_ids(path: Path) -> list[str]:
    """The ids a store at ``path`` recovers when opened again."""
    again = DeltaConfigurationStore(str(path))
    again.open()
    try:
        return sorted(r.id for r in again.recover())
    finally:
        again.close()


class _Vhost:
    id = "vh"


def test_the_event_loop_runs_on_while_a_commit_is_slow(tmp_path: Path) -> None:
    """A durable declare handed to a commit that takes long: the loop serves everyone meanwhile."""
    store = DeltaConfigurationStore(str(tmp_path))
    store.open()
    gate = threading.Event()
    real_change = store.log.change

    def slow_change(changes: list[Change]) -> None:
        assert gate.wait(WAIT)                  # the commit is in flight until the test lets it go
        real_change(changes)

    store.writer._commit = slow_change
    namespace = Namespace("v")
    namespace.listeners.append(NamespaceRecords(_Vhost(), store))  # type: ignore[arg-type]
    outcome: list[tuple[Any, BrokerError | None]] = []

    async def scenario() -> int:
        loop = asyncio.get_running_loop()
        declared = loop.create_future()

        def done(result: Any, error: BrokerError | None) -> None:
            outcome.append((result, error))
            declared.set_result(None)

        namespace.when_stored(lambda: namespace.declare_queue("orders", durable=True), done)
        ticks = 0
        for _ in range(20):                     # the loop keeps running: timers fire, others declare
            await asyncio.sleep(0.005)
            ticks += 1
        namespace.declare_queue(f"scratch-{uuid.uuid4().hex}")
        assert not declared.done() and "orders" not in namespace.queues
        gate.set()
        await asyncio.wait_for(declared, WAIT)
        return ticks

    try:
        assert asyncio.run(scenario()) == 20
        assert outcome[0][1] is None and "orders" in namespace.queues
        assert [r.attributes["name"] for r in store.recover()] == ["orders"]
    finally:
        gate.set()
        store.close()


def test_one_writer_process_serves_every_store_and_outlives_all_but_the_last(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second interpreter costs ~100 MB: the broker's store and each node's share one."""
    monkeypatch.setattr("lakehouse.config_store.MODE", "process")
    # stores other tests of this process left open keep their own writer out of this one's way
    monkeypatch.setattr("lakehouse.config_writer._shared", None)
    monkeypatch.setattr("lakehouse.config_writer._sharing", set())
    first = DeltaConfigurationStore(str(tmp_path / "broker"))
    second = DeltaConfigurationStore(str(tmp_path / "node"))
    first.open()
    second.open()
    try:
        first.save([ConfigurationRecord("p1", "Port", None, {"name": "amqp"})])
        second.save([ConfigurationRecord("q1", "Queue", None, {"name": "a"})])
        assert first.process is second.process and first.process is not None
        child = first.process._child
        assert child is not None
        first.close()
        assert child.poll() is None                       # the node's store still uses it
        second.save([ConfigurationRecord("q2", "Queue", None, {"name": "b"})])
        assert second.process._child is child
    finally:
        second.close()
    assert child.wait(30) == 0                            # the last store closed: it ended
    assert stored_ids(tmp_path / "broker") == ["p1"]
    assert stored_ids(tmp_path / "node") == ["q1", "q2"]
