"""The code generators of ``tools/``, loaded as modules by the tests that check their output."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_generator(name: str) -> ModuleType:
    """``tools/<name>.py`` as a module (a script there, not a package member)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = generator          # dataclasses look their module up
    try:
        spec.loader.exec_module(generator)
    finally:
        del sys.modules[spec.name]
    return generator
