"""README.md, docs/ and the other READMEs: every relative link resolves, and no internal reference leaks in.

The documentation is for users: it must not point at files that are not
there, at headings that were renamed, or at how the project is developed
(planning documents beside the repository, issue numbers, work sessions).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
CODE = re.compile(r"`[^`\n]*`")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
# What belongs to the project's own process, not to its users.
INTERNAL = [
    re.compile(r"\.\./shared"),
    re.compile(r"\bissues?\b", re.I),
    re.compile(r"\bhelpers?\b", re.I),
    re.compile(r"\b(?:earlier|previous|this|next|last|work(?:ing)?)\s+sessions?\b", re.I),
    re.compile(r"\bsessions'", re.I),
    re.compile(r"\bhouse plan\b", re.I),
    re.compile(r"\bthe lead\b", re.I),
]


def _documents() -> list[Path]:
    """README.md, docs/ and the READMEs they link to (benchmarks, integration tests, notebooks)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
            *(ROOT / name / "README.md" for name in ("bench", "notebooks", "tests/integration"))]


def _prose(text: str) -> str:
    """The text without code blocks and code spans (their brackets are not links)."""
    return CODE.sub("", FENCE.sub("", text))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        slug = _slug(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _broken_links(path: Path) -> list[str]:
    broken = []
    for target in LINK.findall(_prose(path.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):
            continue                                    # http:, https:, mailto: ...
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(f"{target}: no heading '#{anchor}' in {linked.name}")
    return broken


def test_the_front_door_links_the_documentation_index() -> None:
    assert "(docs/README.md)" in (ROOT / "README.md").read_text(encoding="utf-8")
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    for page in sorted((ROOT / "docs").glob("*.md")):
        if page.name != "README.md":
            assert f"]({page.name})" in index, f"docs/README.md does not list {page.name}"


@pytest.mark.parametrize("path", _documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    assert _broken_links(path) == []


@pytest.mark.parametrize("path", _documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_internal_references(path: Path) -> None:
    found = [f"{number}: {line.strip()}"
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             for pattern in INTERNAL if pattern.search(line)]
    assert found == []


def test_the_checks_catch_what_they_are_for(tmp_path: Path) -> None:
    """A broken link, a renamed heading and an internal reference are all caught."""
    (tmp_path / "a.md").write_text("# Title\n\n## Some `code` heading: here\n", encoding="utf-8")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#some-code-heading-here) [gone](missing.md) [renamed](a.md#old) "
                    "`[in code](nowhere.md)` [web](https://example.org/x)\n", encoding="utf-8")
    assert [problem.split(":")[0] for problem in _broken_links(page)] == ["missing.md", "a.md#old"]
    assert [p.pattern for p in INTERNAL if p.search("as issue 10 asked")] == [r"\bissues?\b"]
    assert not any(p.search("a session of its connection; SparkSession") for p in INTERNAL)
