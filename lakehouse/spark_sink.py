"""Spark as a producer: ``df.write`` / ``df.writeStream`` ``.format("deltamq")`` publish rows.

Each Spark task (one partition of a micro-batch, or of a batch write) opens
one AMQP 0-9-1 connection to the broker (pika) and publishes its rows in
AMQP transactions.  ``tx.commit-ok`` is the broker's confirm: it comes once
every persistent message of the transaction is on disk (journal group
commit), so a task succeeds only when what it published is durable, and
fails, with the broker's own words, when anything was refused.

Exactly once, across restarts
-----------------------------
Every message of a transaction carries a *producer mark* (the headers
``x-deltamq-producer`` and ``x-deltamq-sequence``; the broker strips them).
A streaming task publishes its whole partition of micro-batch ``b`` in one
transaction marked ``(<query id>/<partition>, b)``; the broker records each
producer's last committed sequence in the same journal commit as the
messages and drops a transaction whose sequence it has already committed
(:mod:`broker.messaging.producer_sequences`).  So when a query is restarted
from its checkpoint and Spark runs a micro-batch again -- its offsets were
logged, its commit was not -- the partitions the broker already took publish
nothing, and the others publish once.  This needs what Spark's own idempotent
sinks need: a replayed batch has the same rows in the same partitions (a
deterministic query over a replayable source).

A batch write (``df.write``) publishes each partition in transactions of
``transactionSize`` rows: at least once (a retried task publishes again what
its failed attempt committed).  Given a ``producer`` option, its n-th
transaction of partition p is marked ``(<producer>/<p>, n)``: a retried task,
or a second run of the same job over the same rows, publishes nothing the
broker already took.

Rows
----
Columns: ``body`` (binary or string, required), and optionally
``exchange``, ``routing_key`` (string; null takes the ``exchange`` /
``routingKey`` option), ``headers`` (a map from string to string, number,
boolean or binary, or a JSON object as a string) and ``properties`` (a map
from string to string or a struct, with AMQP's basic property names:
:data:`PROPERTY_NAMES`).  Any other column is refused when the write is
planned, before anything is published.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import (BinaryType, BooleanType, ByteType, DataType, DoubleType, FloatType,
                               IntegerType, LongType, MapType, ShortType, StringType, StructType,
                               TimestampType)

from broker.messaging.producer_sequences import MAX_SEQUENCE, PRODUCER_HEADER, SEQUENCE_HEADER

if TYPE_CHECKING:
    import pika
    from pyspark.sql import Row

__all__ = ["SinkOptions", "DeltaMQWriter", "DeltaMQStreamWriter", "PartitionPublisher", "Published",
           "SinkError", "check_schema", "PROPERTY_NAMES", "COLUMNS"]

#: the columns a row may have
COLUMNS: Final = ("body", "exchange", "routing_key", "headers", "properties")
#: AMQP 0-9-1 basic properties a row may set, and how their text is read
_INTEGER_PROPERTIES: Final = ("delivery_mode", "priority", "timestamp")
PROPERTY_NAMES: Final = ("content_type", "content_encoding", "delivery_mode", "priority", "correlation_id",
                         "reply_to", "expiration", "message_id", "timestamp", "type", "user_id", "app_id")
_HEADER_VALUE_TYPES: Final = (StringType, BinaryType, BooleanType, ByteType, ShortType, IntegerType,
                              LongType, FloatType, DoubleType, TimestampType)
# Spark's local properties a micro-batch's tasks carry (StreamExecution / MicroBatchExecution)
_QUERY_ID_PROPERTY: Final = "sql.streaming.queryId"
_BATCH_ID_PROPERTY: Final = "streaming.sql.batchId"
#: options Spark itself reads, which reach the writer too
_SPARKS_OWN: Final = frozenset({"checkpointlocation"})


class SinkError(Exception):
    """What the user must fix about a deltamq write (its message says what)."""


# -- options --------------------------------------------------------------------------------

@dataclass(frozen=True)
class SinkOptions:
    """The writer's options (``.option(name, value)``; names are case-insensitive)."""

    url: str = "amqp://guest:guest@localhost:5672/%2F"
    vhost: str | None = None
    user: str | None = None
    password: str | None = None
    exchange: str = ""
    routing_key: str = ""
    persistent: bool = True
    producer: str | None = None
    transaction_size: int = 1000

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        known = {"url": "url", "vhost": "vhost", "user": "user", "password": "password",
                 "exchange": "exchange", "routingkey": "routing_key", "persistent": "persistent",
                 "producer": "producer", "transactionsize": "transaction_size"}
        values: dict[str, Any] = {}
        for name, value in options.items():
            field = known.get(name.lower())
            if field is None and name.lower() in _SPARKS_OWN:
                continue
            if field is None:
                if name.lower() == "path":             # .save(path): nothing to do with a path
                    raise SinkError("format('deltamq') writes to a broker, not a path:"
                                    " call .save() without one and set .option('url', ...)")
                raise SinkError(f"unknown option '{name}' for format('deltamq'); the options are: "
                                "url, vhost, user, password, exchange, routingKey, persistent,"
                                " producer, transactionSize")
            values[field] = value
        if "persistent" in values:
            text = str(values["persistent"]).strip().lower()
            if text not in ("true", "false"):
                raise SinkError(f"option 'persistent' must be true or false, got '{values['persistent']}'")
            values["persistent"] = text == "true"
        if "transaction_size" in values:
            try:
                size = int(values["transaction_size"])
            except ValueError:
                size = 0
            if size < 1:
                raise SinkError("option 'transactionSize' must be a positive number of rows,"
                                f" got '{values['transaction_size']}'")
            values["transaction_size"] = size
        if not str(values.get("url", cls.url)).startswith(("amqp://", "amqps://")):
            raise SinkError(f"option 'url' must be an AMQP URL (amqp://user:password@host:port/vhost),"
                            f" got '{values['url']}'")
        producer = values.get("producer")
        if producer is not None and not 0 < len(producer) <= 200:
            raise SinkError("option 'producer' must be a name of 1 to 200 characters")
        return cls(**values)

    def connection_parameters(self) -> pika.URLParameters:
        import pika

        params = pika.URLParameters(self.url)
        if self.vhost is not None:
            params.virtual_host = self.vhost
        if self.user is not None or self.password is not None:
            current = params.credentials
            user = self.user if self.user is not None else getattr(current, "username", "guest")
            password = self.password if self.password is not None else getattr(current, "password", "guest")
            params.credentials = pika.PlainCredentials(user, password)
        return params

    def where(self) -> str:
        """The broker and virtual host, for messages (no password)."""
        params = self.connection_parameters()
        return f"amqp://{params.host}:{params.port}/{quote(params.virtual_host, safe='')}"


