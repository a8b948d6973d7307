"""``deltamq status|list|purge|replay``: rabbitmqctl-like commands for a running broker, over its REST API.

::

    deltamq status [connection options]
    deltamq list queues|connections|exchanges|consumers|users|vhosts [COLUMN ...]
                 [--vhost VHOST] [--no-headers] [connection options]
    deltamq purge QUEUE [--vhost VHOST] [connection options]
    deltamq replay QUEUE [--from FROM] [--to TO] [--exchange X] [--routing-key K | --to-queue Q]
                   [--limit N] [--vhost VHOST] [--json] [connection options]

Connection options: ``--url`` (default ``$DELTAMQ_MANAGEMENT_URL``, else
``http://localhost:8080``, the embedded default's HTTP port; credentials may
be in it, ``http://user:password@host:port``), ``--user`` and ``--password``
(default ``$DELTAMQ_USER``/``$DELTAMQ_PASSWORD``, else ``guest``/``guest``).

Contributed to the ``deltamq`` command through entry point group
``deltamq.commands`` (the broker never imports management); plain ``urllib``,
so the commands start quickly.  A broker that cannot be reached (exit 69,
EX_UNAVAILABLE, as rabbitmqctl) and credentials it refuses (exit 77,
EX_NOPERM) are each one line on standard error.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

DEFAULT_URL = "http://localhost:8080"
URL_VARIABLE = "DELTAMQ_MANAGEMENT_URL"
EXIT_UNAVAILABLE = 69        # sysexits.h, as rabbitmqctl exits when the node is down
EXIT_NO_PERMISSION = 77
TIMEOUT = 10.0

#: bidirectional controls (LRE..RLO, LRI..PDI, LRM, RLM): shown as <U+XXXX>, as the console does
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069\u200e\u200f]")
_CONTROL = re.compile("[\x00-\x1f\x7f]")


class CtlError(Exception):
    """A one-line failure, with the process' exit status."""

    def __init__(self, text: str, status: int = 1) -> None:
        super().__init__(text)
        self.status = status


# -- talking to the broker -------------------------------------------------------------------

