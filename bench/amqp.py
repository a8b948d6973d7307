"""A deliberately minimal AMQP 0-9-1 client for load generation.

It speaks raw frames on an ``asyncio.Protocol`` (uvloop when installed) and does
only what the benchmark needs:

* connection handshake (SASL PLAIN), channel open, exchange/queue declare,
  bind, purge, delete, basic.qos, basic.consume, confirm.select;
* publishing from *pre-encoded* frame blocks (method + content header + body,
  concatenated, many messages per ``transport.write``), with a
  ``time.perf_counter_ns()`` send stamp patched into the first 8 bytes of the
  body;
* parsing deliveries and publisher confirms with ``struct.unpack_from`` straight
  off the receive buffer, acking with ``multiple=true`` every N deliveries.

Everything else a real client does (properties, returns, transactions, ...) is
absent on purpose.  ``time.perf_counter_ns`` is CLOCK_MONOTONIC on Linux, shared
by all processes of the machine, so producer and consumer may live in different
processes.
"""

from __future__ import annotations

import asyncio
import struct
import time
from array import array
from struct import pack, unpack_from
from typing import Callable

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_END = b"\xce"
FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8

# (class, method) ids used here
CONNECTION_START, CONNECTION_START_OK = (10, 10), (10, 11)
CONNECTION_TUNE, CONNECTION_TUNE_OK = (10, 30), (10, 31)
CONNECTION_OPEN, CONNECTION_OPEN_OK = (10, 40), (10, 41)
CONNECTION_CLOSE, CONNECTION_CLOSE_OK = (10, 50), (10, 51)
CHANNEL_OPEN, CHANNEL_OPEN_OK = (20, 10), (20, 11)
CHANNEL_CLOSE, CHANNEL_CLOSE_OK = (20, 40), (20, 41)
EXCHANGE_DECLARE, EXCHANGE_DECLARE_OK = (40, 10), (40, 11)
EXCHANGE_DELETE, EXCHANGE_DELETE_OK = (40, 20), (40, 21)
QUEUE_DECLARE, QUEUE_DECLARE_OK = (50, 10), (50, 11)
QUEUE_BIND, QUEUE_BIND_OK = (50, 20), (50, 21)
QUEUE_PURGE, QUEUE_PURGE_OK = (50, 30), (50, 31)
QUEUE_DELETE, QUEUE_DELETE_OK = (50, 40), (50, 41)
BASIC_QOS, BASIC_QOS_OK = (60, 10), (60, 11)
BASIC_CONSUME, BASIC_CONSUME_OK = (60, 20), (60, 21)
CONFIRM_SELECT, CONFIRM_SELECT_OK = (85, 10), (85, 11)

BODY_SIZE = 256
_HB_FRAME = b"\x08\x00\x00\x00\x00\x00\x00\xce"


class AMQPError(Exception):
    """The broker closed the channel/connection, or it misbehaved."""


# --------------------------------------------------------------------------
# encoding helpers


