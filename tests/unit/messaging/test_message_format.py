"""The message container's formats: registry by tag, native bytes kept, conversion, annotations."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from typing import Any

import pytest

from broker.messaging import message_format
from broker.messaging.dead_letter import dead_lettered
from broker.messaging.message import Message, MessageProperties
from broker.messaging.message_format import UnknownMessageFormat, format_for, known_formats, register

from .support import JsonCodec


class OtherFormat(JsonCodec):
    """A second protocol's format: JSON with its own tag, annotations kept apart."""

    tag = "test-other"

    def encode(self, props: MessageProperties, annotations: Mapping[str, Any] | None = None) -> bytes:
        return super().encode(props, None) + (b"|" + repr(sorted(annotations)).encode()
                                              if annotations else b"")

    def decode(self, data: bytes) -> MessageProperties:
        return super().decode(data.split(b"|")[0])


def test_a_tag_resolves_in_a_process_that_never_imported_an_engine() -> None:
    code = ("import sys; from broker.messaging.message_format import format_for;"
            "assert not any(m.startswith('broker.protocol') for m in sys.modules);"
            "f = format_for('amqp-0-9-1'); print(f.tag, f.decode(f.encode("
            "__import__('broker.messaging.message', fromlist=['x']).MessageProperties(priority=3))).priority)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["amqp-0-9-1", "3"]


def test_unknown_tags_are_refused_naming_the_known_ones() -> None:
    with pytest.raises(UnknownMessageFormat, match="unknown message format 'amqp-9'.*amqp-0-9-1"):
        format_for("amqp-9")
    assert "amqp-0-9-1" in known_formats()


def test_registering_a_second_format_under_a_taken_tag_is_refused() -> None:
    fmt = format_for("amqp-0-9-1")
    assert register(fmt) is fmt                       # the same object again: fine
    with pytest.raises(ValueError, match="already registered"):
        register(type("Impostor", (), {"tag": "amqp-0-9-1"})())  # type: ignore[arg-type]


def test_a_new_format_plugs_in_without_changes_to_messaging() -> None:
    other = OtherFormat()
    register(other)
    try:
        assert format_for("test-other") is other and "test-other" in known_formats()
        source = format_for("amqp-0-9-1")
        props = MessageProperties(content_type="text/plain", priority=4, headers={"a": 1})
        native = source.encode(props)
        msg = Message(exchange="x", routing_key="k", body=b"b", native=native, format=source, arrival=0.0)
        assert msg.native_for(source) is native       # its own format: the bytes as received
        assert other.decode(msg.native_for(other)) == props   # another: through the common view
        assert msg.native() == ("amqp-0-9-1", native)
    finally:
        del message_format._formats["test-other"]


def test_native_bytes_are_kept_and_the_view_is_decoded_on_demand() -> None:
    fmt = JsonCodec()
    props = MessageProperties(delivery_mode=2, priority=7, expiration="2000")
    native = fmt.encode(props)
    msg = Message(exchange="", routing_key="q", body=b"", native=native, format=fmt, arrival=1.0)
    assert fmt.decodes == 1                            # the hot fields, once
    assert (msg.persistent, msg.priority, msg.expires_at) == (True, 7, 3.0)
    assert msg.properties == props and fmt.decodes == 2
    assert msg.native() == ("test-json", native) and msg.format_tag == "test-json"


def test_a_message_made_from_a_view_is_encoded_in_the_default_format() -> None:
    props = MessageProperties(content_type="application/json", delivery_mode=1)
    msg = Message(exchange="", routing_key="q", body=b"", properties=props, arrival=0.0)
    assert msg.format is None and msg.format_tag == "amqp-0-9-1"
    tag, native = msg.native()
    assert tag == "amqp-0-9-1" and format_for(tag).decode(native) == props


def test_dead_lettering_records_history_as_annotations_in_the_messages_own_format() -> None:
    fmt = OtherFormat()
    props = MessageProperties(headers={"app": "x"}, expiration="60000", delivery_mode=2)
    original = Message(exchange="ex", routing_key="rk", body=b"b", native=fmt.encode(props),
                       format=fmt, arrival=0.0)
    copy = dead_lettered(original, queue="q", reason="expired", wall_time=1.0e9,
                         exchange="dlx", routing_key=None, arrival=5.0)
    assert copy.format is fmt and copy.expires_at is None and copy.persistent
    assert copy.annotations is not None and copy.annotations["x-first-death-reason"] == "expired"
    assert copy.bare_properties().headers == {"app": "x"}        # the message's own metadata
    death = copy.properties.headers["x-death"][0]                # the common view shows both
    assert (death["queue"], death["original-expiration"], death["count"]) == ("q", "60000", 1)
    # the format decides where annotations go; a second death counts up
    assert copy.native_for(fmt).endswith(b"|['x-death', 'x-first-death-exchange', "
                                         b"'x-first-death-queue', 'x-first-death-reason', "
                                         b"'x-last-death-exchange', 'x-last-death-queue', "
                                         b"'x-last-death-reason']")
    again = dead_lettered(copy, queue="q", reason="expired", wall_time=1.0e9,
                          exchange="dlx", routing_key=None, arrival=6.0)
    assert again.annotations is not None and again.annotations["x-death"][0]["count"] == 2
    assert "x-death" not in (again.bare_properties().headers or {})


def test_0_9_1_carries_annotations_as_headers() -> None:
    fmt = format_for("amqp-0-9-1")
    native = fmt.encode(MessageProperties(headers={"a": 1}), {"x-death": [{"count": 1}]})
    assert fmt.decode(native).headers == {"a": 1, "x-death": [{"count": 1}]}


def test_annotations_survive_a_change_of_properties_and_cost_no_slot() -> None:
    props = MessageProperties(headers={"a": 1})
    msg = Message.annotated({"x-death": []}, exchange="", routing_key="q", body=b"",
                            properties=props, arrival=0.0)
    copy = msg.with_properties(props.replace(priority=2), exchange="other")
    assert copy.annotations == {"x-death": []} and copy.priority == 2
    assert copy.properties.headers == {"a": 1, "x-death": []}
    plain = Message(exchange="", routing_key="q", body=b"", properties=props, arrival=0.0)
    assert plain.annotations is None and Message.annotated(None, exchange="", routing_key="q", body=b"",
                                                           arrival=0.0).annotations is None
    assert "annotations" not in Message.__slots__
