"""Dead-lettering: the copy of a message a queue republishes to its dead-letter exchange.

The headers follow RabbitMQ (https://www.rabbitmq.com/docs/dlx), since client
code reads them:

- ``x-death``: a list of tables, most recent first, one per (queue, reason),
  each with ``count``, ``reason``, ``queue``, ``time``, ``exchange``,
  ``routing-keys`` and, when the message had one, ``original-expiration``.
  Dying again in the same queue for the same reason increments ``count`` and
  moves that table to the front.
- ``x-first-death-reason``/``-queue``/``-exchange``: set once, never changed;
  ``x-last-death-reason``/``-queue``/``-exchange`` (RabbitMQ 3.13+): the latest.
- The ``expiration`` property is removed, so the copy does not expire again
  with the TTL it already used up.

These values are the copy's broker *annotations*
(:attr:`~broker.messaging.message.Message.annotations`), not part of its own
metadata: the copy keeps the message's format, and each format carries them
where its clients look (0-9-1: the headers above).  A message that arrives
with them in its headers (recovered from the journal, or republished by a
client) has its history read from there.

Reasons: ``rejected``, ``expired``, ``maxlen``, ``delivery_limit``.
"""

from __future__ import annotations

import datetime
from typing import Any

from broker.messaging.message import Message

__all__ = ["dead_lettered", "is_cycle", "REASONS"]

REASONS = ("rejected", "expired", "maxlen", "delivery_limit")

#: the annotations dead-lettering sets
DEATH_KEYS = ("x-death", "x-first-death-reason", "x-first-death-queue", "x-first-death-exchange",
              "x-last-death-reason", "x-last-death-queue", "x-last-death-exchange")

_UTC = datetime.timezone.utc


def _text(value: Any) -> Any:
    return bytes(value).decode("utf-8", "replace") if isinstance(value, (bytes, bytearray)) else value


def _routing_keys(message: Message, headers: dict[str, Any]) -> list[str]:
    """The routing key plus any sender-selected CC keys (RabbitMQ records both)."""
    keys = [message.routing_key]
    cc = headers.get("CC")
    if isinstance(cc, (list, tuple)):
        keys.extend(str(_text(key)) for key in cc)
    return keys


def dead_lettered(message: Message, *, queue: str, reason: str, wall_time: float,
                  exchange: str, routing_key: str | None, arrival: float) -> Message:
    """The copy of ``message`` that ``queue`` publishes to dead-letter ``exchange``.

    ``routing_key`` is the queue's x-dead-letter-routing-key (None: keep the
    message's own); ``wall_time`` (epoch seconds) stamps the x-death entry;
    ``arrival`` (broker clock) starts the copy's life in its next queue.
    """
    props = message.bare_properties()
    headers: dict[str, Any] = dict(props.headers or {})
    headers.update(message.annotations or ())
    deaths = [death for death in headers.get("x-death") or () if isinstance(death, dict)]
    for index, death in enumerate(deaths):
        if _text(death.get("queue")) == queue and _text(death.get("reason")) == reason:
            updated = dict(death)
            updated["count"] = int(death.get("count") or 1) + 1
            del deaths[index]
            break
    else:
        updated = {
            "count": 1,
            "reason": reason,
            "queue": queue,
            "time": datetime.datetime.fromtimestamp(int(wall_time), _UTC),
            "exchange": message.exchange,
            "routing-keys": _routing_keys(message, headers),
        }
        if props.expiration is not None:
            updated["original-expiration"] = props.expiration
    deaths.insert(0, updated)
    annotations: dict[str, Any] = {key: headers.pop(key) for key in DEATH_KEYS if key in headers}
    annotations["x-death"] = deaths
    if "x-first-death-reason" not in annotations:
        annotations["x-first-death-reason"] = reason
        annotations["x-first-death-queue"] = queue
        annotations["x-first-death-exchange"] = message.exchange
    annotations["x-last-death-reason"] = reason
    annotations["x-last-death-queue"] = queue
    annotations["x-last-death-exchange"] = message.exchange
    return Message.annotated(
        annotations, exchange=exchange,
        routing_key=message.routing_key if routing_key is None else routing_key,
        body=message.body, properties=props.replace(headers=headers or None, expiration=None),
        format=message.format, arrival=arrival)


def is_cycle(message: Message, queue: str) -> bool:
    """Whether dead-lettering ``message`` into ``queue`` closes a cycle with no rejection in it.

    RabbitMQ drops the message for such a queue: it would otherwise circle
    forever (e.g. a queue whose dead-letter exchange routes back to it on TTL).
    """
    headers = message.properties.headers or {}
    for death in headers.get("x-death") or ():
        if not isinstance(death, dict):
            continue
        if _text(death.get("reason")) == "rejected":
            return False
        if _text(death.get("queue")) == queue:
            return True
    return False
