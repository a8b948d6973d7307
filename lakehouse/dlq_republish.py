"""Republishing repaired dead letters over AMQP 0-9-1, with publisher confirms.

The dead-letter processor (:mod:`lakehouse.dlq`) hands each republish here:
the body, the message's common view (its original properties, decoded from
the journal's native bytes) with the headers the policy decided, and the
target exchange and routing key.  Publishes are ``mandatory`` and confirmed
(RabbitMQ's publisher confirms, which DeltaMQ answers once the journal
commit is durable), so "republished" means the broker routed the message and
holds it.  A refusal of one message -- no such exchange, no queue bound for
its key, a nack, a property the broker rejects -- is that message's failure
(:class:`RepublishRefused`) and the channel is reopened for the next; losing
the connection is the whole pass's failure (pika's ``AMQPConnectionError``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pika
import pika.exceptions

from broker.messaging.message import MessageProperties

__all__ = ["Republisher", "RepublishRefused", "basic_properties"]

log = logging.getLogger(__name__)


class RepublishRefused(Exception):
    """The broker refused one republish; the message says why, in AMQP's terms."""


def basic_properties(view: MessageProperties, headers: Mapping[str, Any] | None) -> pika.BasicProperties:
    """pika's basic properties for ``view`` with ``headers`` in place of its own."""
    return pika.BasicProperties(
        content_type=view.content_type, content_encoding=view.content_encoding,
        headers=dict(headers) if headers else None, delivery_mode=view.delivery_mode,
        priority=view.priority, correlation_id=view.correlation_id, reply_to=view.reply_to,
        expiration=view.expiration, message_id=view.message_id, timestamp=view.timestamp,
        type=view.type, user_id=view.user_id, app_id=view.app_id, cluster_id=view.cluster_id)


class Republisher:
    """One AMQP connection and confirmed channel to the broker, opened on first use."""

    def __init__(self, url: str, *, username: str | None = None, password: str | None = None) -> None:
        self.parameters = pika.URLParameters(url)
        if username is not None or password is not None:
            current = self.parameters.credentials
            self.parameters.credentials = pika.PlainCredentials(
                username if username is not None else getattr(current, "username", "guest"),
                password if password is not None else getattr(current, "password", "guest"))
        self.parameters.client_properties = {"connection_name": "deltamq spark dlq"}
        self._connection: pika.BlockingConnection | None = None
        self._channel: Any = None

    def _confirmed_channel(self) -> Any:
        if self._connection is None or not self._connection.is_open:
            self._connection = pika.BlockingConnection(self.parameters)
            self._channel = None
        if self._channel is None or not self._channel.is_open:
            self._channel = self._connection.channel()
            self._channel.confirm_delivery()
        return self._channel

    def publish(self, exchange: str, routing_key: str, body: bytes, properties: pika.BasicProperties) -> None:
        """Publish and wait for the broker's confirm; :class:`RepublishRefused` if it will not take it."""
        channel = self._confirmed_channel()
        try:
            channel.basic_publish(exchange, routing_key, body, properties, mandatory=True)
        except pika.exceptions.UnroutableError:
            raise RepublishRefused(f"unroutable: exchange '{exchange}' routed routing key"
                                   f" '{routing_key}' to no queue") from None
        except pika.exceptions.NackError:
            raise RepublishRefused(f"the broker nacked the publish to exchange '{exchange}'") from None
        except pika.exceptions.ChannelClosedByBroker as exc:
            self._channel = None
            raise RepublishRefused(f"channel closed by the broker: {exc.reply_code} {exc.reply_text}") from None

    def close(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None and connection.is_open:
            try:
                connection.close()
            except pika.exceptions.AMQPError as exc:      # closing: nothing left to lose
                log.debug("closing the republish connection: %s", exc)

    def __enter__(self) -> Republisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
