"""The walls between the packages: who may import ``deltalake``, and what ``broker`` may name.

* only the Delta table adapter imports ``deltalake``: ``lakehouse/delta_table.py``
  (writing, the latest state) and ``lakehouse/delta_versions.py`` (reading any
  version); every other module reaches delta-rs through them;
* ``broker/`` names no module of ``lakehouse`` or ``mgmt`` -- no import, no
  ``"module:attribute"`` string: it finds its store, management and commands
  through entry points only, which ``pyproject.toml`` declares;
* every entry point ``pyproject.toml`` declares is installed (``make
  install``) and loads.
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("broker", "lakehouse", "mgmt")
#: the modules allowed to import deltalake: the table adapter's two halves
TABLE_ADAPTER = (Path("lakehouse/delta_table.py"), Path("lakehouse/delta_versions.py"))
#: a reference to a module of lakehouse or mgmt: ``lakehouse``, ``mgmt.plugin:HttpManagement``
OTHER_PACKAGE = re.compile(r"^(lakehouse|mgmt)(\.\w+)*(:\w+)?$")


def _modules(*packages: str) -> Iterator[tuple[Path, ast.Module]]:
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path.relative_to(ROOT), ast.parse(path.read_text(), str(path))


def _imported(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """(line, module) for every import, including ``importlib.import_module("...")`` with a literal."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.lineno, node.module
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) \
                in ("import_module", "__import__") and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            yield node.lineno, node.args[0].value


def _docstrings(tree: ast.Module) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and node.body and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant):
            found.add(id(node.body[0].value))
    return found


def test_only_the_table_adapter_imports_deltalake() -> None:
    importers = {f"{path}:{line}" for path, tree in _modules(*SOURCES) for line, name in _imported(tree)
                 if name.split(".")[0] == "deltalake" and path not in TABLE_ADAPTER}
    assert importers == set(), "import deltalake only in lakehouse/delta_table.py and delta_versions.py"
    for adapter in TABLE_ADAPTER:
        assert any(name.split(".")[0] == "deltalake"
                   for _, name in _imported(ast.parse((ROOT / adapter).read_text())))


def test_broker_names_no_lakehouse_or_mgmt_module() -> None:
    offenders = []
    for path, tree in _modules("broker"):
        offenders += [f"{path}:{line}: import {name}" for line, name in _imported(tree)
                      if name.split(".")[0] in ("lakehouse", "mgmt")]
        docstrings = _docstrings(tree)
        offenders += [f"{path}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
                      if isinstance(node, ast.Constant) and isinstance(node.value, str)
                      and id(node) not in docstrings and OTHER_PACKAGE.match(node.value)]
    assert offenders == [], "broker/ finds lakehouse and mgmt through entry points only"


def test_the_walls_are_seen() -> None:
    """The checks above would see a violation (they are not vacuous)."""
    tree = ast.parse('import deltalake\nfrom deltalake.table import DeltaTable\n'
                     'importlib.import_module("lakehouse.config_store")\nX = "mgmt.plugin:HttpManagement"\n')
    assert [name for _, name in _imported(tree)] == ["deltalake", "deltalake.table", "lakehouse.config_store"]
    assert OTHER_PACKAGE.match("mgmt.plugin:HttpManagement") and not OTHER_PACKAGE.match("management")


def test_every_declared_entry_point_is_installed_and_loads() -> None:
    """``pyproject.toml``'s entry points are what the broker finds: run ``make install`` if not."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert {"deltamq.stores", "deltamq.management", "deltamq.commands"} <= set(declared)
    for group, plugins in declared.items():
        installed = {ep.name: ep for ep in entry_points(group=group)}
        for name, target in plugins.items():
            assert name in installed, f"entry point {group}:{name} is not installed: run make install"
            assert installed[name].value == target, f"{group}:{name} is installed as" \
                f" {installed[name].value}, declared as {target}: run make install"
            loaded = installed[name].load()
            module = loaded.__module__.split(".")[0]
            assert module in SOURCES
            # the module comes from this checkout (PYTHONPATH over another editable install too)
            assert Path(__import__(loaded.__module__, fromlist=["_"]).__file__).is_relative_to(ROOT)
