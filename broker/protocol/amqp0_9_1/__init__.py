"""AMQP 0-8, 0-9 and 0-9-1: one engine with per-version tables (:mod:`.connection`).

:data:`ENGINE_SPECS` registers it with :data:`broker.protocol.engine.ENGINES`,
0-9-1 first (the header an unsupported one is answered with).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.protocol.detect import AmqpVersion
from broker.protocol.engine import Engine, EngineSpec

if TYPE_CHECKING:
    from broker.protocol.host import ProtocolHost


def _connection(host: ProtocolHost, version: AmqpVersion, remote_host: str, remote_port: int,
                port_name: str) -> Engine:
    from .connection import AmqpConnection   # the engine and its codec load on first use

    return AmqpConnection(host, version, remote_host=remote_host, remote_port=remote_port,
                          port_name=port_name)


ENGINE_SPECS = (
    EngineSpec("AMQP_0_9_1", (AmqpVersion.V0_9_1,), _connection),
    EngineSpec("AMQP_0_9", (AmqpVersion.V0_9,), _connection),
    EngineSpec("AMQP_0_8", (AmqpVersion.V0_8,), _connection),
)
