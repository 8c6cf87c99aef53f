"""Every relative link in the user docs resolves: the file exists, and so does the heading it names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"(?ms)^```.*?^```")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def _pages() -> list[Path]:
    return [REPO / "README.md", REPO / "benchmarks" / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    plain = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", plain).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    """The anchors of ``page``'s headings, with GitHub's ``-1``, ``-2`` suffixes for repeats."""
    seen: dict[str, int] = {}
    anchors: set[str] = set()
    for heading in re.findall(r"(?m)^#{1,6} (.+)$", FENCE.sub("", page.read_text(encoding="utf-8"))):
        slug = _slug(heading)
        n = seen.get(slug, 0)
        anchors.add(slug if n == 0 else f"{slug}-{n}")
        seen[slug] = n + 1
    return anchors


def _links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return [a or b for a, b in LINK.findall(text)]


def _problem(page: Path, target: str) -> str | None:
    """Why ``target`` (a link in ``page``) does not resolve, or None when it does."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: are not checked offline
        return None
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    if not dest.exists():
        return f"{target}: no file {dest.name} in {dest.parent.name}/"
    if anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
        return f"{target}: no heading with anchor #{anchor} in {dest.name}"
    return None


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    problems = [p for t in _links(page) if (p := _problem(page, t))]
    assert not problems, "\n".join(problems)


def test_the_checker_catches_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "a.md"
    page.write_text("# Top\n\n## Run `it` now\n\n[x](#run-it-now) [y](missing.md) [z](#nowhere)\n", encoding="utf-8")
    (tmp_path / "b.md").write_text("# B\n", encoding="utf-8")
    found = [_problem(page, t) for t in _links(page)]
    assert found[0] is None and "no file" in str(found[1]) and "#nowhere" in str(found[2])
    assert _problem(page, "b.md#b") is None and _problem(page, "https://example.org/x") is None
