"""The seam between transports and protocol engines, and the registry of engines.

Every protocol engine (AMQP 0-8/0-9/0-9-1 today; 1.0 and 0-10 later) is a
sans-IO object that implements :class:`Engine`: the transport hands it the
bytes it reads (:meth:`Engine.receive_data`), writes what
:meth:`Engine.data_to_send` gives, and learns what the connection needs from
the socket through :data:`EngineEvent` values the engine reports with
``on_event``: it opened, it awaits the peer's close, it is finished (with or
without waiting for the peer to close its side), input should stop or
resume, how often to beat and when the peer counts as gone, work to run off
the event loop (verifying a salted password).  Events are reported when
they happen -- never per frame -- so the hot path is bytes in, bytes out.

A transport knows nothing else about an engine.  Which engine serves a
connection is decided by the protocol header the client sends
(:mod:`broker.protocol.detect`), through :data:`ENGINES`: protocol version
-> engine factory.  An engine package registers itself by listing
:class:`EngineSpec` values in its ``ENGINE_SPECS``, and :data:`BUILTIN` names
the packages loaded at start-up; what the registry holds is what the broker
*implements* -- the Port model, the start-up log and ``deltamq serve --help``
all ask it, so a new engine is advertised the moment it is registered.
"""

from __future__ import annotations

import enum
import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from broker.protocol.detect import HEADER_FOR, AmqpVersion

if TYPE_CHECKING:
    from broker import errors
    from broker.protocol.host import ProtocolHost


# -- events: what an engine needs from its transport ---------------------------------

@dataclass(frozen=True, slots=True)
class Opened:
    """The handshake is done (0-9-1: connection.open-ok sent): no longer an opening connection."""


@dataclass(frozen=True, slots=True)
class Closing:
    """The engine sent its close and awaits the peer's answer; bound the wait."""


@dataclass(frozen=True, slots=True)
class Finished:
    """The engine's output is final: close once it is written.

    ``linger``: the engine answered the peer's close, so the peer closes the
    socket next; until it does, read and drop what still arrives.
    """

    linger: bool = False


@dataclass(frozen=True, slots=True)
class PauseReading:
    """Stop reading: the engine holds back as much input as it may (a blocked publisher)."""


@dataclass(frozen=True, slots=True)
class ResumeReading:
    """Read again."""


@dataclass(frozen=True, slots=True)
class IdleTiming:
    """Keep the connection alive: send a beat after ``send_after`` seconds of our silence,
    drop the peer after ``expire_after`` seconds of its own (0: never).  ``interval`` is
    what was negotiated (0-9-1: the heartbeat; it also bounds how long a close may take)."""

    interval: float
    send_after: float
    expire_after: float


@dataclass(frozen=True, slots=True)
class WorkRequested:
    """Run ``work`` off the event loop; hand its result to :meth:`Engine.work_done`."""

    work: Callable[[], Any]


EngineEvent = Opened | Closing | Finished | PauseReading | ResumeReading | IdleTiming | WorkRequested


#: stop producing deliveries once this much output is queued or not yet written
WRITE_BUFFER_LIMIT = 1 << 20


class OutputQueue:
    """The output side engines share: bytes queued until the transport takes them
    (:meth:`data_to_send`), and what it took and has not reported written
    (``_in_flight``, cleared by the engine's ``output_drained``)."""

    def _init_output(self) -> None:
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._in_flight = 0
        self.bytes_sent = 0

    @property
    def writable(self) -> bool:
        """Below :data:`WRITE_BUFFER_LIMIT`: deliveries may go on."""
        return self._in_flight + self._out_bytes < WRITE_BUFFER_LIMIT

    def data_to_send(self) -> bytes:
        if not self._out:
            return b""
        data = b"".join(self._out)
        self._out.clear()
        self._in_flight += self._out_bytes
        self._out_bytes = 0
        self.bytes_sent += len(data)
        return data


