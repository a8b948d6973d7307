from __future__ import annotations

import pytest

from broker.messaging.topic_trie import TopicTrie, normalise_binding_key, split_key

# (binding key, routing key, matches?) -- AMQP 0-9-1 section 3.1.3.3 and RabbitMQ's behaviour
CASES = [
    ("a.b.c", "a.b.c", True),
    ("a.b.c", "a.b", False),
    ("a.b.c", "a.b.c.d", False),
    ("a.*.c", "a.b.c", True),
    ("a.*.c", "a.c", False),
    ("a.*.c", "a.b.b.c", False),
    ("*", "a", True),
    ("*", "", False),
    ("*", "a.b", False),
    ("*.*", "a.b", True),
    ("*.*", "a", False),
    ("#", "", True),
    ("#", "a", True),
    ("#", "a.b.c", True),
    ("#.#", "", True),
    ("#.#", "a.b", True),
    ("a.#", "a", True),
    ("a.#", "a.b.c", True),
    ("a.#", "b.a", False),
    ("#.a", "a", True),
    ("#.a", "x.y.a", True),
    ("#.a", "a.x", False),
    ("a.#.b", "a.b", True),
    ("a.#.b", "a.x.b", True),
    ("a.#.b", "a.x.y.z.b", True),
    ("a.#.b", "a.b.c", False),
    ("a.#.b", "a.b.x.b", True),
    ("#.b.#", "b", True),
    ("#.b.#", "a.b.c", True),
    ("#.b.#", "a.c", False),
    ("*.#", "", False),
    ("*.#", "a", True),
    ("*.#", "a.b.c", True),
    ("#.*", "", False),
    ("#.*", "a", True),
    ("a.*.#", "a", False),
    ("a.*.#", "a.b", True),
    ("", "", True),
    ("", "a", False),
    ("a", "", False),
    ("a..b", "a..b", True),
    ("a.*.b", "a..b", True),
    ("a.#", "a.", True),
    ("*", ".", False),
    ("*.*", ".", True),
    ("a", "A", False),
    ("#.#.#.x.#.#", "q.w.e.x", True),
    ("#.a.#.a.#", "a.a", True),
    ("#.a.#.a.#", "b.a.b", False),
]


@pytest.mark.parametrize(("binding_key", "routing_key", "matches"), CASES)
def test_topic_matching(binding_key: str, routing_key: str, matches: bool) -> None:
    trie: TopicTrie[str] = TopicTrie()
    trie.add(binding_key, "dest")
    assert (trie.match(routing_key) == ["dest"]) is matches


def test_split_and_normalise() -> None:
    assert split_key("") == [] and split_key("a..b") == ["a", "", "b"] and split_key(".") == ["", ""]
    assert normalise_binding_key("#.#.a.#.#.#") == ["#", "a", "#"]


def test_many_bindings_each_destination_once() -> None:
    trie: TopicTrie[str] = TopicTrie()
    for key, dest in [("a.*", "q1"), ("a.#", "q1"), ("#", "q2"), ("a.b", "q3"), ("x.*", "q4")]:
        trie.add(key, dest)
    assert sorted(trie.match("a.b")) == ["q1", "q2", "q3"]
    assert sorted(trie.match("x.y")) == ["q2", "q4"]
    assert sorted(trie.match("")) == ["q2"]


def test_remove_prunes_and_counts_duplicates() -> None:
    trie: TopicTrie[str] = TopicTrie()
    trie.add("a.*.c", "q")
    trie.add("a.*.c", "q")  # e.g. two bindings differing only in arguments
    trie.add("a.#", "r")
    assert len(trie) == 3
    assert trie.remove("a.*.c", "q")
    assert sorted(trie.match("a.b.c")) == ["q", "r"]
    assert trie.remove("a.*.c", "q")
    assert trie.match("a.b.c") == ["r"]
    assert not trie.remove("a.*.c", "q")
    assert not trie.remove("nope.x", "q")
    assert trie.remove("a.#", "r")
    assert len(trie) == 0 and list(trie.destinations()) == []
    assert trie._root.empty()  # every node pruned


def test_pathological_patterns_stay_fast() -> None:
    trie: TopicTrie[str] = TopicTrie()
    trie.add(".".join(["#", "a"] * 20) + ".b", "q")
    routing_key = ".".join(["a"] * 120)
    assert trie.match(routing_key) == []  # completes quickly thanks to memoised states
