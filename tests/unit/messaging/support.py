"""Test doubles for the messaging core: a clock, consumers, a properties codec, message makers."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from broker.messaging import Message, MessageProperties, Queue, QueueEntry


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


class WallClock(FakeClock):
    pass


class RecordingConsumer:
    """A consumer with a prefetch-style credit; records what it receives."""

    def __init__(self, tag: str = "c", *, credit: int | None = None, no_ack: bool = False) -> None:
        self.tag = tag
        self.no_ack = no_ack
        self.credit = credit  # None: unlimited
        self.entries: list[QueueEntry] = []
        self.cancelled_by: list[Queue] = []

    def can_deliver(self, entry: QueueEntry) -> bool:
        return self.credit is None or self.credit > 0

    def deliver(self, entry: QueueEntry) -> None:
        assert entry.state != 0, "a delivered entry must not be available"
        if self.credit is not None:
            self.credit -= 1
        self.entries.append(entry)

    def queue_deleted(self, queue: Queue) -> None:
        self.cancelled_by.append(queue)

    @property
    def bodies(self) -> list[bytes]:
        return [entry.message.body for entry in self.entries]

    def settle_all(self) -> None:
        for entry in self.entries:
            entry.queue.settle(entry)


class JsonCodec:
    """A stand-in for a protocol engine's properties codec."""

    tag = "test-json"

    def __init__(self) -> None:
        self.decodes = 0
        self.encodes = 0

    def encode(self, props: MessageProperties, annotations: Mapping[str, Any] | None = None) -> bytes:
        self.encodes += 1
        if annotations:
            props = props.replace(headers={**(props.headers or {}), **annotations})
        fields = {name: getattr(props, name) for name in MessageProperties.__slots__
                  if getattr(props, name) is not None}
        return json.dumps(fields, sort_keys=True).encode()

    def decode(self, data: bytes) -> MessageProperties:
        self.decodes += 1
        return MessageProperties(**json.loads(data))


def message(body: bytes | str = b"m", *, routing_key: str = "rk", exchange: str = "",
            arrival: float = 1000.0, headers: dict[str, Any] | None = None,
            **props: Any) -> Message:
    """A message with decoded properties (``props`` are MessageProperties fields)."""
    if isinstance(body, str):
        body = body.encode()
    return Message(exchange=exchange, routing_key=routing_key, body=body,
                   properties=MessageProperties(headers=headers, **props), arrival=arrival)


def drain(queue: Queue) -> list[bytes]:
    """Bodies of every ready message, in delivery order, via basic.get (settled)."""
    bodies = []
    while (entry := queue.get(no_ack=True)) is not None:
        bodies.append(entry.message.body)
    return bodies
