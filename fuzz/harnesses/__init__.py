"""The harnesses: every module of this package is one, named after the module.

A harness module defines

* ``one_input(data: bytes) -> None``: hand ``data`` to the decoder and check its
  contract; return quietly when the decoder accepted the input or refused it
  with its own error, raise (anything) when it broke the contract;
* ``seeds() -> list[bytes]``: valid encodings to start from (the seed corpus);
* optionally ``MAX_LEN``: the longest input worth trying (default 4096 bytes).

Adding a decoder's harness is adding one such module; the runner, the seed
writer and the tests find it by listing this package.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

DEFAULT_MAX_LEN = 4096


def names() -> list[str]:
    """Every harness, by name (its module's name), sorted."""
    return sorted(info.name for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_"))


def load(name: str) -> ModuleType:
    """The harness module ``name``; ValueError naming the harnesses there are when there is none.

    A dotted name is a module path: a harness kept elsewhere (the runner's own tests use one).
    """
    if "." in name:
        return importlib.import_module(name)
    if name not in names():
        raise ValueError(f"no fuzzing harness {name!r}; there are: {', '.join(names())}")
    return importlib.import_module(f"{__name__}.{name}")


def max_len(harness: ModuleType) -> int:
    return int(getattr(harness, "MAX_LEN", DEFAULT_MAX_LEN))
