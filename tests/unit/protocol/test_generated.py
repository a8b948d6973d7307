"""The committed method tables are exactly what the generator makes from the specs."""

from __future__ import annotations

from tests.generators import ROOT, load_generator

SPECS = ROOT / "specs"


def test_methods_module_is_up_to_date_with_the_specs() -> None:
    generator = load_generator("gen_amqp0_9_1")
    committed = (ROOT / "broker" / "protocol" / "amqp0_9_1" / "methods.py").read_text()
    assert generator.generate(SPECS) == committed, "run: python tools/gen_amqp0_9_1.py"
