"""``deltamq spark serve`` started as a user starts it, for the tests that need a warm server.

:class:`ServeProcess` runs the command as a child process in its own process
group, on any free port (``--port 0``), its output captured to a file, and
waits until the server has published its record
(:func:`lakehouse.connect_server.recorded_server`): from then on it serves.
:meth:`ServeProcess.stop` sends SIGTERM (a clean stop) and, should that not
end it, kills the whole group: nothing is left running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from lakehouse.connect_server import ConnectServer, recorded_server
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[1]
#: a JVM, Delta and the Connect plugin starting on a loaded 2-core machine
START_TIMEOUT = 240.0
STOP_TIMEOUT = 60.0


def deltamq(*args: str, env: dict[str, str] | None = None, timeout: float = 300
            ) -> subprocess.CompletedProcess[str]:
    """``deltamq <args>`` run to its end, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "broker.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=REPO)


class ServeProcess:
    """``deltamq spark serve --data-dir <dir> --port 0`` as a child process."""

    def __init__(self, data_dir: Path, log_path: Path, *extra: str) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.command = [sys.executable, "-m", "broker.cli", "spark", "serve", "--data-dir", str(data_dir),
                        "--port", "0", "--refresh", "0.5", *extra]
        self.proc: subprocess.Popen[bytes] | None = None
        #: the server's record, once it serves
        self.server: ConnectServer | None = None

    def start(self) -> ConnectServer:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.command, cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self.server = wait_until(self._serving, START_TIMEOUT, interval=0.2, what="deltamq spark serve")
        except BaseException:
            self.stop()
            raise
        return self.server

    def _serving(self) -> ConnectServer | None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"`{' '.join(self.command)}` exited with {self.proc.returncode}:\n{self.log()}")
        server = recorded_server(self.data_dir)
        return server if server is not None and server.pid == self.proc.pid else None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-8000:]
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait(self, timeout: float = STOP_TIMEOUT) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def stop(self) -> int | None:
        """SIGTERM to the command; its whole process group killed if it does not end."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)      # the JVM, should it have outlived its parent
        except (ProcessLookupError, PermissionError):
            pass
        return proc.wait(timeout=STOP_TIMEOUT)
