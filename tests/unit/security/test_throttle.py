"""The login throttle: failures per source and per user, blocks that grow, driven by a hand clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.errors import AuthenticationFailed
from broker.model.system_config import SystemConfig, load_system_config
from broker.security.password_file import PasswordFileAuthenticationProvider
from broker.security.throttle import LoginThrottle, LoginThrottled, ThrottleSettings

SETTINGS = ThrottleSettings(max_failures=3, max_source_failures=5, window=60.0, block=10.0,
                            max_block=100.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def throttle(clock: Clock) -> LoginThrottle:
    return LoginThrottle(SETTINGS, clock)


def fail(throttle: LoginThrottle, user: str, source: str, times: int) -> None:
    for _ in range(times):
        throttle.admit(user, source)
        throttle.failed(user, source)


def test_a_user_is_blocked_after_max_failures_from_any_address(throttle: LoginThrottle,
                                                                clock: Clock) -> None:
    fail(throttle, "alice", "10.0.0.1", 2)
    fail(throttle, "alice", "10.0.0.2", 1)             # the third, from elsewhere
    with pytest.raises(LoginThrottled, match=r"user 'alice': try again in 10 s") as refused:
        throttle.admit("alice", "10.0.0.3")
    assert refused.value.retry_after == pytest.approx(10.0)
    assert refused.value.reply_code == 403             # ACCESS_REFUSED over AMQP
    throttle.admit("bob", "10.0.0.3")                  # another user: unaffected
    clock.now += 9.9
    with pytest.raises(LoginThrottled):
        throttle.admit("alice", "10.0.0.3")
    clock.now += 0.1
    throttle.admit("alice", "10.0.0.3")                # the block has passed
    assert (throttle.failures, throttle.refused) == (3, 2)


def test_an_address_is_blocked_after_its_own_limit_across_users(
        throttle: LoginThrottle, clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    for user in ("a", "b", "c", "d", "e"):             # 5 users, one failure each
        fail(throttle, user, "10.0.0.9", 1)
    blocked = [r.getMessage() for r in caplog.records if "refused for" in r.getMessage()]
    assert blocked == ["logins for address 10.0.0.9 are refused for 10 s after 5 failures"
                       " within 60 s"]
    with pytest.raises(LoginThrottled, match="address 10.0.0.9"):
        throttle.admit("f", "10.0.0.9")
    throttle.admit("f", "10.0.0.8")                    # another address: unaffected
    assert throttle.blocked() == (1, 0)


def test_failures_older_than_the_window_do_not_count(throttle: LoginThrottle,
                                                     clock: Clock) -> None:
    fail(throttle, "alice", "10.0.0.1", 2)
    clock.now += 61
    fail(throttle, "alice", "10.0.0.1", 2)
    throttle.admit("alice", "10.0.0.1")


def test_a_success_forgets_the_users_failures_not_the_addresss(throttle: LoginThrottle) -> None:
    fail(throttle, "alice", "10.0.0.1", 2)
    fail(throttle, "mallory", "10.0.0.1", 2)
    throttle.succeeded("alice")
    fail(throttle, "alice", "10.0.0.1", 1)             # alice: 1 again, the address: 5
    with pytest.raises(LoginThrottled, match="address"):
        throttle.admit("carol", "10.0.0.1")
    throttle.admit("alice", "10.0.0.2")


def test_blocks_that_follow_each_other_double_up_to_max_block(throttle: LoginThrottle,
                                                              clock: Clock) -> None:
    lengths = []
    for _ in range(6):
        fail(throttle, "alice", "", 3)
        with pytest.raises(LoginThrottled) as refused:
            throttle.admit("alice", "")
        lengths.append(round(refused.value.retry_after))
        clock.now += refused.value.retry_after
    assert lengths == [10, 20, 40, 80, 100, 100]
    clock.now += 101                                    # quiet for max_block: back to `block`
    fail(throttle, "alice", "", 3)
    with pytest.raises(LoginThrottled) as refused:
        throttle.admit("alice", "")
    assert round(refused.value.retry_after) == 10


def test_zero_turns_a_limit_off(clock: Clock) -> None:
    throttle = LoginThrottle(ThrottleSettings(max_failures=0, max_source_failures=0), clock)
    fail(throttle, "alice", "10.0.0.1", 50)
    throttle.admit("alice", "10.0.0.1")
    assert throttle.failures == 50


def test_settings_come_from_context_variables_and_bad_ones_are_refused() -> None:
    values = {"deltamq.login.max_failures": "7", "deltamq.login.max_source_failures": "0",
              "deltamq.login.failure_window": "30", "deltamq.login.block": "0.5",
              "deltamq.login.max_block": "60"}
    assert ThrottleSettings.from_context(values.__getitem__) == ThrottleSettings(7, 0, 30, 0.5, 60)
    with pytest.raises(ValueError, match="deltamq.login.block must be a number"):
        ThrottleSettings.from_context({**values, "deltamq.login.block": "soon"}.__getitem__)


# -- through a provider in a broker: what AMQP and REST logins both call ------------------

def broker_with_passwords(tmp_path: Path, **context: str) -> SystemConfig:
    overrides = {"deltamq.data_dir": str(tmp_path), "deltamq.login.max_failures": "3",
                 **context}
    return load_system_config(None, overrides)


def test_a_blocked_user_is_refused_even_with_the_right_password(tmp_path: Path) -> None:
    system = broker_with_passwords(tmp_path)
    try:
        broker = system.broker
        provider = broker.authentication_provider("passwordFile")
        assert isinstance(provider, PasswordFileAuthenticationProvider)
        for _ in range(3):
            with pytest.raises(AuthenticationFailed) as wrong:
                provider.authenticate("guest", "wrong", "127.0.0.1")
            assert not isinstance(wrong.value, LoginThrottled)
        with pytest.raises(LoginThrottled, match="user 'guest'"):
            provider.authenticate("guest", "guest", "127.0.0.1")
        provider.add_user("alice", "wonderland")
        assert provider.authenticate("alice", "wonderland", "127.0.0.1").name == "alice"
        statistics = broker.attributes()
        assert (statistics["loginFailures"], statistics["loginsThrottled"]) == (3, 1)
    finally:
        system.close()


def test_bad_throttle_context_refuses_to_start(tmp_path: Path) -> None:
    from broker.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="deltamq.login.max_failures must be a number"):
        broker_with_passwords(tmp_path, **{"deltamq.login.max_failures": "many"})
