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
pays nothing for the seam.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable


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


@runtime_checkable
class EndsStream(Protocol):
    """A layer with a goodbye of its own (a WebSocket close frame, a TLS close_notify)."""

    def end_stream(self) -> None:
        """The stream above ended: put the goodbye in :meth:`Layer.data_to_send`."""


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
        """The stream above ended (the engine finished, the header was refused): what goes
        to the socket before it closes -- each layer's goodbye, encoded by the layers below."""
        for layer in reversed(self.layers):
            if isinstance(layer, EndsStream):
                layer.end_stream()
        return self.send(b"")

    @property
    def closed(self) -> bool:
        return any(layer.closed for layer in self.layers)

    @property
    def buffered_bytes(self) -> int:
        return sum(layer.buffered_bytes for layer in self.layers)
