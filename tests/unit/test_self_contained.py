"""A clone builds and tests with nothing beside it: no code reads the shared folder beside it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE = re.compile(r"\.\./shared|parents\[\d\]\s*/\s*[\"']shared[\"']|parent\s*/\s*[\"']shared[\"']")


def _tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z", "--", *patterns], cwd=ROOT,
                         capture_output=True, check=True).stdout
    return [ROOT / name for name in out.decode().split("\0") if name]


def test_no_code_reads_outside_the_clone() -> None:
    files = _tracked("*.py", "*.sh", "*.mjs", "Makefile", ".ci/*", "tools/*", "pyproject.toml")
    assert files, "git ls-files found nothing: not a checkout?"
    offenders = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
                 for path in files if path.is_file()
                 for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
                 if OUTSIDE.search(line) and path.name != "test_self_contained.py"]
    assert offenders == []


def test_the_generators_read_the_specs_kept_in_the_repository() -> None:
    text = (ROOT / "tools" / "gen_amqp0_9_1.py").read_text()
    for name in re.findall(r'specs / "([^"]+)"', text):
        assert (ROOT / "specs" / name).is_file(), f"specs/{name} is not in the repository"
