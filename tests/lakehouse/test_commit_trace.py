"""The commit traces (DELTAMQ_JOURNAL_TRACE): each stage stamped in order, joined into a message's path.

A trace that stamped a stage at the wrong moment would attribute the latency
tail to the wrong cause; these tests check the order of the stamps of real
commits, and that the report's stages add up to each message's whole time.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from pathlib import Path
from typing import BinaryIO

import pytest

from bench.commit_trace import STAGES, report
from broker.messaging.namespace import Namespace
from lakehouse import commit_trace, journal as journal_module
from lakehouse.commit_pipeline import DURABLE
from lakehouse.commit_trace import LoopTrace, WriterTrace
from lakehouse.journal_writer import REQUEST, RowEncoder, open_journal_table, serve
from tests.waiting import wait_until

from .test_commit_pipeline import _Answers, _group, _request
from .test_journal import open_journal, persistent


def _records(directory: Path, kind: str) -> list[dict[str, object]]:
    return [json.loads(line) for path in directory.glob(f"{kind}-*.jsonl")
            for line in path.read_text().splitlines() if line.strip()]


def test_the_writer_stamps_each_stage_of_a_commit_in_the_order_it_happens(tmp_path: Path) -> None:
    table = open_journal_table(str(tmp_path / "journal"), 1)
    trace = WriterTrace(str(tmp_path / "trace"))
    events: list[tuple[object, ...]] = []
    read, write = os.pipe()
    requests: BinaryIO = os.fdopen(read, "rb")
    thread = threading.Thread(target=serve, args=(table, RowEncoder("v"), requests, _Answers(events), trace))
    thread.start()
    os.write(write, b"".join(_request(number, _group(number * 10, 3)) for number in (1, 2, 3)))
    wait_until(lambda: ("answer", 3, DURABLE) in events, timeout=60, what="the third group durable")
    os.write(write, REQUEST.pack(0, 0))
    thread.join(30)
    os.close(write)
    requests.close()
    trace.close()
    records = {record["group"]: record for record in _records(tmp_path / "trace", "writer")}
    assert sorted(records) == [1, 2, 3]
    for record in records.values():
        f0, f1 = record["fsync1"]                       # type: ignore[misc]
        g0, g1 = record["fsync2"]                       # type: ignore[misc]
        order = [record["received"], record["encoded"], f0, f1, record["staged"], record["publish"],
                 g0, g1, record["answered"]]
        assert order == sorted(order)
        assert record["stage_cpu"] > 0 and record["stage_wait"] >= 0   # type: ignore[operator]
    # group 2 was published after group 1's answer: one publisher, in order
    assert records[2]["publish"] >= records[1]["answered"]  # type: ignore[operator]


def test_a_traced_journal_joins_into_a_path_whose_stages_add_up(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    directory = tmp_path / "trace"
    monkeypatch.setenv("DELTAMQ_JOURNAL_TRACE", str(directory))           # the writer process's side
    monkeypatch.setattr(journal_module, "loop_trace", lambda: LoopTrace(str(directory)))
    ns = Namespace("v")
    journal = open_journal(tmp_path / "journal", ns)
    queue = ns.declare_queue("q", durable=True)[0]

    async def main() -> None:
        journal.attach_loop(asyncio.get_running_loop())
        for body in (b"one", b"two", b"three"):
            queue.enqueue(persistent(body))
            group = journal.pending
            assert group is not None
            done = asyncio.Event()
            group.when_durable(done.set)
            await asyncio.wait_for(done.wait(), 60)
            await asyncio.sleep(0.01)           # the trace's next turn

    asyncio.run(main())
    journal.close()
    loop_records = [r for r in _records(directory, "loop") if "group" in r]
    assert sum(len(r["arrivals"]) for r in loop_records) == 3            # type: ignore[arg-type]
    for record in loop_records:
        assert record["sent"] <= record["staged"] <= record["durable"] <= record["waiters"] <= record["flushed"]  # type: ignore[operator]
    result = report(directory, "all")
    assert result["messages"] == 3
    stages = result["stages_ms_at_p50"]
    assert all(stages[name] >= 0 for name in STAGES)
    # the stages cut the message's whole time: their sum is its time in the broker (rounding aside)
    assert abs(sum(stages.values()) - result["broker_ms"]["p50"]) < 0.05 * len(STAGES)


def test_arrivals_are_the_enqueued_messages_of_a_group() -> None:
    class _Message:
        arrival = 12.5

    rows = [("enqueue", "q", 1, 0.0, None, None, None, None, _Message(), None),
            ("enqueue", "q", 1, 0.0, None, None, None, None, None, None),      # another queue's copy
            ("settle", "q", 1, 0.0, None, 1, "acked", None, None, None)]
    assert commit_trace.arrivals(rows) == [12.5]


def test_the_auto_window_is_the_paced_stretch_after_the_throughput_window() -> None:
    from bench.commit_trace import pick_window

    burst = [i / 20_000 for i in range(40_000)]                      # 2 s at 20,000/s
    paced = [3.0 + i / 2_000 for i in range(6_000)]                  # a pause, then 3 s at 2,000/s
    start, end = pick_window({1: {"arrivals": burst + paced}}, "auto")
    assert 3.0 <= start <= 3.6 and 5.7 <= end <= 6.01                # the paced stretch, its ramp left out
    assert pick_window({1: {"arrivals": burst + paced}}, "all") == (0.0, paced[-1])
