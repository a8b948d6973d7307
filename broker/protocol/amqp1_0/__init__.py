"""AMQP 1.0: the type system codec, generated definitions, frames and message sections, and the engine.

:mod:`.types` is the public face of the codec; :mod:`.framing` reads and
writes frames; :mod:`.sections` splits a message into its sections;
:mod:`.connection`, :mod:`.session` and :mod:`.links` are the engine, which
:data:`ENGINE_SPECS` registers for both 1.0 headers (plain and SASL).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.protocol.detect import AmqpVersion
from broker.protocol.engine import Engine, EngineSpec

if TYPE_CHECKING:
    from broker.protocol.host import ProtocolHost


def _connection(host: ProtocolHost, version: AmqpVersion, remote_host: str, remote_port: int,
                port_name: str) -> Engine:
    from .connection import AmqpConnection10   # the engine and its codec load on first use

    return AmqpConnection10(host, version, remote_host=remote_host, remote_port=remote_port, port_name=port_name)


ENGINE_SPECS = (
    EngineSpec("AMQP_1_0", (AmqpVersion.V1_0, AmqpVersion.V1_0_SASL), _connection),
)
