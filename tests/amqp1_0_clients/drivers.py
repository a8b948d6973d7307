"""Running the AMQP 1.0 client drivers of this directory from a test.

``rhea_driver.js`` (rhea, from npm) and ``JmsDriver.java`` (Qpid JMS, from Maven
Central) each do one scenario against a broker and print JSON lines; the last line
is the scenario's result (``ok`` true and its figures, or ``error``).  The clients
are fetched by tools/ensure-amqp1-clients (``make test`` runs it; :func:`ensure_fetched`
runs it when they are missing), into this directory: ``node_modules/`` and
``classpath.txt``.  python-qpid-proton is a PyPI dependency of the ``test`` extra.

    out = run_rhea(port, "send-receive", "q1", "--count", "10", "--durable")
    assert out.result["received"] == 10

    java = compile_jms(tmp_path)              # javac once, then:
    out = run_jms(java, port, "transacted", "q2")
"""

from __future__ import annotations

import os

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

DIR = Path(__file__).resolve().parent
REPO = DIR.parents[1]
ENSURE = REPO / "tools" / "ensure-amqp1-clients"
CLASSPATH = DIR / "classpath.txt"

RHEA_SCENARIOS = ("send-receive", "selector", "browse", "reply-to", "durable-subscription")
JMS_SCENARIOS = ("send-receive", "transacted", "transacted-forward", "selector", "browse", "reply-to", "durable-subscription")


class DriverUnavailable(RuntimeError):
    """A client could not be fetched or a tool it needs is missing."""


def _opted_out() -> bool:
    """Only DELTAMQ_SKIP_AMQP1_CLIENTS=1 lets the client tests skip; otherwise a client that is
    missing makes its tests fail (make test fetches both)."""
    return os.environ.get("DELTAMQ_SKIP_AMQP1_CLIENTS") == "1"


def _rhea_present() -> bool:
    return (DIR / "node_modules" / "rhea" / "package.json").is_file()


def _jms_present() -> bool:
    return CLASSPATH.is_file() and CLASSPATH.stat().st_size > 0


def rhea_fetched() -> bool:
    """Run the rhea tests? Yes, unless opted out and rhea is missing."""
    return not _opted_out() or _rhea_present()


def jms_fetched() -> bool:
    """Run the Qpid JMS tests? Yes, unless opted out and Qpid JMS is missing."""
    return not _opted_out() or _jms_present()


def ensure_fetched() -> None:
    """Run tools/ensure-amqp1-clients if rhea or Qpid JMS is missing; raise if still missing."""
    if not (_rhea_present() and _jms_present()):
        subprocess.run(["bash", str(ENSURE)], check=False, timeout=1200)
    missing = [name for name, ok in (("rhea", _rhea_present()), ("Qpid JMS", _jms_present())) if not ok]
    if missing:
        raise DriverUnavailable(f"{' and '.join(missing)} could not be fetched "
                                "(see the output of tools/ensure-amqp1-clients)")


@dataclass
class Outcome:
    """What a driver printed: its JSON lines, exit code and standard error."""

    lines: list[dict] = field(default_factory=list)
    returncode: int = 0
    stderr: str = ""

    @property
    def result(self) -> dict:
        """The last line: the scenario's result."""
        return self.lines[-1] if self.lines else {"error": f"no output; stderr: {self.stderr[-2000:]}"}

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and bool(self.result.get("ok"))

    def events(self, name: str) -> list[dict]:
        return [line for line in self.lines if line.get("event") == name]


def _run(cmd: list[str], timeout: float) -> Outcome:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=DIR)
    lines = []
    for text in proc.stdout.splitlines():
        text = text.strip()
        if text.startswith("{"):
            lines.append(json.loads(text))
    return Outcome(lines, proc.returncode, proc.stderr)


def run_rhea(port: int, scenario: str, address: str, *extra: str, host: str = "127.0.0.1",
             timeout: float = 90.0) -> Outcome:
    """node rhea_driver.js --scenario SCENARIO --address ADDRESS ... against host:port."""
    if shutil.which("node") is None:
        raise DriverUnavailable("Node.js is not installed")
    return _run(["node", str(DIR / "rhea_driver.js"), "--host", host, "--port", str(port),
                 "--scenario", scenario, "--address", address, "--timeout", str(int(timeout - 5)),
                 *extra], timeout)


def compile_jms(build: Path) -> list[str]:
    """javac JmsDriver.java into ``build``; returns the java command line that runs it."""
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            raise DriverUnavailable(f"{tool} is not installed")
    if not jms_fetched():
        raise DriverUnavailable("Qpid JMS is not fetched (tools/ensure-amqp1-clients)")
    cp = CLASSPATH.read_text().strip()
    subprocess.run(["javac", "-cp", cp, "-d", str(build), str(DIR / "JmsDriver.java")],
                   check=True, timeout=300)
    return ["java", "-cp", f"{build}:{cp}", "JmsDriver"]


def run_jms(java: list[str], port: int, scenario: str, address: str, *extra: str,
            host: str = "127.0.0.1", timeout: float = 120.0) -> Outcome:
    """The compiled JmsDriver (see :func:`compile_jms`) doing SCENARIO against host:port."""
    return _run([*java, "--host", host, "--port", str(port), "--scenario", scenario,
                 "--address", address, *extra], timeout)
