"""What fuzzing found in the decoders and engines (fuzz/, docs/fuzzing.md), each pinned by behaviour.

Every input that broke a contract is also kept in ``fuzz/regressions/<harness>/``
and replayed by tests/unit/test_fuzzing.py; these tests say what the right
behaviour is, in the protocol's terms.
"""

from __future__ import annotations

import pytest

from broker.messaging.selector_syntax import MAX_DIGITS
from broker.messaging.selectors import SelectorError, compile_selector
from broker.protocol.amqp0_9_1 import methods as m
from broker.protocol.detect import AmqpVersion

from .messaging.support import message

from .protocol.harness import Client, Delivery, FakeHost


def test_0_9_basic_recover_is_asynchronous_and_recover_sync_is_answered() -> None:
    # AMQP 0-9 (Qpid's XML): basic.recover has no response; basic.recover-sync, Qpid's
    # addition, is answered with recover-sync-ok.  Both requeue what is unacknowledged.
    c = Client(FakeHost(), AmqpVersion.V0_9)
    c.handshake()
    c.open_channel(1)
    c.send(1, m.QueueDeclare(queue="q"))
    c.publish(1, "", "q", b"m")
    c.send(1, m.BasicGet(queue="q"))
    c.take()
    c.send(1, m.BasicRecover(requeue=True))
    assert c.take() == []
    c.send(1, m.BasicGet(queue="q"))
    [(_, again)] = c.take()
    assert isinstance(again, Delivery) and again.method.redelivered
    c.send(1, m.BasicRecoverSync(requeue=True))
    assert c.take() == [(1, m.BasicRecoverSyncOk())]
    assert c.server.channels[1].unacked == {}


def test_basic_recover_is_answered_in_0_8_and_0_9_1() -> None:
    for version in (AmqpVersion.V0_8, AmqpVersion.V0_9_1):
        c = Client(FakeHost(), version)
        c.handshake()
        c.open_channel(1)
        c.send(1, m.BasicRecover(requeue=True))
        assert c.take() == [(1, m.BasicRecoverOk())]


def test_a_client_sending_recover_sync_ok_is_refused_as_a_server_method() -> None:
    c = Client(FakeHost(), AmqpVersion.V0_9)
    c.handshake()
    c.open_channel(1)
    c.send(1, m.BasicRecoverSyncOk())
    [(_, close)] = c.take()
    assert isinstance(close, m.ConnectionClose) and close.reply_code == 503


@pytest.mark.parametrize("literal", ["1" * 4301, "0x" + "f" * 4000, "0" + "7" * 5000])
def test_an_exact_literal_too_long_for_a_python_int_is_a_selector_error(literal: str) -> None:
    # Python refuses to convert (or show) decimal integers of more than 4300 digits:
    # int() raised ValueError, and an error message showing a long hex literal did too
    with pytest.raises(SelectorError, match=f"exact numeric literal of [0-9]+ digits is longer than {MAX_DIGITS}"):
        compile_selector(f"a = {literal}")
    with pytest.raises(SelectorError) as caught:
        compile_selector(f"a IS {literal}")            # named in "expected NULL, found ..." before
    assert caught.value.position == 5


def test_exact_literals_up_to_the_limit_keep_their_exact_value() -> None:
    literal = "9" * MAX_DIGITS
    selector = compile_selector(f"a = {literal} AND b = 0x{'f' * MAX_DIGITS}")
    assert selector.matches(message(b"x", headers={"a": int(literal), "b": 16 ** MAX_DIGITS - 1}))
