"""Read-only Spark SQL over the broker's history, for the console's History page.

``GET /api/latest/sql`` says whether a Spark Connect server (``deltamq
spark serve``) serves the broker's data directory; ``POST /api/latest/sql``
with ``{"query": "...", "limit": N}`` runs a query there and answers
``{"columns": [{"name", "type"}], "rows": [[...]], "truncated": bool,
"elapsedMs": ms, "server": "sc://..."}``.

The broker runs no Spark: the query goes to the warm server through a Spark
Connect client (plain Python: gRPC and Arrow), in a worker thread, never on
the event loop; at most :data:`MAX_LIMIT` rows come back and a query running
longer than :data:`TIMEOUT` seconds is interrupted (504).  Without a server
the answer is 503, saying how to start one.

Administrators only (403 otherwise): the views hold every virtual host's
messages.  Read-only by construction, not by trust:

* a query (``SELECT``, ``WITH``, ``VALUES``, ``TABLE``) is sent wrapped as
  ``SELECT * FROM (<query>)``, which Spark's parser accepts only if it is a
  query -- ``WITH ... INSERT``, a second statement or a closing parenthesis
  that tries to leave the subquery all fail to parse there;
* ``SHOW``, ``DESCRIBE`` and ``EXPLAIN`` (which never runs what it explains)
  are sent as they are;
* anything else, and the functions that call Java methods (``reflect``,
  ``java_method``, ``try_reflect``), are refused with 422 before anything
  is sent.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from litestar import MediaType, Request, Response, get, post
from litestar.handlers import BaseRouteHandler

from broker.cpu_placement import released
from broker.security.principal import Principal
from mgmt.errors import FORBIDDEN, SERVICE_UNAVAILABLE, UNPROCESSABLE, ApiError

PATHS = ["/api/latest/sql", "/api/v1/sql"]
DEFAULT_LIMIT = 1000
MAX_LIMIT = 10_000
#: seconds a query may run before it is interrupted
TIMEOUT = 60.0
GATEWAY_TIMEOUT = 504
#: queries running at once (more wait for a turn, within their timeout)
CONCURRENT_QUERIES = 4

#: statements sent as a subquery: Spark's parser then admits queries only
QUERY_KEYWORDS = frozenset({"SELECT", "WITH", "VALUES", "TABLE"})
#: statements that read the catalog or describe a plan, never change anything
INSPECTION_KEYWORDS = frozenset({"SHOW", "DESCRIBE", "DESC", "EXPLAIN"})
#: functions that call static Java methods in the server (System.exit among them)
FORBIDDEN_FUNCTIONS = frozenset({"reflect", "java_method", "try_reflect"})


class QueryRefused(ValueError):
    """The statement is not one the History page may run; the text says why."""


class ServerGone(ConnectionError):
    """The recorded Spark Connect server does not accept connections."""


@dataclass(frozen=True, slots=True)
class _Scanned:
    """What :func:`_scan` found in a statement, outside literals and comments."""

    words: list[str]
    identifiers: list[str]
    #: the statement without one trailing semicolon
    statement: str


def _scan(query: str) -> _Scanned:
    """Words and quoted identifiers of ``query`` as Spark's lexer sees them.

    String literals (``'...'``, ``"..."``, raw ``r'...'`` without escapes) and
    comments (``--``, nested ``/* */``; not hints' ``/*+ */``) are skipped; a
    semicolon may only end the statement.
    """
    words: list[str] = []
    identifiers: list[str] = []
    end: int | None = None                    # where a semicolon ended the statement
    i = 0
    while i < len(query):
        c = query[i]
        if query.startswith("--", i):
            newline = query.find("\n", i)
            i = len(query) if newline < 0 else newline + 1
            continue
        if query.startswith("/*+", i):          # a hint: its arguments are expressions
            i += 3
            continue
        if query.startswith("/*", i):
            i = _comment_end(query, i)
            continue
        if c.isspace():
            i += 1
            continue
        if end is not None:
            raise QueryRefused("give one statement (a semicolon may only end it)")
        if c in "'\"":
            raw = bool(words) and words[-1] == "R" and query[i - 1] in "rR"
            if raw:
                words.pop()                         # r'...' is a literal, not a word
            i = _literal_end(query, i, raw)
        elif c == "`":
            i, name = _quoted_identifier(query, i)
            identifiers.append(name)
        elif c == ";":
            end = i
            i += 1
        elif c.isalpha() or c == "_":
            start = i
            while i < len(query) and (query[i].isalnum() or query[i] == "_"):
                i += 1
            words.append(query[start:i].upper())
        else:
            i += 1
    return _Scanned(words, identifiers, query if end is None else query[:end])


def _comment_end(query: str, i: int) -> int:
    depth = 0
    while i < len(query):
        if query.startswith("/*", i):
            depth += 1
            i += 2
        elif query.startswith("*/", i):
            depth -= 1
            i += 2
            if depth == 0:
                return i
        else:
            i += 1
    raise QueryRefused("a comment is not closed (a */ is missing)")


def _quoted_identifier(query: str, i: int) -> tuple[int, str]:
    """Where the `...` identifier at ``i`` ends, and its name (a doubled ` is one)."""
    j = i + 1
    while True:
        close = query.find("`", j)
        if close < 0:
            raise QueryRefused("a quoted identifier is not closed (a ` is missing)")
        if not query.startswith("``", close):
            return close + 1, query[i + 1:close].replace("``", "`")
        j = close + 2


def _literal_end(query: str, i: int, raw: bool) -> int:
    quote = query[i]
    i += 1
    while i < len(query):
        if query[i] == "\\" and not raw:
            i += 2
        elif query[i] == quote:
            return i + 1
        else:
            i += 1
    raise QueryRefused(f"a string is not closed (a {quote} is missing)")


def read_only_statement(query: str) -> str:
    """The statement to send for ``query``, or :class:`QueryRefused` saying why not."""
    scanned = _scan(query)
    if not scanned.words:
        raise QueryRefused("the query is empty")
    called = {w.lower() for w in scanned.words} | {name.lower() for name in scanned.identifiers}
    forbidden = sorted(called & FORBIDDEN_FUNCTIONS)
    if forbidden:
        raise QueryRefused(f"{forbidden[0]}() is not allowed here: it calls Java methods in the server")
    first = scanned.words[0]
    if first in QUERY_KEYWORDS:
        # the newline ends a trailing -- comment before the closing parenthesis
        return f"SELECT * FROM (\n{scanned.statement}\n) AS history_query"
    if first in INSPECTION_KEYWORDS:
        return scanned.statement
    allowed = ", ".join(sorted(QUERY_KEYWORDS | INSPECTION_KEYWORDS))
    raise QueryRefused(f"only read-only statements run here ({allowed}); {first} is not one of them")


# -- running a query on the Spark Connect server -------------------------------------------------

def json_value(value: Any) -> Any:
    """A value of an Arrow row as JSON: binary as base64, times as ISO 8601, maps as objects."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if all(isinstance(item, tuple) and len(item) == 2 for item in value) and value:
            return {str(k): json_value(v) for k, v in value}       # an Arrow map's entries
        return [json_value(item) for item in value]
    return str(value)


def run_query(server: Any, statement: str, limit: int, started: Callable[[Any], None]) -> dict[str, Any]:
    """Run ``statement`` in a new Connect session on ``server`` (blocking: call it in a thread)."""
    from lakehouse.connect_server import remote_session

    began = time.perf_counter()
    spark = remote_session(server, default=False)
    started(spark)
    try:
        frame = spark.sql(statement)
        schema = frame.schema
        table = frame.limit(limit + 1).toArrow()
    finally:
        spark.stop()
    # by column: a result may name two columns alike
    rows = [[json_value(value) for value in row] for row in zip(*(c.to_pylist() for c in table.columns))]
    return {"columns": [{"name": f.name, "type": f.dataType.simpleString()} for f in schema.fields],
            "rows": rows[:limit], "truncated": len(rows) > limit,
            "elapsedMs": round((time.perf_counter() - began) * 1000, 1)}


def _spark_message(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= 4000 else text[:4000] + " ..."


class SqlHistory:
    """Runs the History page's queries on the Spark Connect server of a data directory."""

    def __init__(self, data_dir: str | None, timeout: float = TIMEOUT) -> None:
        self.data_dir = data_dir
        self.timeout = timeout
        self.limiter = anyio.CapacityLimiter(CONCURRENT_QUERIES)

    def server(self) -> Any:
        """The Spark Connect server to use, or None (a ``ConnectServer``)."""
        from lakehouse.connect_server import find_server

        try:
            return find_server(self.data_dir)
        except ValueError as exc:                     # DELTAMQ_SPARK_REMOTE is not sc://
            raise ApiError(SERVICE_UNAVAILABLE, str(exc)) from None

    def status(self) -> dict[str, Any]:
        server = self.server()
        return {"available": server is not None, "server": server.address if server else None,
                "dataDir": str(Path(self.data_dir).resolve()) if self.data_dir else None,
                "maxLimit": MAX_LIMIT, "timeoutSeconds": self.timeout}

    async def run(self, query: str, limit: int) -> dict[str, Any]:
        try:
            statement = read_only_statement(query)
        except QueryRefused as exc:
            raise ApiError(UNPROCESSABLE, str(exc)) from None
        server = self.server()
        if server is None:
            raise ApiError(SERVICE_UNAVAILABLE,
                           "no Spark Connect server serves the broker's data directory: start one"
                           f" with `deltamq spark serve --data-dir {self.data_dir}`")
        query_run = _QueryRun()

        def work() -> dict[str, Any]:
            if not server.answering():                # rather than gRPC's retries for minutes
                raise ServerGone(f"the Spark Connect server at {server.address} does not answer")
            return run_query(server, statement, limit, query_run.started)

        with anyio.move_on_after(self.timeout):
            try:
                result = await anyio.to_thread.run_sync(released(work), abandon_on_cancel=True, limiter=self.limiter)
            except ServerGone as exc:
                raise ApiError(SERVICE_UNAVAILABLE, str(exc)) from None
            except Exception as exc:
                if _error_class(exc) is None:         # not Spark refusing the query: the server failing
                    raise ApiError(SERVICE_UNAVAILABLE, f"the Spark Connect server at {server.address}"
                                                        f" failed: {_spark_message(exc)}") from None
                raise ApiError(UNPROCESSABLE, _spark_message(exc)) from None
            return {**result, "server": server.address}
        query_run.time_out()
        raise ApiError(GATEWAY_TIMEOUT, f"the query ran longer than {self.timeout:g} s and was interrupted")


class _QueryRun:
    """The Connect session of one query, interrupted once its time is up (from any thread)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.session: Any = None
        self.timed_out = False

    def started(self, spark: Any) -> None:
        with self.lock:
            self.session = spark
            interrupt = self.timed_out
        if interrupt:
            _interrupt(spark)

    def time_out(self) -> None:
        with self.lock:
            self.timed_out = True
            spark = self.session
        if spark is not None:                         # its thread then ends with an error
            threading.Thread(target=_interrupt, args=(spark,), daemon=True).start()


def _error_class(exc: BaseException) -> str | None:
    """Spark's error class of a failure (``PARSE_SYNTAX_ERROR``...), None for other failures."""
    get_error_class = getattr(exc, "getErrorClass", None)
    return get_error_class() if callable(get_error_class) else None


def _interrupt(spark: Any) -> None:
    try:
        spark.interruptAll()
    except Exception:                                 # the session has ended meanwhile
        pass


def _limit(value: Any) -> int:
    if value is None:
        return DEFAULT_LIMIT
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT:
        raise ApiError(UNPROCESSABLE, f"'limit' must be a whole number from 1 to {MAX_LIMIT}")
    return value


# -- the HTTP endpoints -----------------------------------------------------------------------------

def route_handlers(management: Any) -> list[BaseRouteHandler]:
    """``GET`` and ``POST /api/latest/sql`` of ``management`` (a :class:`mgmt.app.Management`)."""
    history = SqlHistory(_data_dir(management.broker))

    async def administrator(request: Request[Any, Any, Any]) -> Principal:
        principal: Principal = await management.principal(request)
        if not management.administrator(principal):
            raise ApiError(FORBIDDEN, f"user '{principal.name}' may not query the broker's history:"
                                      " administrators only (it holds every virtual host's messages)")
        return principal

    @get(PATHS, summary="Whether a Spark Connect server serves the broker's history", tags=["History"],
         description="Administrators only. `available` is false while no `deltamq spark serve` serves"
                     " the broker's data directory.")
    async def sql_status(request: Request[Any, Any, Any]) -> Response[Any]:
        await administrator(request)
        return Response(content=history.status(), media_type=MediaType.JSON,
                        headers={"Cache-Control": "no-store"})

    @post(PATHS, status_code=200, summary="Run read-only Spark SQL over the broker's history",
          tags=["History"],
          description=f"Administrators only. Body: {{\"query\": \"SELECT ...\", \"limit\": 1..{MAX_LIMIT}}}"
                      f" (default {DEFAULT_LIMIT}). Only SELECT, WITH, VALUES, TABLE, SHOW, DESCRIBE and"
                      " EXPLAIN run (422 otherwise); 503 without a Spark Connect server; 504 after"
                      f" {TIMEOUT:g} s.")
    async def sql_query(request: Request[Any, Any, Any]) -> Response[Any]:
        from mgmt.rest import parse_object

        await administrator(request)
        body = parse_object(await request.body())
        query = body.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ApiError(UNPROCESSABLE, "give 'query': the SQL to run, e.g. SELECT * FROM queue_history")
        result = await history.run(query, _limit(body.get("limit")))
        return Response(content=result, media_type=MediaType.JSON, headers={"Cache-Control": "no-store"})

    return [sql_status, sql_query]


def _data_dir(broker: Any) -> str | None:
    """The broker's data directory (``deltamq.data_dir``), None when it has none."""
    try:
        resolved = broker.resolve("${deltamq.data_dir}")
    except Exception:                                  # no such variable: a broker in memory
        return None
    return str(resolved) if resolved and "://" not in str(resolved) else None