# -- schema -------------------------------------------------------------------------------

def check_schema(schema: StructType) -> None:
    """Refuse, before anything is published, a row schema the sink cannot publish."""
    names = [field.name for field in schema.fields]
    unknown = [name for name in names if name not in COLUMNS]
    if unknown:
        raise SinkError(f"format('deltamq') cannot publish column(s) {', '.join(map(repr, unknown))}:"
                        f" a row has {', '.join(COLUMNS)} (only 'body' is required); select or rename"
                        " the columns first, e.g. to_json(struct(...)) AS body")
    fields = {field.name: field.dataType for field in schema.fields}
    if "body" not in fields:
        raise SinkError("format('deltamq') needs a 'body' column (binary or string) in every row")
    _expect(fields, "body", (BinaryType, StringType), "binary or string")
    _expect(fields, "exchange", (StringType,), "string")
    _expect(fields, "routing_key", (StringType,), "string")
    headers = fields.get("headers")
    if headers is not None and not isinstance(headers, StringType) and not (
            isinstance(headers, MapType) and isinstance(headers.keyType, StringType)
            and isinstance(headers.valueType, _HEADER_VALUE_TYPES)):
        raise SinkError(f"column 'headers' must be a map<string, string|number|boolean|binary> or a JSON"
                        f" object as a string, not {headers.simpleString()}")
    properties = fields.get("properties")
    if isinstance(properties, StructType):
        extra = [f.name for f in properties.fields if f.name not in PROPERTY_NAMES]
        if extra:
            raise SinkError(f"column 'properties' has unknown field(s) {', '.join(map(repr, extra))};"
                            f" the message properties are {', '.join(PROPERTY_NAMES)}")
    elif properties is not None and not (isinstance(properties, MapType)
                                         and isinstance(properties.keyType, StringType)):
        raise SinkError(f"column 'properties' must be a map<string, string> or a struct of message"
                        f" properties, not {properties.simpleString()}")