def shortstr(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    if len(b) > 255:
        raise ValueError("shortstr too long")
    return bytes((len(b),)) + b


def longstr(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return pack(">I", len(b)) + b


def table(d: dict | None) -> bytes:
    out = bytearray()
    for k, v in (d or {}).items():
        out += shortstr(k)
        if isinstance(v, bool):
            out += b"t" + (b"\x01" if v else b"\x00")
        elif isinstance(v, int):
            out += b"l" + pack(">q", v)
        elif isinstance(v, (str, bytes)):
            out += b"S" + longstr(v)
        elif isinstance(v, dict):
            out += b"F" + table(v)
        else:
            raise TypeError(f"unsupported table value {v!r}")
    return pack(">I", len(out)) + bytes(out)


def method_frame(channel: int, cm: tuple[int, int], args: bytes = b"") -> bytes:
    payload = pack(">HH", *cm) + args
    return pack(">BHI", FRAME_METHOD, channel, len(payload)) + payload + FRAME_END


def publish_block(channel: int, exchange: str, routing_key: str,
                  body_size: int = BODY_SIZE, frame_max: int = 131072) -> tuple[bytes, int]:
    """One pre-encoded basic.publish: method + header + body frame(s).

    Returns (block, offset of the 8-byte timestamp inside block).  The message
    is non-persistent (delivery-mode 1).
    """
    if body_size < 8:
        raise ValueError("body must hold the 8-byte timestamp")
    m = method_frame(channel, (60, 40), pack(">H", 0) + shortstr(exchange)
                     + shortstr(routing_key) + b"\x00")
    # class 60, weight 0, body size, flags: delivery-mode present (bit 12) -> 1
    hp = pack(">HHQH", 60, 0, body_size, 0x1000) + b"\x01"
    h = pack(">BHI", FRAME_HEADER, channel, len(hp)) + hp + FRAME_END
    body = bytes(8) + bytes((i % 251) + 1 for i in range(body_size - 8))
    chunk = frame_max - 8
    frames = []
    for i in range(0, body_size, chunk):
        part = body[i:i + chunk]
        frames.append(pack(">BHI", FRAME_BODY, channel, len(part)) + part + FRAME_END)
    return m + h + b"".join(frames), len(m) + len(h) + 7


class Publisher:
    """Pre-encoded batches of publishes for one channel.

    ``batch(n, ts)`` returns n concatenated publishes whose bodies all carry
    the send timestamp ``ts``; the n blocks are encoded once and only the 8
    timestamp bytes of each are rewritten per batch.
    """

    def __init__(self, channel: int, exchange: str, routing_key: str, max_batch: int,
                 body_size: int = BODY_SIZE, frame_max: int = 131072):
        block, off = publish_block(channel, exchange, routing_key, body_size, frame_max)
        self.block_len = len(block)
        self.max_batch = max_batch
        self._buf = bytearray(block * max_batch)
        self._offsets = [i * self.block_len + off for i in range(max_batch)]

    def batch(self, n: int, ts: int) -> memoryview:
        """A view valid until the next call: copy it (bytes()/b"".join) before writing."""
        buf = self._buf
        pk = struct.pack_into
        for off in self._offsets[:n]:
            pk(">q", buf, off, ts)
        return memoryview(buf)[: n * self.block_len]


# --------------------------------------------------------------------------
# the connection


class Channel:
    """Per-channel state.  Consumer/producer fields are used by the hot path."""

    __slots__ = (
        "number", "conn", "rpc", "closed",
        # consumer side
        "received", "no_ack", "ack_every", "last_tag", "acked_tag", "samples",
        "on_delivery",
        # producer side (publisher confirms)
        "confirming", "published", "acked_upto", "singles", "nacked", "on_confirm",
    )

    def __init__(self, number: int, conn: "Connection"):
        self.number = number
        self.conn = conn
        self.rpc: asyncio.Future | None = None
        self.closed: str | None = None
        self.received = 0
        self.no_ack = True
        self.ack_every = 50
        self.last_tag = 0
        self.acked_tag = 0
        self.samples: array | None = None
        self.on_delivery: Callable[["Channel"], None] | None = None
        self.confirming = False
        self.published = 0
        self.acked_upto = 0
        self.singles: set[int] = set()
        self.nacked = 0
        self.on_confirm: Callable[["Channel"], None] | None = None

    # ---- publisher confirms
    @property
    def confirmed(self) -> int:
        return self.acked_upto + len(self.singles)

    @property
    def unconfirmed(self) -> int:
        return self.published - self.acked_upto - len(self.singles)

    def _confirm(self, tag: int, multiple: bool) -> None:
        if multiple:
            if tag > self.acked_upto:
                self.acked_upto = tag
                if self.singles:
                    self.singles = {t for t in self.singles if t > tag}
        elif tag == self.acked_upto + 1:
            self.acked_upto = tag
            s = self.singles
            if s:
                nxt = tag + 1
                while nxt in s:
                    s.discard(nxt)
                    nxt += 1
                self.acked_upto = nxt - 1
        elif tag > self.acked_upto:
            self.singles.add(tag)

    # ---- synchronous methods
    async def call(self, cm: tuple[int, int], args: bytes, reply: tuple[int, int],
                   timeout: float = 15.0) -> bytes:
        if self.closed:
            raise AMQPError(self.closed)
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.rpc = fut
        self.conn.write(method_frame(self.number, cm, args))
        try:
            cm_got, payload = await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            raise AMQPError(f"timeout waiting for {reply} after {cm} on channel {self.number}") from None
        finally:
            self.rpc = None
        if cm_got != reply:
            raise AMQPError(f"expected {reply}, got {cm_got}")
        return payload

    async def exchange_declare(self, name: str, type_: str, durable: bool = False) -> None:
        bits = 0x02 if durable else 0
        await self.call(EXCHANGE_DECLARE, pack(">H", 0) + shortstr(name) + shortstr(type_)
                        + bytes((bits,)) + table({}), EXCHANGE_DECLARE_OK)

    async def exchange_delete(self, name: str) -> None:
        await self.call(EXCHANGE_DELETE, pack(">H", 0) + shortstr(name) + b"\x00",
                        EXCHANGE_DELETE_OK)

    async def queue_declare(self, name: str, durable: bool = False, passive: bool = False,
                            arguments: dict | None = None) -> tuple[int, int]:
        bits = (0x01 if passive else 0) | (0x02 if durable else 0)
        p = await self.call(QUEUE_DECLARE, pack(">H", 0) + shortstr(name) + bytes((bits,))
                            + table(arguments), QUEUE_DECLARE_OK)
        n = p[0]
        msgs, consumers = unpack_from(">II", p, 1 + n)
        return msgs, consumers

    async def queue_bind(self, queue: str, exchange: str, routing_key: str = "") -> None:
        await self.call(QUEUE_BIND, pack(">H", 0) + shortstr(queue) + shortstr(exchange)
                        + shortstr(routing_key) + b"\x00" + table({}), QUEUE_BIND_OK)

    async def queue_purge(self, queue: str) -> int:
        p = await self.call(QUEUE_PURGE, pack(">H", 0) + shortstr(queue) + b"\x00",
                            QUEUE_PURGE_OK)
        return unpack_from(">I", p)[0]

    async def queue_delete(self, queue: str) -> int:
        p = await self.call(QUEUE_DELETE, pack(">H", 0) + shortstr(queue) + b"\x00",
                            QUEUE_DELETE_OK, timeout=60.0)
        return unpack_from(">I", p)[0]

    async def basic_qos(self, prefetch_count: int) -> None:
        await self.call(BASIC_QOS, pack(">IHB", 0, prefetch_count, 0), BASIC_QOS_OK)

    async def basic_consume(self, queue: str, tag: str, no_ack: bool, ack_every: int = 50) -> None:
        self.no_ack = no_ack
        self.ack_every = max(1, ack_every)
        bits = 0x02 if no_ack else 0
        await self.call(BASIC_CONSUME, pack(">H", 0) + shortstr(queue) + shortstr(tag)
                        + bytes((bits,)) + table({}), BASIC_CONSUME_OK)

    async def confirm_select(self) -> None:
        await self.call(CONFIRM_SELECT, b"\x00", CONFIRM_SELECT_OK)
        self.confirming = True

    def ack_frame(self, tag: int) -> bytes:
        """basic.ack(tag, multiple=true)."""
        return pack(">BHIHHQB", FRAME_METHOD, self.number, 13, 60, 80, tag, 1) + FRAME_END

    def flush_acks(self) -> None:
        if not self.no_ack and self.last_tag > self.acked_tag:
            self.acked_tag = self.last_tag
            self.conn.write(self.ack_frame(self.last_tag))


class Connection(asyncio.Protocol):
    channel_class: type[Channel] = Channel     # what channel() opens; subclasses may swap it

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.channels: dict[int, Channel] = {}
        self.ch0 = Channel(0, self)
        self.channels[0] = self.ch0
        self.frame_max = 131072
        self.heartbeat = 0
        self.error: str | None = None
        self.lost: asyncio.Future | None = None
        self._writable = True
        self._resume_waiters: list[asyncio.Future] = []
        self._next_channel = 1
        self.recording = False   # latency samples on/off (set by the driver)
        self.on_progress: Callable[[], None] | None = None  # wake-up hook

    # ------------------------------------------------------------ protocol
    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport
        transport.set_write_buffer_limits(high=1 << 20, low=1 << 18)
        self.lost = asyncio.get_running_loop().create_future()

    def connection_lost(self, exc) -> None:
        msg = self.error or (f"connection lost: {exc}" if exc else "connection closed by peer")
        self.error = self.error or msg
        for ch in self.channels.values():
            if ch.rpc is not None and not ch.rpc.done():
                ch.rpc.set_exception(AMQPError(msg))
        if self.lost is not None and not self.lost.done():
            self.lost.set_result(msg)
        self._wake_writers()
        if self.on_progress:
            self.on_progress()

    def pause_writing(self) -> None:
        self._writable = False

    def resume_writing(self) -> None:
        self._writable = True
        self._wake_writers()
        if self.on_progress:
            self.on_progress()

    def _wake_writers(self) -> None:
        for f in self._resume_waiters:
            if not f.done():
                f.set_result(None)
        self._resume_waiters.clear()

    @property
    def writable(self) -> bool:
        return self._writable and self.error is None

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    async def drain(self) -> None:
        if not self._writable and self.error is None:
            f = asyncio.get_running_loop().create_future()
            self._resume_waiters.append(f)
            await f

    def data_received(self, data: bytes) -> None:  # noqa: C901 - the hot path
        buf: bytes | bytearray
        if self.buf:
            self.buf += data
            buf = self.buf
        else:
            buf = data
        n = len(buf)
        pos = 0
        chans = self.channels
        uf = unpack_from
        now = time.perf_counter_ns() if self.recording else 0
        touched: set[Channel] | None = None
        out: list[bytes] | None = None
        while n - pos >= 8:
            ftype, chno, size = uf(">BHI", buf, pos)
            end = pos + 7 + size
            if end >= n:
                break
            if ftype == FRAME_BODY:
                ch = chans[chno]
                ch.received += 1
                if now and ch.samples is not None:
                    ch.samples.append(now - uf(">q", buf, pos + 7)[0])
                if not ch.no_ack and ch.last_tag - ch.acked_tag >= ch.ack_every:
                    ch.acked_tag = ch.last_tag
                    if out is None:
                        out = []
                    out.append(ch.ack_frame(ch.last_tag))
                if touched is None:
                    touched = set()
                touched.add(ch)
            elif ftype == FRAME_METHOD:
                cls, mth = uf(">HH", buf, pos + 7)
                if cls == 60 and mth == 60:                  # basic.deliver
                    ctl = buf[pos + 11]
                    chans[chno].last_tag = uf(">Q", buf, pos + 12 + ctl)[0]
                elif cls == 60 and (mth == 80 or mth == 120):  # confirm ack / nack
                    tag, bits = uf(">QB", buf, pos + 11)
                    ch = chans[chno]
                    if mth == 120:
                        ch.nacked += 1
                    ch._confirm(tag, bool(bits & 1))
                    if ch.on_confirm is not None:
                        ch.on_confirm(ch)
                else:
                    self._control(chno, (cls, mth), bytes(buf[pos + 11:end]))
            elif ftype == FRAME_HEARTBEAT:
                if out is None:
                    out = []
                out.append(_HB_FRAME)
            # FRAME_HEADER: nothing to do (our bodies are one frame)
            if buf[end] != 0xCE:
                self._fail(f"bad frame end at offset {end}")
                return
            pos = end + 1
        if pos >= n:
            self.buf = bytearray()
        elif buf is not self.buf:
            self.buf = bytearray(buf[pos:])
        elif pos:
            del self.buf[:pos]
        if out:
            self.write(b"".join(out))
        if touched:
            for ch in touched:
                if ch.on_delivery is not None:
                    ch.on_delivery(ch)

    def _fail(self, msg: str) -> None:
        self.error = msg
        if self.transport is not None:
            self.transport.close()

    def _control(self, chno: int, cm: tuple[int, int], payload: bytes) -> None:
        ch = self.channels.get(chno)
        if cm == CONNECTION_CLOSE or cm == CHANNEL_CLOSE:
            code = unpack_from(">H", payload)[0]
            tl = payload[2]
            text = payload[3:3 + tl].decode(errors="replace")
            msg = f"{'connection' if cm == CONNECTION_CLOSE else 'channel'}.close {code} {text}"
            if cm == CONNECTION_CLOSE:
                self.write(method_frame(0, CONNECTION_CLOSE_OK))
                self.error = msg
                for c in self.channels.values():
                    c.closed = msg
                    if c.rpc is not None and not c.rpc.done():
                        c.rpc.set_exception(AMQPError(msg))
                if self.transport is not None:
                    self.transport.close()
            elif ch is not None:
                self.write(method_frame(chno, CHANNEL_CLOSE_OK))
                ch.closed = msg
                if ch.rpc is not None and not ch.rpc.done():
                    ch.rpc.set_exception(AMQPError(msg))
                # a channel closed under a running benchmark is a failure
                self.error = self.error or msg
                if self.on_progress:
                    self.on_progress()
            return
        if cm in ((10, 60), (10, 61)):      # connection.blocked / unblocked: ignore
            return
        if ch is not None and ch.rpc is not None and not ch.rpc.done():
            ch.rpc.set_result((cm, payload))

    # ------------------------------------------------------------ handshake
    @classmethod
    async def open(cls, host: str, port: int, vhost: str = "/", user: str = "guest",
                   password: str = "guest", timeout: float = 15.0) -> "Connection":
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(loop.create_connection(cls, host, port), timeout)
        try:
            await asyncio.wait_for(conn._handshake(vhost, user, password), timeout)
        except BaseException:
            conn.abort()
            raise
        return conn

    async def _handshake(self, vhost: str, user: str, password: str) -> None:
        loop = asyncio.get_running_loop()
        ch0 = self.ch0
        ch0.rpc = loop.create_future()
        self.write(PROTOCOL_HEADER)
        cm, _ = await ch0.rpc
        if cm != CONNECTION_START:
            raise AMQPError(f"expected connection.start, got {cm}")
        props = table({"product": "deltamq-bench", "version": "1",
                       "capabilities": {"publisher_confirms": True, "basic.nack": True}})
        resp = b"\x00" + user.encode() + b"\x00" + password.encode()
        payload = await ch0.call(CONNECTION_START_OK, props + shortstr("PLAIN") + longstr(resp)
                                 + shortstr("en_US"), CONNECTION_TUNE)
        channel_max, frame_max, heartbeat = unpack_from(">HIH", payload)
        self.frame_max = min(frame_max or 131072, 131072)
        self.heartbeat = 0
        self.write(method_frame(0, CONNECTION_TUNE_OK, pack(">HIH", channel_max or 2047,
                                                             self.frame_max, 0)))
        await ch0.call(CONNECTION_OPEN, shortstr(vhost) + shortstr("") + b"\x00",
                       CONNECTION_OPEN_OK)

    async def channel(self) -> Channel:
        n = self._next_channel
        self._next_channel += 1
        ch = self.channel_class(n, self)
        self.channels[n] = ch
        await ch.call(CHANNEL_OPEN, shortstr(""), CHANNEL_OPEN_OK)
        return ch

    async def close(self, timeout: float = 5.0) -> None:
        if self.error is None and self.transport is not None and not self.transport.is_closing():
            try:
                await self.ch0.call(CONNECTION_CLOSE, pack(">H", 200) + shortstr("bye")
                                    + pack(">HH", 0, 0), CONNECTION_CLOSE_OK, timeout=timeout)
            except (AMQPError, OSError):
                pass
        self.abort()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.close()


def install_uvloop() -> bool:
    """Use uvloop's event loop policy when available; returns whether it is."""
    try:
        import uvloop  # type: ignore
    except ImportError:
        return False
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return True


def raise_if_failed(conns) -> None:
    """Raise the first error any of the connections (or their channels) met."""
    for c in conns:
        if c.error:
            raise AMQPError(c.error)


class Waker:
    """``await nap(t)`` sleeps up to t seconds; ``wake()`` (a connection's
    on_progress, a channel's on_confirm) ends the current nap early."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._fut: asyncio.Future | None = None

    def wake(self, *_a) -> None:
        if self._fut is not None and not self._fut.done():
            self._fut.set_result(None)

    async def nap(self, t: float) -> None:
        self._fut = self.loop.create_future()
        h = self.loop.call_later(t, self.wake)
        try:
            await self._fut
        finally:
            h.cancel()
            self._fut = None


async def publish_confirmed(conn: Connection, ch: Channel, n: int, batch: int, window: int,
                            frames: Callable[[int], bytes],
                            progress: Callable[[int, float], None] | None = None,
                            every: float = 10.0) -> float:
    """Publish n messages on ``ch`` (in confirm mode) until all are confirmed,
    at most ``batch`` per write and ``window`` unconfirmed; ``frames(k)`` gives
    the bytes of k publishes.  ``progress(confirmed, seconds)`` is called every
    ``every`` seconds.  Returns the seconds it took."""
    waker = Waker()
    ch.on_confirm = waker.wake
    conn.on_progress = waker.wake
    t0 = last = time.perf_counter()
    sent = 0
    while ch.confirmed < n:
        raise_if_failed((conn,))
        k = min(batch, n - sent, window - ch.unconfirmed)
        if k > 0 and conn.writable:
            conn.write(frames(k))
            sent += k
            ch.published += k
            await asyncio.sleep(0)
        else:
            await waker.nap(0.05)
        if progress is not None and time.perf_counter() - last > every:
            last = time.perf_counter()
            progress(ch.confirmed, last - t0)
    return time.perf_counter() - t0


async def with_channel(broker, fn):
    """fn(conn, ch) on a fresh connection to ``broker`` (host, port, vhost), closed after."""
    conn = await Connection.open(broker.host, broker.port, broker.vhost)
    try:
        ch = await conn.channel()
        return await fn(conn, ch)
    finally:
        await conn.close()


def admin(broker, fn):
    """with_channel() in an event loop of its own (uvloop when installed)."""
    install_uvloop()
    return asyncio.run(with_channel(broker, fn))


def probe(host: str, port: int, vhost: str) -> None:
    """Open and close one connection: raises while the broker does not yet take AMQP."""
    async def once() -> None:
        conn = await Connection.open(host, port, vhost, timeout=5)
        await conn.close()
    asyncio.run(once())
