"""The topic exchange's binding trie: one walk per routing key, not a regex per binding.

Binding keys and routing keys are lists of words separated by ``.``; in a
binding key ``*`` matches exactly one word and ``#`` zero or more (AMQP 0-9-1
section 3.1.3.3).  As in RabbitMQ, the empty key has zero words and ``a..b``
has an empty middle word, so ``#`` matches the empty routing key and ``*``
does not.  Runs of ``#`` are collapsed when a key is added (``#.#`` means the
same as ``#``), and the walk remembers which (node, word index) states it has
visited, so patterns such as ``#.a.#.a.#`` cost at most nodes x words steps.
"""

from __future__ import annotations

from typing import Generic, Hashable, Iterator, TypeVar

__all__ = ["TopicTrie", "normalise_binding_key", "split_key"]

D = TypeVar("D", bound=Hashable)


def split_key(key: str) -> list[str]:
    """The words of a key: ``""`` has none, ``"a..b"`` has three."""
    return key.split(".") if key else []


def normalise_binding_key(key: str) -> list[str]:
    """The words of a binding key with runs of ``#`` collapsed to one."""
    words: list[str] = []
    for word in split_key(key):
        if word == "#" and words and words[-1] == "#":
            continue
        words.append(word)
    return words


class _Node(Generic[D]):
    __slots__ = ("children", "star", "hash", "destinations")

    def __init__(self) -> None:
        self.children: dict[str, _Node[D]] = {}
        self.star: _Node[D] | None = None
        self.hash: _Node[D] | None = None
        # destination -> number of bindings with this key for it (bindings that
        # differ only in arguments route once)
        self.destinations: dict[D, int] = {}

    def child(self, word: str) -> _Node[D] | None:
        if word == "*":
            return self.star
        if word == "#":
            return self.hash
        return self.children.get(word)

    def empty(self) -> bool:
        return not (self.children or self.star or self.hash or self.destinations)


class TopicTrie(Generic[D]):
    """Destinations indexed by topic binding key."""

    __slots__ = ("_root", "_size")

    def __init__(self) -> None:
        self._root: _Node[D] = _Node()
        self._size = 0

    def __len__(self) -> int:
        """The number of (binding key, destination) pairs added and not removed."""
        return self._size

    def add(self, binding_key: str, destination: D) -> None:
        node = self._root
        for word in normalise_binding_key(binding_key):
            nxt = node.child(word)
            if nxt is None:
                nxt = _Node()
                if word == "*":
                    node.star = nxt
                elif word == "#":
                    node.hash = nxt
                else:
                    node.children[word] = nxt
            node = nxt
        node.destinations[destination] = node.destinations.get(destination, 0) + 1
        self._size += 1

    def remove(self, binding_key: str, destination: D) -> bool:
        """Remove one (key, destination) pair; False when it was not there."""
        path: list[tuple[_Node[D], str]] = []
        node = self._root
        for word in normalise_binding_key(binding_key):
            nxt = node.child(word)
            if nxt is None:
                return False
            path.append((node, word))
            node = nxt
        count = node.destinations.get(destination)
        if count is None:
            return False
        if count > 1:
            node.destinations[destination] = count - 1
        else:
            del node.destinations[destination]
        self._size -= 1
        # prune nodes left empty, deepest first
        for parent, word in reversed(path):
            child = parent.child(word)
            if child is None or not child.empty():
                break
            if word == "*":
                parent.star = None
            elif word == "#":
                parent.hash = None
            else:
                del parent.children[word]
        return True

    def match(self, routing_key: str) -> list[D]:
        """Every destination whose binding key matches ``routing_key``, each once."""
        found: dict[D, None] = {}
        self._walk(self._root, split_key(routing_key), 0, found, set())
        return list(found)

    def _walk(self, node: _Node[D], words: list[str], index: int,
              found: dict[D, None], seen: set[tuple[int, int]]) -> None:
        state = (id(node), index)
        if state in seen:
            return
        seen.add(state)
        hash_node = node.hash
        if hash_node is not None:
            # '#' swallows zero or more words, then matching continues after it
            for resume in range(index, len(words) + 1):
                self._walk(hash_node, words, resume, found, seen)
        if index == len(words):
            for destination in node.destinations:
                found[destination] = None
            return
        child = node.children.get(words[index])
        if child is not None:
            self._walk(child, words, index + 1, found, seen)
        if node.star is not None:
            self._walk(node.star, words, index + 1, found, seen)

    def destinations(self) -> Iterator[D]:
        """Every destination in the trie (with repeats across keys)."""
        stack = [self._root]
        while stack:
            node = stack.pop()
            yield from node.destinations
            stack.extend(node.children.values())
            if node.star is not None:
                stack.append(node.star)
            if node.hash is not None:
                stack.append(node.hash)