class Management:
    """The REST API of one broker, as one user."""

    def __init__(self, url: str, user: str | None, password: str | None,
                 timeout: float = TIMEOUT) -> None:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise CtlError(f"not a management URL: {url!r} (expected http://host:port)", 2)
        self.user = user if user is not None else (parts.username or "guest")
        self.password = password if password is not None else (parts.password or "guest")
        netloc = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
        if parts.port is not None:
            netloc += f":{parts.port}"
        self.base = urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        self.timeout = timeout

    def get(self, path: str) -> Any:
        return self._call("GET", path)

    def post(self, path: str, body: Mapping[str, Any]) -> Any:
        return self._call("POST", path, json.dumps(body).encode())

    def text(self, path: str) -> str:
        return str(self._call("GET", path, raw=True))

    def _call(self, method: str, path: str, body: bytes | None = None, raw: bool = False) -> Any:
        token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        request = urllib.request.Request(
            self.base + path, data=body, method=method,
            headers={"Authorization": f"Basic {token}", "Accept": "application/json",
                     "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                data = response.read()
        except urllib.error.HTTPError as exc:
            raise self._refusal(exc) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, socket.timeout):
                reason = f"no answer within {self.timeout:g} s"
            raise CtlError(f"cannot reach the broker's management at {self.base}: {reason}"
                           f" (is the broker running? --url names another)",
                           EXIT_UNAVAILABLE) from None
        if raw:
            return data.decode("utf-8", "replace")
        return json.loads(data) if data else None

    def _refusal(self, exc: urllib.error.HTTPError) -> CtlError:
        try:
            message = json.loads(exc.read()).get("errorMessage") or exc.reason
        except (ValueError, AttributeError):
            message = exc.reason
        if exc.code == 401:
            return CtlError(f"the broker at {self.base} refused user '{self.user}': {message}"
                            " (--user, --password)", EXIT_NO_PERMISSION)
        if exc.code == 403:
            return CtlError(f"user '{self.user}' may not do this: {message}", EXIT_NO_PERMISSION)
        return CtlError(f"{message} (HTTP {exc.code})")

    def node_of(self, vhost: str) -> str:
        """The virtual host node that holds virtual host ``vhost``."""
        for node in self.get("/api/latest/virtualhostnode?depth=1"):
            for host in node.get("virtualhosts", []):
                if host["name"] == vhost:
                    return str(node["name"])
        raise CtlError(f"no virtual host '{vhost}' at {self.base}")

    def virtual_host(self, requested: str | None) -> str:
        """``--vhost`` as the broker means it: none, '' and '/' are its default virtual host."""
        if requested not in (None, "", "/"):
            return str(requested)
        return str(self.get("/api/latest/broker")["defaultVirtualHost"])


def _segment(name: str) -> str:
    return quote(name, safe="")


# -- list ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Listing:
    """One kind of object ``deltamq list`` shows: where to read it and its columns."""

    path: Callable[[Management, str], str]
    #: rabbitmqctl's column names (and a few of our own) -> how to read them
    columns: Mapping[str, Callable[[Mapping[str, Any]], Any]]
    default: tuple[str, ...]
    per_vhost: bool = True


def _attr(name: str) -> Callable[[Mapping[str, Any]], Any]:
    return lambda shown: shown.get(name)


def _stat(name: str) -> Callable[[Mapping[str, Any]], Any]:
    return lambda shown: (shown.get("statistics") or {}).get(name)


def _queues_path(api: Management, vhost: str) -> str:
    return f"/api/latest/queue/{_segment(api.node_of(vhost))}/{_segment(vhost)}"


def _exchanges_path(api: Management, vhost: str) -> str:
    return f"/api/latest/exchange/{_segment(api.node_of(vhost))}/{_segment(vhost)}"


def _consumers_path(api: Management, vhost: str) -> str:
    return f"/api/latest/consumer/{_segment(api.node_of(vhost))}/{_segment(vhost)}/*"


def _connections_path(api: Management, vhost: str) -> str:
    return "/api/latest/connection?depth=0"


LISTINGS: dict[str, Listing] = {
    "queues": Listing(_queues_path, {
        "name": _attr("name"),
        "messages": lambda q: ((q.get("statistics") or {}).get("queueDepthMessages", 0)
                               + (q.get("statistics") or {}).get("unacknowledgedMessages", 0)),
        "messages_ready": _stat("queueDepthMessages"),
        "messages_unacknowledged": _stat("unacknowledgedMessages"),
        "message_bytes_ready": _stat("queueDepthBytes"),
        "consumers": _stat("consumerCount"),
        "durable": _attr("durable"),
        "auto_delete": _attr("autoDelete"),
        "exclusive": _attr("exclusive"),
        "type": _attr("type"),
        "arguments": _attr("arguments"),
        "messages_in": _stat("messagesIn"),
        "messages_out": _stat("messagesOut"),
    }, ("name", "messages")),
    "exchanges": Listing(_exchanges_path, {
        "name": _attr("name"), "type": _attr("type"), "durable": _attr("durable"),
        "auto_delete": _attr("autoDelete"), "internal": _attr("internal"),
        "arguments": _attr("arguments"),
        "bindings": lambda e: len(e.get("bindings") or []),
    }, ("name", "type")),
    "consumers": Listing(_consumers_path, {
        "queue_name": _attr("queue"), "consumer_tag": _attr("name"),
        "connection": _attr("connection"), "channel": _attr("session"),
        "ack_required": lambda c: not c.get("noAck", False),
        "exclusive": _attr("exclusive"), "arguments": _attr("arguments"),
    }, ("queue_name", "consumer_tag", "connection", "channel", "ack_required")),
    "connections": Listing(_connections_path, {
        "name": _attr("name"), "user": _attr("principal"), "vhost": _attr("virtualHost"),
        "peer": _attr("remoteAddress"), "protocol": _attr("protocol"), "port": _attr("port"),
        "channels": _stat("sessionCount"), "client": _attr("clientProduct"),
        "state": _attr("state"),
    }, ("name", "user", "vhost", "protocol", "channels"), per_vhost=False),
    "users": Listing(lambda api, vhost: "/api/latest/user", {
        "name": _attr("name"),
        "vhosts": lambda u: u.get("virtualHosts") or "(all)",
    }, ("name", "vhosts"), per_vhost=False),
    "vhosts": Listing(lambda api, vhost: "/api/latest/virtualhost", {
        "name": _attr("name"), "state": _attr("state"),
        "connections": _stat("connectionCount"), "queues": _stat("queueCount"),
        "exchanges": _stat("exchangeCount"), "messages": _stat("totalDepthOfQueuesMessages"),
    }, ("name", "connections", "queues", "messages"), per_vhost=False),
}


def printable(value: Any) -> str:
    """A cell: booleans and lists as rabbitmqctl prints them, controls made visible."""
    if value is None:
        text = ""
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, list):
        text = ",".join(printable(item) for item in value)
    elif isinstance(value, dict):
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    else:
        text = str(value)
    text = _BIDI.sub(lambda m: f"<U+{ord(m.group()):04X}>", text)
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def table(header: Sequence[str], rows: Sequence[Sequence[str]], headers: bool = True) -> str:
    """Columns aligned on the widest cell, separated by two spaces; numbers to the right."""
    shown = [list(header), *rows] if headers else [list(row) for row in rows]
    if not shown:
        return ""
    widths = [max(len(row[index]) for row in shown) for index in range(len(header))]
    numeric = [bool(rows) and all(re.fullmatch(r"-?[0-9]+(\.[0-9]+)?", row[index])
                                  for row in rows) for index in range(len(header))]
    lines = []
    for row in shown:
        cells = [cell.rjust(width) if numeric[index] else cell.ljust(width)
                 for index, (cell, width) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


def list_objects(api: Management, kind: str, columns: Sequence[str], vhost: str | None,
                 headers: bool = True) -> str:
    listing = LISTINGS[kind]
    chosen = list(columns) or list(listing.default)
    unknown = [column for column in chosen if column not in listing.columns]
    if unknown:
        raise CtlError(f"unknown column{'s' if len(unknown) > 1 else ''} for {kind}:"
                       f" {', '.join(unknown)}; known: {', '.join(listing.columns)}", 2)
    host = api.virtual_host(vhost) if listing.per_vhost else ""
    found = api.get(listing.path(api, host))
    objects = found if isinstance(found, list) else [found]
    if kind == "connections" and vhost is not None:
        wanted = api.virtual_host(vhost)
        objects = [c for c in objects if c.get("virtualHost") == wanted]
    objects.sort(key=lambda shown: str(shown.get("name", "")))
    rows = [[printable(listing.columns[column](shown)) for column in chosen]
            for shown in objects]
    return table(chosen, rows, headers)


# -- status ----------------------------------------------------------------------------------

def _duration(milliseconds: float) -> str:
    seconds = int(milliseconds // 1000)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    return (f"{days}d " if days else "") + f"{hours}h {minutes:02d}m {seconds:02d}s"


def _size(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})? (\S+)$", re.M)


def _process_figures(api: Management) -> dict[str, float]:
    """The unlabelled samples of /metrics (the process' figures among them)."""
    figures: dict[str, float] = {}
    for name, value in _SAMPLE.findall(api.text("/metrics")):
        try:
            figures.setdefault(name, float(value))
        except ValueError:
            continue
    return figures


def alarms_of(broker: Mapping[str, Any]) -> list[str]:
    """The broker's alarms in force: its attributes and statistics named ``...Alarm`` that
    are true (a memory or disk alarm, when the broker shows it)."""
    shown = {**broker, **(broker.get("statistics") or {})}
    return sorted(name for name, value in shown.items()
                  if name.lower().endswith("alarm") and value is True)


def status(api: Management) -> str:
    broker = api.get("/api/latest/broker")
    statistics = broker.get("statistics") or {}
    ports = api.get("/api/latest/port")
    hosts = api.get("/api/latest/virtualhost")
    figures = _process_figures(api)
    memory = figures.get("process_resident_memory_bytes")
    descriptors = figures.get("process_open_fds")
    limit = figures.get("process_max_fds")
    listeners = [f"{port['name']} ({port['type']}) on {port.get('bindingAddress') or '*'}:"
                 f"{port.get('boundPort', port.get('port'))}"
                 + ("" if port.get("boundPort", 0) >= 0 else " (not listening)")
                 for port in sorted(ports, key=lambda p: str(p["name"]))]
    alarms = alarms_of(broker)
    lines = [
        ("Broker", f"{printable(broker['name'])} (DeltaMQ {broker.get('productVersion', '?')})"),
        ("Management", api.base),
        ("Process id", str(statistics.get("processPid", "?"))),
        ("Uptime", _duration(float(statistics.get("uptime", 0)))),
        ("Memory", _size(memory) + " resident" if memory is not None else "unknown"),
        ("Descriptors", f"{descriptors:.0f} open of {limit:.0f}"
         if descriptors is not None and limit is not None else "unknown"),
        ("Alarms", ", ".join(alarms) if alarms else "none"),
        ("Listeners", "; ".join(listeners) if listeners else "none"),
        ("Connections", str(statistics.get("connectionCount", 0))),
        ("Virtual hosts", ", ".join(printable(h["name"]) for h in hosts) or "none"),
    ]
    width = max(len(label) for label, _ in lines) + 1
    return "".join(f"{label + ':':<{width}} {value}\n" for label, value in lines)


def purge(api: Management, queue: str, vhost: str | None) -> str:
    host = api.virtual_host(vhost)
    path = (f"/api/latest/queue/{_segment(api.node_of(host))}/{_segment(host)}/"
            f"{_segment(queue)}/clearQueue")
    removed = api.post(path, {})
    return (f"purged {removed} message{'' if removed == 1 else 's'} from queue"
            f" '{printable(queue)}' in virtual host '{printable(host)}'\n")


# -- replay ----------------------------------------------------------------------------------

#: seconds ``deltamq replay`` waits for its answer by default (a replay may take a while)
REPLAY_TIMEOUT = 600.0


def replay_bound(text: str) -> tuple[str, str | int]:
    """``--from``/``--to``: a journal version (a whole number) or an ISO 8601 time."""
    text = text.strip()
    if re.fullmatch(r"[0-9]+", text):
        return "Version", int(text)
    return "Time", text


def replay(api: Management, queue: str, vhost: str | None, bounds: Mapping[str, str | None],
           target: Mapping[str, Any], as_json: bool = False) -> str:
    """The queue's ``replayMessages`` operation; one line saying what it did (or its JSON)."""
    body: dict[str, Any] = {key: value for key, value in target.items() if value is not None}
    for side in ("from", "to"):
        given = bounds.get(side)
        if given is not None:
            kind, value = replay_bound(given)
            body[f"{side}{kind}"] = value
    host = api.virtual_host(vhost)
    path = (f"/api/latest/queue/{_segment(api.node_of(host))}/{_segment(host)}/"
            f"{_segment(queue)}/replayMessages")
    answer = api.post(path, body)
    if as_json:
        return json.dumps(answer, indent=2, sort_keys=True) + "\n"
    count = answer["replayed"]
    where = (f"queue '{printable(target['destination'])}'" if target.get("destination") is not None
             else f"exchange '{printable(target['exchange'])}'" if target.get("exchange") is not None
             else "their own exchanges")
    lines = [f"replayed {count} message{'' if count == 1 else 's'} of queue '{printable(queue)}'"
             f" in virtual host '{printable(host)}' into {where}"
             f" (journal version {answer['journalVersion']})"]
    for key, what in (("unroutable", "routed to no queue"), ("refused", "refused by a queue"),
                      ("missing", "not replayed, their bodies are gone from the journal")):
        if answer.get(key):
            lines.append(f"{what}: {printable(answer[key])}")
    return "\n".join(lines) + "\n"


def _add_replay_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    replaying = commands.add_parser(
        "replay", help="publish again a queue's messages between two times or journal versions",
        description="Publish again the messages the journal says were enqueued on a queue"
                    " between two times or two versions of the journal (settled ones too):"
                    " through their own exchanges, another exchange, or into a queue"
                    " (the queue's replayMessages operation; docs/replay.md).",
        epilog="FROM and TO are ISO 8601 times (2026-11-24T10:00:00Z; no offset: UTC), TO"
               " excluded, or journal versions (whole numbers), both included.")
    replaying.add_argument("queue", metavar="QUEUE", help="the queue whose history is replayed")
    replaying.add_argument("--from", dest="start", metavar="FROM",
                           help="first time or version (default: the oldest)")
    replaying.add_argument("--to", dest="end", metavar="TO",
                           help="time (excluded) or version (included) to stop at (default: now)")
    through = replaying.add_mutually_exclusive_group()
    through.add_argument("--exchange", "-e", metavar="EXCHANGE",
                         help="publish through this exchange (default: each message's own;"
                              " '' is the default exchange)")
    through.add_argument("--to-queue", "-q", dest="destination", metavar="QUEUE",
                         help="put the messages straight into this queue")
    replaying.add_argument("--routing-key", "-k", metavar="KEY",
                           help="routing key (default: each message's own)")
    replaying.add_argument("--limit", type=int, metavar="N", help="at most N messages")
    replaying.add_argument("--vhost", "-p", metavar="VHOST",
                           help="the virtual host (default: the broker's default one)")
    replaying.add_argument("--json", action="store_true", help="print the operation's answer as JSON")
    _connection_options(replaying, timeout=REPLAY_TIMEOUT)
    replaying.set_defaults(run=_command(lambda api, args: replay(
        api, args.queue, args.vhost, {"from": args.start, "to": args.end},
        {"exchange": args.exchange, "routingKey": args.routing_key,
         "destination": args.destination, "limit": args.limit}, args.json)))


# -- the commands ----------------------------------------------------------------------------

def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``status``, ``list``, ``purge`` and ``replay`` to the ``deltamq`` command."""
    status_parser = commands.add_parser(
        "status", help="a running broker's version, uptime, memory, alarms, listeners",
        description="Ask a running broker (over its REST API) for its version, uptime,"
                    " memory, descriptors, alarms, listeners, connections and virtual hosts.")
    _connection_options(status_parser)
    status_parser.set_defaults(run=_command(lambda api, args: status(api)))

    listing = commands.add_parser(
        "list", help="list a running broker's queues, connections, exchanges, ...",
        description="List objects of a running broker as a table, like rabbitmqctl's"
                    " list_queues: 'deltamq list queues name messages consumers'.",
        epilog="columns: " + "; ".join(f"{kind}: {' '.join(listing.columns)}"
                                       for kind, listing in LISTINGS.items()))
    listing.add_argument("kind", choices=sorted(LISTINGS), metavar="WHAT",
                         help=f"one of: {', '.join(sorted(LISTINGS))}")
    listing.add_argument("columns", nargs="*", metavar="COLUMN",
                         help="columns to show, in order (default: a few; see below)")
    listing.add_argument("--vhost", "-p", metavar="VHOST",
                         help="the virtual host (default: the broker's default one)")
    listing.add_argument("--no-headers", dest="headers", action="store_false",
                         help="leave out the line of column names")
    _connection_options(listing)
    listing.set_defaults(run=_command(
        lambda api, args: list_objects(api, args.kind, args.columns, args.vhost, args.headers)))

    purging = commands.add_parser(
        "purge", help="remove every ready message from a queue",
        description="Remove every ready message of a queue of a running broker (its"
                    " clearQueue operation); unacknowledged ones stay.")
    purging.add_argument("queue", metavar="QUEUE")
    purging.add_argument("--vhost", "-p", metavar="VHOST",
                         help="the virtual host (default: the broker's default one)")
    _connection_options(purging)
    purging.set_defaults(run=_command(lambda api, args: purge(api, args.queue, args.vhost)))
    _add_replay_command(commands)


def _connection_options(parser: argparse.ArgumentParser, timeout: float = TIMEOUT) -> None:
    group = parser.add_argument_group("connection")
    group.add_argument("--url", metavar="URL",
                       default=os.environ.get(URL_VARIABLE, DEFAULT_URL),
                       help=f"the broker's HTTP management (default: ${URL_VARIABLE}, else"
                            f" {DEFAULT_URL}); may carry credentials: http://user:pass@host:port")
    group.add_argument("--user", "-u", metavar="NAME", default=os.environ.get("DELTAMQ_USER"),
                       help="management user (default: $DELTAMQ_USER, the URL's, else guest)")
    group.add_argument("--password", metavar="P", default=os.environ.get("DELTAMQ_PASSWORD"),
                       help="password (default: $DELTAMQ_PASSWORD, the URL's, else guest)")
    group.add_argument("--timeout", metavar="SECONDS", type=float, default=timeout,
                       help=f"how long to wait for an answer (default {timeout:g})")


def _command(action: Callable[[Management, argparse.Namespace], str]
             ) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            api = Management(args.url, args.user, args.password, args.timeout)
            sys.stdout.write(action(api, args))
        except CtlError as exc:
            print(f"deltamq: error: {exc}", file=sys.stderr)
            return exc.status
        return 0
    return run
