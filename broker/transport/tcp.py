"""TCP transport: asyncio protocol callbacks drive the sans-IO protocol engines.

Why not one anyio task group per connection (the house plan's first design)?
Measured with 100 paced producers, every small read became a task wake-up
and every delivery to another connection a writer-task wake-up through an
``anyio.Event``: at half the peak rate the broker spent its time switching
tasks and p99 latency reached 25-175 ms.  Here the event loop calls
:meth:`AmqpProtocol.data_received` directly; the engine's output is written
with ``transport.write`` once per loop iteration (coalescing every delivery
made to a connection in that iteration); flow control is the transport's own
``pause_writing``/``resume_writing`` and ``pause_reading``.  No task runs per
connection.  The engines stay sans-IO; anyio still runs the broker (task
groups, signals, worker threads, timers).

Heartbeats (AMQP 0-9-1 spec 4.2.7): a timer per connection beats when we have
been quiet for about half the interval, and drops a peer silent for two.

Opening and closing are bounded (:mod:`.handshake`): a connection that has
not opened within the open timeout is closed, and one source address may
have only so many opening at once.  After ``connection.close-ok`` went out
the socket stays open, read and discarded, until the client closes it or the
close timeout passes (RabbitMQ does the same): a client that still had
frames on their way when it closed -- amqplib writes a channel's queued
publishes after the connection's close -- would otherwise meet a reset and
report an error instead of its close.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, cast

from broker import errors
from broker.protocol.detect import HEADER_SIZE, AmqpVersion, detect
from broker.transport.handshake import HandshakeLimits, OpeningConnections

log = logging.getLogger(__name__)

WRITE_HIGH_WATER = 1 << 20     # transport buffer above which deliveries pause
IDLE_TICK = 0.25               # timer period while no heartbeat is negotiated
STALL = 0.5                    # a timer this late means the event loop did not run meanwhile

EngineFactory = Callable[[AmqpVersion, str, int], Any]


@dataclass
class ConnectionRegistry:
    """The live connections of a port (to close them all, to count them, to block them)."""

    connections: set[AmqpProtocol] = field(default_factory=set)
    max_connections: int = -1
    limits: HandshakeLimits = field(default_factory=HandshakeLimits)
    #: shared by every port of the broker: the per-address limit is the broker's
    opening: OpeningConnections = field(default_factory=OpeningConnections)

    def set_blocked(self, blocked: bool, reason: str = "low on memory") -> None:
        for conn in list(self.connections):
            conn.set_blocked(blocked, reason)

    @property
    def buffered_bytes(self) -> int:
        """Bytes the connections hold in their buffers (for the memory alarm)."""
        return sum(conn.buffered_bytes for conn in self.connections)


class AmqpProtocol(asyncio.Protocol):
    """One accepted TCP connection: sniff the protocol header, then pump an engine."""

    def __init__(self, engine_factory: EngineFactory, supported: frozenset[AmqpVersion],
                 registry: ConnectionRegistry) -> None:
        self.engine_factory = engine_factory
        self.supported = supported
        self.registry = registry
        self.engine: Any = None
        self.transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._header = b""
        self._remote = ("?", 0)
        self._flush_scheduled = False
        self._write_paused = False
        self._read_paused = False
        self._authenticating = False
        self._timer: asyncio.TimerHandle | None = None
        self._last_received = self._last_sent = self._loop.time()
        self._closing_since: float | None = None
        self._open_timer: asyncio.TimerHandle | None = None   # armed while counted as opening
        self._open_deadline = 0.0
        self._lingering = False

    # -- asyncio.Protocol ---------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        peer = self.transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self._remote = (str(peer[0]), int(peer[1]))
        limits = self.registry.limits
        if not self.registry.opening.admit(self._remote[0], limits):
            self.transport.abort()
            return
        self._open_deadline = self._loop.time() + limits.open_timeout
        self._open_timer = self._loop.call_later(limits.open_timeout, self._open_timeout)

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return                        # closed: read until the peer closes, and drop it
        engine = self.engine
        if engine is None:
            self._header += data
            if len(self._header) < HEADER_SIZE:
                return
            if not self._start_engine():
                return
            engine = self.engine
            data, self._header = self._header[HEADER_SIZE:], b""
            if not data:
                self._flush()
                return
        self._last_received = self._loop.time()
        engine.receive_data(data)
        if engine.authentication is not None and not self._authenticating:
            self._authenticate()
        self._flush()
        if engine.reading_paused and not self._read_paused and self.transport is not None:
            self._read_paused = True
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        return False                      # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._opening_done()
        self.registry.connections.discard(self)
        if self.engine is not None:
            self.engine.connection_lost()
        self.transport = None

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self.engine is not None:
            self.engine.output_drained()
            self._flush()

    # -- engine plumbing ------------------------------------------------------------
    def _start_engine(self) -> bool:
        assert self.transport is not None
        detected = detect(self._header[:HEADER_SIZE], self.supported)
        host, port = self._remote
        if detected.version is None:
            log.info("refusing protocol header %r from %s", self._header[:HEADER_SIZE], host)
            self.transport.write(detected.reply)
            self.transport.close()
            return False
        if 0 <= self.registry.max_connections <= len(self.registry.connections):
            log.warning("refusing connection from %s: maxOpenConnections reached", host)
            self.transport.close()
            return False
        self.engine = self.engine_factory(detected.version, host, port)
        self.engine.on_output = self._schedule_flush
        self.registry.connections.add(self)
        self.engine.start()
        self._rearm(IDLE_TICK)
        return True

    def _schedule_flush(self) -> None:
        # Called by the engine whenever its output goes from empty to not empty —
        # often while another connection's publish is being processed.  One
        # write per connection per loop iteration.
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        transport, engine = self.transport, self.engine
        if transport is None or engine is None:
            return
        data = engine.data_to_send()
        if data:
            transport.write(data)
            self._last_sent = self._loop.time()
            if not self._write_paused:
                engine.output_drained()
        if self._read_paused and not engine.reading_paused:
            self._read_paused = False             # the engine processed what it held back
            transport.resume_reading()
        if self._open_timer is not None and engine.opened:
            self._opening_done()
        if engine.closed and not self._lingering:
            if engine.awaits_peer_close:
                self._linger()
            else:
                transport.close()

    def _authenticate(self) -> None:
        """Verify credentials in a worker thread: salted hashes are slow by design."""
        engine = self.engine
        self._authenticating = True
        future = self._loop.run_in_executor(None, engine.authentication)

        def done(fut: asyncio.Future[Any]) -> None:
            self._authenticating = False
            if self.transport is None:
                return
            exc = fut.exception()
            engine.authentication_done(None if exc else fut.result(), exc)
            self._flush()

        future.add_done_callback(done)

    @property
    def buffered_bytes(self) -> int:
        """Input not yet parsed and output not yet written (the memory alarm counts them)."""
        held = len(self._header)
        if self.engine is not None:
            held += self.engine.buffered_bytes
        if self.transport is not None:
            held += self.transport.get_write_buffer_size()
        return held

    def set_blocked(self, blocked: bool, reason: str = "low on memory") -> None:
        """Resource alarm: tell the engine; read again once it no longer holds input back."""
        engine = self.engine
        if engine is None:
            return
        engine.set_blocked(blocked, reason)
        if self._read_paused and not engine.reading_paused and self.transport is not None:
            self._read_paused = False
            self.transport.resume_reading()
        self._flush()

    def close(self, error: errors.BrokerError) -> None:
        if self._lingering and self.transport is not None:
            self.transport.close()
        elif self.engine is not None:
            self.engine.close(error)
            self._flush()
        elif self.transport is not None:
            self.transport.close()

    # -- timers -------------------------------------------------------------------
    def _rearm(self, delay: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_later(delay, self._tick)

    def _open_timeout(self) -> None:
        """Not opened in time: close the socket without a word (RabbitMQ's handshake_timeout)."""
        late = self._loop.time() - self._open_deadline
        if late > STALL:
            # The loop was stalled (a busy machine, a long start-up step): timers run
            # before the input that arrived meanwhile is read, and what the client
            # sent in time is not its fault.  Time the broker did not run is not counted.
            self._open_deadline = self._loop.time() + late
            self._open_timer = self._loop.call_later(late, self._open_timeout)
            return
        self._open_timer = None
        self.registry.opening.done(self._remote[0])
        if self.transport is None:
            return
        state = getattr(self.engine, "state", None)
        where = "no protocol header" if state is None else f"{getattr(state, 'value', state)}"
        self.registry.opening.expired(self._remote[0], self.registry.limits, where)
        self.transport.abort()

    def _opening_done(self) -> None:
        """Opened, or gone: no longer counted against its address, nor timed."""
        if self._open_timer is not None:
            self._open_timer.cancel()
            self._open_timer = None
            self.registry.opening.done(self._remote[0])

    def _linger(self) -> None:
        """close-ok is on its way: read and drop until the peer closes, or the close timeout."""
        assert self.transport is not None and self.engine is not None
        self._lingering = True
        self.registry.connections.discard(self)
        if self._read_paused:
            self._read_paused = False
            self.transport.resume_reading()
        timeout = self.registry.limits.closing_timeout(self.engine.heartbeat)
        if self._timer is not None:
            self._timer.cancel()
        # long after close-ok: a client that neither closes nor reads is not waited for
        self._timer = self._loop.call_later(timeout, self.transport.abort)

    def _tick(self) -> None:
        engine, transport = self.engine, self.transport
        if engine is None or transport is None:
            return
        now = self._loop.time()
        if engine.state.name == "CLOSING":
            self._closing_since = self._closing_since or now
            if now - self._closing_since > self.registry.limits.closing_timeout(engine.heartbeat):
                transport.close()
                return
        interval = engine.heartbeat
        if interval:
            if now - self._last_received > 2 * interval:
                log.info("closing connection from %s: missed heartbeats from client", engine.remote_host)
                transport.abort()
                return
            if now - self._last_sent >= interval * 0.45:
                engine.send_heartbeat()
                self._flush()
        self._rearm(interval / 4 if interval else IDLE_TICK)


async def close_all(registry: ConnectionRegistry, reason: str) -> None:
    """Broker shutdown: 320 CONNECTION_FORCED to every client, then give them a moment."""
    for conn in list(registry.connections):
        try:
            conn.close(errors.ConnectionForced(reason))
        except Exception:
            log.exception("closing a connection at shutdown")
    deadline = asyncio.get_running_loop().time() + 1.0
    while registry.connections and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
