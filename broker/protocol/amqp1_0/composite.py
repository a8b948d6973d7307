"""Base classes of the generated described types, and their registration with the codec.

The spec's composite types are described lists (spec 1.3, "Composite Type
Representation"); a few restricted types are described too (the message
sections data, amqp-value, ... ).  :mod:`.definitions` generates one class
for each and registers its decoder by descriptor code and symbol and its
encoder by class.  The bases group them by what they ``provide`` in the spec,
so an engine can ask ``isinstance(x, Outcome)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any, ClassVar, TypeVar

from .decoding import DESCRIBED, Buffer, decode, describe
from .encoding import ENCODERS, encode
from .values import DecodeError, Symbol

C = TypeVar("C", bound="Composite")


class Composite:
    """A described type of the spec: ``NAME``, descriptor ``CODE`` and ``SYMBOL``."""

    __slots__ = ()
    NAME: ClassVar[str]
    CODE: ClassVar[int]
    SYMBOL: ClassVar[str]

    def encode(self) -> bytes:
        return encode(self)

    @classmethod
    def decode_from(cls: type[C], buffer: Buffer, offset: int = 0, end: int | None = None) -> tuple[C, int]:
        """Decode the described value at ``offset``, which must be a ``cls``: ``(value, next offset)``.

        ``Performative.decode_from(body)`` accepts any performative,
        ``Transfer.decode_from(body)`` only a transfer; anything else is a
        :class:`DecodeError` naming what was found.
        """
        value, next_offset = decode(buffer, offset, end)
        if not isinstance(value, cls):
            raise DecodeError(f"expected {_expected(cls)}, found {describe(value)}", offset)
        return value, next_offset


def _expected(cls: type) -> str:
    symbol = getattr(cls, "SYMBOL", None)
    return symbol if isinstance(symbol, str) else f"a {cls.__name__.lower()}"


class Performative(Composite):
    """The body of an AMQP frame (type 0x00): open, begin, attach, flow, transfer, ... (spec 2.7)."""

    __slots__ = ()


class SaslFrame(Composite):
    """The body of a SASL frame (type 0x01): mechanisms, init, challenge, response, outcome (spec 5.3.3)."""

    __slots__ = ()


class Section(Composite):
    """A section of a message (spec 3.2): header, annotations, properties, body, footer."""

    __slots__ = ()


class DeliveryState(Composite):
    """The state of a delivery (spec 3.4): received, the outcomes, transactional-state."""

    __slots__ = ()


class Outcome(Composite):
    """A terminal delivery state (spec 3.4): accepted, rejected, released, modified, declared."""

    __slots__ = ()


class LifetimePolicy(Composite):
    """The lifetime of a dynamic node (spec 3.5.10)."""

    __slots__ = ()


#: an instance with no slot filled yet (the generated decoders fill every slot at once)
new = object.__new__


def slot_setters(cls: type[Composite]) -> tuple[Callable[[Any, Any], None], ...]:
    """The ``__set__`` of each field's slot, in field order: setting a frozen dataclass's fields
    while it is being built, without the frozen ``__setattr__`` in the way."""
    return tuple(cls.__dict__[f.name].__set__ for f in fields(cls))  # type: ignore[arg-type]


def register(cls: type[Composite], decoder: Callable[[Buffer, int, int, int], tuple[Any, int]],
             encoder: Callable[[Any], bytes]) -> None:
    """Make ``decode`` build ``cls`` for its descriptor (code or symbol) and ``encode`` write it."""
    DESCRIBED[cls.CODE] = decoder
    DESCRIBED[Symbol(cls.SYMBOL)] = decoder
    ENCODERS[cls] = encoder