class Engine(Protocol):
    """One connection's protocol engine, as a transport sees it (sans-IO)."""

    #: set by the transport: called when output goes from empty to not empty
    on_output: Callable[[], None]
    #: set by the transport: called with each :data:`EngineEvent` as it happens
    on_event: Callable[[EngineEvent], None]

    @property
    def state(self) -> enum.Enum:
        """Where the connection is; the member's value reads well in a log line."""

    @property
    def buffered_bytes(self) -> int:
        """Input not yet parsed and output not yet taken (the memory alarm counts them)."""

    def start(self) -> None:
        """The protocol header was accepted: produce the first output (0-9-1: connection.start)."""

    def receive_data(self, data: bytes) -> None:
        """Bytes read from the peer (after the protocol header)."""

    def data_to_send(self) -> bytes:
        """Take everything the engine wants written (b"" when nothing)."""

    def output_drained(self) -> None:
        """The transport wrote what it took and the socket keeps up."""

    def keepalive(self) -> None:
        """We were silent for :attr:`IdleTiming.send_after`: produce a beat."""

    def work_done(self, result: Any, error: BaseException | None = None) -> None:
        """The work of a :class:`WorkRequested` finished (``error`` when it raised)."""

    def set_blocked(self, blocked: bool, reason: str) -> None:
        """A resource alarm set or cleared: publishers are to stop / may go on."""

    def close(self, error: errors.BrokerError) -> None:
        """The broker closes the connection (shutdown, port deleted, management)."""

    def connection_lost(self) -> None:
        """The socket is gone: release everything."""


#: (host, version the header selected, remote host, remote port, port name) -> engine
EngineFactory = Callable[["ProtocolHost", AmqpVersion, str, int, str], Engine]


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """One protocol a Port can enable, and the engine that serves it.

    ``protocol`` is the Port's name for it (``AMQP_0_9_1``), ``versions`` the
    protocol headers it answers (1.0: the plain and the SASL header).
    """

    protocol: str
    versions: tuple[AmqpVersion, ...]
    factory: EngineFactory


#: engine packages loaded on first use; each has ``ENGINE_SPECS``, most preferred first
#: (the first registered is the header an unsupported one is answered with)
BUILTIN = ("broker.protocol.amqp0_9_1", "broker.protocol.amqp1_0")


class EngineRegistry:
    """Protocol version -> engine factory; the protocols the broker implements."""

    def __init__(self, packages: Iterable[str] = ()) -> None:
        self._packages = list(packages)
        self._specs: dict[str, EngineSpec] = {}
        self._by_version: dict[AmqpVersion, EngineSpec] = {}

    def register(self, spec: EngineSpec) -> None:
        taken = [v.value for v in spec.versions if v in self._by_version]
        if spec.protocol in self._specs or taken:
            raise ValueError(f"an engine for {spec.protocol} {taken or ''} is already registered")
        self._specs[spec.protocol] = spec
        for version in spec.versions:
            self._by_version[version] = spec

    def _load(self) -> None:
        packages, self._packages = self._packages, []
        for name in packages:
            for spec in importlib.import_module(name).ENGINE_SPECS:
                self.register(spec)

    @property
    def protocols(self) -> list[str]:
        """Port protocol names implemented, oldest version first (``AMQP_0_8``, ...)."""
        self._load()
        return sorted(self._specs, key=_version_key)

    def versions(self, protocols: Iterable[str]) -> frozenset[AmqpVersion]:
        """The protocol headers a port that enables ``protocols`` answers."""
        self._load()
        return frozenset(v for p in protocols if p in self._specs for v in self._specs[p].versions)

    def factory(self, version: AmqpVersion) -> EngineFactory:
        self._load()
        return self._by_version[version].factory

    def preferred_header(self, versions: frozenset[AmqpVersion]) -> bytes:
        """The header to answer an unsupported one with: the most preferred of ``versions``."""
        self._load()
        for spec in self._specs.values():
            for version in spec.versions:
                if version in versions:
                    return HEADER_FOR[version]
        first = next(iter(self._specs.values()))
        return HEADER_FOR[first.versions[0]]

    def describe(self) -> str:
        """``AMQP 0-8, 0-9, 0-9-1``: for help texts."""
        self._load()
        return "AMQP " + ", ".join(self._specs[p].versions[0].value for p in self.protocols)


def _version_key(protocol: str) -> tuple[int, ...]:
    """``AMQP_0_9_1`` -> (0, 9, 1): protocols in version order."""
    return tuple(int(part) for part in protocol.split("_") if part.isdigit())


#: the engines this broker implements
ENGINES = EngineRegistry(BUILTIN)
