"""The generated definitions: up to date with the spec files, and saying what the spec says."""

from __future__ import annotations

from dataclasses import MISSING, fields

import pytest

from broker.protocol.amqp1_0 import definitions as d
from broker.protocol.amqp1_0.composite import DeliveryState, Outcome, Performative, SaslFrame, Section
from broker.protocol.amqp1_0.types import decode, encode
from tests.generators import ROOT, load_generator


def test_definitions_module_is_up_to_date_with_the_specs() -> None:
    generator = load_generator("gen_amqp1_0")
    committed = (ROOT / "broker" / "protocol" / "amqp1_0" / "definitions.py").read_text()
    assert generator.generate(ROOT / "specs" / "amqp-1.0") == committed, "run: python tools/gen_amqp1_0.py"


def test_every_described_type_of_the_spec_is_there_with_its_descriptor() -> None:
    codes = {cls.NAME: cls.CODE for cls in d.DESCRIBED_TYPES}
    assert codes == {
        "open": 0x10, "begin": 0x11, "attach": 0x12, "flow": 0x13, "transfer": 0x14, "disposition": 0x15,
        "detach": 0x16, "end": 0x17, "close": 0x18, "error": 0x1d,
        "received": 0x23, "accepted": 0x24, "rejected": 0x25, "released": 0x26, "modified": 0x27,
        "source": 0x28, "target": 0x29, "delete-on-close": 0x2b, "delete-on-no-links": 0x2c,
        "delete-on-no-messages": 0x2d, "delete-on-no-links-or-messages": 0x2e,
        "coordinator": 0x30, "declare": 0x31, "discharge": 0x32, "declared": 0x33, "transactional-state": 0x34,
        "sasl-mechanisms": 0x40, "sasl-init": 0x41, "sasl-challenge": 0x42, "sasl-response": 0x43,
        "sasl-outcome": 0x44,
        "header": 0x70, "delivery-annotations": 0x71, "message-annotations": 0x72, "properties": 0x73,
        "application-properties": 0x74, "data": 0x75, "amqp-sequence": 0x76, "amqp-value": 0x77, "footer": 0x78,
    }
    assert d.Transfer.SYMBOL == "amqp:transfer:list" and d.AmqpValue.SYMBOL == "amqp:amqp-value:*"


def test_fields_follow_the_spec_order_defaults_and_mandatory_flags() -> None:
    assert d.Attach.FIELDS == ("name", "handle", "role", "snd-settle-mode", "rcv-settle-mode", "source", "target",
                               "unsettled", "incomplete-unsettled", "initial-delivery-count", "max-message-size",
                               "offered-capabilities", "desired-capabilities", "properties")
    a = d.Attach(name="l", handle=0, role=d.Role.SENDER)
    assert (a.snd_settle_mode, a.rcv_settle_mode, a.incomplete_unsettled) == (2, 0, False)
    o = d.Open(container_id="c")
    assert (o.max_frame_size, o.channel_max, o.idle_time_out) == (4294967295, 65535, None)
    s = d.Source()
    assert (s.durable, s.expiry_policy, s.timeout, s.dynamic) == (0, "session-end", 0, False)
    h = d.Header()
    assert (h.durable, h.priority, h.ttl, h.first_acquirer, h.delivery_count) == (False, 4, None, False, 0)
    mandatory = {name for name, f in d.Begin.__dataclass_fields__.items() if f.default is MISSING}
    assert mandatory == {"next_outgoing_id", "incoming_window", "outgoing_window"}


def test_bases_say_what_each_type_provides() -> None:
    assert issubclass(d.Transfer, Performative) and issubclass(d.SaslInit, SaslFrame)
    assert issubclass(d.Accepted, Outcome) and issubclass(d.Accepted, DeliveryState)
    assert issubclass(d.Received, DeliveryState) and not issubclass(d.Received, Outcome)
    assert issubclass(d.Declared, Outcome) and issubclass(d.TransactionalState, DeliveryState)
    assert issubclass(d.Header, Section) and issubclass(d.Data, Section)


def test_restricted_choices_are_constants() -> None:
    assert d.AmqpErrorCondition.DECODE_ERROR == "amqp:decode-error"
    assert d.LinkErrorCondition.STOLEN == "amqp:link:stolen"
    assert d.ConnectionErrorCondition.FRAMING_ERROR == "amqp:connection:framing-error"
    assert d.SessionErrorCondition.WINDOW_VIOLATION == "amqp:session:window-violation"
    assert d.TransactionErrorCondition.TRANSACTION_ROLLBACK == "amqp:transaction:rollback"
    assert (d.TerminusDurability.NONE, d.TerminusDurability.CONFIGURATION,
            d.TerminusDurability.UNSETTLED_STATE) == (0, 1, 2)
    assert d.TerminusExpiryPolicy.LINK_DETACH == "link-detach" and d.TerminusExpiryPolicy.NEVER == "never"
    assert (d.StdDistMode.MOVE, d.StdDistMode.COPY) == ("move", "copy")
    assert (d.SenderSettleMode.UNSETTLED, d.SenderSettleMode.SETTLED, d.SenderSettleMode.MIXED) == (0, 1, 2)
    assert (d.ReceiverSettleMode.FIRST, d.ReceiverSettleMode.SECOND) == (0, 1)
    assert (d.SaslCode.OK, d.SaslCode.AUTH, d.SaslCode.SYS, d.SaslCode.SYS_PERM, d.SaslCode.SYS_TEMP) == (
        0, 1, 2, 3, 4)
    assert (d.Role.SENDER, d.Role.RECEIVER) == (False, True)
    assert d.TxnCapability.LOCAL_TRANSACTIONS == "amqp:local-transactions"
    assert (d.MIN_MAX_FRAME_SIZE, d.PORT, d.MESSAGE_FORMAT) == (512, 5672, 0)


SAMPLES = {"int": 7, "str": "x", "bool": True, "bytes": b"\x01", "Sequence[str]": ["a", "b"], "Any": "any",
           "dict[Any, Any]": {"k": 1}, "list[Any]": [1, "two"]}


def _sample(annotation: str) -> object:
    base = annotation.removesuffix(" | None")
    return d.Error(condition="amqp:x") if base == "Error" else SAMPLES[base]


@pytest.mark.parametrize("cls", d.DESCRIBED_TYPES, ids=lambda cls: cls.NAME)
def test_every_described_type_round_trips_with_every_field_set(cls: type) -> None:
    values = {f.name: _sample(f.type) for f in fields(cls)}
    instance = cls(**values)
    decoded, end = decode(encode(instance))
    assert decoded == instance and type(decoded) is cls
    bare = {f.name: _sample(f.type) for f in fields(cls) if f.default is MISSING}
    assert decode(encode(cls(**bare)))[0] == cls(**bare)
