"""``deltamq spark serve``: a warm Spark Connect server over a broker's data directory.

Each ``deltamq sql`` used to start a JVM of its own (10-25 s before the
first row).  ``deltamq spark serve`` keeps one running: a local Spark
session built as :func:`lakehouse.spark.spark_session` builds them (Delta's
extensions and catalog, DeltaMQ's log store) with Spark Connect's plugin,
which serves gRPC on a loopback port (``--host``/``--port``).  The broker's
views (``journal``, ``queue_history``, ...) are views of the session
catalog, so every Connect client's session sees them; a thread looks for
new nodes' tables every ``--refresh`` seconds and re-creates the views when
the set changes.  Delta re-reads a table's log before each query, so a
query sees the broker's latest commits.

The server admits clients holding a random token (Spark Connect's
pre-shared bearer token), kept with its address in a record only its owner
may read (:mod:`lakehouse.connect_server`); ``deltamq sql``, the broker's
History page and :func:`lakehouse.connect_server.spark_for` find it there.
SIGTERM or SIGINT stops it cleanly (``deltamq spark serve --stop`` sends
SIGTERM and waits); ``--status`` says whether one serves a directory.

Standard error carries the progress of a first run's download, one line
when it serves and one per change of the views; the JVM's own output goes
to ``~/.cache/deltamq/spark-connect/<digest>.log``.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from lakehouse.connect_server import DEFAULT_PORT, ConnectServer, process_running, record_path, \
    recorded_server, remove_record, write_record

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: the class Spark Connect's server runs as (spark.plugins)
CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
#: what Spark Connect's server reads its pre-shared token from
TOKEN_VARIABLE = "SPARK_CONNECT_AUTHENTICATE_TOKEN"
DEFAULT_REFRESH = 5.0
#: seconds ``--stop`` waits for the server to end
STOP_TIMEOUT = 60.0

log = logging.getLogger(__name__)


def add_command(jobs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = jobs.add_parser(
        "serve", help="run a warm Spark Connect server with Delta and the broker's views",
        description="Run a Spark Connect server over a broker's data directory until SIGTERM or"
                    " Ctrl-C: Delta configured, the broker's views registered. `deltamq sql`, the"
                    " console's History page and notebooks use it while it runs.")
    serve.add_argument("--data-dir", default=os.environ.get("DELTAMQ_DATA_DIR", "./data"),
                       help="the broker's data directory (default: $DELTAMQ_DATA_DIR or ./data)")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default 127.0.0.1: this machine only)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT,
                       help=f"port to listen on (default {DEFAULT_PORT}; 0: any free port)")
    serve.add_argument("--refresh", type=float, default=DEFAULT_REFRESH,
                       help=f"seconds between looks for new nodes' tables (default {DEFAULT_REFRESH:g})")
    serve.add_argument("--no-token", action="store_true",
                       help="admit clients without a token (pyspark's client sends one to other"
                            " hosts than localhost only over TLS): only on a private network")
    serve.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                       help="a Spark setting, e.g. --conf spark.driver.memory=4g (repeatable)")
    action = serve.add_mutually_exclusive_group()
    action.add_argument("--status", action="store_true",
                        help="say whether a server serves the data directory (exit status 1: none)")
    action.add_argument("--stop", action="store_true", help="stop the server of the data directory")
    serve.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from lakehouse.spark_object_store import is_object_store

    # an s3:// location (the nodes' storePath parent, as in docker-compose.yml) stays a string
    data_dir: Path | str = args.data_dir if is_object_store(args.data_dir) else Path(args.data_dir)
    if args.status:
        return _status(data_dir)
    if args.stop:
        return _stop(data_dir)
    if isinstance(data_dir, Path) and not data_dir.is_dir():
        return _fail(f"no data directory at {data_dir} (give --data-dir DIR or set DELTAMQ_DATA_DIR)")
    settings = []
    for item in args.conf:
        key, equals, value = item.partition("=")
        if not equals or not key.strip():
            return _fail(f"--conf {item!r}: give KEY=VALUE, e.g. spark.driver.memory=4g")
        settings.append((key.strip(), value))
    running = recorded_server(data_dir)
    if running is not None:
        return _fail(f"a Spark Connect server already serves {data_dir} at {running.address}"
                     f" (process {running.pid}); stop it with `deltamq spark serve --stop`")
    if args.port != 0 and not _port_free(args.host, args.port):
        return _fail(f"port {args.port} on {args.host} is in use (give --port N, or 0 for any free port)")
    stopping = threading.Event()
    _stop_on_signals(stopping)
    server = ConnectServerProcess(data_dir, args.host, args.port, not args.no_token, settings)
    try:
        server.start()
    except Exception as exc:                 # a missing JDK or Maven, or Spark refusing to start
        server.close()
        return _fail(_start_failure(exc, server.jvm_log))
    try:
        server.serve(args.refresh, stopping)
    finally:
        server.close()
    _say("stopped")
    return 0


class ConnectServerProcess:
    """The Spark session of ``deltamq spark serve``, its Connect server and its record."""

    def __init__(self, data_dir: Path | str, host: str, port: int, with_token: bool,
                 settings: list[tuple[str, str]]) -> None:
        self.data_dir = data_dir if isinstance(data_dir, str) else data_dir.resolve()
        self.host = host
        self.port = port
        self.token = secrets.token_urlsafe(32) if with_token else None
        self.settings = settings
        self.jvm_log = record_path(self.data_dir).with_suffix(".log")
        self.warehouse = Path(tempfile.mkdtemp(prefix="deltamq-spark-serve-"))
        self.spark: SparkSession | None = None
        self.record: ConnectServer | None = None

    def start(self) -> None:
        from lakehouse.delta_jars import connect_jars
        from lakehouse.prerequisites import require_java
        from lakehouse.spark import spark_session

        require_java()
        if self.token is not None:
            os.environ[TOKEN_VARIABLE] = self.token      # read by the JVM, never written down
        # Python code a client sends (UDFs, data sources) runs with this Python
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        jars = connect_jars(progress=_say)
        if self.port == 0:
            self.port = _any_free_port(self.host)
        self.spark = spark_session(
            self.data_dir, app_name="deltamq-spark-serve", jvm_log=self.jvm_log, progress=_say,
            jars=jars, shared_views=True, settings=[
                ("spark.plugins", CONNECT_PLUGIN),
                ("spark.connect.grpc.binding.address", self.host),
                ("spark.connect.grpc.binding.port", str(self.port)),
                ("spark.connect.grpc.port.maxRetries", "0"),
                # the session catalog's database holds the shared views: no spark-warehouse
                # directory where the server happens to be started
                ("spark.sql.warehouse.dir", str(self.warehouse)),
                # a client shows Spark's message for a query it refuses, not the server's stack
                ("spark.sql.connect.serverStacktrace.enabled", "false"),
                # one shuffle partition per core of local[2]: the views' joins over the journal
                # cost ~6% less CPU per warm query than with 4 (docs/warm-sql.md)
                ("spark.sql.shuffle.partitions", "2"),
                *self.settings])
        self.record = ConnectServer(self.host, self.port, self.token, os.getpid(), str(self.data_dir),
                                    datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"))
        write_record(self.record)
        _say(f"Spark Connect at {self.record.address} serves {self.data_dir}"
             f" (views: {_views(self.spark)}; Spark's log: {self.jvm_log})")

    def serve(self, refresh: float, stopping: threading.Event) -> None:
        """Keep the views current until ``stopping`` is set."""
        from lakehouse.spark import register_views, view_sources

        assert self.spark is not None
        seen = view_sources(self.data_dir)
        failed: str | None = None
        while not stopping.wait(refresh):
            now = view_sources(self.data_dir)
            if now == seen:
                continue
            try:
                register_views(self.spark, self.data_dir, shared=True)
            except Exception as exc:         # a table half created: tried again next time
                message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                if message != failed:
                    _say(f"the views could not be updated yet: {message}")
                failed = message
                continue
            seen, failed = now, None
            _say(f"views updated: {_views(self.spark)}")

    def close(self) -> None:
        if self.record is not None:
            remove_record(self.data_dir, os.getpid())
        if self.spark is not None:
            self.spark.stop()               # stops the Connect plugin with the context
            self.spark = None
        shutil.rmtree(self.warehouse, ignore_errors=True)


def _views(spark: SparkSession) -> str:
    names = sorted(t.name for t in spark.catalog.listTables() if t.tableType == "VIEW")
    return ", ".join(names) or "none yet: no node has tables"


def _stop_on_signals(stopping: threading.Event) -> None:
    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)


def _port_free(host: str, port: int) -> bool:
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
        return True
    except OSError:
        return False


def _any_free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _start_failure(exc: Exception, jvm_log: Path) -> str:
    from lakehouse.delta_jars import FetchFailed
    from lakehouse.prerequisites import MissingPrerequisite

    if isinstance(exc, (MissingPrerequisite, FetchFailed)):
        return str(exc)
    return f"Spark did not start: {type(exc).__name__}: {str(exc).strip()} (Spark's output: {jvm_log})"


def _status(data_dir: Path | str) -> int:
    server = recorded_server(data_dir)
    if server is None:
        print(f"no Spark Connect server serves {data_dir}")
        return 1
    print(f"{server.address} serves {server.data_dir} (process {server.pid}, since {server.started_at})")
    return 0


def _stop(data_dir: Path | str) -> int:
    server = recorded_server(data_dir)
    if server is None or server.pid is None:
        return _fail(f"no Spark Connect server serves {data_dir}")
    try:
        os.kill(server.pid, signal.SIGTERM)
    except ProcessLookupError:
        return 0
    except PermissionError:
        return _fail(f"the server of {data_dir} (process {server.pid}) is another user's")
    deadline = time.monotonic() + STOP_TIMEOUT
    while process_running(server.pid):
        if time.monotonic() > deadline:
            return _fail(f"the server of {data_dir} (process {server.pid}) did not stop"
                         f" within {STOP_TIMEOUT:g} s")
        time.sleep(0.1)
    print(f"stopped the Spark Connect server of {data_dir} (process {server.pid})")
    return 0


def _say(line: str) -> None:
    print(f"deltamq spark serve: {line}", file=sys.stderr, flush=True)


def _fail(message: str) -> int:
    _say(message)
    return 1
