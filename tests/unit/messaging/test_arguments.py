from __future__ import annotations

from typing import Any

import pytest

from broker.errors import PreconditionFailed
from broker.messaging.arguments import DEFAULT_LVQ_KEY, QueueSettings, alternate_exchange_of, queue_settings


def test_no_arguments_is_a_plain_standard_queue() -> None:
    settings = queue_settings(None, "q", "v")
    assert settings == QueueSettings()
    assert settings.kind == "standard" and not settings.limited and settings.overflow == "drop-head"


@pytest.mark.parametrize(("arguments", "expected"), [
    ({"x-max-priority": 10}, {"kind": "priority", "priority_levels": 11, "priority_offset": 0}),
    ({"x-qpid-priorities": 10}, {"kind": "priority", "priority_levels": 10, "priority_offset": 0}),
    ({"x-qpid-priorities": 2}, {"kind": "priority", "priority_levels": 2, "priority_offset": 4}),
    ({"x-max-priority": 0}, {"kind": "standard", "priority_levels": 0}),
    ({"x-max-priority": 3, "x-qpid-priorities": 10}, {"priority_levels": 4}),
    ({"x-last-value-key": "sym"}, {"kind": "lvq", "lvq_key": "sym"}),
    ({"qpid.last_value_queue_key": "sym"}, {"kind": "lvq", "lvq_key": "sym"}),
    ({"x-qpid-last-value-queue-key": b"sym"}, {"kind": "lvq", "lvq_key": "sym"}),
    ({"qpid.last_value_queue": True}, {"kind": "lvq", "lvq_key": DEFAULT_LVQ_KEY}),
    ({"qpid.queue_sort_key": "rank"}, {"kind": "sorted", "sort_key": "rank"}),
    ({"x-message-ttl": 0}, {"message_ttl": 0}),
    ({"x-message-ttl": 1500, "x-expires": 60000}, {"message_ttl": 1500, "expires": 60000}),
    ({"x-max-length": 0}, {"max_length": 0}),
    ({"x-max-length": 5, "qpid.max_count": 9}, {"max_length": 5}),
    ({"qpid.max_count": 9, "qpid.max_size": "100"}, {"max_length": 9, "max_length_bytes": 100}),
    ({"qpid.max_count": 0}, {"max_length": None}),
    ({"x-max-length-bytes": 1024}, {"max_length_bytes": 1024}),
    ({"x-overflow": "reject-publish"}, {"overflow": "reject-publish"}),
    ({"x-overflow": "reject-publish-dlx"}, {"overflow": "reject-publish-dlx"}),
    ({"qpid.max_count": 3, "qpid.policy_type": "reject"}, {"overflow": "reject-publish", "max_length": 3}),
    ({"qpid.max_count": 3, "qpid.policy_type": "ring"}, {"overflow": "drop-head", "max_length": 3}),
    ({"qpid.max_count": 3, "qpid.policy_type": "none"}, {"max_length": None}),
    ({"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dead"},
     {"dead_letter_exchange": "dlx", "dead_letter_routing_key": "dead"}),
    ({"x-dead-letter-exchange": ""}, {"dead_letter_exchange": ""}),
    ({"x-single-active-consumer": True}, {"single_active_consumer": True}),
    ({"x-delivery-limit": 3}, {"delivery_limit": 3}),
    ({"x-qpid-maximum-delivery-count": 4}, {"delivery_limit": 3}),
    ({"x-qpid-maximum-delivery-count": "1"}, {"delivery_limit": 0}),
    ({"x-qpid-maximum-delivery-count": 0}, {"delivery_limit": None}),
    ({"x-queue-type": "classic", "x-queue-mode": "lazy"}, {"kind": "standard"}),
    ({"x-queue-type": "quorum", "x-delivery-limit": 2}, {"kind": "standard", "delivery_limit": 2}),
    ({"x-custom-thing": [1, 2]}, {"kind": "standard"}),
])
def test_arguments_normalise(arguments: dict[str, Any], expected: dict[str, Any]) -> None:
    settings = queue_settings(arguments, "q", "v")
    for field, value in expected.items():
        assert getattr(settings, field) == value, field


