from __future__ import annotations

import pytest

from broker.errors import PreconditionFailed
from broker.messaging import Message, MessageProperties, Namespace

from .support import JsonCodec, message


def test_properties_default_to_none_and_replace_copies() -> None:
    props = MessageProperties(content_type="text/plain")
    assert props.headers is None and props.priority is None and props.cluster_id is None
    changed = props.replace(priority=5, headers={"a": 1})
    assert changed.priority == 5 and changed.headers == {"a": 1}
    assert changed.content_type == "text/plain"
    assert props.priority is None  # original untouched
    assert not hasattr(props, "__dict__")  # slotted


def test_message_keeps_encoded_properties_and_decodes_on_demand() -> None:
    codec = JsonCodec()
    props = MessageProperties(content_type="application/json", headers={"k": "v"})
    encoded = codec.encode(props)
    msg = Message(exchange="x", routing_key="rk", body=b"abc", properties=props,
                  native=encoded, format=codec, arrival=5.0)
    assert msg.properties == props
    assert msg.properties is not props  # decoded afresh, not kept
    assert codec.decodes == 2  # one decode per access
    assert msg.native_for(codec) is encoded  # same codec: the kept bytes
    other = JsonCodec()
    assert other.decode(msg.native_for(other)) == props
    assert other.encodes == 1


def test_message_without_codec_keeps_decoded_object() -> None:
    props = MessageProperties(priority=3)
    msg = Message(exchange="", routing_key="q", body=b"", properties=props, arrival=0.0)
    assert msg.properties is props
    codec = JsonCodec()
    assert codec.decode(msg.native_for(codec)) == props


def test_message_derived_fields() -> None:
    plain = message(arrival=10.0)
    assert plain.priority == 0 and plain.persistent is False and plain.expires_at is None
    assert plain.body_size == 1 and plain.arrival == 10.0
    rich = message(b"12345", arrival=10.0, priority=7, delivery_mode=2, expiration="1500")
    assert rich.priority == 7 and rich.persistent is True
    assert rich.expires_at == pytest.approx(11.5)
    assert rich.body_size == 5
    assert message(delivery_mode=1).persistent is False


@pytest.mark.parametrize("expiration", ["abc", "-1", "1.5", " 5", ""])
def test_invalid_expiration_is_refused(expiration: str) -> None:
    with pytest.raises(PreconditionFailed) as caught:
        message(expiration=expiration)
    assert caught.value.reply_text.startswith(f"PRECONDITION_FAILED - invalid expiration '{expiration}'")


def test_with_properties_keeps_body_and_replaces_metadata() -> None:
    original = message(b"payload", routing_key="a", exchange="x", arrival=1.0, priority=2)
    copy = original.with_properties(MessageProperties(priority=9), exchange="dlx", arrival=2.0)
    assert copy.body is original.body
    assert copy.priority == 9 and copy.exchange == "dlx" and copy.routing_key == "a"
    assert copy.arrival == 2.0 and original.priority == 2


def test_routing_key_and_exchange_strings_are_shared() -> None:
    first = Message(exchange="".join(["ex", "change"]), routing_key="".join(["or", "ders"]),
                    body=b"", properties=None, arrival=0)
    second = Message(exchange="".join(["ex", "change"]), routing_key="".join(["or", "ders"]),
                     body=b"", properties=None, arrival=0)
    assert first.routing_key is second.routing_key
    assert first.exchange is second.exchange


def test_message_is_stored_once_across_queues() -> None:
    namespace = Namespace("v")
    for name in ("q1", "q2", "q3"):
        namespace.declare_queue(name)
        namespace.bind_queue(name, "amq.fanout", "")
    msg = message(b"shared")
    queues = namespace.route("amq.fanout", msg)
    assert len(queues) == 3
    for queue in queues:
        assert queue.enqueue(msg)
    entries = [queue.get() for queue in queues]
    assert all(entry is not None and entry.message is msg for entry in entries)


def test_properties_none_decodes_from_wire_form() -> None:
    codec = JsonCodec()
    encoded = codec.encode(MessageProperties(priority=4, expiration="10"))
    msg = Message(exchange="", routing_key="q", body=b"", properties=None,
                  native=encoded, format=codec, arrival=1.0)
    assert msg.priority == 4 and msg.expires_at == pytest.approx(1.01)
