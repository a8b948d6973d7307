"""Publish rate limits: a publisher over its rate (or its virtual host's) is held back, then let go."""

from __future__ import annotations

import pytest

from broker.messaging.flow_control import PublisherFlow
from broker.messaging.namespace import Namespace
from broker.messaging.publish_rate import PER_PUBLISHER_VARIABLE, TokenBucket, rate_limit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _namespace(per_publisher: float | None, per_vhost: float | None = None) -> tuple[Namespace, Clock]:
    clock = Clock()
    ns = Namespace("v", clock=clock)
    ns.flow.rates.set_limits(per_publisher, per_vhost)
    return ns, clock


def test_a_bucket_lets_a_second_s_worth_through_then_holds_the_rate() -> None:
    bucket = TokenBucket(10, now=0.0)
    assert [bucket.take(0.0) for _ in range(10)] == [0.0] * 10
    assert bucket.take(0.0) == pytest.approx(0.2)       # one token owed, and one more to go on with
    assert bucket.take(0.2) == 0.0
    fast = TokenBucket(1000, now=0.0)
    for _ in range(1000):
        fast.take(0.0)
    assert fast.take(0.0) == pytest.approx(51 / 1000)   # one owed, then 5% of a second's worth


def test_a_publisher_over_its_rate_is_throttled_until_its_bucket_refills() -> None:
    ns, clock = _namespace(per_publisher=5)
    changes: list[str] = []
    fast = PublisherFlow(lambda: changes.append(fast.reason))
    slow = PublisherFlow()
    for _ in range(5):
        ns.flow.published(fast, [])
    assert changes == []
    ns.flow.published(fast, [])
    ns.flow.published(slow, [])                           # its own bucket: not held back
    assert changes == ["publish rate limit"] and not slow.blocked
    release = ns.next_deadline()
    assert release is not None and release > clock.now
    clock.now = release
    ns.run_due(clock.now)
    assert changes == ["publish rate limit", ""] and ns.next_deadline() is None


def test_the_virtual_host_rate_holds_back_whoever_publishes_past_it() -> None:
    ns, clock = _namespace(per_publisher=None, per_vhost=4)
    first, second = PublisherFlow(), PublisherFlow()
    for _ in range(2):
        ns.flow.published(first, [])
        ns.flow.published(second, [])
    ns.flow.published(second, [])
    assert second.throttled and not first.throttled
    ns.flow.published(first, [])
    assert first.throttled and first.reason == "publish rate limit"


def test_a_closed_publisher_is_forgotten() -> None:
    ns, _clock = _namespace(per_publisher=1)
    publisher = PublisherFlow()
    ns.flow.published(publisher, [])
    ns.flow.published(publisher, [])
    assert publisher.throttled
    publisher.close()
    assert ns.flow.rates.throttled == {} and ns.next_deadline() is None


@pytest.mark.parametrize("text,value", [(None, None), ("-1", None), ("2.5", 2.5), ("1000", 1000.0)])
def test_a_limit_is_read_from_context(text: str | None, value: float | None) -> None:
    assert rate_limit(PER_PUBLISHER_VARIABLE, text) == value


@pytest.mark.parametrize("text", ["fast", "0", "-2"])
def test_a_limit_that_is_no_rate_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=PER_PUBLISHER_VARIABLE):
        rate_limit(PER_PUBLISHER_VARIABLE, text)