def _expect(fields: dict[str, DataType], name: str, types: tuple[type, ...], wanted: str) -> None:
    kind = fields.get(name)
    if kind is not None and not isinstance(kind, types):
        raise SinkError(f"column '{name}' must be {wanted}, not {kind.simpleString()}")


# -- rows -> messages -------------------------------------------------------------------------

def message_of(row: Row, options: SinkOptions,
               mark: tuple[str, int] | None) -> tuple[str, str, bytes, pika.BasicProperties]:
    """(exchange, routing key, body, properties) of ``row``, marked with ``mark``; SinkError if bad."""
    import pika

    values = row.asDict(recursive=False)
    body = values.get("body")
    if body is None:
        raise SinkError("a row has a null 'body': every message needs one (use an empty string)")
    body = body.encode("utf-8") if isinstance(body, str) else bytes(body)
    exchange = values.get("exchange")
    routing_key = values.get("routing_key")
    headers = _headers(values.get("headers"))
    if PRODUCER_HEADER in headers or SEQUENCE_HEADER in headers:
        raise SinkError(f"headers '{PRODUCER_HEADER}' and '{SEQUENCE_HEADER}' are the sink's own")
    if mark is not None:
        headers[PRODUCER_HEADER], headers[SEQUENCE_HEADER] = mark
    props: dict[str, Any] = {"delivery_mode": 2 if options.persistent else 1}
    props.update(_properties(values.get("properties")))
    return (options.exchange if exchange is None else exchange,
            options.routing_key if routing_key is None else routing_key,
            body, pika.BasicProperties(headers=headers or None, **props))


