"""The walls of ARCHITECTURE.md that imports can break, checked on the source.

``broker/messaging`` (the protocol-neutral core) and ``lakehouse`` (the
tables) never import ``broker.protocol``: messages reach them as
:class:`~broker.messaging.message.Message` with a format tag, and formats are
resolved by tag through :mod:`broker.messaging.message_format`.  Checked by
walking every module's syntax tree (imports inside functions and under
``TYPE_CHECKING`` count too), so no test order or lazy import can hide one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = "broker.protocol"


def imported_modules(source: str, package: str) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``source``, a module of ``package``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def forbidden(modules: list[tuple[int, str]]) -> list[tuple[int, str]]:
    return [(line, module) for line, module in modules
            if module == FORBIDDEN or module.startswith(FORBIDDEN + ".")]


def offending_imports(directory: Path) -> list[str]:
    found = []
    for path in sorted(directory.rglob("*.py")):
        package = ".".join(path.relative_to(ROOT).parts[:-1])
        found += [f"{path.relative_to(ROOT)}:{line}: {module}"
                  for line, module in forbidden(imported_modules(path.read_text(), package))]
    return found


@pytest.mark.parametrize("package", ["broker/messaging", "lakehouse"])
def test_package_does_not_import_protocol_engines(package: str) -> None:
    assert offending_imports(ROOT / package) == []


@pytest.mark.parametrize("source", [
    "import broker.protocol.amqp0_9_1.properties",
    "from broker.protocol.amqp0_9_1 import properties",
    "from broker import protocol",
    "def f():\n    from ..protocol.amqp0_9_1.properties import FORMAT",
    "if TYPE_CHECKING:\n    from broker.protocol.engine import Engine",
])
def test_the_check_sees_every_kind_of_import(source: str) -> None:
    assert forbidden(imported_modules(source, "broker.messaging"))


def test_the_check_lets_the_rest_through() -> None:
    source = "from broker.messaging.message import Message\nfrom . import queue\nimport broker.protocolx"
    assert not forbidden(imported_modules(source, "broker.messaging"))
