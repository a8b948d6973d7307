"""The 0-9-1 engine driven purely through the :class:`~broker.protocol.engine.Engine` protocol.

What a transport sees: bytes in, bytes out, and the events the engine reports
(opened, closing, finished, pause/resume reading, idle timing, work for a
thread) -- in memory, no sockets, no clock.  Also the engine registry.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest

from broker import errors
from broker.protocol.amqp0_9_1 import methods as m
from broker.protocol.amqp0_9_1.connection import HOLD_LIMIT
from broker.protocol.detect import HEADER_FOR, AmqpVersion
from broker.protocol.engine import (ENGINES, Closing, Engine, EngineEvent, EngineRegistry,
                                    EngineSpec, Finished, IdleTiming, Opened, PauseReading,
                                    ResumeReading, WorkRequested)

from .harness import _DECODERS, Client, FakeHost


class Driver:
    """A transport in miniature: it knows the engine only through the Engine protocol."""

    def __init__(self, host: FakeHost, version: AmqpVersion = AmqpVersion.V0_9_1) -> None:
        self.engine: Engine = ENGINES.factory(version)(host, version, "127.0.0.1", 40000, "amqp")
        self.events: list[EngineEvent] = []
        self.wakeups = 0
        self.engine.on_event = lambda event: self.events.append(event)
        self.engine.on_output = self._wake
        self.encoder = Client(host, version)       # only to encode client frames
        self.version = version

    def _wake(self) -> None:
        self.wakeups += 1

    def send(self, channel: int, method: m.Method) -> None:
        self.engine.receive_data(self.encoder.encode(channel, method))

    def run_work(self) -> None:
        """Run what WorkRequested asked for, as a worker thread would."""
        [work] = [e.work for e in self.events if isinstance(e, WorkRequested)]
        self.events = [e for e in self.events if not isinstance(e, WorkRequested)]
        try:
            result = work()
        except Exception as exc:
            self.engine.work_done(None, exc)
        else:
            self.engine.work_done(result)

    def methods(self) -> list[Any]:
        data, out, o = self.engine.data_to_send(), [], 0
        self.engine.output_drained()
        while o < len(data):
            ftype, _channel, size = struct.unpack_from(">BHI", data, o)
            payload = data[o + 7:o + 7 + size]
            if ftype == 1:
                out.append(_DECODERS[self.version][struct.unpack_from(">I", payload)[0]](payload, 4))
            elif ftype == 8:
                out.append("heartbeat")
            o += 8 + size
        return out

    def take_events(self) -> list[EngineEvent]:
        events, self.events = self.events, []
        return events

    def open(self, heartbeat: int = 0) -> None:
        self.engine.start()
        assert isinstance(self.methods()[0], m.ConnectionStart)
        self.send(0, m.ConnectionStartOk(
            client_properties={"capabilities": {"connection.blocked": True}},
            mechanism="PLAIN", response=b"\x00guest\x00guest", locale="en_US"))
        self.run_work()
        assert isinstance(self.methods()[0], m.ConnectionTune)
        self.send(0, m.ConnectionTuneOk(channel_max=10, frame_max=131072, heartbeat=heartbeat))
        self.send(0, m.ConnectionOpen(virtual_host="/"))
        assert isinstance(self.methods()[0], m.ConnectionOpenOk)


def test_the_handshake_reports_work_idle_timing_and_opened() -> None:
    driver = Driver(FakeHost())
    driver.engine.start()
    assert driver.wakeups == 1 and isinstance(driver.methods()[0], m.ConnectionStart)
    driver.send(0, m.ConnectionStartOk(client_properties={}, mechanism="PLAIN",
                                       response=b"\x00guest\x00guest", locale="en_US"))
    requested, paused = driver.events
    assert isinstance(requested, WorkRequested)         # the password is verified off the loop
    assert paused == PauseReading()                      # and nothing read meanwhile
    assert driver.methods() == []                        # nothing until the work is done
    driver.run_work()
    assert driver.take_events() == [paused, ResumeReading()]
    assert isinstance(driver.methods()[0], m.ConnectionTune)
    driver.send(0, m.ConnectionTuneOk(channel_max=10, frame_max=131072, heartbeat=20))
    assert driver.take_events() == [IdleTiming(interval=20, send_after=9.0, expire_after=40.0)]
    assert driver.engine.state.value == "awaiting connection.open"
    driver.send(0, m.ConnectionOpen(virtual_host="/"))
    assert driver.take_events() == [Opened()]
    assert driver.engine.state.value == "open"


def test_no_heartbeat_means_no_idle_timing() -> None:
    driver = Driver(FakeHost())
    driver.open(heartbeat=0)
    assert not [e for e in driver.take_events() if isinstance(e, IdleTiming)]


def test_keepalive_produces_a_heartbeat_frame() -> None:
    driver = Driver(FakeHost())
    driver.open(heartbeat=10)
    driver.engine.keepalive()
    assert driver.methods() == ["heartbeat"]


def test_a_refused_login_finishes_without_linger() -> None:
    driver = Driver(FakeHost())
    driver.engine.start()
    driver.methods()
    driver.send(0, m.ConnectionStartOk(client_properties={}, mechanism="PLAIN",
                                       response=b"\x00guest\x00wrong", locale="en_US"))
    driver.run_work()
    assert driver.take_events() == [PauseReading(), Finished(linger=False)]   # no reading resumed


def test_the_peers_close_is_answered_and_the_engine_finishes_with_linger() -> None:
    driver = Driver(FakeHost())
    driver.open()
    driver.take_events()
    driver.send(0, m.ConnectionClose(reply_code=200))
    assert isinstance(driver.methods()[-1], m.ConnectionCloseOk)
    assert driver.take_events() == [Finished(linger=True)]


def test_the_brokers_close_reports_closing_then_finished_at_close_ok() -> None:
    driver = Driver(FakeHost())
    driver.open()
    driver.take_events()
    driver.engine.close(errors.ConnectionForced("shutdown"))
    assert driver.take_events() == [Closing()]
    assert isinstance(driver.methods()[-1], m.ConnectionClose)
    driver.send(0, m.ConnectionCloseOk())
    assert driver.take_events() == [Finished(linger=False)]


def test_lost_framing_finishes_at_once() -> None:
    driver = Driver(FakeHost())
    driver.open()
    driver.take_events()
    driver.engine.receive_data(b"\x01\x00\x00\x00\x00\x00\x04abcdX")    # frame-end is not 0xce
    # connection.close goes out, but no close-ok can be parsed any more: done, no waiting
    assert driver.take_events() == [Closing(), Finished(linger=False)]
    assert isinstance(driver.methods()[-1], m.ConnectionClose)


def test_a_blocked_publisher_pauses_reading_past_the_hold_limit_and_resumes_when_unblocked() -> None:
    host = FakeHost()
    driver = Driver(host)
    driver.open()
    driver.send(1, m.ChannelOpen())
    driver.send(1, m.QueueDeclare(queue="q"))
    driver.methods()
    driver.take_events()
    driver.engine.set_blocked(True, "low on memory")
    body = b"x" * 60000
    publish = driver.encoder.publish_bytes(1, "", "q", body)
    sent = 0
    while not driver.events:
        driver.engine.receive_data(publish)
        sent += 1
        assert sent * len(publish) < 2 * HOLD_LIMIT
    assert driver.take_events() == [PauseReading()]
    assert host.namespace.queue("q").message_count <= 1     # the rest held, not routed
    driver.engine.set_blocked(False, "")
    assert driver.take_events() == [ResumeReading()]
    assert host.namespace.queue("q").message_count == sent


def test_buffered_bytes_are_the_engines_unsent_output() -> None:
    driver = Driver(FakeHost())
    driver.engine.start()
    assert driver.engine.buffered_bytes > 0
    driver.methods()
    assert driver.engine.buffered_bytes == 0


# -- the registry --------------------------------------------------------------------

def test_the_registry_serves_the_0_9_1_family_with_one_engine_and_1_0_with_another() -> None:
    assert ENGINES.protocols == ["AMQP_0_8", "AMQP_0_9", "AMQP_0_9_1", "AMQP_1_0"]
    assert ENGINES.versions(["AMQP_0_9_1", "AMQP_0_10"]) == frozenset({AmqpVersion.V0_9_1})
    assert ENGINES.versions(["AMQP_1_0"]) == frozenset({AmqpVersion.V1_0, AmqpVersion.V1_0_SASL})
    assert ENGINES.factory(AmqpVersion.V1_0) is ENGINES.factory(AmqpVersion.V1_0_SASL)
    assert ENGINES.factory(AmqpVersion.V1_0) is not ENGINES.factory(AmqpVersion.V0_9_1)
    assert ENGINES.describe() == "AMQP 0-8, 0-9, 0-9-1, 1.0"
    everything = ENGINES.versions(ENGINES.protocols)
    assert ENGINES.preferred_header(everything) == HEADER_FOR[AmqpVersion.V0_9_1]
    assert ENGINES.preferred_header(frozenset({AmqpVersion.V0_8})) == HEADER_FOR[AmqpVersion.V0_8]


def test_registering_an_engine_is_all_it_takes_to_implement_a_protocol() -> None:
    def factory(host: Any, version: AmqpVersion, remote_host: str, remote_port: int,
                port_name: str) -> Engine:
        raise AssertionError("not started here")

    registry = EngineRegistry(["broker.protocol.amqp0_9_1"])
    registry.register(EngineSpec("AMQP_1_0", (AmqpVersion.V1_0, AmqpVersion.V1_0_SASL), factory))
    assert registry.protocols == ["AMQP_0_8", "AMQP_0_9", "AMQP_0_9_1", "AMQP_1_0"]
    assert registry.versions(["AMQP_1_0"]) == frozenset({AmqpVersion.V1_0, AmqpVersion.V1_0_SASL})
    assert registry.factory(AmqpVersion.V1_0_SASL) is factory
    assert registry.describe() == "AMQP 0-8, 0-9, 0-9-1, 1.0"
    with pytest.raises(ValueError, match="already registered"):
        registry.register(EngineSpec("AMQP_1_0_again", (AmqpVersion.V1_0,), factory))
