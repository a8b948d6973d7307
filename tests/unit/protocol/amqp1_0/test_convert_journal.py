"""A 1.0 message in the journal: its row, reading it back (Spark's executors), recovery and the DLQ job."""

from __future__ import annotations

import json
from pathlib import Path

from broker.messaging.message import Message
from broker.messaging.namespace import Namespace
from broker.protocol.amqp1_0.convert import AMQP_SECTIONS_TYPE
from broker.protocol.amqp1_0.message_format import message_from_transfer, transfer_payload
from broker.protocol.amqp1_0.sections import encode_sections
from broker.protocol.amqp1_0.types import (AmqpValue, ApplicationProperties, Data, Header, MessageAnnotations,
                                           Properties, Symbol, Timestamp)
from lakehouse.dlq import _decoded_headers
from lakehouse.journal import DeltaMessageJournal
from lakehouse.journal_writer import describe
from lakehouse.queue_reads import read_messages

DATA_MESSAGE = encode_sections([
    Header(durable=True, priority=6), MessageAnnotations({"x-opt-source": "sensor"}),
    Properties(message_id="m-1", subject="reading", content_type=Symbol("application/json"),
               creation_time=Timestamp(1_700_000_000_000)),
    ApplicationProperties({"unit": "C", "n": 3}), Data(b'{"t": 21}')])
VALUE_MESSAGE = encode_sections([Header(durable=True), AmqpValue({"t": 21})])


def received(payload: bytes) -> Message:
    return message_from_transfer(payload, exchange="amq.topic", routing_key="sensors", arrival=5.0)


def journaled(path: Path, *payloads: bytes) -> list[bytes]:
    """Journal ``payloads`` published to durable queue 'q' (one commit); the payloads a 1.0
    consumer would get back after recovery."""
    journal = DeltaMessageJournal(path, "v")
    journal.open()
    ns = Namespace("v")
    ns.journal = journal
    journal.recover(ns)
    queue = ns.declare_queue("q", durable=True)[0]
    for payload in payloads:
        queue.enqueue(received(payload))
    records = ns.records()
    journal.close()
    journal = DeltaMessageJournal(path, "v")
    journal.open()
    fresh = Namespace("v")
    fresh.journal = journal
    fresh.restore(records)
    journal.recover(fresh)
    out = []
    while (entry := fresh.queues["q"].get()) is not None:
        out.append(transfer_payload(entry.message, delivery_count=0, first_acquirer=False))
    journal.close()
    return out


def test_the_journal_row_of_a_1_0_message_has_the_common_columns() -> None:
    tag, native = received(DATA_MESSAGE).native()
    assert tag == "amqp-1.0"
    properties, headers = describe(received(DATA_MESSAGE).properties)
    assert dict(properties) == {"content_type": "application/json", "delivery_mode": "2", "priority": "6",
                                "message_id": "m-1", "timestamp": "1700000000", "type": "reading"}
    assert json.loads(headers or "") == {"unit": "C", "n": 3, "x-opt-source": "sensor"}


def test_a_journaled_1_0_message_reads_back_with_its_columns_and_body(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    assert journaled(path, DATA_MESSAGE, VALUE_MESSAGE) == [DATA_MESSAGE, VALUE_MESSAGE]   # recovered as sent
    rows = read_messages(str(path), "q", [1, 2], {}).to_pylist()
    data, value = rows
    assert data["body"] == b'{"t": 21}' and data["message_format"] == "amqp-1.0"
    assert (data["exchange"], data["routing_key"]) == ("amq.topic", "sensors")
    assert dict(data["properties"])["type"] == "reading"
    assert json.loads(data["headers"]) == {"unit": "C", "n": 3, "x-opt-source": "sensor"}
    assert value["body"] == encode_sections([AmqpValue({"t": 21})])
    assert dict(value["properties"])["content_type"] == AMQP_SECTIONS_TYPE


def test_the_dlq_job_reads_the_headers_of_a_1_0_message() -> None:
    tag, native = received(DATA_MESSAGE).native()
    assert _decoded_headers(tag, native) == ({"unit": "C", "n": 3, "x-opt-source": "sensor"}, None)
    headers, why = _decoded_headers(tag, b"\x42")
    assert headers == {} and why is not None and "amqp-1.0" in why
