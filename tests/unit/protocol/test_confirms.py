"""The publisher-confirm ledger alone: answers in order, merged runs, journal groups."""

from __future__ import annotations

from typing import Callable

from broker.protocol.amqp0_9_1.confirms import ACK, NACK, Answer, ConfirmLedger


class Group:
    """A journal group: pending until ``finish``."""

    def __init__(self) -> None:
        self.done = False
        self.error: BaseException | None = None

    def finish(self, error: BaseException | None = None) -> None:
        self.done, self.error = True, error

    def when_durable(self, callback: Callable[[], None]) -> None:
        raise AssertionError("the ledger never registers callbacks")


def ledger_with(*outcomes: object) -> ConfirmLedger:
    ledger = ConfirmLedger()
    for outcome in outcomes:
        ledger.publish()
        ledger.record(outcome)  # type: ignore[arg-type]
    return ledger


def test_publishes_are_numbered_from_one() -> None:
    ledger = ConfirmLedger()
    assert [ledger.publish() for _ in range(3)] == [1, 2, 3]


def test_consecutive_acks_become_one_multiple_ack() -> None:
    ledger = ledger_with(ACK, ACK, ACK)
    assert ledger.outstanding == 3
    assert ledger.answers() == ([Answer(True, 3, True)], None)
    assert ledger.outstanding == 0 and ledger.answers() == ([], None)


def test_a_single_publish_is_answered_without_multiple() -> None:
    assert ledger_with(ACK).answers() == ([Answer(True, 1, False)], None)
    assert ledger_with(NACK).answers() == ([Answer(False, 1, False)], None)


def test_a_nack_ends_the_acks_before_it_and_acks_resume_after() -> None:
    ledger = ledger_with(ACK, ACK, NACK, ACK)
    assert ledger.answers() == ([Answer(True, 2, True), Answer(False, 3, False),
                                 Answer(True, 4, False)], None)


def test_a_pending_group_holds_back_everything_after_it() -> None:
    group = Group()
    ledger = ledger_with(ACK, group, group, ACK, NACK)
    answers, blocked = ledger.answers()
    assert answers == [Answer(True, 1, False)] and blocked is group
    ledger.publish()
    ledger.record(ACK)
    assert ledger.answers() == ([], group)                 # still waiting; asking again is harmless
    group.finish()
    assert ledger.answers() == ([Answer(True, 4, True), Answer(False, 5, False),
                                 Answer(True, 6, False)], None)


def test_a_failed_group_nacks_its_publishes() -> None:
    group = Group()
    ledger = ledger_with(ACK, group, group, ACK)
    ledger.answers()
    group.finish(OSError("disk full"))
    assert ledger.answers() == ([Answer(False, 3, True), Answer(True, 4, False)], None)


def test_runs_of_different_groups_stay_apart() -> None:
    first, second = Group(), Group()
    ledger = ledger_with(first, second)
    second.finish()
    assert ledger.answers() == ([], first)                  # the earlier group decides
    first.finish()
    assert ledger.answers() == ([Answer(True, 2, True)], None)
