"""A blocked publisher's channel traffic, held back in order.

While a connection is blocked (``connection.blocked``: a resource alarm, an
overfull queue, a publish rate limit), a channel is held from its first
``basic.publish`` on: its frames wait here, in order, so that what it sends
after the publish is not processed before it; other channels and channel 0
flow on.  A ``channel.close`` on a held channel discards what was held there
(publishes never confirmed) and goes through, so a client can always shut
down.  Once the connection is unblocked the connection replays the frames.
"""

from __future__ import annotations

from collections.abc import Iterable

from .codec import FRAME_METHOD

_BASIC_PUBLISH_ID = b"\x00\x3c\x00\x28"
_CHANNEL_CLOSE_ID = b"\x00\x14\x00\x28"
#: what a held frame costs beyond its payload (the frame header and end octet)
FRAME_OVERHEAD = 8

Frame = tuple[int, int, bytes]          # frame type, channel, payload


class HeldFrames:
    """The frames held back on a blocked connection, and the channels they belong to."""

    def __init__(self) -> None:
        self.frames: list[Frame] = []
        #: the held channels; empty when none is (read on every frame: a plain set)
        self.channels: set[int] = set()
        #: bytes held (the connection stops reading past its hold limit)
        self.size = 0

    def __bool__(self) -> bool:
        return bool(self.channels)

    def hold(self, ftype: int, channel: int, payload: bytes) -> bool | None:
        """Hold the frame when its channel is held or it is a publish that starts holding it:
        True.  False: let it through.  None: a channel.close that let its channel go (what
        was held there is dropped)."""
        if channel not in self.channels:
            if not (ftype == FRAME_METHOD and payload[:4] == _BASIC_PUBLISH_ID):
                return False
            self.channels.add(channel)
        elif ftype == FRAME_METHOD and payload[:4] == _CHANNEL_CLOSE_ID:
            self.channels.discard(channel)
            self.frames = [f for f in self.frames if f[1] != channel]
            self.size = sum(len(f[2]) + FRAME_OVERHEAD for f in self.frames)
            return None
        self.frames.append((ftype, channel, payload))
        self.size += len(payload) + FRAME_OVERHEAD
        return True

    def take(self) -> list[Frame]:
        """Every held frame, in order; nothing is held afterwards."""
        self.channels.clear()
        frames, self.frames, self.size = self.frames, [], 0
        return frames

    def put_back(self, frames: Iterable[Frame]) -> None:
        """Hold ``frames`` again (releasing them blocked the connection once more)."""
        for frame in frames:
            self.frames.append(frame)
            self.channels.add(frame[1])
            self.size += len(frame[2]) + FRAME_OVERHEAD