@pytest.mark.parametrize(("arguments", "text"), [
    ({"x-max-length": -1}, "invalid arg 'x-max-length' for queue 'q' in vhost 'v': {value_negative,-1}"),
    ({"x-max-length": "ten"}, "invalid arg 'x-max-length' for queue 'q' in vhost 'v': {unacceptable_type,longstr}"),
    ({"x-max-length": 1.5}, "invalid arg 'x-max-length' for queue 'q' in vhost 'v': {unacceptable_type,double}"),
    ({"x-max-length": True}, "invalid arg 'x-max-length' for queue 'q' in vhost 'v': {unacceptable_type,bool}"),
    ({"x-message-ttl": -5}, "invalid arg 'x-message-ttl' for queue 'q' in vhost 'v': {value_negative,-5}"),
    ({"x-expires": 0}, "invalid arg 'x-expires' for queue 'q' in vhost 'v': {value_zero,0}"),
    ({"x-max-priority": 256}, "invalid arg 'x-max-priority' for queue 'q' in vhost 'v': {max_value_exceeded,256}"),
    ({"x-max-priority": -1}, "invalid arg 'x-max-priority' for queue 'q' in vhost 'v': {value_negative,-1}"),
    ({"x-overflow": "drop-tail"}, "invalid arg 'x-overflow' for queue 'q' in vhost 'v': {unacceptable_value,drop-tail}"),
    ({"x-queue-type": "stream"}, "invalid arg 'x-queue-type' for queue 'q' in vhost 'v': {unsupported_queue_type,stream}"),
    ({"x-dead-letter-routing-key": "k"},
     "invalid arg 'x-dead-letter-routing-key' for queue 'q' in vhost 'v': {routing_key_but_no_dlx_defined}"),
    ({"x-dead-letter-exchange": 5}, "invalid arg 'x-dead-letter-exchange' for queue 'q' in vhost 'v': {unacceptable_type,long}"),
    ({"x-single-active-consumer": "yes"},
     "invalid arg 'x-single-active-consumer' for queue 'q' in vhost 'v': {unacceptable_type,longstr}"),
    ({"qpid.policy_type": "flow_to_disk"}, "invalid arg 'qpid.policy_type' for queue 'q' in vhost 'v': {unsupported_policy,flow_to_disk}"),
    ({"x-delivery-limit": -2}, "invalid arg 'x-delivery-limit' for queue 'q' in vhost 'v': {value_negative,-2}"),
    ({"x-max-priority": 5, "x-last-value-key": "k"},
     "invalid arg 'x-last-value-key' for queue 'q' in vhost 'v': {conflicting_queue_type,priority,lvq}"),
])
def test_invalid_arguments_are_refused_with_rabbitmq_text(arguments: dict[str, Any], text: str) -> None:
    with pytest.raises(PreconditionFailed) as caught:
        queue_settings(arguments, "q", "v")
    assert caught.value.text == text
    assert caught.value.reply_code == 406 and not caught.value.hard


def test_alternate_exchange_under_both_names() -> None:
    assert alternate_exchange_of({"alternate-exchange": "ae"}) == "ae"
    assert alternate_exchange_of({"x-qpid-alternate-exchange": b"ae2"}) == "ae2"
    assert alternate_exchange_of({"alternate-exchange": "a", "x-qpid-alternate-exchange": "b"}) == "a"
    assert alternate_exchange_of({}) is None and alternate_exchange_of(None) is None


def test_broker_j_attribute_names_as_declare_arguments() -> None:
    settings = queue_settings({"maximumQueueDepthMessages": 5, "maximumQueueDepthBytes": "4096",
                               "overflowPolicy": "REJECT", "priorities": 10, "maximumDeliveryAttempts": 3,
                               "alternateExchange": "ae"})
    assert (settings.max_length, settings.max_length_bytes, settings.overflow) == (5, 4096, "reject-publish")
    assert (settings.kind, settings.priority_levels) == ("priority", 10)
    assert settings.delivery_limit == 2 and settings.dead_letter_exchange == "ae"
    assert queue_settings({"lvqKey": "k"}).lvq_key == "k" and queue_settings({"sortKey": "s"}).sort_key == "s"
    unlimited = queue_settings({"maximumQueueDepthMessages": -1, "maximumQueueDepthBytes": -1})
    assert unlimited.max_length is None and unlimited.max_length_bytes is None
    assert queue_settings({"overflowPolicy": "PRODUCER_FLOW_CONTROL"}).overflow == "producer-flow-control"
    with pytest.raises(PreconditionFailed, match="'overflowPolicy'.*unsupported_policy,flow_to_disk"):
        queue_settings({"overflowPolicy": "FLOW_TO_DISK"})


def test_required_alternate_and_unknown_arguments() -> None:
    from broker.messaging.arguments import (EXCHANGE_ARGUMENTS, required_alternate_of, unknown_argument_behaviour,
                                            unknown_arguments)

    assert required_alternate_of({"alternateExchange": "ae"}) == "ae"
    assert required_alternate_of({"alternate-exchange": "a", "alternateExchange": "b"}) is None
    assert unknown_arguments({"alternate-exchange": "a", "x-b": 1, "a": 2}, EXCHANGE_ARGUMENTS) == ["a", "x-b"]
    assert unknown_argument_behaviour(None) == "IGNORE" and unknown_argument_behaviour(" fail ") == "FAIL"
    with pytest.raises(ValueError, match="expected one of IGNORE, LOG, FAIL"):
        unknown_argument_behaviour("strict")
