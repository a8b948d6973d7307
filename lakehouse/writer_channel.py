"""The broker's end of the journal's writer process: start it, send it groups, read its answers.

Runs on the event loop and never blocks it: requests go to the writer's
standard input without blocking (what the pipe does not take waits for it to
drain), answers are read as the loop sees the writer's standard output
readable.  Each answer (:mod:`lakehouse.commit_pipeline`: group number,
status, and for a failure its error text) is passed to ``on_answer`` in the
order the writer wrote them; the end of that output (the writer died) to
``on_exit`` once, after which a new writer may be started.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import subprocess
import sys
from typing import Callable

from broker.cpu_placement import place_writer_process
from broker.data_directory import inherited_descriptors

from .commit_pipeline import ERROR_LENGTH, FAILED, REPLY
from .journal_writer import REQUEST

__all__ = ["WriterChannel"]

_PIPE_SIZE = 1 << 20


class WriterChannel:
    """One writer process of a journal, and the pipes to it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, arguments: list[str],
                 on_answer: Callable[[int, int, BaseException | None], None],
                 on_exit: Callable[[int], None]) -> None:
        self._loop = loop
        self._on_answer = on_answer
        self._on_exit = on_exit
        self.process = subprocess.Popen(
            [sys.executable, "-m", "lakehouse.journal_writer", *arguments],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0,
            pass_fds=inherited_descriptors())   # it holds the data directory while it lives
        assert self.process.stdin is not None and self.process.stdout is not None
        place_writer_process(self.process.pid)  # off the event loop's CPUs: broker.cpu_placement
        self._in = self.process.stdin
        self._out = self.process.stdout
        try:                                   # a group in one write, not several (Linux: 64 KiB default)
            fcntl.fcntl(self._in.fileno(), fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
        except (OSError, AttributeError):
            pass
        os.set_blocking(self._in.fileno(), False)
        os.set_blocking(self._out.fileno(), False)
        self._outbox = bytearray()             # request bytes the pipe did not take yet
        self._inbox = b""
        loop.add_reader(self._out.fileno(), self._read)

    def send(self, number: int, payload: bytes) -> None:
        """Send group ``number`` (pickled rows; empty: a probe) without blocking the loop."""
        data = REQUEST.pack(number, len(payload)) + payload
        fd = self._in.fileno()
        if self._outbox:
            self._outbox += data
            return
        try:
            written = os.write(fd, data)
        except BlockingIOError:
            written = 0
        except OSError:                        # the writer died: _read sees its end
            return
        if written < len(data):
            self._outbox += memoryview(data)[written:]
            self._loop.add_writer(fd, self._drain)

    def _drain(self) -> None:
        fd = self._in.fileno()
        try:
            written = os.write(fd, self._outbox)
        except BlockingIOError:
            return
        except OSError:
            self._loop.remove_writer(fd)
            return
        del self._outbox[:written]
        if not self._outbox:
            self._loop.remove_writer(fd)

    def _read(self) -> None:
        try:
            data = os.read(self._out.fileno(), 65536)
        except BlockingIOError:
            return
        if not data:
            self._exited()
            return
        buffer = self._inbox + data
        offset = 0
        while len(buffer) - offset >= REPLY.size:
            number, status = REPLY.unpack_from(buffer, offset)
            error: BaseException | None = None
            end = offset + REPLY.size
            if status == FAILED:
                if len(buffer) - end < ERROR_LENGTH.size:
                    break
                (length,) = ERROR_LENGTH.unpack_from(buffer, end)
                if len(buffer) - end - ERROR_LENGTH.size < length:
                    break
                text = buffer[end + ERROR_LENGTH.size:end + ERROR_LENGTH.size + length]
                error = OSError(f"journal: {text.decode('utf-8', 'replace')}")
                end += ERROR_LENGTH.size + length
            offset = end
            self._on_answer(number, status, error)
        self._inbox = buffer[offset:]

    def _exited(self) -> None:
        self._detach()
        code = self.process.wait()
        self._in.close()
        self._out.close()
        self._on_exit(code)

    def _detach(self) -> None:
        try:
            self._loop.remove_reader(self._out.fileno())
            self._loop.remove_writer(self._in.fileno())
        except (RuntimeError, ValueError):     # the loop is closed already
            pass

    def close(self, timeout: float = 60.0) -> None:
        """Send what waits and the stop frame, then wait for the writer to finish (blocking)."""
        if not self._loop.is_closed():
            self._detach()
        os.set_blocking(self._in.fileno(), True)
        os.set_blocking(self._out.fileno(), True)
        try:
            self._in.write(bytes(self._outbox) + REQUEST.pack(0, 0))
            self._in.close()
        except OSError:
            pass
        # what it has is committed (or not) by the writer before it exits
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._out.close()
