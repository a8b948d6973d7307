"""The exactly-once rule: a producer's sequence is committed once; replays are dropped."""

from __future__ import annotations

import pytest

from broker import errors
from broker.messaging.producer_sequences import (MAX_SEQUENCE, PRODUCER_HEADER, SEQUENCE_HEADER,
                                                 ProducerMark, ProducerSequences, producer_mark)

from .journal_fake import Group


def committed(producers: ProducerSequences, name: str, sequence: int) -> None:
    mark = ProducerMark(name, sequence)
    assert producers.admit(mark) is None
    producers.committing(mark, None)


def test_the_same_sequence_twice_is_a_replay() -> None:
    producers = ProducerSequences()
    committed(producers, "q/0", 3)
    replay = producers.admit(ProducerMark("q/0", 3))
    assert replay is not None and replay.original is None


def test_a_lower_sequence_is_a_replay_and_a_higher_one_is_new() -> None:
    producers = ProducerSequences()
    committed(producers, "q/0", 3)
    assert producers.admit(ProducerMark("q/0", 2)) is not None
    assert producers.admit(ProducerMark("q/0", 4)) is None


def test_producers_are_independent() -> None:
    producers = ProducerSequences()
    committed(producers, "q/0", 3)
    assert producers.admit(ProducerMark("q/1", 3)) is None
    assert producers.admit(ProducerMark("other/0", 0)) is None
    assert producers.committed() == {"q/0": 3}


def test_a_sequence_on_its_way_to_disk_counts_and_its_replay_waits_for_it() -> None:
    producers = ProducerSequences()
    group = Group()
    producers.committing(ProducerMark("q/0", 5), group)
    replay = producers.admit(ProducerMark("q/0", 5))
    assert replay is not None and replay.original is group     # answered when the original is durable
    assert producers.committed() == {}
    group.done = True
    for callback in group.callbacks:
        callback()
    assert producers.committed() == {"q/0": 5}
    assert producers.last("q/0") == 5


def test_a_failed_commit_gives_the_sequence_back() -> None:
    producers = ProducerSequences()
    committed(producers, "q/0", 4)
    group = Group()
    producers.committing(ProducerMark("q/0", 5), group)
    group.done, group.error = True, OSError("disk full")
    for callback in group.callbacks:
        callback()
    assert producers.last("q/0") == 4
    assert producers.admit(ProducerMark("q/0", 5)) is None       # the retry is accepted


def test_restored_sequences_keep_the_highest() -> None:
    producers = ProducerSequences()
    committed(producers, "q/0", 7)
    producers.restore({"q/0": 6, "q/1": 2})
    assert producers.committed() == {"q/0": 7, "q/1": 2}
    assert producers.admit(ProducerMark("q/1", 2)) is not None


def test_a_mark_is_read_from_headers_and_taken_out_of_them() -> None:
    mark, rest = producer_mark({PRODUCER_HEADER: "q/0", SEQUENCE_HEADER: 9, "kept": 1})
    assert mark == ProducerMark("q/0", 9)
    assert rest == {"kept": 1}


@pytest.mark.parametrize("headers", [
    {PRODUCER_HEADER: "q/0"},                                    # no sequence
    {PRODUCER_HEADER: "q/0", SEQUENCE_HEADER: "9"},               # text, not a number
    {PRODUCER_HEADER: "q/0", SEQUENCE_HEADER: -1},
    {PRODUCER_HEADER: "q/0", SEQUENCE_HEADER: MAX_SEQUENCE + 1},  # the journal keeps an int32
    {PRODUCER_HEADER: "q/0", SEQUENCE_HEADER: True},
    {PRODUCER_HEADER: "", SEQUENCE_HEADER: 1},
    {PRODUCER_HEADER: 5, SEQUENCE_HEADER: 1},
])
def test_a_malformed_mark_is_refused_with_its_header_named(headers: dict[str, object]) -> None:
    with pytest.raises(errors.PreconditionFailed, match="x-deltamq-"):
        producer_mark(headers)
