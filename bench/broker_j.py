"""A private Apache Qpid Broker-J for the AMQP 1.0 benchmark and the 1.0 client drivers.

Nothing is installed by hand.  The binary distribution is Maven Central's
``org.apache.qpid:apache-qpid-broker-j:9.2.0:tar.gz:bin``: Maven fetches it into
``~/.m2`` (``mvn dependency:get``) and it is unpacked once under
``~/.cache/deltamq/qpid-broker-j-9.2.0/`` (``DELTAMQ_BROKER_J_HOME`` names another
place).  All it needs is the JDK and Maven.

Each start is a fresh broker: a new temporary ``QPID_WORK`` directory holding an
initial configuration written here, removed again at stop.  That configuration:

* one AMQP port, bound to 127.0.0.1 on a free port (5690 if free), speaking AMQP
  1.0 -- and 0-9-1, so that the benchmark declares its queues the same way on
  every broker (through bench.amqp) and its start-up is checked like the others';
* the ``Plain`` authentication provider with guest/guest, PLAIN allowed without
  TLS (the connection never leaves loopback);
* one virtual host node ``default`` (JSON) whose virtual host is **BDB**
  (Berkeley DB JE, shipped in the distribution).  BDB is the virtual host type
  Broker-J creates by default, and it syncs: a transaction holding persistent messages is
  committed and the log ``fsync``-ed (grouped: one sync for the commits that
  queued up meanwhile) before the broker sends the ``accepted`` outcome.  That is
  the same promise RabbitMQ's classic queue (fsync before the confirm) and
  DeltaMQ's journal (Delta commit before the confirm) give, so the durable
  figures compare like with like.  A Memory store would not hold durable
  messages at all;  Derby would sync each commit on its own.
* node auto-creation: attaching to (or sending to) an unknown address creates a
  durable queue of that name, as the 1.0 clients' integration tests expect -- except
  for ``amq.*`` names: those are the standard exchanges (topics and subscriptions);
* no HTTP port, no management plugin, loggers at WARN (Broker-J's operational
  log lines at INFO, so the start-up is visible in ``qpid.log``).

Usable on its own::

    python -m bench.broker_j          # fetch if needed, start, print where, Ctrl-C stops it
    python -m bench.broker_j --fetch  # only fetch and unpack
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from . import procutil

VERSION = "9.2.0"
ARTIFACT = f"org.apache.qpid:apache-qpid-broker-j:{VERSION}:tar.gz:bin"
HEADER_1_0 = b"AMQP\x00\x01\x00\x00"
HEADER_1_0_SASL = b"AMQP\x03\x01\x00\x00"


def cache_dir() -> Path:
    override = os.environ.get("DELTAMQ_BROKER_J_HOME")
    if override:
        return Path(override)
    return Path.home() / ".cache" / "deltamq" / f"qpid-broker-j-{VERSION}"


def m2_tarball() -> Path:
    local = Path(os.environ.get("MAVEN_REPO_LOCAL", Path.home() / ".m2" / "repository"))
    return local.joinpath("org", "apache", "qpid", "apache-qpid-broker-j", VERSION,
                          f"apache-qpid-broker-j-{VERSION}-bin.tar.gz")


def home() -> Path | None:
    """QPID_HOME of the unpacked distribution (the directory holding bin/qpid-server), if any."""
    base = cache_dir()
    if not base.is_dir():
        return None
    for script in sorted(base.glob("**/bin/qpid-server")):
        return script.parent.parent
    return None


def fetched() -> bool:
    return home() is not None


def fetch(log=print) -> Path:
    """Fetch (Maven) and unpack (once) the distribution; returns its QPID_HOME."""
    found = home()
    if found is not None:
        return found
    tarball = m2_tarball()
    if not tarball.exists():
        if shutil.which("mvn") is None:
            raise RuntimeError("Broker-J is fetched with Maven, and mvn is not installed "
                               "(apt-get install -y maven)")
        cmd = ["mvn", "-q", "-B", "dependency:get", f"-Dartifact={ARTIFACT}", "-Dtransitive=false"]
        log(f"[broker-j] fetching {ARTIFACT}: {' '.join(cmd)}")
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if r.returncode != 0 or not tarball.exists():
            raise RuntimeError(f"mvn dependency:get {ARTIFACT} failed (exit {r.returncode}):\n"
                               f"{(r.stdout + r.stderr)[-3000:]}")
    base = cache_dir()
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=_ensure(base.parent)))
    try:
        log(f"[broker-j] unpacking {tarball} into {base}")
        with tarfile.open(tarball) as tar:
            tar.extractall(staging, filter="data")
        for script in staging.glob("**/bin/*"):
            if script.is_file() and not script.suffix:
                script.chmod(0o755)
        if base.exists():
            shutil.rmtree(base)
        staging.rename(base)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    found = home()
    if found is None:
        raise RuntimeError(f"{tarball} holds no bin/qpid-server")
    return found


def _ensure(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p


def initial_config(port: int, host: str, store: str = "BDB") -> dict:
    """Broker-J's initial configuration (model 8.0, what 9.x ships) for a private broker."""
    virtualhost = {
        "type": store,
        "nodeAutoCreationPolicies": [{
            # not amq.*: those name the standard exchanges, and a receiver attaching to
            # one would otherwise get a new queue of that name instead of a subscription
            "pattern": r"(?!amq\.).*", "nodeType": "Queue", "createdOnPublish": True,
            "createdOnConsume": True, "attributes": {"durable": True},
        }],
    }
    rules = [
        {"name": "Root", "type": "NameAndLevel", "level": "WARN", "loggerName": "ROOT"},
        {"name": "Operational", "type": "NameAndLevel", "level": "INFO", "loggerName": "qpid.message.*"},
    ]
    return {
        "name": "deltamq-bench-broker-j",
        "modelVersion": "8.0",
        "authenticationproviders": [{
            "name": "plain", "type": "Plain", "secureOnlyMechanisms": [],
            "users": [{"name": "guest", "type": "managed", "password": "guest"}],
        }],
        "brokerloggers": [{
            "name": "logfile", "type": "File",
            "fileName": "${qpid.work_dir}${file.separator}log${file.separator}qpid.log",
            "brokerloginclusionrules": rules,
        }],
        "ports": [{
            "name": "AMQP", "type": "AMQP", "port": str(port), "bindingAddress": host,
            "protocols": ["AMQP_1_0", "AMQP_0_9_1"],
            "authenticationProvider": "plain",
            "virtualhostaliases": [
                {"name": "nameAlias", "type": "nameAlias"},
                {"name": "defaultAlias", "type": "defaultAlias"},
                {"name": "hostnameAlias", "type": "hostnameAlias"},
            ],
        }],
        "virtualhostnodes": [{
            "name": "default", "type": "JSON", "defaultVirtualHostNode": "true",
            "virtualHostInitialConfiguration": json.dumps(virtualhost),
        }],
    }


