"""The AMQP 1.0 benchmark's load: 1 sender -> 1 queue -> 1 receiver, at-least-once.

Two processes of one *generator* -- a real AMQP 1.0 client library -- do the
messaging: a sender and a receiver, each with its own connection.  The parent
(this module) never speaks AMQP during a run.  It shares with them a control
block (a small file in /dev/shm of little-endian int64 slots, ``CONTROL``) where
it sets the phase, the paced rate and whether latencies are recorded, and where
they write their counters; it reads those and the CPU times to time the windows.

Generators (``GENERATORS``), same protocol, same messages:

* ``rhea``   -- rhea on Node.js (bench/amqp1_0_generators/load.js);
* ``proton`` -- python-qpid-proton's reactor API (bench/amqp1_0_proton.py);
  ``proton-blocking`` its BlockingConnection API (one message in flight: the
  blocking send waits for the outcome);
* ``jms``    -- Qpid JMS on the JDK (bench/amqp1_0_generators/JmsLoad.java),
  asynchronous sends with a CompletionListener, a MessageListener receiving.

The clients come from tools/ensure-amqp1-clients (rhea, Qpid JMS; proton from
PyPI through the ``test`` extra).

Per variant (``VARIANTS``: transient = non-durable queue, durable=false; durable =
durable queue, durable=true header), like bench/workloads.py:

1. *Throughput.*  The sender keeps ``window`` (1000) deliveries unsettled,
   sending as credit allows, and pauses while the queue holds more than
   ``backlog`` (10,000) messages the receiver has not received (a sustained
   end-to-end rate, not a queue filling up).  The receiver grants ``credit``
   (1000) and accepts each delivery.  Over ``duration`` s after ``warmup`` s:
   sent, accepted and delivered msg/s.  The figure is delivered msg/s.
2. After the queue drains: the sender sends at ``latency_fraction`` (0.5) of the
   delivered rate, paced by a 1 ms tick; every body carries the sender's
   CLOCK_MONOTONIC at the write, the receiver subtracts it from its clock when
   the message arrives: p50/p99/p99.9/max over ``lat_duration`` s after
   ``lat_warmup`` s.
3. CPU of the sender and receiver processes, of the broker's process tree, of
   interrupts and of everything else ("other jobs") for both windows.
"""

from __future__ import annotations

import mmap
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Callable

from . import procutil
from .amqp import admin
from .workers import Pool, Snap, WorkloadError
from .workloads import _cpu, _pct

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
GENERATORS_DIR = BENCH / "amqp1_0_generators"
CLIENTS_DIR = REPO / "tests" / "amqp1_0_clients"
ENSURE_CLIENTS = REPO / "tools" / "ensure-amqp1-clients"

# the control block: slot numbers (keep in step with load.js, JmsLoad.java, amqp1_0_proton.py)
CONTROL = ("phase", "rate", "record", "sent", "accepted", "received", "ready_sender",
           "ready_receiver", "backlog", "other_outcomes", "behind_ms")
(PHASE, RATE, RECORD, SENT, ACCEPTED, RECEIVED, READY_SENDER, READY_RECEIVER, BACKLOG,
 OTHER_OUTCOMES, BEHIND_MS) = range(len(CONTROL))
SLOTS = 16
SETUP, RUN_MAX, PAUSE, RUN_RATE, STOP = range(5)


@dataclass(frozen=True)
class Variant:
    name: str
    queue: str
    durable: bool
    title: str


VARIANTS = {
    "transient": Variant("transient", "bench.amqp1.transient", False,
                         "transient: non-durable queue, durable=false"),
    "durable": Variant("durable", "bench.amqp1.durable", True,
                       "durable: durable queue, durable=true (synced to disk before accepted)"),
}


@dataclass
class LoadOptions:
    generator: str = "rhea"
    duration: float = 10.0
    warmup: float = 3.0
    lat_duration: float = 10.0
    lat_warmup: float = 1.0
    latency_fraction: float = 0.5
    #: msg/s of the latency window when set, instead of ``latency_fraction`` of the peak (A/B runs)
    latency_rate: float | None = None
    size: int = 256
    window: int = 1000
    credit: int = 1000
    backlog: int = 10_000
    drain_timeout: float = 60.0
    nice: int = 0
    hostname: str = ""          # the open frame's hostname; "" = the client's default (the host)
    log: Callable[[str], None] = field(default=print, repr=False)


