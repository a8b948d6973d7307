"""The engine harnesses' seed corpora reach the multi-step SASL exchange: replayed, the SCRAM seeds
of ``amqp0_9_1_frames`` and ``amqp1_0_frames`` drive the real SCRAM server through both of its
steps (counted) and log in, so the fuzzer starts from inputs that cover that code."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from broker.protocol.amqp0_9_1.connection import AmqpConnection
from broker.protocol.amqp1_0.connection import AmqpConnection10
from broker.security.scram import ScramServer
from fuzz import harnesses
from fuzz.run import CORPUS


def _counting(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    calls: Counter[str] = Counter()
    for name in ("server_first", "server_final"):
        real = getattr(ScramServer, name)

        def counted(self: ScramServer, message: bytes, real: Any = real, name: str = name) -> bytes:
            answer: bytes = real(self, message)
            calls[name] += 1
            if self.complete:
                calls["logged in"] += 1
            return answer

        monkeypatch.setattr(ScramServer, name, counted)
    return calls


def _opened(monkeypatch: pytest.MonkeyPatch, engine: type) -> list[Any]:
    opened: list[Any] = []
    real = engine._open

    def recording(self: Any, *args: Any) -> None:
        real(self, *args)
        opened.append(self.principal)

    monkeypatch.setattr(engine, "_open", recording)
    return opened


@pytest.mark.parametrize("harness, engine", [("amqp0_9_1_frames", AmqpConnection),
                                             ("amqp1_0_frames", AmqpConnection10)])
def test_the_scram_seeds_in_the_corpus_log_in_through_both_steps(
        harness: str, engine: type, monkeypatch: pytest.MonkeyPatch) -> None:
    seeds = [path.read_bytes() for path in sorted((CORPUS / harness).iterdir())
             if b"SCRAM-SHA" in path.read_bytes()]
    assert len(seeds) >= 2, f"fuzz/corpus/{harness} has no SCRAM seed"
    calls = _counting(monkeypatch)
    opened = _opened(monkeypatch, engine)
    run = harnesses.load(harness).one_input
    for seed in seeds:
        run(seed)
    assert calls["server_first"] == calls["server_final"] == calls["logged in"] == len(seeds)
    assert [principal.name for principal in opened] == ["user"] * len(seeds)


def test_without_the_scram_seeds_the_exchange_is_not_reached(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the counts above would be without the seeds added for it: nothing (the check can fail)."""
    calls = _counting(monkeypatch)
    for harness in ("amqp0_9_1_frames", "amqp1_0_frames"):
        run = harnesses.load(harness).one_input
        for path in sorted((CORPUS / harness).iterdir()):
            if b"SCRAM-SHA" not in path.read_bytes():
                run(path.read_bytes())
    assert calls["server_final"] == 0
