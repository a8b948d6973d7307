"""Where a running ``deltamq spark serve`` is found, and sessions that talk to it.

``deltamq spark serve`` (:mod:`lakehouse.serve_command`) keeps one Spark
Connect server per data directory.  While it serves, a record of it -- its
process id, address and access token -- lies in
``~/.cache/deltamq/spark-connect/<digest of the data directory>.json``
(readable by its owner only); the server removes it when it stops.
:func:`find_server` reads that record (or ``$DELTAMQ_SPARK_REMOTE``, a
``sc://`` address, which wins: a server elsewhere, in a container, say) so
that ``deltamq sql``, notebooks and the broker's History page reach the warm
server instead of starting a JVM of their own.

A Spark Connect client is plain Python (gRPC and Arrow): no JVM starts in
the process that uses :func:`remote_session`.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from lakehouse.delta_jars import cache_dir
from lakehouse.spark_object_store import is_object_store

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: a Spark Connect address (``sc://host:port``, with ``/;token=...`` if the server wants one)
REMOTE_VARIABLE = "DELTAMQ_SPARK_REMOTE"
#: the port Spark Connect listens on unless told otherwise
DEFAULT_PORT = 15002
#: addresses a client on this machine reaches as ``localhost``
_LOCAL_ADDRESSES = frozenset({"127.0.0.1", "localhost", "::1", "0.0.0.0", "::", ""})


@dataclass(frozen=True)
class ConnectServer:
    """A Spark Connect server serving a data directory: where it listens and how to get in."""

    host: str
    port: int
    #: the bearer token it wants (None: none)
    token: str | None = None
    #: the ``deltamq spark serve`` process (None: a server given by address)
    pid: int | None = None
    data_dir: str | None = None
    started_at: str | None = None

    @property
    def client_host(self) -> str:
        # pyspark's client sends a token without TLS only to "localhost" (local credentials)
        return "localhost" if self.host in _LOCAL_ADDRESSES else self.host

    @property
    def address(self) -> str:
        """``sc://host:port``: where it is, without the token (safe to print)."""
        host = f"[{self.client_host}]" if ":" in self.client_host else self.client_host
        return f"sc://{host}:{self.port}"

    @property
    def url(self) -> str:
        """The address a client connects to, with the token."""
        return self.address + (f"/;token={self.token}" if self.token else "")

    @classmethod
    def from_url(cls, url: str) -> ConnectServer:
        """The server a ``sc://host:port[/;token=...]`` address names."""
        parts = urlsplit(url)
        if parts.scheme != "sc" or not parts.hostname:
            raise ValueError(f"{url!r} is not a Spark Connect address (sc://host:port)")
        params = dict(p.split("=", 1) for p in parts.path.lstrip("/").split(";") if "=" in p)
        return cls(parts.hostname, parts.port or DEFAULT_PORT, params.get("token"))

    def answering(self, timeout: float = 1.0) -> bool:
        """Does something accept connections at its address?"""
        try:
            with socket.create_connection((self.client_host, self.port), timeout=timeout):
                return True
        except OSError:
            return False


def record_path(data_dir: str | Path) -> Path:
    """Where the record of the server of ``data_dir`` lies (one per directory, resolved; or per URI)."""
    key = str(data_dir).rstrip("/") if is_object_store(data_dir) else str(Path(data_dir).resolve())
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_dir() / "spark-connect" / f"{digest}.json"


def write_record(server: ConnectServer) -> Path:
    """Publish ``server`` as the one serving its data directory (atomically, owner-only)."""
    assert server.data_dir is not None
    path = record_path(server.data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_suffix(f".{os.getpid()}.tmp")
    descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as out:
        json.dump(asdict(server), out)
    os.replace(temp, path)
    return path


def remove_record(data_dir: str | Path, pid: int) -> None:
    """Remove the record of ``data_dir`` if it is still the one process ``pid`` wrote."""
    path = record_path(data_dir)
    found = _read_record(path)
    if found is not None and found.pid == pid:
        path.unlink(missing_ok=True)


def recorded_server(data_dir: str | Path) -> ConnectServer | None:
    """The server the record of ``data_dir`` names, if its process still runs."""
    found = _read_record(record_path(data_dir))
    if found is None or found.pid is None or not process_running(found.pid):
        return None
    return found


def find_server(data_dir: str | Path | None) -> ConnectServer | None:
    """The server to use for ``data_dir``: ``$DELTAMQ_SPARK_REMOTE``'s, else the recorded one
    (none for a data directory that is not local: ``None``)."""
    remote = os.environ.get(REMOTE_VARIABLE, "").strip()
    if remote:
        return ConnectServer.from_url(remote)
    return None if data_dir is None else recorded_server(data_dir)


def _read_record(path: Path) -> ConnectServer | None:
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return ConnectServer(**data)
    except (OSError, ValueError, TypeError):
        return None


def process_running(pid: int) -> bool:
    """Does process ``pid`` still run (another user's counts)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:             # another user's process: it runs
        return True
    try:                                # an ended child its parent has not waited for yet
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


#: how often a request is tried again when the server does not answer, and the longest
#: wait between tries: about 1 s in all (pyspark's default tolerates 10 minutes)
RETRIES, LONGEST_BACKOFF_MS = 3, 1000


def remote_session(server: ConnectServer, *, default: bool = True) -> SparkSession:
    """A new Spark Connect session on ``server`` (no JVM here; nothing is sent until used).

    ``default``: it becomes the process's default session (``getActiveSession()``),
    as ``SparkSession.builder.remote(...).create()`` makes it; a process running
    queries for others (the broker) passes False.  A server that stops answering
    fails a request within about a second instead of pyspark's ten minutes.
    """
    from pyspark.sql.connect.client.retries import DefaultPolicy
    from pyspark.sql.connect.session import SparkSession as RemoteSession

    if default:
        session = RemoteSession.builder.remote(server.url).create()
    else:
        session = RemoteSession(connection=server.url)
    session.client.set_retry_policies([DefaultPolicy(max_retries=RETRIES, max_backoff=LONGEST_BACKOFF_MS)])
    return session  # type: ignore[return-value]


def spark_for(data_dir: str | Path, **local_options: Any) -> SparkSession:
    """A session with the broker's views over ``data_dir``: the warm server's when one serves
    it and answers, else a local session (:func:`lakehouse.spark.spark_session` with
    ``local_options``).  For notebooks and scripts: the same SQL works on both."""
    server = find_server(data_dir)
    if server is not None and server.answering():
        return remote_session(server)
    from lakehouse.spark import spark_session

    return spark_session(data_dir, **local_options)
