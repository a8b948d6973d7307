"""Forked load-generator worker processes and the parent that steers them:
the machinery both suites (workloads.py, durable.py) run their workloads on.

The parent never speaks AMQP during a run.  It shares with the workers a
control block ``ctrl`` (``ctrl[PHASE]`` is the phase, the other slots are the
suite's), one published and one confirmed counter per producer, one received
counter per consumer, and one ready flag per worker (1 ready, -1 failed); it
reads the counters and the CPU times to time the measurement windows itself.
A worker runs ``worker(ws, wl, host, port, vhost, ctrl, pubc, confc, recv,
ready)`` in an asyncio (uvloop) loop and reports through a pipe:
``reply(pipe, result)``, or ``("error", text)``.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import signal
import time
import traceback
from dataclasses import dataclass
from time import perf_counter
from typing import Callable, Iterator

from . import procutil
from .amqp import AMQPError, install_uvloop

PHASE = 0          # ctrl[PHASE]: the phase the workers are in


class WorkloadError(RuntimeError):
    pass


def _serve(worker, reply, amqp_text: bool, ws, wl, host, port, vhost,
           ctrl, pubc, confc, recv, ready, pipe, nice: int) -> None:
    """The body of a worker process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # the parent handles Ctrl-C
    if nice:
        try:
            os.nice(nice)
        except OSError:
            pass
    install_uvloop()
    try:
        reply(pipe, asyncio.run(worker(ws, wl, host, port, vhost, ctrl, pubc, confc, recv, ready)))
    except BaseException as e:  # noqa: BLE001
        ready[ws.wid] = -1
        try:
            msg = str(e) if amqp_text and isinstance(e, AMQPError) else traceback.format_exc()
            pipe.send(("error", msg))
        except Exception:  # noqa: BLE001
            pass
    finally:
        pipe.close()


@dataclass
class Snap:
    """Counters and CPU times at one instant."""
    t: float
    pub: int
    conf: int
    recv: int
    client: list[float]          # CPU seconds per worker process
    broker: float                # CPU seconds of the broker's process tree
    broker_pids: list[int]
    machine: tuple[int, int, int, int]
    everyone: dict[int, float]


@dataclass
class Window:
    """Rates and CPU between two snaps; CPU in % of one core."""
    dt: float
    published: float             # msg/s
    confirmed: float
    received: float
    client: list[float]          # per worker process, rounded to 0.1
    broker: float
    busy: float                  # the whole machine
    irq: float
    steal: float
    others: list                 # the busiest processes that are neither broker nor load generator


class Pool:
    """The worker processes of one workload run against ``broker``.

    ``stop`` is the suite's STOP phase.  A worker's error is shown in full, or
    only its last line (``last_line``: for tracebacks); ``amqp_text`` makes
    workers report an AMQPError by its message rather than a traceback.
    ``tick``: how often sleep() checks the workers and the broker."""

    def __init__(self, broker, nprod: int, ncons: int, nworkers: int, stop: int, *,
                 tick: float = 0.2, last_line: bool = False, amqp_text: bool = False):
        self.ctx = ctx = mp.get_context("fork")
        self.broker = broker
        self.ctrl = ctx.RawArray("q", 4)
        self.pubc = ctx.RawArray("q", nprod)
        self.confc = ctx.RawArray("q", nprod)
        self.recv = ctx.RawArray("q", ncons)
        self.ready = ctx.RawArray("q", nworkers)
        self.stop, self.tick, self.last_line, self.amqp_text = stop, tick, last_line, amqp_text
        self.procs: list = []
        self.pipes: list = []

    def spawn(self, worker: Callable, reply: Callable, name: str, ws, wl, nice: int = 0) -> None:
        b = self.broker
        r, w = self.ctx.Pipe(duplex=False)
        p = self.ctx.Process(target=_serve, name=name,
                             args=(worker, reply, self.amqp_text, ws, wl, b.host, b.port, b.vhost,
                                   self.ctrl, self.pubc, self.confc, self.recv, self.ready, w, nice),
                             daemon=True)
        p.start()
        w.close()
        self.procs.append(p)
        self.pipes.append(r)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def health(self) -> None:
        """Raise WorkloadError if a worker failed or died, or the broker exited."""
        for i, p in enumerate(self.procs):
            if self.ready[i] == -1 or (not p.is_alive() and self.ctrl[PHASE] != self.stop):
                msg = "worker died"
                if self.pipes[i].poll(1):
                    try:
                        msg = str(self.pipes[i].recv()[1])
                    except EOFError:
                        pass
                msg = msg.strip()
                raise WorkloadError(f"worker {i}: {msg.splitlines()[-1] if self.last_line else msg}")
        if not self.broker.alive():
            raise WorkloadError("broker process exited")

    def sleep(self, t: float) -> None:
        end = perf_counter() + t
        while True:
            self.health()
            left = end - perf_counter()
            if left <= 0:
                return
            time.sleep(min(self.tick, left))

    def wait(self, done: Callable[[], bool], timeout: float) -> bool:
        """Until done() (True) or timeout seconds (False), checking health."""
        t0 = perf_counter()
        while not done():
            self.health()
            if perf_counter() - t0 > timeout:
                return False
            time.sleep(0.05)
        return True

    def wait_ready(self, timeout: float = 60.0) -> None:
        if not self.wait(lambda: all(self.ready[i] == 1 for i in range(len(self.procs))), timeout):
            raise WorkloadError(f"workers not ready after {timeout:g} s")

    def reports(self) -> Iterator[tuple[object, object]]:
        """After STOP: each worker's ("ok", info) as (info, its pipe), to read
        its samples from; the worker is joined once the caller has."""
        for i, (p, r) in enumerate(zip(self.procs, self.pipes)):
            if not r.poll(30):
                raise WorkloadError(f"worker {i} did not report")
            kind, val = r.recv()
            if kind != "ok":
                raise WorkloadError(f"worker {i}: {str(val).strip()}")
            yield val, r
            p.join(10)

    def close(self) -> None:
        """STOP, and make sure every worker is gone."""
        self.ctrl[PHASE] = self.stop
        for p in self.procs:
            p.join(5)
            if p.is_alive():
                p.terminate()
                p.join(5)
        for r in self.pipes:
            r.close()

    def snap(self) -> Snap:
        bp = procutil.tree(self.broker.pid)
        got = sum(self.recv)       # before the publish counters: the backlog is never < 0
        return Snap(perf_counter(), sum(self.pubc), sum(self.confc), got,
                    [procutil.cpu_seconds(x) for x in self.pids],
                    sum(procutil.cpu_seconds(x) for x in bp), bp,
                    procutil.machine_cpu(), procutil.all_cpu_seconds())

    def window(self, a: Snap, b: Snap) -> Window:
        dt = b.t - a.t
        busy, irq, steal = procutil.machine_pct(a.machine, b.machine)
        ours = set(self.pids) | set(b.broker_pids) | {os.getpid()}
        return Window(dt, (b.pub - a.pub) / dt, (b.conf - a.conf) / dt, (b.recv - a.recv) / dt,
                      [round(100 * (y - x) / dt, 1) for x, y in zip(a.client, b.client)],
                      100 * (b.broker - a.broker) / dt, busy, irq, steal,
                      procutil.top_cpu(a.everyone, b.everyone, dt, ours))
