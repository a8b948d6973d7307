"""A private RabbitMQ node for the benchmark (Debian's ``rabbitmq-server``).

The node is nobody's system service: it runs as the current user, listens on
127.0.0.1 on a port of its own (5680 by default, the next free one otherwise),
keeps its Mnesia database, logs, config, enabled-plugins file and Erlang cookie
(``HOME``) in a fresh temporary directory, has a unique node name, its own
distribution port and its own epmd (``ERL_EPMD_PORT``, loopback only), and has
no plugins -- unless made with ``management=True``: then the
``rabbitmq_management`` plugin (HTTP API and UI) is enabled in its
enabled-plugins file and listens on 127.0.0.1 on a free port (``http_port``,
15672 if free).  ``guest``/``guest`` works because the default
``loopback_users`` only lets guest in from loopback, which we are.

If the package is missing it is installed with ``apt-get install -y
rabbitmq-server`` (through ``sudo`` unless we are root).  Usable on its own::

    python -m bench.rabbitmq          # start, print where, wait for Ctrl-C, stop
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from . import procutil

RMQ_BIN = "/usr/lib/rabbitmq/bin"
RMQ_SERVER = os.path.join(RMQ_BIN, "rabbitmq-server")
RMQ_CTL = os.path.join(RMQ_BIN, "rabbitmqctl")


def installed() -> bool:
    return os.path.exists(RMQ_SERVER) and os.path.exists(RMQ_CTL)


def version() -> str:
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "rabbitmq-server"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def install(log=print) -> None:
    """apt-get install -y rabbitmq-server (sudo if not root); no-op if installed."""
    if installed():
        return
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    if sudo and shutil.which("sudo") is None:
        raise RuntimeError("rabbitmq-server is not installed and sudo is unavailable; "
                           "run: apt-get install -y rabbitmq-server")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = sudo + ["apt-get", "install", "-y", "-q", "rabbitmq-server"]
    log(f"[rabbitmq] installing: {' '.join(cmd)}")
    r = subprocess.run(cmd, env=env)
    if r.returncode != 0 or not installed():
        log("[rabbitmq] install failed; running apt-get update and retrying")
        subprocess.run(sudo + ["apt-get", "update", "-q"], env=env, check=False)
        subprocess.run(cmd, env=env, check=True)
    if not installed():
        raise RuntimeError("rabbitmq-server still not installed")
    # The package's postinst may have started (or tried to start) the system
    # service on 5672; it does not interfere with our private node.


def _epmd() -> str | None:
    return shutil.which("epmd") or next(iter(sorted(glob.glob("/usr/lib/erlang/erts-*/bin/epmd"))), None)



class RabbitMQ(procutil.ManagedBroker):
    name = "rabbitmq"

    def __init__(self, port: int = 5680, host: str = "127.0.0.1", log=print,
                 keep_dir: bool = False, management: bool = False):
        self.host = host
        self.want_port = port
        self.port = port
        self.vhost = "/"
        self.log = log
        self.keep_dir = keep_dir
        self.dir: str | None = None
        self.proc: subprocess.Popen | None = None
        self.nodename = f"deltamq-bench-{os.getpid()}@localhost"
        self.epmd_port = 0
        self.dist_port = 0
        self._beam: int | None = None
        self.version = ""
        self.nice = 0               # niceness increment for the broker process (<0: root)
        self.management = management    # enable rabbitmq_management (HTTP API on http_port)
        self.http_port = 0

    # ------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        d = self.dir
        assert d
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))}
        env.update({
            "HOME": d,                                   # .erlang.cookie lives here
            "RABBITMQ_NODENAME": self.nodename,
            "RABBITMQ_USE_LONGNAME": "false",
            "RABBITMQ_NODE_IP_ADDRESS": self.host,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_PORT": str(self.epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_CONF_ENV_FILE": os.path.join(d, "rabbitmq-env.conf"),
            "RABBITMQ_CONFIG_FILE": os.path.join(d, "rabbitmq"),   # -> rabbitmq.conf
            "RABBITMQ_ADVANCED_CONFIG_FILE": os.path.join(d, "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": os.path.join(d, "enabled_plugins"),
            "RABBITMQ_MNESIA_BASE": os.path.join(d, "mnesia"),
            "RABBITMQ_LOG_BASE": os.path.join(d, "log"),
            "RABBITMQ_PID_FILE": os.path.join(d, "rabbitmq.pid"),
            "RABBITMQ_PLUGINS_EXPAND_DIR": os.path.join(d, "plugins-expand"),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        })
        return env

    def _write_config(self) -> None:
        d = self.dir
        assert d
        for sub in ("mnesia", "log", "plugins-expand"):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        with open(os.path.join(d, "rabbitmq-env.conf"), "w") as f:
            f.write("# private benchmark node: everything comes from the environment\n")
        with open(os.path.join(d, "enabled_plugins"), "w") as f:
            # no plugins, or only the management plugin (and what it depends on)
            f.write("[rabbitmq_management].\n" if self.management else "[].\n")
        with open(os.path.join(d, "advanced.config"), "w") as f:
            f.write("[].\n")
        with open(os.path.join(d, "rabbitmq.conf"), "w") as f:
            f.write(
                "loopback_users.guest = true\n"       # the default, spelled out
                "disk_free_limit.absolute = 50MB\n"
                "vm_memory_high_watermark.relative = 0.4\n"
                "log.file.level = warning\n"
                "log.console = false\n"
            )
            if self.management:
                f.write(f"management.tcp.port = {self.http_port}\n"
                        f"management.tcp.ip = {self.host}\n")

    # ------------------------------------------------------------------
    def start(self, timeout: float = 120.0) -> None:
        install(self.log)
        self.version = version()
        self.dir = tempfile.mkdtemp(prefix="deltamq-bench-rabbitmq-")
        self.port = procutil.free_port(self.want_port, self.host)
        self.dist_port = procutil.free_port(self.port + 20000 if self.port + 20000 < 65536 else None)
        self.epmd_port = procutil.free_port(14369)
        self.http_port = procutil.free_port(15672, self.host) if self.management else 0
        self._write_config()
        self.log(f"[rabbitmq] starting private node {self.nodename} {self.version} on "
                 f"{self.host}:{self.port} (dist {self.dist_port}, epmd {self.epmd_port}, dir {self.dir})")
        t0 = self._launch("RabbitMQ", [RMQ_SERVER], log_path=os.path.join(self.dir, "stdout.log"),
                          cwd=self.dir, env=self.env(), timeout=timeout)
        if self.management and not procutil.wait_port(self.http_port, 60, self.alive, self.host):
            tail = self._tail()
            self.stop()
            raise RuntimeError(f"RabbitMQ's management plugin did not open "
                               f"{self.host}:{self.http_port}:\n{tail}")
        self.log(f"[rabbitmq] up in {time.monotonic() - t0:.1f}s, beam.smp pid {self.pid}"
                 + (f", management API on {self.host}:{self.http_port}" if self.management else ""))

    def _tail(self, n: int = 30) -> str:
        if not self.dir:
            return ""
        lines: list[str] = []
        for p in [os.path.join(self.dir, "stdout.log")] + glob.glob(os.path.join(self.dir, "log", "*.log")):
            try:
                with open(p, errors="replace") as f:
                    lines += [f"{os.path.basename(p)}: {line.rstrip()}" for line in f.readlines()[-n:]]
            except OSError:
                pass
        return "\n".join(lines[-n:])

    @property
    def pid(self) -> int:
        """pid of the node's beam.smp (the process whose RSS/CPU we measure)."""
        if self._beam and procutil.comm(self._beam).startswith("beam"):
            return self._beam
        assert self.proc is not None
        # our own session: the one beam.smp below the start script is the node
        for p in procutil.tree(self.proc.pid):
            if procutil.comm(p).startswith("beam"):
                self._beam = p
                return p
        # the start script may exec into erl: then the Popen pid is beam itself
        return self.proc.pid

    def ctl(self, *args: str, timeout: float = 60.0) -> str:
        r = subprocess.run([RMQ_CTL, "-n", self.nodename, *args], env=self.env(), cwd=self.dir,
                           capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)}: {r.stderr.strip() or r.stdout.strip()}")
        return r.stdout

    def queue_info(self, queue: str) -> dict[str, str]:
        """messages / messages_ram / message_bytes_ram / memory of one queue."""
        cols = ["name", "messages", "messages_ram", "message_bytes_ram", "messages_persistent",
                "disk_writes", "memory"]
        try:
            out = self.ctl("list_queues", "-q", "--no-table-headers", *cols, timeout=60)
        except Exception as e:  # noqa: BLE001
            return {"error": str(e)}
        for line in out.splitlines():
            parts = line.split("\t")
            if parts and parts[0] == queue:
                return dict(zip(cols, parts))
        return {}

    def collect_garbage(self) -> None:
        """Full GC of every Erlang process of the node (so RSS reflects live data)."""
        self.ctl("eval", "[erlang:garbage_collect(P) || P <- erlang:processes()], ok.", timeout=120)

    def describe(self) -> str:
        return (f"RabbitMQ {self.version} (private node {self.nodename}, classic queues"
                + (", rabbitmq_management plugin)" if self.management else ")"))

    def stop(self) -> None:
        if self.proc is not None:
            if self.alive():
                try:
                    self.ctl("stop", timeout=60)
                except Exception as e:  # noqa: BLE001
                    self.log(f"[rabbitmq] rabbitmqctl stop failed ({e}); terminating")
                try:
                    self.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
            procutil.stop_group(self.proc, ((signal.SIGTERM, 15), (signal.SIGKILL, 15)))
            # beam may outlive the script in its session if the script did not exec
            if self._beam and procutil.comm(self._beam).startswith("beam"):
                try:
                    os.kill(self._beam, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.proc = None
            self.log("[rabbitmq] stopped")
        if self.epmd_port:
            epmd = _epmd()
            if epmd:
                subprocess.run([epmd, "-port", str(self.epmd_port), "-kill"], capture_output=True,
                               env=dict(os.environ, ERL_EPMD_PORT=str(self.epmd_port)), timeout=10)
            self.epmd_port = 0
        if self.dir and not self.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None




def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def main() -> None:
    signal.signal(signal.SIGTERM, _raise_interrupt)
    r = RabbitMQ()
    try:
        r.start()
        print(f"RabbitMQ on amqp://guest:guest@{r.host}:{r.port}/  (Ctrl-C to stop)", flush=True)
        while True:
            signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        r.stop()


if __name__ == "__main__":
    main()
    sys.exit(0)
