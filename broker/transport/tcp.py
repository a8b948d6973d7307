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

The transport knows an engine only through
:class:`~broker.protocol.engine.Engine`: bytes in and out, and the events
it reports (opened, closing, finished, pause/resume reading, idle timing,
work for a thread).  Under the engine sits a chain of byte-stream layers
(:mod:`.layers`) whose top is protocol header detection
(:class:`~broker.protocol.detect.HeaderDetector`), which picks the engine;
with no other layer the chain is bypassed once the header is read.

Idle timing (AMQP 0-9-1 spec 4.2.7 heartbeats, AMQP 1.0's idle-time-out): a
timer per connection beats when we have been quiet as long as the engine
asked, and drops a peer silent longer than it allows (after the engine's last
word, if it has one).  Every accepted socket also gets TCP keepalive
(:mod:`.keepalive`), which finds a vanished peer where no heartbeat was
negotiated.

Opening and closing are bounded (:mod:`.handshake`): a connection that has
not opened within the open timeout is closed, and one source address may
have only so many opening at once.  After the engine answered the peer's close
(``connection.close-ok``) the socket stays open, read and discarded, until the client closes it or the
close timeout passes (RabbitMQ does the same): a client that still had
frames on their way when it closed -- amqplib writes a channel's queued
publishes after the connection's close -- would otherwise meet a reset and
report an error instead of its close.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar, cast

from broker import errors
from broker.protocol.detect import AmqpVersion, HeaderDetector
from broker.protocol.engine import (Closing, Engine, EngineEvent, Finished, IdleTiming, Opened,
                                    PauseReading, ResumeReading, WorkRequested)
from broker.transport.handshake import HandshakeLimits, OpeningConnections
from broker.transport.keepalive import TcpKeepAlive
from broker.transport.layers import Layer, LayerChain, LayerFactory, no_layers

log = logging.getLogger(__name__)

WRITE_HIGH_WATER = 1 << 20     # transport buffer above which deliveries pause
IDLE_TICK = 0.25               # timer period while the engine asked for no idle timing
STALL = 0.5                    # a timer this late means the event loop did not run meanwhile

#: (version the header selected, remote host, remote port) -> the engine to serve it
EngineFactory = Callable[[AmqpVersion, str, int], Engine]
_Call = TypeVar("_Call", bound=Callable[..., Any])


def _guarded(method: _Call) -> _Call:
    """Whatever an engine lets out (a bug it did not catch) drops this connection only,
    logged once with its traceback: the listener and the other connections go on."""
    @functools.wraps(method)
    def run(self: AmqpProtocol, *args: Any) -> Any:
        try:
            return method(self, *args)
        except Exception as exc:
            self._engine_failed(exc)
            return None
    return cast(_Call, run)


@dataclass
class ConnectionRegistry:
    """The live connections of a port (to close them all, to count them, to block them)."""

    connections: set[AmqpProtocol] = field(default_factory=set)
    limits: HandshakeLimits = field(default_factory=HandshakeLimits)
    #: what accepted sockets get (:mod:`.keepalive`)
    keepalive: TcpKeepAlive = field(default_factory=TcpKeepAlive)
    #: shared by every port of the broker: the per-address limit is the broker's
    opening: OpeningConnections = field(default_factory=OpeningConnections)
    #: the layers between the socket and header detection (TLS, WebSocket: none yet)
    layers: LayerFactory = no_layers
    #: the transport the connections' model objects name (Broker-J's TCP, SSL, WS, WSS)
    transport: str = "TCP"

    def set_blocked(self, blocked: bool, reason: str = "low on memory") -> None:
        for conn in list(self.connections):
            conn.set_blocked(blocked, reason)

    @property
    def buffered_bytes(self) -> int:
        """Bytes the connections hold in their buffers (for the memory alarm)."""
        return sum(conn.buffered_bytes for conn in self.connections)


class AmqpProtocol(asyncio.Protocol):
    """One accepted TCP connection: its layers, then the engine the protocol header picks."""

    def __init__(self, engine_factory: EngineFactory, supported: frozenset[AmqpVersion],
                 registry: ConnectionRegistry, preferred_header: bytes = b"",
                 layers: Sequence[Layer] | None = None) -> None:
        self.engine_factory = engine_factory
        self.registry = registry
        self.engine: Engine | None = None
        self.transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._detector = HeaderDetector(supported, preferred_header)
        #: None once bypassed: plain TCP after the header
        #: ``layers``: made by the caller, who wants to see them (TLS: the peer's certificate)
        self._chain: LayerChain | None = LayerChain(
            [*(registry.layers() if layers is None else layers), self._detector])
        self._remote = ("?", 0)
        self._flush_scheduled = False
        self._write_paused = False
        self._read_paused = False
        self._timer: asyncio.TimerHandle | None = None
        self._idle: IdleTiming | None = None
        self._last_received = self._last_sent = self._loop.time()
        self._closing_since: float | None = None
        self._finished: Finished | None = None          # the engine's output is final
        self._open_timer: asyncio.TimerHandle | None = None   # armed while counted as opening
        self._open_deadline = 0.0
        self._lingering = False
        self._failed = False
        #: the engine's ``input_slice`` (0: a read is handed over whole)
        self._input_slice = 0

    # -- asyncio.Protocol ---------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        peer = self.transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self._remote = (str(peer[0]), int(peer[1]))
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            try:
                self.registry.keepalive.apply(sock)
            except OSError as exc:        # the peer is gone already, or the system refuses
                log.debug("no TCP keepalive for %s: %s", self._remote[0], exc)
        limits = self.registry.limits
        if not self.registry.opening.admit(self._remote[0], limits):
            self.transport.abort()
            return
        self._open_deadline = self._loop.time() + limits.open_timeout
        self._open_timer = self._loop.call_later(limits.open_timeout, self._open_timeout)

    @_guarded
    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return                        # closed: read until the peer closes, and drop it
        chain = self._chain
        if chain is not None:
            data = chain.receive(data)
            if self.engine is None and not self._start_engine():
                return
            if not data:
                self._flush()
                return
        engine = self.engine
        assert engine is not None
        self._last_received = self._loop.time()
        step = self._input_slice
        if step and len(data) > step:
            # the engine asked for large reads in slices, its output written after each
            for start in range(0, len(data), step):
                engine.receive_data(data[start:start + step])
                self._flush()
                if self._finished is not None or self.transport is None:
                    return
            return
        engine.receive_data(data)
        self._flush()

    def eof_received(self) -> bool:
        return False                      # close our side too

    @_guarded
    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._opening_done()
        self.registry.connections.discard(self)
        self.transport = None
        if self.engine is not None:
            self.engine.connection_lost()

    def pause_writing(self) -> None:
        self._write_paused = True

    @_guarded
    def resume_writing(self) -> None:
        self._write_paused = False
        if self.engine is not None:
            self.engine.output_drained()
            self._flush()

    # -- engine plumbing ------------------------------------------------------------
    def _start_engine(self) -> bool:
        """The header is read (or refused, or still incomplete): start the engine it names."""
        assert self.transport is not None and self._chain is not None
        detector = self._detector
        host, port = self._remote
        if detector.version is None:
            if detector.closed:
                log.info("refusing protocol header %r from %s", detector.header, host)
                self._lingering = True    # what still comes is dropped
            self._flush()                 # what the layers have to say (the preferred header)
            return False
        if self._chain.transparent:
            self._chain = None            # detection was the only layer: bypass it from now on
        engine = self.engine = self.engine_factory(detector.version, host, port)
        engine.on_output = self._schedule_flush
        engine.on_event = self._event
        self._input_slice = getattr(engine, "input_slice", 0)
        self.registry.connections.add(self)
        engine.start()
        self._rearm(IDLE_TICK)
        return True

    def _event(self, event: EngineEvent) -> None:
        """What the engine needs from the socket (it reports as it happens, mid-input too)."""
        transport = self.transport
        if isinstance(event, Finished):
            self._finished = event
            self._schedule_flush()        # closes once the last output is written
        elif isinstance(event, Opened):
            self._opening_done()
        elif isinstance(event, Closing):
            self._closing_since = self._loop.time()
        elif isinstance(event, PauseReading):
            if not self._read_paused and transport is not None:
                self._read_paused = True
                transport.pause_reading()
        elif isinstance(event, ResumeReading):
            if self._read_paused and transport is not None:
                self._read_paused = False
                transport.resume_reading()
        elif isinstance(event, IdleTiming):
            self._idle = event
            self._rearm(self._tick_period())
        elif isinstance(event, WorkRequested):
            self._run_work(event.work)

    def _schedule_flush(self) -> None:
        # Called by the engine whenever its output goes from empty to not empty —
        # often while another connection's publish is being processed.  One
        # write per connection per loop iteration.
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    @_guarded
    def _flush(self) -> None:
        self._flush_scheduled = False
        transport, engine, chain = self.transport, self.engine, self._chain
        if transport is None:
            return
        data = engine.data_to_send() if engine is not None else b""
        if chain is not None:
            data = chain.send(data)
            if self._finished is not None:
                data += chain.end()       # the layers' goodbye (TLS close_notify)
        if data:
            transport.write(data)
            self._last_sent = self._loop.time()
            if not self._write_paused and engine is not None:
                engine.output_drained()
        if chain is not None and chain.closed:
            reason = chain.close_reason
            if reason and not self._lingering:
                log.info("closing connection from %s: %s", self._remote[0], reason)
            self._lingering = True
            transport.close()             # a layer ended the stream (a refused header, a TLS alert)
            return
        finished = self._finished
        if finished is not None and not self._lingering:
            if finished.linger:
                self._linger()
            else:
                transport.close()

    def _run_work(self, work: Callable[[], Any]) -> None:
        """Blocking work (verifying a salted hash is slow by design) in a worker thread."""
        engine = self.engine
        assert engine is not None
        future = self._loop.run_in_executor(None, work)

        future.add_done_callback(functools.partial(self._work_done, engine))

    @_guarded
    def _work_done(self, engine: Engine, fut: asyncio.Future[Any]) -> None:
        if self.transport is None:
            return
        exc = fut.exception()
        engine.work_done(None if exc else fut.result(), exc)
        self._flush()

    def _engine_failed(self, exc: Exception) -> None:
        """See :func:`_guarded`."""
        if self._failed:
            return
        self._failed = True
        log.error("internal error on connection from %s:%d; dropping it", *self._remote,
                  exc_info=exc)
        self.registry.connections.discard(self)
        if self.transport is not None:
            self.transport.abort()

    @property
    def buffered_bytes(self) -> int:
        """Input not yet parsed and output not yet written (the memory alarm counts them)."""
        held = self._chain.buffered_bytes if self._chain is not None else 0
        if self.engine is not None:
            held += self.engine.buffered_bytes
        if self.transport is not None:
            held += self.transport.get_write_buffer_size()
        return held

    @_guarded
    def set_blocked(self, blocked: bool, reason: str = "low on memory") -> None:
        """Resource alarm: tell the engine (it says when to pause or resume reading)."""
        if self.engine is None:
            return
        self.engine.set_blocked(blocked, reason)
        self._flush()

    @_guarded
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

    def _tick_period(self) -> float:
        interval = self._idle_interval
        return interval / 4 if interval else IDLE_TICK

    @property
    def _idle_interval(self) -> float:
        return self._idle.interval if self._idle is not None else 0.0

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
        where = "no protocol header" if self.engine is None else f"{self.engine.state.value}"
        self.registry.opening.expired(self._remote[0], self.registry.limits, where)
        self.transport.abort()

    def _opening_done(self) -> None:
        """Opened, or gone: no longer counted against its address, nor timed."""
        if self._open_timer is not None:
            self._open_timer.cancel()
            self._open_timer = None
            self.registry.opening.done(self._remote[0])

    def _linger(self) -> None:
        """The peer's close was answered: read and drop until it closes, or the close timeout."""
        assert self.transport is not None
        self._lingering = True
        self.registry.connections.discard(self)
        if self._read_paused:
            self._read_paused = False
            self.transport.resume_reading()
        timeout = self.registry.limits.closing_timeout(self._idle_interval)
        if self._timer is not None:
            self._timer.cancel()
        # long after close-ok: a client that neither closes nor reads is not waited for
        self._timer = self._loop.call_later(timeout, self.transport.abort)

    @_guarded
    def _tick(self) -> None:
        engine, transport = self.engine, self.transport
        if engine is None or transport is None:
            return
        now = self._loop.time()
        if self._closing_since is not None:
            if now - self._closing_since > self.registry.limits.closing_timeout(self._idle_interval):
                transport.close()
                return
        idle = self._idle
        if idle is not None:
            silence = now - self._last_received
            if idle.expire_after and silence > idle.expire_after:
                log.info("closing connection from %s: missed heartbeats from client (nothing"
                         " received for %.0f s)", self._remote[0], silence)
                self._expire(engine, transport, silence)
                return
            if idle.send_after and now - self._last_sent >= idle.send_after:
                engine.keepalive()
                self._flush()
        self._rearm(self._tick_period())

    def _expire(self, engine: Engine, transport: asyncio.Transport, silence: float) -> None:
        """The peer was silent too long: the engine's last word if it has one (AMQP 1.0's
        ``close`` with an error), then the socket is dropped without waiting for the peer."""
        last_word = getattr(engine, "idle_expired", None)
        if last_word is not None:
            last_word(silence)
            self._flush()
        transport.abort()                 # what did not reach the kernel is not waited for


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
