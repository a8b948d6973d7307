"""/proc readers: CPU time, RSS, process trees, whole-machine CPU."""

from __future__ import annotations

import os
import subprocess
import socket
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """user+system CPU seconds of a process (all its threads); 0 if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return 0.0
    fields = data[data.rindex(b")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _ppid_map() -> dict[int, int]:
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rindex(b")") + 2:].split()
        out[int(name)] = int(fields[1])
    return out


def tree(pid: int) -> list[int]:
    """pid and all its descendants."""
    ppids = _ppid_map()
    kids: dict[int, list[int]] = {}
    for p, pp in ppids.items():
        kids.setdefault(pp, []).append(p)
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, ()))
    return out


def all_cpu_seconds() -> dict[int, float]:
    """{pid: cpu seconds} of every process on the machine."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            out[int(name)] = cpu_seconds(int(name))
    return out


def top_cpu(a: dict[int, float], b: dict[int, float], dt: float, exclude: set[int],
            n: int = 3, min_pct: float = 2.0) -> list[tuple[str, int, float]]:
    """The n busiest processes between two all_cpu_seconds() snapshots."""
    rows = []
    for pid, t in b.items():
        if pid in exclude:
            continue
        pct = 100 * (t - a.get(pid, 0.0)) / dt
        if pct >= min_pct:
            rows.append((comm(pid), pid, round(pct, 1)))
    rows.sort(key=lambda r: -r[2])
    return rows[:n]


def tree_cpu_seconds(pid: int) -> float:
    return sum(cpu_seconds(p) for p in tree(pid))


def rss_bytes(pid: int) -> int:
    """VmRSS of a process in bytes (0 if gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def machine_cpu() -> tuple[int, int, int, int]:
    """(busy, total, irq+softirq, steal) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        parts = f.readline().split()[1:]
    vals = [int(x) for x in parts] + [0] * 8
    idle = vals[3] + vals[4]
    total = sum(vals[:8])
    return total - idle, total, vals[5] + vals[6], vals[7]


def machine_pct(m0: tuple[int, int, int, int], m1: tuple[int, int, int, int]) -> tuple[float, float, float]:
    """(busy, irq+softirq, steal) between two machine_cpu() readings, in % of one core."""
    total = max(1, m1[1] - m0[1])
    n = ncpu()
    return (100 * (m1[0] - m0[0]) / total * n, 100 * (m1[2] - m0[2]) / total * n,
            100 * (m1[3] - m0[3]) / total * n)


def ncpu() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        return os.cpu_count() or 1


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    s = socket.socket()
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_port(preferred: int | None = None, host: str = "127.0.0.1") -> int:
    if preferred and port_free(preferred, host):
        return preferred
    s = socket.socket()
    s.bind((host, 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port: int, timeout: float, alive=lambda: True, host: str = "127.0.0.1") -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            return False
        try:
            with socket.create_connection((host, port), timeout=1):
                return True
        except OSError:
            time.sleep(0.2)
    return False


def set_autogroup_nice(n: int, pid: str | int = "self") -> bool:
    """Set the nice value of a process's scheduler autogroup (Linux).

    With ``kernel.sched_autogroup_enabled`` the CPU is first shared between
    autogroups (one per session), so a process's own niceness only matters
    against processes of its session; this is what weighs against other jobs.
    """
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(n))
        return True
    except OSError:
        return False


def niceness(n: int):
    """A Popen preexec_fn applying niceness n to the child and to its session's
    autogroup (Popen's start_new_session runs setsid before preexec_fn)."""
    if not n:
        return None

    def apply() -> None:
        try:
            os.nice(n)
        except OSError:
            pass
        set_autogroup_nice(n)
    return apply


def stop_group(proc: "subprocess.Popen[bytes]", steps: tuple[tuple[int, float], ...]) -> int | None:
    """Signal ``proc``'s process group with each (signal, seconds to wait) until it exits."""
    for sig, wait in steps:
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            pass
    return proc.returncode


class ManagedBroker:
    """``with Broker(...) as b:`` starts it and always stops it.

    Subclasses set ``host``, ``port``, ``vhost``, ``nice`` and ``log`` and
    implement ``start`` (calling :meth:`_launch`), ``stop`` and ``_tail``.
    """

    proc: "subprocess.Popen[bytes] | None" = None

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def _tail(self, n: int = 30) -> str:
        raise NotImplementedError

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _launch(self, name: str, cmd: list[str], *, log_path: str, cwd: str,
                env: dict[str, str] | None, timeout: float) -> float:
        """Start ``cmd`` in a session of its own, wait for its port and an AMQP handshake.

        Returns the monotonic time it was started at; on failure stops it and
        raises RuntimeError with the tail of its log.
        """
        from .amqp import probe

        with open(log_path, "wb") as out:
            self.proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL,
                                         preexec_fn=niceness(self.nice),  # type: ignore[attr-defined]
                                         start_new_session=True)
        started = time.monotonic()
        host, port = self.host, self.port  # type: ignore[attr-defined]
        if not wait_port(port, timeout, self.alive, host):
            tail = self._tail()
            self.stop()
            raise RuntimeError(f"{name} did not open {host}:{port}:\n{tail}")
        # the port opens slightly before the broker takes connections: handshake
        deadline = time.monotonic() + 30
        while True:
            try:
                probe(host, port, self.vhost)  # type: ignore[attr-defined]
                return started
            except Exception as e:  # noqa: BLE001
                if time.monotonic() > deadline or not self.alive():
                    tail = self._tail()
                    self.stop()
                    raise RuntimeError(f"{name} does not complete an AMQP 0-9-1 handshake "
                                       f"(vhost {self.vhost!r}): {e!r}\n{tail}") from e  # type: ignore[attr-defined]
                time.sleep(0.3)

    def __enter__(self):  # type: ignore[no-untyped-def]
        self.start()
        return self

    def __exit__(self, *exc) -> None:  # type: ignore[no-untyped-def]
        self.stop()
