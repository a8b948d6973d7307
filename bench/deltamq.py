"""Start/stop DeltaMQ for the benchmark, the way a user does::

    .venv/bin/deltamq serve --amqp-port N --data-dir TMP

in a fresh temporary data directory, in its own session, stopped with SIGINT
(like Ctrl-C), then SIGTERM, then SIGKILL.  If ``serve --help`` advertises an
HTTP/management port option, a free port is passed so that the benchmark
instance does not collide with a broker somebody else runs on 8080.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import procutil

REPO = Path(__file__).resolve().parent.parent
DEFAULT_EXE = REPO / ".venv" / "bin" / "deltamq"



class DeltaMQ(procutil.ManagedBroker):
    name = "deltamq"

    def __init__(self, port: int = 0, host: str = "127.0.0.1", exe: str | os.PathLike | None = None,
                 vhost: str = "/", log=print, keep_dir: bool = False):
        self.host = host
        self.want_port = port
        self.port = port
        self.vhost = vhost
        self.exe = str(exe or DEFAULT_EXE)
        self.log = log
        self.keep_dir = keep_dir
        self.dir: str | None = None
        self.proc: subprocess.Popen | None = None
        self.cmd: list[str] = []
        self.version = ""
        self.nice = 0               # niceness increment for the broker process (<0: root)
        self.http_port = 0          # the management (HTTP) port given to serve, if any

    def _prefix(self) -> tuple[list[str], dict[str, str]]:
        """The command that runs ``deltamq``, and its environment.

        The console script, as a user runs it.  Before ``make install`` has
        created it, fall back to ``.venv/bin/python -m broker.cli`` from the
        repository (same entry point, said in the log); in a checkout without a
        ``.venv`` (a git worktree), to the interpreter running the benchmark.
        """
        env = dict(os.environ)
        if os.path.exists(self.exe):
            return [self.exe], env
        py = REPO / ".venv" / "bin" / "python"
        if not py.exists():
            py = Path(sys.executable)       # a worktree without its own venv: the benchmark's interpreter
        if self.exe == str(DEFAULT_EXE) and py.exists() and (REPO / "broker" / "cli.py").exists():
            env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
            return [str(py), "-m", "broker.cli"], env
        return [], env

    def available(self) -> tuple[bool, str]:
        """(usable, why not): the console script exists and `serve --help` works."""
        prefix, env = self._prefix()
        if not prefix:
            return False, f"{self.exe} does not exist (run `make install`)"
        if prefix[0] != self.exe:
            self.log(f"[deltamq] {self.exe} is not installed (`make install` creates it); "
                     f"using {' '.join(prefix)}")
        try:
            r = subprocess.run(prefix + ["serve", "--help"], capture_output=True, text=True,
                               timeout=60, cwd=REPO, env=env)
        except (OSError, subprocess.SubprocessError) as e:
            return False, f"`deltamq serve --help` failed: {e}"
        if r.returncode != 0:
            return False, f"`deltamq serve --help` exited {r.returncode}: " \
                          f"{(r.stderr or r.stdout).strip().splitlines()[-1:] or ''}"
        self._help = r.stdout + r.stderr
        if "--amqp-port" not in self._help or "--data-dir" not in self._help:
            return False, "`deltamq serve` has no --amqp-port/--data-dir options yet"
        return True, ""

    def _extra_args(self) -> list[str]:
        h = getattr(self, "_help", "")
        for opt in ("--http-port", "--management-port", "--mgmt-port"):
            if opt in h:
                self.http_port = procutil.free_port(None, self.host)
                return [opt, str(self.http_port)]
        self.http_port = 0
        return []

    def start(self, timeout: float = 90.0) -> None:
        ok, why = self.available()
        if not ok:
            raise RuntimeError(why)
        try:
            self.version = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                                          capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            self.version = ""
        self.dir = tempfile.mkdtemp(prefix="deltamq-bench-data-")
        self.port = procutil.free_port(self.want_port or None, self.host)
        prefix, env = self._prefix()
        self.cmd = prefix + ["serve", "--amqp-port", str(self.port), "--data-dir",
                             os.path.join(self.dir, "data")] + self._extra_args()
        self.log(f"[deltamq] starting: {' '.join(self.cmd)}")
        t0 = self._launch("DeltaMQ", self.cmd, log_path=os.path.join(self.dir, "deltamq.log"),
                          cwd=self.dir, env=env, timeout=timeout)
        self.log(f"[deltamq] up in {time.monotonic() - t0:.1f}s, pid {self.pid}")

    def _tail(self, n: int = 30) -> str:
        if not self.dir:
            return ""
        try:
            with open(os.path.join(self.dir, "deltamq.log"), errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def describe(self) -> str:
        return f"DeltaMQ {self.version or ''}".strip()

    def stop(self) -> None:
        if self.proc is not None:
            rc = procutil.stop_group(self.proc, ((signal.SIGINT, 15), (signal.SIGTERM, 10), (signal.SIGKILL, 10)))
            self.proc = None
            self.log(f"[deltamq] stopped (exit {rc})")
        if self.dir and not self.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


