"""A harness that breaks on purpose, for the fuzzing runner's own tests (tests/unit/test_fuzzing.py):
an input starting ``CRASH`` raises, one starting ``HANG`` never returns."""

from __future__ import annotations

import time


def one_input(data: bytes) -> None:
    if data.startswith(b"CRASH"):
        raise ValueError(f"the canary fell over on {len(data)} bytes")
    if data.startswith(b"HANG"):
        while True:
            time.sleep(0.05)


def seeds() -> list[bytes]:
    return [b"fine"]