def _headers(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError as exc:
            raise SinkError(f"column 'headers' holds text that is not JSON ({exc}): {value[:80]!r}") from None
        if not isinstance(parsed, dict):
            raise SinkError(f"column 'headers' must hold a JSON object, got {value[:80]!r}")
        return parsed
    return {key: (bytes(item) if isinstance(item, bytearray) else item)
            for key, item in value.items() if item is not None}


def _properties(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        value = value.asDict()
    props: dict[str, Any] = {}
    for name, item in value.items():
        if item is None:
            continue
        if name not in PROPERTY_NAMES:
            raise SinkError(f"unknown message property '{name}' in column 'properties';"
                            f" the properties are {', '.join(PROPERTY_NAMES)} (headers go in 'headers')")
        if name in _INTEGER_PROPERTIES:
            try:
                item = int(item.timestamp()) if hasattr(item, "timestamp") else int(item)
            except (TypeError, ValueError):
                raise SinkError(f"message property '{name}' must be an integer, got {item!r}") from None
            if name == "priority" and not 0 <= item <= 255:
                raise SinkError(f"message property 'priority' must be 0 to 255, got {item}")
            if name == "delivery_mode" and item not in (1, 2):
                raise SinkError(f"message property 'delivery_mode' must be 1 or 2, got {item}")
        else:
            item = str(item)
        props[name] = item
    return props


# -- publishing ---------------------------------------------------------------------------

@dataclass
class Published(WriterCommitMessage):
    """What one task did: messages it published, and transactions the broker had already."""

    producer: str | None
    messages: int = 0
    transactions: int = 0
    replays: int = 0


class PartitionPublisher:
    """One task's connection to the broker: publishes marked transactions, one at a time."""

    def __init__(self, options: SinkOptions) -> None:
        import pika
        import pika.exceptions

        self.options = options
        try:
            self.connection = pika.BlockingConnection(options.connection_parameters())
            self.channel = self.connection.channel()
            self.channel.tx_select()
        except pika.exceptions.AMQPError as exc:
            raise SinkError(f"deltamq sink: cannot open a transactional channel to {options.where()}:"
                            f" {_describe(exc)}") from None

    def publish(self, rows: Iterable[Row], mark: tuple[str, int] | None) -> int:
        """Publish ``rows`` in one transaction (marked ``(producer, sequence)``); the number of messages."""
        import pika.exceptions

        what = "a transaction" if mark is None else f"transaction {mark[1]} of producer '{mark[0]}'"
        if mark is not None and not 0 <= mark[1] <= MAX_SEQUENCE:
            raise SinkError(f"deltamq sink: the sequence of {what} is out of range (0 to {MAX_SEQUENCE})")
        count = 0
        try:
            for row in rows:
                exchange, routing_key, body, props = message_of(row, self.options, mark)
                self.channel.basic_publish(exchange, routing_key, body, props)
                count += 1
            if count:
                self.channel.tx_commit()
        except pika.exceptions.AMQPError as exc:
            raise SinkError(f"deltamq sink: the broker at {self.options.where()} did not take {what}"
                            f" ({count} messages): {_describe(exc)}") from None
        return count

    def close(self) -> None:
        try:
            if self.connection.is_open:
                self.connection.close()
        except Exception:                    # closing after a failure: the failure is what counts
            pass


def _describe(exc: BaseException) -> str:
    code, text = getattr(exc, "reply_code", None), getattr(exc, "reply_text", None)
    if code is not None:                                 # the broker closed the channel or connection
        return f"{code} {text}"
    return str(exc) or repr(exc)


def _task_context() -> Any:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise SinkError("deltamq sink: write() runs in Spark tasks only")
    return context


# -- Spark's writers --------------------------------------------------------------------------

class DeltaMQWriter(DataSourceWriter):
    """``df.write.format("deltamq")``: each partition in transactions of ``transactionSize`` rows."""

    def __init__(self, options: SinkOptions, schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise SinkError("format('deltamq') publishes messages and cannot overwrite: use mode('append')")
        check_schema(schema)
        self.options = options

    def write(self, iterator: Iterator[Row]) -> Published:
        producer = self.options.producer
        if producer is not None:
            producer = f"{producer}/{_task_context().partitionId()}"
        result = Published(producer)
        publisher: PartitionPublisher | None = None
        try:
            for sequence, chunk in enumerate(_chunks(iterator, self.options.transaction_size)):
                if publisher is None:
                    publisher = PartitionPublisher(self.options)
                result.messages += publisher.publish(chunk, None if producer is None else (producer, sequence))
                result.transactions += 1
        finally:
            if publisher is not None:
                publisher.close()
        return result


class DeltaMQStreamWriter(DataSourceStreamWriter):
    """``df.writeStream.format("deltamq")``: each partition of a micro-batch in one transaction."""

    def __init__(self, options: SinkOptions, schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise SinkError("format('deltamq') publishes messages: use outputMode('append'), not complete")
        check_schema(schema)
        self.options = options

    def write(self, iterator: Iterator[Row]) -> Published:
        context = _task_context()
        query = self.options.producer or context.getLocalProperty(_QUERY_ID_PROPERTY)
        batch = context.getLocalProperty(_BATCH_ID_PROPERTY)
        if query is None or batch is None:
            raise SinkError("deltamq sink: no streaming query id or batch id in the task's context")
        producer = f"{query}/{context.partitionId()}"
        result = Published(producer)
        first = next(iterator, None)
        if first is None:
            return result                     # nothing to publish: no connection, no record
        publisher = PartitionPublisher(self.options)
        try:
            result.messages = publisher.publish(_prepend(first, iterator), (producer, int(batch)))
            result.transactions = 1
        finally:
            publisher.close()
        return result

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing left to do: every task's transaction was committed by the broker."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Transactions that committed stay published; a replay of the batch will not repeat them."""


def _chunks(rows: Iterator[Row], size: int) -> Iterator[list[Row]]:
    chunk: list[Row] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _prepend(first: Row, rest: Iterator[Row]) -> Iterator[Row]:
    yield first
    yield from rest

