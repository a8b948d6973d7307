"""TCP transport: accept connections and drive protocol engines over anyio streams.

Per connection one task reads and feeds the engine; one task writes what the
engine produced (deliveries may be produced by *other* connections'
publishes, so the writer is woken through the engine's ``on_output`` hook);
one task keeps heartbeats (AMQP 0-9-1 spec 4.2.7: a peer that sends nothing
for two heartbeat intervals is gone).  The engines never see a socket.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import anyio
from anyio.abc import ByteStream, SocketAttribute, TaskGroup

from broker import errors
from broker.protocol.detect import HEADER_SIZE, AmqpVersion, detect

log = logging.getLogger(__name__)

READ_SIZE = 64 * 1024        # bounds the time one publisher holds the loop (latency for others)
HANDSHAKE_TIMEOUT = 10.0       # seconds to send a protocol header
CLOSE_TIMEOUT = 5.0            # seconds to wait for close-ok after we closed


EngineFactory = Callable[[AmqpVersion, str, int], Any]


@dataclass
class ConnectionRegistry:
    """The live engines of a port (to close them all on shutdown, to count them)."""

    engines: set[Any] = field(default_factory=set)
    max_connections: int = -1


async def serve_stream(stream: ByteStream, engine_factory: EngineFactory,
                       supported: frozenset[AmqpVersion], registry: ConnectionRegistry) -> None:
    """Serve one accepted connection until either side closes it."""
    try:
        remote = stream.extra(SocketAttribute.remote_address, ("?", 0))
    except Exception:
        remote = ("?", 0)
    remote_host, remote_port = (str(remote[0]), int(remote[1])) if isinstance(remote, tuple) else (str(remote), 0)
    async with stream:
        header = b""
        try:
            with anyio.fail_after(HANDSHAKE_TIMEOUT):
                while len(header) < HEADER_SIZE:
                    header += await stream.receive(READ_SIZE)
        except (TimeoutError, anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            return
        detected = detect(header[:HEADER_SIZE], supported)
        if detected.version is None:
            log.info("refusing protocol header %r from %s", header[:HEADER_SIZE], remote_host)
            try:
                await stream.send(detected.reply)
            except (anyio.BrokenResourceError, OSError):
                pass
            return
        if 0 <= registry.max_connections <= len(registry.engines):
            log.warning("refusing connection from %s: maxOpenConnections reached", remote_host)
            return
        engine = engine_factory(detected.version, remote_host, remote_port)
        registry.engines.add(engine)
        try:
            await _drive(stream, engine, header[HEADER_SIZE:])
        finally:
            registry.engines.discard(engine)
            engine.connection_lost()


async def _drive(stream: ByteStream, engine: Any, initial: bytes) -> None:
    wakeup = anyio.Event()
    clock = {"sent": time.monotonic(), "received": time.monotonic()}

    def on_output() -> None:
        wakeup.set()

    engine.on_output = on_output
    engine.start()
    if initial:
        engine.receive_data(initial)

    async def writer(tg: TaskGroup) -> None:
        nonlocal wakeup
        while True:
            await wakeup.wait()
            wakeup = anyio.Event()
            data = engine.data_to_send()
            while data:
                await stream.send(data)
                clock["sent"] = time.monotonic()
                engine.output_drained()
                data = engine.data_to_send()
            if engine.closed:
                tg.cancel_scope.cancel()
                return

    async def reader(tg: TaskGroup) -> None:
        while not engine.closed:
            if engine.reading_paused:
                await anyio.sleep(0.05)          # connection.blocked: stop reading publishers
                continue
            try:
                data = await stream.receive(READ_SIZE)
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                engine.connection_lost()
                tg.cancel_scope.cancel()
                return
            clock["received"] = time.monotonic()
            engine.receive_data(data)
            if engine.authentication is not None:
                await _authenticate(engine)
        wakeup.set()

    async def heartbeat(tg: TaskGroup) -> None:
        closing_since: float | None = None
        while True:
            interval = engine.heartbeat
            await anyio.sleep(interval / 4 if interval else 0.25)
            now = time.monotonic()
            if getattr(engine, "state", None) is not None and engine.state.name == "CLOSING":
                closing_since = closing_since or now
                if now - closing_since > CLOSE_TIMEOUT:
                    engine.connection_lost()
                    tg.cancel_scope.cancel()
                    return
            if not interval:
                continue
            if now - clock["received"] > 2 * interval:
                log.info("closing connection from %s: missed heartbeats from client", engine.remote_host)
                engine.connection_lost()
                tg.cancel_scope.cancel()
                return
            # beat whenever we have been quiet for (about) half an interval
            if now - clock["sent"] >= interval * 0.45:
                engine.send_heartbeat()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer, tg)
            tg.start_soon(heartbeat, tg)
            await reader(tg)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass


async def _authenticate(engine: Any) -> None:
    """Run the engine's credential check in a worker thread (salted hashes are slow by design)."""
    try:
        principal = await anyio.to_thread.run_sync(engine.authentication)
    except Exception as exc:
        engine.authentication_done(None, exc)
    else:
        engine.authentication_done(principal)


async def close_all(registry: ConnectionRegistry, reason: str) -> None:
    """Broker shutdown: 320 CONNECTION_FORCED to every client, then give them a moment."""
    for engine in list(registry.engines):
        try:
            engine.close(errors.ConnectionForced(reason))
        except Exception:
            log.exception("closing %r", engine)
    with anyio.move_on_after(1.0):
        while registry.engines:
            await anyio.sleep(0.05)