class Control:
    """The shared control block: a file of SLOTS int64 in /dev/shm (or the temp dir)."""

    def __init__(self) -> None:
        where = "/dev/shm" if os.path.isdir("/dev/shm") else None
        fd, self.path = tempfile.mkstemp(prefix="deltamq-amqp1-ctl-", dir=where)
        os.write(fd, bytes(8 * SLOTS))
        self._map = mmap.mmap(fd, 8 * SLOTS)
        os.close(fd)
        self.slots = memoryview(self._map).cast("q")

    def __getitem__(self, i: int) -> int:
        return int(self.slots[i])

    def __setitem__(self, i: int, v: int) -> None:
        self.slots[i] = v

    def close(self) -> None:
        self.slots.release()
        self._map.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass


# --------------------------------------------------------------------------
# generators


def ensure_clients(log=print) -> None:
    """tools/ensure-amqp1-clients: rhea and Qpid JMS into tests/amqp1_0_clients/."""
    if not (CLIENTS_DIR / "node_modules" / "rhea").is_dir() or not (CLIENTS_DIR / "classpath.txt").exists():
        log("[amqp1] fetching the AMQP 1.0 clients: bash tools/ensure-amqp1-clients")
        subprocess.run(["bash", str(ENSURE_CLIENTS)], check=False, timeout=1200)


def _jms_command(role: str, build: Path) -> list[str]:
    cp = (CLIENTS_DIR / "classpath.txt").read_text().strip()
    return ["java", "-cp", f"{build}{os.pathsep}{cp}", "JmsLoad", role]


def _compile_jms(log=print) -> Path:
    """javac JmsLoad.java against the fetched Qpid JMS classpath (once per source version)."""
    src = GENERATORS_DIR / "JmsLoad.java"
    cpfile = CLIENTS_DIR / "classpath.txt"
    if not cpfile.exists():
        raise WorkloadError("Qpid JMS is not fetched (tools/ensure-amqp1-clients failed?)")
    build = Path.home() / ".cache" / "deltamq" / "amqp1-jms-load"
    stamp = build / ".source-mtime"
    mark = f"{src.stat().st_mtime_ns}:{cpfile.stat().st_mtime_ns}"
    if not stamp.exists() or stamp.read_text() != mark:
        shutil.rmtree(build, ignore_errors=True)
        build.mkdir(parents=True)
        log("[amqp1] compiling JmsLoad.java")
        subprocess.run(["javac", "-cp", cpfile.read_text().strip(), "-d", str(build), str(src)],
                       check=True, timeout=300)
        stamp.write_text(mark)
    return build


def generator_command(name: str, role: str, log=print) -> tuple[list[str], dict[str, str]]:
    """(argv up to the control file, environment) of one side of generator ``name``."""
    env = dict(os.environ)
    if name == "rhea":
        if shutil.which("node") is None:
            raise WorkloadError("the rhea generator needs Node.js (apt-get install -y nodejs npm)")
        env["NODE_PATH"] = str(CLIENTS_DIR / "node_modules")
        return ["node", str(GENERATORS_DIR / "load.js"), role], env
    if name in ("proton", "proton-blocking"):
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
        api = "blocking" if name == "proton-blocking" else "reactor"
        return [sys.executable, "-m", "bench.amqp1_0_proton", "--api", api, role], env
    if name == "jms":
        return _jms_command(role, _compile_jms(log)), env
    raise WorkloadError(f"unknown generator {name!r}; there are {', '.join(GENERATORS)}")


GENERATORS = ("rhea", "proton", "proton-blocking", "jms")


def address_of(broker, queue: str) -> str:
    """The 1.0 address of an existing queue on ``broker`` (RabbitMQ 3.10 has its own scheme)."""
    fn = getattr(broker, "address", None)
    return fn(queue) if fn else queue