def answers_amqp1_0(host: str, port: int, timeout: float = 5.0) -> tuple[bool, bytes]:
    """Does the port speak AMQP 1.0?  Sends the SASL-layer 1.0 header and reads 8 bytes.

    (True, header) when the same header comes back (a 1.0 SASL layer; a broker that
    takes 1.0 without SASL answers the plain 1.0 header, also True); otherwise
    (False, what came back) -- a 0-9-1-only broker answers its own header and closes.
    """
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(HEADER_1_0_SASL)
        got = b""
        deadline = time.monotonic() + timeout
        while len(got) < 8 and time.monotonic() < deadline:
            try:
                chunk = s.recv(8 - len(got))
            except socket.timeout:
                break
            if not chunk:
                break
            got += chunk
    return got in (HEADER_1_0_SASL, HEADER_1_0), got


class BrokerJ(procutil.ManagedBroker):
    name = "broker-j"

    def __init__(self, port: int = 5690, host: str = "127.0.0.1", log=print,
                 keep_dir: bool = False, store: str = "BDB"):
        self.host = host
        self.want_port = port
        self.port = port
        self.vhost = "default"          # for 0-9-1 (queue declarations); 1.0 clients need none
        self.log = log
        self.keep_dir = keep_dir
        self.store = store
        self.dir: str | None = None
        self.proc: subprocess.Popen | None = None
        self.nice = 0
        self.version = VERSION

    def start(self, timeout: float = 180.0) -> None:
        qpid_home = fetch(self.log)
        self.dir = tempfile.mkdtemp(prefix="deltamq-bench-broker-j-")
        self.port = procutil.free_port(self.want_port, self.host)
        config = os.path.join(self.dir, "initial-config.json")
        with open(config, "w") as f:
            json.dump(initial_config(self.port, self.host, self.store), f, indent=2)
        work = os.path.join(self.dir, "work")
        os.makedirs(work)
        env = {k: v for k, v in os.environ.items() if not k.startswith("QPID_")}
        env.update({"QPID_HOME": str(qpid_home), "QPID_WORK": work})
        cmd = [str(qpid_home / "bin" / "qpid-server"), "--initial-config-path", config]
        self.log(f"[broker-j] starting Broker-J {VERSION} ({self.store} store) on "
                 f"{self.host}:{self.port} (dir {self.dir})")
        t0 = self._launch("Broker-J", cmd, log_path=os.path.join(self.dir, "stdout.log"),
                          cwd=self.dir, env=env, timeout=timeout)
        ok, got = answers_amqp1_0(self.host, self.port)
        if not ok:
            tail = self._tail()
            self.stop()
            raise RuntimeError(f"Broker-J answers the AMQP 1.0 header with {got!r}:\n{tail}")
        self.log(f"[broker-j] up in {time.monotonic() - t0:.1f}s, java pid {self.pid}")

    @property
    def pid(self) -> int:
        """The JVM's pid (the start script execs java; if not, the java below it)."""
        assert self.proc is not None
        for p in procutil.tree(self.proc.pid):
            if procutil.comm(p) == "java":
                return p
        return self.proc.pid

    def _tail(self, n: int = 30) -> str:
        if not self.dir:
            return ""
        lines: list[str] = []
        for p in (os.path.join(self.dir, "stdout.log"),
                  os.path.join(self.dir, "work", "log", "qpid.log")):
            try:
                with open(p, errors="replace") as f:
                    lines += [f"{os.path.basename(p)}: {line.rstrip()}" for line in f.readlines()[-n:]]
            except OSError:
                pass
        return "\n".join(lines[-n:])

    def describe(self) -> str:
        return (f"Apache Qpid Broker-J {VERSION} (private broker, {self.store} virtual host, "
                f"JDK {_java_version()})")

    def stop(self) -> None:
        if self.proc is not None:
            rc = procutil.stop_group(self.proc, ((signal.SIGTERM, 30), (signal.SIGKILL, 10)))
            self.proc = None
            self.log(f"[broker-j] stopped (exit {rc})")
        if self.dir and not self.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


def _java_version() -> str:
    try:
        r = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "?"
    first = (r.stderr or r.stdout).strip().splitlines()[:1]
    return first[0].split('"')[1] if first and '"' in first[0] else "?"


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.broker_j", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fetch", action="store_true", help="only fetch and unpack the distribution")
    ap.add_argument("--port", type=int, default=5690)
    ap.add_argument("--store", default="BDB", help="virtual host type: BDB (default), DERBY, Memory")
    a = ap.parse_args(argv)
    if a.fetch:
        print(fetch())
        return 0
    signal.signal(signal.SIGTERM, _raise_interrupt)
    b = BrokerJ(port=a.port, store=a.store)
    try:
        b.start()
        print(f"Broker-J on amqp://guest:guest@{b.host}:{b.port} (AMQP 1.0 and 0-9-1, "
              f"virtual host 'default'; Ctrl-C to stop)", flush=True)
        while True:
            signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        b.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
