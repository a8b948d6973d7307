"""What every harness checks besides "no exception but the decoder's own".

A decoder's contract (docs/fuzzing.md): malformed input raises the module's
own error, naming what was wrong; an engine answers it with the protocol's
error (a close) and never lets an exception out; nothing is buffered beyond
the limit the protocol negotiated; nothing hangs.  The fuzzer counts any
exception a harness lets out as a crash, so a broken contract is raised here
as :class:`ContractViolation`.

The engines catch every exception themselves (a bug must not take the broker
down) and log it as an internal error: :func:`no_internal_error` turns such a
log record back into the exception it carried.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Iterator
from typing import Any
from contextlib import contextmanager


class ContractViolation(AssertionError):
    """A decoder or engine broke its contract on this input."""


class _Faults(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


_FAULTS = _Faults()
_BROKER = logging.getLogger("broker")
_BROKER.addHandler(_FAULTS)     # also keeps the broker's warnings off the fuzzer's output


@contextmanager
def no_internal_error() -> Iterator[None]:
    """Raise :class:`ContractViolation` when the broker logged an error inside the block
    (chained to the exception the log record carries, so its traceback shows the bug)."""
    _FAULTS.records.clear()
    yield
    if _FAULTS.records:
        record = _FAULTS.records[0]
        _FAULTS.records.clear()
        cause = record.exc_info[1] if record.exc_info else None
        raise ContractViolation(f"the broker logged an error: {record.getMessage()}") from cause


def bounded(what: str, size: int, limit: int) -> None:
    """``size`` bytes of ``what`` are within ``limit``."""
    if size > limit:
        raise ContractViolation(f"{what} holds {size} bytes, more than its bound of {limit}")


def agree(what: str, first: object, second: object,
          equal: Callable[[Any, Any], bool] = operator.eq) -> None:
    """Two results that must be the same (a round trip; a fast path and the generic one)."""
    if not equal(first, second):
        raise ContractViolation(f"{what}: {first!r} != {second!r}")
