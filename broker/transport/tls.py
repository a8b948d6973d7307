"""TLS as a byte-stream layer (sans-IO): an :class:`ssl.SSLObject` over two memory BIOs.

:class:`TlsLayer` is a :class:`~broker.transport.layers.Layer`: records
from below go into the incoming BIO and come out as plaintext for the layer
above; plaintext from above is written into the SSL object and comes out of
the outgoing BIO as records.  Its own output -- the handshake, session
tickets, alerts, ``close_notify`` -- waits in the outgoing BIO for
:meth:`TlsLayer.data_to_send`.  No socket, no clock: the same layer serves a
server (the broker) and, with ``server_side=False``, a client (the tests), and
sits at the bottom of any chain (WebSocket over TLS puts its layer above it).

Failures are not exceptions: a handshake the peer cannot complete, a record
that does not decrypt, bytes that are not TLS at all -- the layer becomes
:attr:`~TlsLayer.closed`, with the alert OpenSSL wrote (or, for input that
never was TLS, a ``handshake_failure`` alert of its own) as its last output,
and :attr:`~TlsLayer.close_reason` says why.  A peer's ``close_notify`` is
answered with ours and closes the layer too.  :meth:`TlsLayer.end_stream` is
our own goodbye when the connection above ends.

Plaintext the layer above gives before the handshake is complete is kept and
sent once it is.

:class:`TlsStart` reads the first bytes of a connection on a TLS port.  The
first byte of a TLS connection is a handshake record (content type 22,
0x16): TLS at once.  An AMQP 1.0 client may instead open with the TLS header
``AMQP 2 1 0 0`` (AMQP 1.0 part 5.2.1): on a port that serves 1.0 it is
answered with the same header and the handshake follows, the ordinary
protocol header coming inside TLS, as Broker-J does.  Any other header
begins with ``A``: on a port with both the ``TCP`` and ``SSL`` transports
(Broker-J's port unification) the bytes then pass untouched, for good, and
the transport bypasses the layer (:attr:`TlsStart.transparent`); on a
TLS-only port they go to TLS, which refuses them with an alert.

:func:`layer_factory` gives a port's :data:`~broker.transport.layers.LayerFactory`
from its transports, and :func:`tls_session` finds, in a connection's layers,
what the handshake settled: the TLS version, the cipher and the peer's
certificate (:class:`PeerCertificate`), which SASL EXTERNAL logs in with.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.x509.oid import NameOID

from broker.security.certificates import attribute_text, common_name
from broker.transport.layers import Layer, LayerFactory, no_layers

log = logging.getLogger(__name__)

#: TLS record content type of a handshake: the first byte a TLS client sends
TLS_HANDSHAKE_RECORD = 0x16
#: plaintext taken from the SSL object per read (a record carries at most 16 KiB)
READ_SIZE = 1 << 16
#: AMQP 1.0's TLS header (part 5.2.1): the handshake follows, then the ordinary header in TLS
AMQP_TLS_HEADER = b"AMQP\x02\x01\x00\x00"
#: a fatal handshake_failure alert (TLS 1.2 record), for a peer that never spoke TLS
HANDSHAKE_FAILURE_ALERT = b"\x15\x03\x03\x00\x02\x02\x28"


@dataclass(frozen=True, slots=True)
class PeerCertificate:
    """The certificate a TLS peer presented and the broker verified."""

    #: the subject as RFC 4514 text, most specific first (``CN=app,O=Example,DC=example,DC=com``)
    subject: str
    #: the subject's first CN ("" when it has none)
    common_name: str
    #: the subject's domain components in the order the text shows them (``example``, ``com``)
    domain_components: tuple[str, ...]

    @classmethod
    def from_der(cls, der: bytes) -> PeerCertificate:
        name = x509.load_der_x509_certificate(der).subject
        dcs = [attribute_text(a.value) for a in reversed(list(name))
               if a.oid == NameOID.DOMAIN_COMPONENT]
        return cls(name.rfc4514_string(), common_name(name), tuple(dcs))


@dataclass(frozen=True, slots=True)
class TlsSession:
    """What a completed handshake settled."""

    version: str
    cipher: str
    peer: PeerCertificate | None


class TlsLayer:
    """TLS over a byte stream, for the bottom of a connection's layers (see module docstring).

    ``TlsLayer(context, *, server_side=True, server_hostname=None)``: ``context``
    is an :class:`ssl.SSLContext` (a server's, made by
    :func:`broker.security.certificates.server_context`, or a client's).
    """

    def __init__(self, context: ssl.SSLContext, *, server_side: bool = True,
                 server_hostname: str | None = None) -> None:
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(self._incoming, self._outgoing, server_side=server_side,
                                     server_hostname=server_hostname)
        self._handshaken = False
        self._closed = False
        self._ended = False             # our close_notify is written
        self._spoke = False             # anything of ours went out
        self._early: list[bytes] = []   # plaintext from above before the handshake finished
        self._early_bytes = 0
        #: why the layer closed ("" while open)
        self.close_reason = ""
        #: what the handshake settled (None until it completes)
        self.session: TlsSession | None = None

    # -- Layer ------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def buffered_bytes(self) -> int:
        return self._incoming.pending + self._outgoing.pending + self._early_bytes

    @property
    def handshake_complete(self) -> bool:
        return self._handshaken

    def receive_data(self, data: bytes) -> bytes:
        if self._closed:
            return b""
        self._incoming.write(data)
        if not self._handshaken and not self._handshake():
            return b""
        return self._read()

    def send_data(self, data: bytes) -> bytes:
        if self._closed or self._ended or not data:
            return b""
        if not self._handshaken:
            self._early.append(bytes(data))
            self._early_bytes += len(data)
            return b""
        self._write(data)
        return self._take()

    def data_to_send(self) -> bytes:
        if not self._handshaken and not self._closed and not self._spoke:
            self._handshake()           # a client's first flight: nothing to wait for
        return self._take()

    def end_stream(self) -> bytes:
        """Our ``close_notify`` (once; b"" when the layer has closed or never finished its handshake)."""
        if self._handshaken and not self._closed:
            self._write_close_notify()
        return self._take()

    # -- internals ------------------------------------------------------------------
    def _take(self) -> bytes:
        data = self._outgoing.read()
        if data:
            self._spoke = True
        return data

    def _handshake(self) -> bool:
        try:
            self._ssl.do_handshake()
        except ssl.SSLWantReadError:
            return False
        except (ssl.SSLError, ValueError) as exc:
            self._fail(exc)
            return False
        self._handshaken = True
        der = self._ssl.getpeercert(binary_form=True)
        cipher = self._ssl.cipher()
        self.session = TlsSession(self._ssl.version() or "", cipher[0] if cipher else "",
                                  PeerCertificate.from_der(der) if der else None)
        if self._early:
            early = b"".join(self._early)
            self._early.clear()
            self._early_bytes = 0
            self._write(early)
        return True

    def _read(self) -> bytes:
        chunks = []
        read = self._ssl.read
        while True:
            try:
                chunk = read(READ_SIZE)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                self._peer_closed()
                break
            except (ssl.SSLError, ValueError) as exc:
                self._fail(exc)
                break
            if not chunk:
                self._peer_closed()
                break
            chunks.append(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                written = self._ssl.write(view)
                view = view[written:]
        except (ssl.SSLError, ValueError) as exc:
            self._fail(exc)

    def _write_close_notify(self) -> None:
        """Our close_notify, once (the peer's is not awaited)."""
        if not self._ended:
            self._ended = True
            try:
                self._ssl.unwrap()
            except ssl.SSLError:
                pass

    def _peer_closed(self) -> None:
        """The peer's close_notify: answer with ours, then the stream is over."""
        self._write_close_notify()
        self._closed = True
        self.close_reason = "the peer closed TLS (close_notify)"

    def _fail(self, exc: Exception) -> None:
        self._closed = True
        reason = str(getattr(exc, "reason", None) or exc).replace("_", " ").lower()
        verify = getattr(exc, "verify_message", None)
        if verify:
            reason = f"{reason}: {verify}"
        stage = "TLS error" if self._handshaken else "TLS handshake failed"
        self.close_reason = f"{stage}: {reason}"
        self._early.clear()
        self._early_bytes = 0
        if not self._spoke and not self._outgoing.pending:
            # OpenSSL writes no alert for bytes that were never TLS: say so ourselves
            self._outgoing.write(HANDSHAKE_FAILURE_ALERT)


class TlsStart:
    """How a connection on a TLS port begins, told by its first bytes (see module docstring).

    ``TlsStart(make_tls, *, plain, upgrade)``: ``make_tls()`` gives the :class:`TlsLayer`;
    ``plain``: the port carries plain TCP too; ``upgrade``: AMQP 1.0's TLS header is
    accepted (the port serves AMQP 1.0).
    """

    def __init__(self, make_tls: Callable[[], TlsLayer], *, plain: bool, upgrade: bool) -> None:
        self._make_tls = make_tls
        self._plain = plain
        self._upgrade = upgrade
        self._decided = False
        self._head = b""                # the first bytes, while they may be the TLS header
        self._reply = b""               # the TLS header, answered
        self.tls: TlsLayer | None = None

    @property
    def transparent(self) -> bool:
        """Decided for plain TCP: the layer passes everything untouched from now on."""
        return self._decided and self.tls is None

    @property
    def session(self) -> TlsSession | None:
        return self.tls.session if self.tls is not None else None

    @property
    def close_reason(self) -> str:
        return self.tls.close_reason if self.tls is not None else ""

    @property
    def closed(self) -> bool:
        return self.tls is not None and self.tls.closed

    @property
    def buffered_bytes(self) -> int:
        return len(self._head) + (self.tls.buffered_bytes if self.tls is not None else 0)

    def receive_data(self, data: bytes) -> bytes:
        if self._decided:
            return data if self.tls is None else self.tls.receive_data(data)
        data = self._head + data
        if not data:
            return b""
        if self._upgrade and data[0] != TLS_HANDSHAKE_RECORD:
            if len(data) < len(AMQP_TLS_HEADER) and AMQP_TLS_HEADER.startswith(data):
                self._head = data       # may still be the TLS header: wait for the rest
                return b""
            if data.startswith(AMQP_TLS_HEADER):
                # AMQP 1.0 part 5.2.1: answer with the TLS header; the handshake follows
                self._head, self._decided, self._reply = b"", True, AMQP_TLS_HEADER
                self.tls = self._make_tls()
                rest = data[len(AMQP_TLS_HEADER):]
                return self.tls.receive_data(rest) if rest else b""
        self._head, self._decided = b"", True
        if data[0] == TLS_HANDSHAKE_RECORD or not self._plain:
            self.tls = self._make_tls()   # not TLS on a TLS-only port: it fails with an alert
            return self.tls.receive_data(data)
        return data

    def send_data(self, data: bytes) -> bytes:
        return data if self.tls is None else self.tls.send_data(data)

    def data_to_send(self) -> bytes:
        reply, self._reply = self._reply, b""
        return reply + self.tls.data_to_send() if self.tls is not None else reply

    def end_stream(self) -> bytes:
        return self.tls.end_stream() if self.tls is not None else b""


def layer_factory(transports: Collection[str], context: Callable[[], ssl.SSLContext], *,
                  upgrade: bool = False) -> LayerFactory:
    """The layers of a port that carries ``transports`` (``TCP``, ``SSL``): nothing for plain
    TCP; for ``SSL``, a :class:`TlsStart` that also lets plain clients in when the port
    carries ``TCP`` too, and accepts AMQP 1.0's TLS header with ``upgrade``, else (TLS
    only) the :class:`TlsLayer` itself.  ``context()`` gives the server context for each
    new TLS connection (the key store's current certificate)."""
    if "SSL" not in transports:
        return no_layers
    plain = "TCP" in transports
    if plain or upgrade:
        def starting() -> Sequence[Layer]:
            return (TlsStart(lambda: TlsLayer(context()), plain=plain, upgrade=upgrade),)
        return starting

    def tls_only() -> Sequence[Layer]:
        return (TlsLayer(context()),)
    return tls_only


def tls_session(layers: Sequence[object]) -> TlsSession | None:
    """The TLS session among a connection's ``layers`` (None: the connection is not TLS)."""
    for layer in layers:
        session = getattr(layer, "session", None)
        if isinstance(session, TlsSession):
            return session
    return None