class LoadProcesses(Pool):
    """A Pool (bench/workers.py: snapshots, windows, health checks) whose two workers
    are the generator's sender and receiver processes, steered through Control."""

    def __init__(self, broker, opt: LoadOptions, variant: Variant, ctl: Control, tmp: str) -> None:
        self.broker, self.opt, self.variant, self.ctl, self.tmp = broker, opt, variant, ctl, tmp
        self.tick, self.last_line, self.amqp_text = 0.1, False, True
        self.popens: list[subprocess.Popen] = []
        self.samples_path = os.path.join(tmp, "latency.f64")

    def options(self) -> list[str]:
        o = self.opt
        kv = {"host": self.broker.host, "port": self.broker.port, "user": "guest", "password": "guest",
              "address": address_of(self.broker, self.variant.queue), "size": o.size,
              "window": o.window, "credit": o.credit, "durable": int(self.variant.durable),
              "samples": self.samples_path}
        if o.hostname:
            kv["hostname"] = o.hostname
        return [f"{k}={v}" for k, v in kv.items()]

    def spawn_roles(self) -> None:
        for role in ("receiver", "sender"):
            cmd, env = generator_command(self.opt.generator, role, self.opt.log)
            err = open(os.path.join(self.tmp, f"{role}.log"), "wb")
            try:
                self.popens.append(subprocess.Popen(
                    cmd + [self.ctl.path] + self.options(), env=env, cwd=REPO, stdout=err,
                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    preexec_fn=procutil.niceness(self.opt.nice), start_new_session=True))
            finally:
                err.close()

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.popens]

    def _log_of(self, i: int) -> str:
        role = ("receiver", "sender")[i]
        try:
            with open(os.path.join(self.tmp, f"{role}.log"), errors="replace") as f:
                return f"{role}: " + f.read().strip()[-2000:]
        except OSError:
            return f"{role}: (no output)"

    def health(self) -> None:
        for i, (p, ready) in enumerate(zip(self.popens, (READY_RECEIVER, READY_SENDER))):
            if self.ctl[ready] == -1 or (p.poll() is not None and self.ctl[PHASE] != STOP):
                raise WorkloadError(f"the {self.opt.generator} {('receiver', 'sender')[i]} failed "
                                    f"(exit {p.poll()}): {self._log_of(i)}")
        if not self.broker.alive():
            raise WorkloadError("broker process exited")

    def wait_ready(self, timeout: float = 120.0) -> None:
        if not self.wait(lambda: self.ctl[READY_SENDER] == 1 and self.ctl[READY_RECEIVER] == 1, timeout):
            raise WorkloadError(f"sender/receiver not attached after {timeout:g} s: "
                                f"{self._log_of(0)} | {self._log_of(1)}")

    def snap(self) -> Snap:
        bp = procutil.tree(self.broker.pid)
        got = self.ctl[RECEIVED]
        return Snap(perf_counter(), self.ctl[SENT], self.ctl[ACCEPTED], got,
                    [procutil.cpu_seconds(x) for x in self.pids],
                    sum(procutil.cpu_seconds(x) for x in bp), bp,
                    procutil.machine_cpu(), procutil.all_cpu_seconds())

    def finish(self) -> array:
        """STOP; wait for both to exit; the receiver's latency samples (ns)."""
        self.ctl[PHASE] = STOP
        for i, p in enumerate(self.popens):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                raise WorkloadError(f"{('receiver', 'sender')[i]} did not stop") from None
        samples = array("q")
        try:
            with open(self.samples_path, "rb") as f:
                raw = array("d")
                raw.frombytes(f.read())
            samples.extend(int(x) for x in raw)
        except OSError as e:
            raise WorkloadError(f"the receiver wrote no latency samples: {e}; {self._log_of(0)}") from None
        return samples

    def close(self) -> None:
        self.ctl[PHASE] = STOP
        for p in self.popens:
            if p.poll() is None:
                procutil.stop_group(p, ((signal.SIGTERM, 5), (signal.SIGKILL, 5)))


def declare(broker, variant: Variant) -> None:
    """A fresh queue for the variant, declared over 0-9-1 (the same on every broker)."""
    async def go(conn, ch):
        await ch.queue_delete(variant.queue)
        await ch.queue_declare(variant.queue, durable=variant.durable)
    admin(broker, go)


