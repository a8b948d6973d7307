"""RabbitMQ's direct reply-to: RPC replies without a reply queue.

A requester consumes the pseudo-queue ``amq.rabbitmq.reply-to`` (no-ack
only) and publishes requests with ``reply-to: amq.rabbitmq.reply-to`` on the
same channel; the broker rewrites that to ``amq.rabbitmq.reply-to.<token>``,
and a reply published to the default exchange with that routing key goes
straight to the requesting channel's consumer — no queue, no binding.  The
token names the channel within its virtual host and dies with it, so a late
reply is simply dropped (or returned, when published mandatory).
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

from broker import errors

from .codec import encode_shortstr

if TYPE_CHECKING:
    from .channel import Channel

PSEUDO_QUEUE = "amq.rabbitmq.reply-to"
PREFIX = PSEUDO_QUEUE + "."


class ReplyConsumer:
    """The one direct reply-to consumer a channel may have."""

    __slots__ = ("channel", "tag", "encoded_tag", "token")

    def __init__(self, channel: Channel, tag: str) -> None:
        self.channel = channel
        self.tag = tag
        self.encoded_tag = encode_shortstr(tag)
        self.token = secrets.token_urlsafe(18)

    @property
    def address(self) -> str:
        """The reply-to value requests carry, and the routing key replies use."""
        return PREFIX + self.token


def _targets(namespace: Any) -> dict[str, ReplyConsumer]:
    targets: dict[str, ReplyConsumer] = namespace.reply_targets
    return targets


def consume(channel: Channel, tag: str, no_ack: bool) -> ReplyConsumer:
    """basic.consume on the pseudo-queue: register the channel's reply consumer."""
    if not no_ack:
        raise errors.PreconditionFailed("reply consumer cannot acknowledge")
    if channel.reply_consumer is not None:
        raise errors.PreconditionFailed("reply consumer already set")
    consumer = ReplyConsumer(channel, tag)
    _targets(channel.namespace)[consumer.token] = consumer
    return consumer


def cancel(consumer: ReplyConsumer) -> None:
    _targets(consumer.channel.namespace).pop(consumer.token, None)


def requester_address(channel: Channel) -> str:
    """The rewritten reply-to of a request published on ``channel``."""
    consumer = channel.reply_consumer
    if consumer is None:
        raise errors.PreconditionFailed("fast reply consumer does not exist")
    return consumer.address


def target(namespace: Any, routing_key: str) -> ReplyConsumer | None:
    """The reply consumer a reply to ``routing_key`` goes to, if it still exists."""
    return _targets(namespace).get(routing_key[len(PREFIX):])
