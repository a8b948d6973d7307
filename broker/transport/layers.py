"""A connection's transport as a chain of byte-stream layers (sans-IO).

From the socket up: ``socket -> [TLS] -> [WebSocket] -> header detection ->
engine``.  A layer takes the bytes from the layer below and passes up what
they mean to the layer above (TLS: the plaintext; WebSocket: the payload of
binary messages); it takes the bytes from above and gives what goes below
(records, frames); and it may have output of its own (a TLS handshake, a
WebSocket pong, the protocol header that refuses a version).  Layers never
touch a socket: :class:`~broker.transport.tcp.AmqpProtocol` drives the
chain.  Protocol header detection
(:class:`~broker.protocol.detect.HeaderDetector`) is always the top layer;
it decides which engine runs above it.

Once the header is read, a chain with no other layer is bypassed entirely:
bytes go straight from the socket to the engine and back, so plain TCP
pays nothing for the seam.  So is a chain whose other layers say they are
``transparent`` (port unification that found a plain client).

Optional, beside the protocol: ``end_stream()`` gives a layer's goodbye
when the connection ends (TLS: ``close_notify``), ``close_reason`` says
why a closed layer closed, for the log.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol


class Layer(Protocol):
    """One byte-stream layer of a connection."""

    @property
    def closed(self) -> bool:
        """The layer ended the stream (a refused header, a TLS alert, a WebSocket close):
        write its last output, then close the socket."""

    def receive_data(self, data: bytes) -> bytes:
        """Bytes from below; returns the bytes for the layer above (b"" while it needs more)."""

    def send_data(self, data: bytes) -> bytes:
        """Bytes from above; returns the bytes for the layer below."""

    def data_to_send(self) -> bytes:
        """The layer's own output for the layer below (b"" when none)."""

    @property
    def buffered_bytes(self) -> int:
        """Bytes the layer holds (the memory alarm counts them)."""


#: makes the layers of one connection, bottom first (between the socket and detection)
LayerFactory = Callable[[], Sequence[Layer]]


def no_layers() -> Sequence[Layer]:
    """Plain TCP: nothing between the socket and header detection."""
    return ()


class LayerChain:
    """The layers of one connection, bottom (next to the socket) first."""

    def __init__(self, layers: Sequence[Layer]) -> None:
        self.layers = list(layers)

    def receive(self, data: bytes) -> bytes:
        """Bytes from the socket; returns what reaches the top."""
        for layer in self.layers:
            if not data:
                break
            data = layer.receive_data(data)
        return data

    def send(self, data: bytes) -> bytes:
        """Bytes from the top (the engine); returns what goes to the socket, with every
        layer's own output encoded by the layers below it."""
        for layer in reversed(self.layers):
            own = layer.data_to_send()
            if data:
                data = layer.send_data(data)
            if own:
                data = own + data
        return data

    def end(self) -> bytes:
        """The connection ends: every layer's goodbye (``end_stream``), encoded by those below."""
        data = b""
        for layer in reversed(self.layers):
            if data:
                data = layer.send_data(data)
            end_stream = getattr(layer, "end_stream", None)
            if end_stream is not None:
                data += end_stream()
        return data

    @property
    def transparent(self) -> bool:
        """Every layer below the top passes bytes untouched: the chain may be bypassed."""
        return all(getattr(layer, "transparent", False) for layer in self.layers[:-1])

    @property
    def close_reason(self) -> str:
        """Why a layer ended the stream ("" when none says)."""
        for layer in self.layers:
            if layer.closed:
                return str(getattr(layer, "close_reason", ""))
        return ""

    @property
    def closed(self) -> bool:
        return any(layer.closed for layer in self.layers)

    @property
    def buffered_bytes(self) -> int:
        return sum(layer.buffered_bytes for layer in self.layers)
