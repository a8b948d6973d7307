"""The committed method tables are exactly what the generator makes from the specs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SPECS = ROOT / "specs"


def test_methods_module_is_up_to_date_with_the_specs() -> None:
    spec = importlib.util.spec_from_file_location("gen_amqp0_9_1", ROOT / "tools" / "gen_amqp0_9_1.py")
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = generator          # dataclasses look their module up
    try:
        spec.loader.exec_module(generator)
    finally:
        del sys.modules[spec.name]
    committed = (ROOT / "broker" / "protocol" / "amqp0_9_1" / "methods.py").read_text()
    assert generator.generate(SPECS) == committed, "run: python tools/gen_amqp0_9_1.py"