def delete(broker, variant: Variant) -> None:
    async def go(conn, ch):
        await ch.queue_delete(variant.queue)
    admin(broker, go)


def run_variant(broker, variant: Variant, opt: LoadOptions) -> dict:
    """One variant on one broker: throughput window, then latency at a fraction of it."""
    log = opt.log
    tmp = tempfile.mkdtemp(prefix="deltamq-amqp1-load-")
    ctl = Control()
    procs = LoadProcesses(broker, opt, variant, ctl, tmp)
    result: dict = {"variant": variant.name, "title": variant.title, "generator": opt.generator,
                    "window": opt.window, "credit": opt.credit, "size": opt.size}
    declare(broker, variant)
    try:
        ctl[BACKLOG] = opt.backlog
        procs.spawn_roles()
        procs.wait_ready()

        ctl[PHASE] = RUN_MAX
        procs.sleep(opt.warmup)
        s0 = procs.snap()
        procs.sleep(opt.duration)
        s1 = procs.snap()
        ctl[PHASE] = PAUSE
        tw = procs.window(s0, s1)
        accepted = (s1.conf - s0.conf) / tw.dt
        result["throughput"] = {
            "sent_per_s": round(tw.published), "accepted_per_s": round(accepted),
            "delivered_per_s": round(tw.received), "window_s": round(tw.dt, 2),
            "backlog_at_end": s1.pub - s1.recv, "other_outcomes": ctl[OTHER_OUTCOMES], **_cpu(tw)}
        T = result["throughput"]
        log(f"    throughput: sent {T['sent_per_s']:,}/s accepted {T['accepted_per_s']:,}/s delivered "
            f"{T['delivered_per_s']:,}/s (generator CPU {T['client_cpu_pct_per_process']} receiver, "
            f"sender; broker {T['broker_cpu_pct']}%, machine {T['machine_busy_pct']}%)")

        def drained() -> bool:
            return (ctl[RECEIVED] >= ctl[SENT]
                    and ctl[ACCEPTED] + ctl[OTHER_OUTCOMES] >= ctl[SENT])
        if not procs.wait(drained, opt.drain_timeout):
            result["drain_timeout"] = True
            log(f"    warning: the receiver did not catch up within {opt.drain_timeout:g} s")

        target = opt.latency_rate or tw.received * opt.latency_fraction
        if target < 1:
            raise WorkloadError("the peak delivered rate is ~0; cannot measure latency")
        ctl[RATE] = max(1, int(target * 1000))
        ctl[PHASE] = RUN_RATE
        procs.sleep(opt.lat_warmup)
        ctl[RECORD] = 1
        l0 = procs.snap()
        procs.sleep(opt.lat_duration)
        ctl[RECORD] = 0
        l1 = procs.snap()
        lw = procs.window(l0, l1)
        ctl[PHASE] = PAUSE
        procs.wait(drained, opt.drain_timeout)
        vals = sorted(procs.finish())
        result["latency"] = {
            "target_rate_per_s": round(target), "sent_per_s": round(lw.published),
            "delivered_per_s": round(lw.received), "samples": len(vals),
            "p50_ms": round(_pct(vals, 0.50), 3), "p99_ms": round(_pct(vals, 0.99), 3),
            "p999_ms": round(_pct(vals, 0.999), 3),
            "max_ms": round(vals[-1] / 1e6, 3) if vals else None,
            "sender_behind_max_ms": ctl[BEHIND_MS], **_cpu(lw)}
        L = result["latency"]
        log(f"    latency @ {target:,.0f} msg/s (sent {L['sent_per_s']:,}/s): p50 {L['p50_ms']} ms "
            f"p99 {L['p99_ms']} ms max {L['max_ms']} ms ({len(vals):,} samples; generator CPU "
            f"{L['client_cpu_pct_per_process']}, broker {L['broker_cpu_pct']}%)")
        return result
    finally:
        procs.close()
        ctl.close()
        shutil.rmtree(tmp, ignore_errors=True)
        if broker.alive():
            try:
                delete(broker, variant)
            except Exception as e:  # noqa: BLE001
                log(f"    (deleting {variant.queue} failed: {e})")
