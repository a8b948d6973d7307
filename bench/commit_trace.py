"""Where a durable message's latency goes: the journal's commit traces, joined and attributed.

Run the broker with ``DELTAMQ_JOURNAL_TRACE=<directory>`` (see
:mod:`lakehouse.commit_trace`; the benchmark passes its environment on), e.g.::

    DELTAMQ_JOURNAL_TRACE=/tmp/trace python -m bench.amqp1_0 --quick --only deltamq --variants durable
    python -m bench.commit_trace /tmp/trace [--window auto|all|START:END]

Each durable message's time in the broker, from its arrival on the event loop
to the turn in which its group's waiters had run (its delivery and its
``accepted`` written), is cut into the stages below; the report gives p50,
p99 and max of the whole, and the mean of each stage over the messages at
the median and over the tail (at or above p99), so the stages the tail
spends its time in stand out:

* ``wait_hand_off``: in the open group, until the writer took a group
  (it was staging the one before);
* ``pipe``: sent by the loop -> read by the writer;
* ``encode``: unpickling and the Arrow table;
* ``write``: the Parquet file and the commit's content written;
* ``fsync1``: the first fsync round (data file, commit content, table directory);
* ``wait_publish``: staged, waiting for the publisher (the group before being published);
* ``link``, ``fsync2``: the link into ``_delta_log`` and its fsync;
* ``answer``: the writer's answer until the loop read it;
* ``waiters``: the waiters (deliveries, ``accepted``) and the loop's next turn.

Also: how long the writer's threads and the loop waited for a core
(run-queue time, ``/proc/thread-self/schedstat``) over the tail's groups,
how many tail groups overlapped a garbage collection of the loop, how many
checkpoints the writer asked of the upkeep process in the window (one per
20 commits: at these rates several a second, so their timing alone does not
single out the tail), and the fsync rounds' own distribution.  ``--window auto`` keeps
the longest stretch of steady arrivals after the last one above 75 % of the
peak rate (the benchmark's paced latency window, after its throughput window).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

STAGES = ("wait_hand_off", "pipe", "encode", "write", "fsync1", "wait_publish", "link", "fsync2", "answer",
          "waiters")


def load(directory: Path) -> tuple[dict[int, dict[str, Any]], dict[int, dict[str, Any]], list[float],
                                   list[tuple[float, float]]]:
    """The loop's and the writer's records by group number, checkpoint requests, gc pauses."""
    loop: dict[int, dict[str, Any]] = {}
    writer: dict[int, dict[str, Any]] = {}
    checkpoints: list[float] = []
    collections: list[tuple[float, float]] = []
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            entry = json.loads(line)
            if "event" in entry:
                checkpoints.append(entry["at"])
            elif "gc" in entry:
                collections.append((entry["start"], entry["end"]))
            elif path.name.startswith("loop-"):
                loop[entry["group"]] = entry
            else:
                writer[entry["group"]] = entry
    return loop, writer, checkpoints, collections


def pick_window(loop: dict[int, dict[str, Any]], spec: str) -> tuple[float, float]:
    """The span of arrival times to report on."""
    times = sorted(a for entry in loop.values() for a in entry["arrivals"])
    if not times:
        raise SystemExit("no traced messages")
    if spec == "all":
        return times[0], times[-1]
    if spec != "auto":
        start, end = spec.split(":")
        return times[0] + float(start), times[0] + float(end)
    step = 0.25
    buckets: dict[int, int] = {}
    for t in times:
        buckets[int((t - times[0]) / step)] = buckets.get(int((t - times[0]) / step), 0) + 1
    peak = max(buckets.values())
    last_peak = max(k for k, v in buckets.items() if v > 0.75 * peak)
    after = sorted(v for k, v in buckets.items() if k > last_peak)
    if not after:
        return times[0], times[-1]
    pace = after[len(after) // 2]              # the paced window's rate, per bucket
    steady = [k for k, v in buckets.items() if k > last_peak and 0.5 * pace <= v <= 1.5 * pace]
    runs: list[list[int]] = []                 # the longest run of consecutive steady buckets
    for k in sorted(steady):
        if runs and runs[-1][-1] == k - 1:
            runs[-1].append(k)
        else:
            runs.append([k])
    longest = max(runs, key=len)
    first = longest[0] + min(2, len(longest) // 4)     # the sender's ramp into its pace: left out
    return times[0] + first * step, times[0] + (longest[-1] + 1) * step


def quantile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] if ordered else float("nan")


def stages(entry: dict[str, Any], work: dict[str, Any], arrival: float) -> dict[str, float] | None:
    try:
        f0, f1 = work["fsync1"]
        g0, g1 = work["fsync2"]
        return {"wait_hand_off": entry["sent"] - arrival, "pipe": work["received"] - entry["sent"],
                "encode": work["encoded"] - work["received"], "write": f0 - work["encoded"],
                "fsync1": f1 - f0, "wait_publish": work["publish"] - f1,
                "link": g0 - work["publish"], "fsync2": g1 - g0, "answer": entry["durable"] - g1,
                "waiters": entry["flushed"] - entry["durable"]}
    except KeyError:
        return None


def report(directory: Path, window: str) -> dict[str, Any]:
    loop, writer, checkpoints, collections = load(directory)
    start, end = pick_window(loop, window)
    messages: list[tuple[float, int, dict[str, float]]] = []
    for number, entry in loop.items():
        work = writer.get(number)
        if work is None or "flushed" not in entry:
            continue
        for arrival in entry["arrivals"]:
            if start <= arrival <= end:
                parts = stages(entry, work, arrival)
                if parts is not None:
                    messages.append((entry["flushed"] - arrival, number, parts))
    if not messages:
        raise SystemExit("no complete traces in the window")
    totals = [m[0] for m in messages]
    p50, p99 = quantile(totals, 0.5), quantile(totals, 0.99)
    tail = [m for m in messages if m[0] >= p99]
    middle = [m for m in messages if abs(m[0] - p50) <= 0.001] or messages

    def mean_stages(chosen: list[tuple[float, int, dict[str, float]]]) -> dict[str, float]:
        return {name: round(sum(m[2][name] for m in chosen) / len(chosen) * 1e3, 2) for name in STAGES}

    groups = sorted({m[1] for m in messages})
    tail_groups = sorted({m[1] for m in tail})
    before_tail = sorted({n - 1 for n in tail_groups} | set(tail_groups))

    def group_figure(numbers: list[int], key: str) -> float:
        values = [writer[n][key] for n in numbers if n in writer and key in writer[n]]
        return round(sum(values) / len(values) * 1e3, 2) if values else float("nan")

    def overlaps(numbers: list[int], spans: list[tuple[float, float]]) -> int:
        hit = 0
        for n in numbers:
            entry = loop.get(n)
            if entry is None or not entry["arrivals"]:
                continue
            lo, hi = min(entry["arrivals"]), entry["flushed"]
            if any(s < hi and e > lo for s, e in spans):
                hit += 1
        return hit

    def rounds(key: str, numbers: list[int]) -> dict[str, float]:
        values = [writer[n][key][1] - writer[n][key][0] for n in numbers if n in writer and key in writer[n]]
        return {"p50": round(quantile(values, 0.5) * 1e3, 2), "p90": round(quantile(values, 0.9) * 1e3, 2),
                "p99": round(quantile(values, 0.99) * 1e3, 2), "max": round(max(values) * 1e3, 2)}

    sizes = [len(loop[n]["arrivals"]) for n in groups]
    loop_waits = [loop[n].get("loop_wait", 0.0) for n in tail_groups]
    span = end - start
    return {
        "window_s": round(span, 2), "messages": len(messages), "rate": round(len(messages) / span),
        "groups": len(groups), "messages_per_group_p50": quantile(sizes, 0.5),
        "broker_ms": {"p50": round(p50 * 1e3, 2), "p99": round(p99 * 1e3, 2), "max": round(max(totals) * 1e3, 2)},
        "stages_ms_at_p50": mean_stages(middle), "stages_ms_tail": mean_stages(tail),
        "tail_groups": len(tail_groups),
        "writer_run_queue_ms_tail_and_before": {
            "stage_thread": group_figure(before_tail, "stage_wait"),
            "publish_thread": group_figure(before_tail, "publish_wait"),
            "all_groups_stage_thread": group_figure(groups, "stage_wait")},
        "writer_cpu_ms": {"stage": group_figure(groups, "stage_cpu"), "publish": group_figure(groups, "publish_cpu")},
        "loop_run_queue_ms_tail_groups": round(sum(loop_waits) / max(len(loop_waits), 1) * 1e3, 2),
        "tail_groups_during_gc_gen1_or_2": overlaps(tail_groups, collections),
        "fsync1_ms": rounds("fsync1", groups), "fsync2_ms": rounds("fsync2", groups),
        "checkpoint_requests_in_window": sum(start <= t <= end for t in checkpoints),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--window", default="auto", help="auto, all or START:END seconds after the first arrival")
    args = parser.parse_args(argv)
    print(json.dumps(report(args.directory, args.window), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
