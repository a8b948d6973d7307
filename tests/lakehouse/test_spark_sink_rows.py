"""The sink's options, row schema and row -> message conversion (no JVM: pyspark's types only)."""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql import Row
from pyspark.sql.types import (BinaryType, IntegerType, MapType, StringType, StructField, StructType)

from broker.messaging.producer_sequences import PRODUCER_HEADER, SEQUENCE_HEADER
from lakehouse.spark_sink import SinkError, SinkOptions, check_schema, message_of


def schema(**columns: object) -> StructType:
    return StructType([StructField(name, kind) for name, kind in columns.items()])  # type: ignore[arg-type]


def test_options_are_case_insensitive_and_typed() -> None:
    options = SinkOptions.parse({"URL": "amqp://u:p@h:1/v", "routingkey": "k", "Persistent": "FALSE",
                                 "transactionSize": "10", "checkpointLocation": "/tmp/x"})
    assert (options.routing_key, options.persistent, options.transaction_size) == ("k", False, 10)
    params = SinkOptions.parse({"url": "amqp://u:p@h:1/v", "vhost": "other", "user": "me"}).connection_parameters()
    assert (params.host, params.port, params.virtual_host) == ("h", 1, "other")
    assert (params.credentials.username, params.credentials.password) == ("me", "p")


@pytest.mark.parametrize("options, error", [
    ({"colour": "red"}, "unknown option 'colour'"),
    ({"path": "/tmp/x"}, "writes to a broker, not a path"),
    ({"transactionSize": "0"}, "'transactionSize' must be a positive number"),
    ({"url": "localhost:5672"}, "must be an AMQP URL"),
    ({"producer": ""}, "'producer' must be a name"),
])
def test_bad_options_say_what_to_fix(options: dict[str, str], error: str) -> None:
    with pytest.raises(SinkError, match=error):
        SinkOptions.parse(options)


@pytest.mark.parametrize("columns, error", [
    ({"body": BinaryType(), "colour": StringType()}, "cannot publish column"),
    ({"exchange": StringType()}, "needs a 'body' column"),
    ({"body": IntegerType()}, "'body' must be binary or string, not int"),
    ({"body": StringType(), "headers": MapType(StringType(), MapType(StringType(), StringType()))},
     "'headers' must be a map"),
    ({"body": StringType(), "properties": schema(colour=StringType())}, "unknown field"),
    ({"body": StringType(), "properties": StringType()}, "'properties' must be a map"),
])
def test_bad_schemas_are_refused_naming_the_column(columns: dict[str, object], error: str) -> None:
    with pytest.raises(SinkError, match=error):
        check_schema(schema(**columns))


def test_a_row_becomes_a_marked_message() -> None:
    options = SinkOptions(exchange="ex", routing_key="default-key")
    row = Row(body=bytearray(b"b"), exchange=None, routing_key="k", headers='{"a": [1, 2]}',
              properties={"priority": "4", "content_type": "text/plain", "timestamp": "1700000000"})
    exchange, key, body, props = message_of(row, options, ("q/1", 7))
    assert (exchange, key, body) == ("ex", "k", b"b")
    assert props.headers == {"a": [1, 2], PRODUCER_HEADER: "q/1", SEQUENCE_HEADER: 7}
    assert (props.priority, props.content_type, props.timestamp, props.delivery_mode) == (4, "text/plain",
                                                                                          1700000000, 2)
    struct_props = Row(content_type=None, delivery_mode=1, timestamp=dt.datetime(2026, 1, 1,
                                                                                   tzinfo=dt.timezone.utc))
    _e, _k, _b, props = message_of(Row(body="é", properties=struct_props), options, None)
    assert props.delivery_mode == 1 and props.timestamp == 1767225600 and props.headers is None


@pytest.mark.parametrize("row, error", [
    (Row(body=None), "null 'body'"),
    (Row(body="x", headers="[1]"), "must hold a JSON object"),
    (Row(body="x", headers="{nope"), "not JSON"),
    (Row(body="x", headers={PRODUCER_HEADER: "me"}), "the sink's own"),
    (Row(body="x", properties={"colour": "red"}), "unknown message property 'colour'"),
    (Row(body="x", properties={"priority": "high"}), "'priority' must be an integer"),
    (Row(body="x", properties={"priority": "300"}), "'priority' must be 0 to 255"),
    (Row(body="x", properties={"delivery_mode": "3"}), "'delivery_mode' must be 1 or 2"),
])
def test_bad_rows_say_what_to_fix(row: Row, error: str) -> None:
    with pytest.raises(SinkError, match=error):
        message_of(row, SinkOptions(), ("q/0", 0))
