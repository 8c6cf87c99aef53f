"""The user docs read in minutes: every page opens with its command, and its median sentence is short.

``python -m tests.e2e.test_doc_style`` prints each page's lines, words and median sentence length.
"""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
MAX_MEDIAN = 20  # words per sentence
FENCE = re.compile(r"(?ms)^```.*?^```")
END = re.compile(r"(?<=[.!?])\s+(?=[^a-z\s])")


def _pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def _units(text: str) -> list[str]:
    """Paragraphs and list items of ``text``'s prose: no code blocks, tables, headings or comments."""
    units: list[str] = []
    for block in re.split(r"\n\s*\n", FENCE.sub("\n\n", text)):
        lines = [ln for ln in block.splitlines() if not ln.lstrip().startswith(("|", "#", "<!--"))]
        item: list[str] = []
        for line in lines:
            if re.match(r"\s*(?:[-*]|\d+\.) ", line) and item:
                units.append(" ".join(item))
                item = []
            item.append(re.sub(r"^\s*(?:[-*]|\d+\.) ", "", line).strip())
        if item:
            units.append(" ".join(item))
    return [u for u in units if u.strip()]


def sentences(text: str) -> list[int]:
    """The word count of each sentence of ``text``'s prose."""
    counts = []
    for unit in _units(text):
        counts += [len(s.split()) for s in END.split(unit) if s.split()]
    return counts


def median_sentence(text: str) -> float:
    counts = sentences(text)
    return statistics.median(counts) if counts else 0.0


def _opening(text: str) -> str:
    """What comes after the page's title: its first non-empty block."""
    body = text.split("\n", 1)[1].lstrip("\n")
    return body.split("\n\n", 1)[0]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.name)
def test_the_median_sentence_is_short(page: Path) -> None:
    median = median_sentence(page.read_text(encoding="utf-8"))
    assert median <= MAX_MEDIAN, f"{page.name}: median sentence {median} words (at most {MAX_MEDIAN})"


@pytest.mark.parametrize("page", [p for p in _pages() if p.name != "guide.md"], ids=lambda p: p.name)
def test_each_page_opens_with_its_command(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert text.startswith("# "), f"{page.name}: no title"
    assert _opening(text).startswith("```"), f"{page.name}: the first block after the title is not a command"


HISTORY = re.compile(
    r"(?i)\bwe tried\b|\bbefore commit|\bcommits? [0-9a-f]{7}\b|\bthis version\b|\bin the order the work"
)


@pytest.mark.parametrize("page", [*_pages(), REPO / "benchmarks" / "README.md"], ids=lambda p: p.name)
def test_no_page_tells_the_history(page: Path) -> None:
    """Today's figures only: the history lives in git."""
    found = HISTORY.findall(page.read_text(encoding="utf-8"))
    assert not found, f"{page.name}: {found}"


def test_the_benchmarks_open_with_today_s_figures_and_their_commands() -> None:
    text = (REPO / "benchmarks" / "README.md").read_text(encoding="utf-8")
    sections = re.findall(r"(?m)^## (.+)$", FENCE.sub("", text))
    assert sections[0] == "Today's figures" and "Memory and fixed cost" in sections, sections
    table = text.split("## Today's figures", 1)[1].split("\n\n", 2)[1]
    rows = [r for r in table.splitlines() if r.startswith("|")][2:]
    assert len(rows) >= 8, table
    for row in rows:
        command = row.rstrip(" |").rsplit("|", 1)[1]
        assert "python" in command or "the same" in command, f"a figure without its command: {row}"
    assert median_sentence(text) <= MAX_MEDIAN


def test_the_measure_splits_prose_only() -> None:
    text = "# T\n\nOne two three. Four five.\n\n```bash\na b c d e f g h\n```\n\n| a | b |\n\n- six seven\n- eight\n"
    assert sentences(text) == [3, 2, 2, 1]
    assert sentences("Use `x.y` e.g. here. Next one") == [4, 2]


def main() -> None:
    """Print lines, words and the median sentence of each page given (default: docs/*.md)."""
    paths = [Path(p) for p in sys.argv[1:]] or _pages()
    for path in paths:
        text = path.read_text(encoding="utf-8")
        counts = sentences(text)
        p90 = statistics.quantiles(counts, n=10)[-1] if len(counts) > 1 else 0
        print(
            f"{path.name:24} {len(text.splitlines()):5} lines {len(text.split()):6} words "
            f"median {median_sentence(text):4} p90 {p90:5.1f}"
        )


if __name__ == "__main__":
    main()
