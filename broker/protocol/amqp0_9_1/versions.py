"""What each AMQP 0-8 / 0-9 / 0-9-1 version speaks, and what the server announces in connection.start.

The method tables of each version (generated into :mod:`.methods` from the
specs), the methods only a server may send, and the server properties and
capabilities RabbitMQ's clients look for.
"""

from __future__ import annotations

import platform
from typing import Any

from broker.protocol.detect import AmqpVersion

from . import methods as m

__all__ = ["VERSION_TABLES", "SERVER_ONLY", "CAPABILITIES", "method_ids", "method_ids_table",
           "server_properties"]

VERSION_TABLES = {
    AmqpVersion.V0_8: (m.DECODERS_0_8, m.ENCODERS_0_8, (8, 0)),
    AmqpVersion.V0_9: (m.DECODERS_0_9, m.ENCODERS_0_9, (0, 9)),
    AmqpVersion.V0_9_1: (m.DECODERS_0_9_1, m.ENCODERS_0_9_1, (0, 9)),
}

# Methods only a server sends: a client sending one is 503 COMMAND_INVALID.
SERVER_ONLY = {
    m.ConnectionStart, m.ConnectionSecure, m.ConnectionTune, m.ConnectionOpenOk,
    m.ChannelOpenOk, m.ExchangeDeclareOk, m.ExchangeDeleteOk, m.ExchangeBindOk,
    m.ExchangeUnbindOk, m.QueueDeclareOk, m.QueueBindOk, m.QueueUnbindOk, m.QueuePurgeOk,
    m.QueueDeleteOk, m.BasicQosOk, m.BasicConsumeOk, m.BasicDeliver, m.BasicGetOk,
    m.BasicGetEmpty, m.BasicReturn, m.BasicRecoverOk, m.BasicRecoverSyncOk, m.TxSelectOk, m.TxCommitOk,
    m.TxRollbackOk, m.ConfirmSelectOk,
}

CAPABILITIES = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "consumer_priorities": True,
    "direct_reply_to": True,
}

def method_ids_table(version: AmqpVersion) -> dict[type[m.Method], tuple[int, int]]:
    return {AmqpVersion.V0_8: m.IDS_0_8, AmqpVersion.V0_9: m.IDS_0_9}.get(version, m.IDS_0_9_1)


def method_ids(method: m.Method, version: AmqpVersion) -> tuple[int, int]:
    return method_ids_table(version).get(type(method), (0, 0))


def server_properties(product: str, version: str) -> dict[str, Any]:
    """The server-properties table of connection.start."""
    return {
        "product": product,
        "version": version,
        "platform": f"Python {platform.python_version()}",
        "copyright": "DeltaMQ authors",
        "information": "DeltaMQ: an AMQP broker whose durable state lives in Delta Lake",
        "cluster_name": "deltamq",
        "capabilities": dict(CAPABILITIES),
    }
