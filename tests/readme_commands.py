"""The README's fenced blocks and the ``readme-test`` markers that classify them (tests/e2e/test_readme.py).

Every fenced block of the README, whatever its language, carries a marker: an HTML comment
on the last non-blank line before its opening fence (GitHub renders nothing for it)::

    <!-- readme-test: run <recipe> -->     tests/e2e/test_readme.py runs this block (its <recipe> tests)
    <!-- readme-test: skip (<reason>) -->  not runnable in the tests; the test reports why

A block with no marker, a malformed marker, a ``run`` of a recipe the tests do not know and a
known recipe with no block are all problems (:func:`marker_problems`), so a new recipe cannot
slip in untested and unexplained.
"""

from __future__ import annotations

import itertools
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

MARKER_START = "<!-- readme-test:"
_MARKER = re.compile(r"^<!-- readme-test: (?:run (?P<recipe>[a-z0-9-]+)|skip \((?P<reason>.*\S.*)\)) -->$")
_FENCE = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})\s*(?P<lang>[^`\s]*)")


@dataclass(frozen=True)
class Marker:
    """A block's classification: ``action`` is ``run`` (``arg`` = recipe) or ``skip`` (``arg`` = reason)."""

    action: str
    arg: str


@dataclass(frozen=True)
class Block:
    """One fenced block: 1-based line of its opening fence, info string, body, marker line (or None)."""

    line: int
    lang: str
    text: str
    marker_line: str | None


def blocks(markdown: str) -> list[Block]:
    """Every fenced block of ``markdown``, in order, with the marker line just before it (if any).

    Args:
        markdown: The README's text.
    """
    lines, found, i = markdown.splitlines(), [], 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, end = opening["fence"], i + 1
        while end < len(lines) and not _closes(lines[end], fence):
            end += 1
        before = [line.strip() for line in lines[:i] if line.strip()]
        marker = before[-1] if before and before[-1].startswith(MARKER_START) else None
        found.append(Block(i + 1, opening["lang"], "\n".join(lines[i + 1 : end]), marker))
        i = end + 1
    return found


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return stripped.startswith(fence) and set(stripped) == {fence[0]}


def marker(block: Block) -> Marker | None:
    """The block's parsed marker; None when it has none or the comment is malformed."""
    match = _MARKER.match(block.marker_line or "")
    if not match:
        return None
    return Marker("run", match["recipe"]) if match["recipe"] else Marker("skip", match["reason"].strip())


def marker_problems(found: list[Block], recipes: set[str]) -> list[str]:
    """What keeps ``found`` from being fully classified: one line per problem, empty when none.

    Args:
        found: The README's blocks.
        recipes: The recipe names the tests run.
    """
    problems, used = [], []
    for block in found:
        parsed = marker(block)
        where = f"README line {block.line} (```{block.lang})"
        if parsed is None and block.marker_line is None:
            problems.append(
                f"{where}: no marker; add `<!-- readme-test: run <recipe> -->` and a test,"
                " or `<!-- readme-test: skip (<why>) -->`"
            )
        elif parsed is None:
            problems.append(f"{where}: malformed marker {block.marker_line!r}")
        elif parsed.action == "run":
            used.append(parsed.arg)
            if parsed.arg not in recipes:
                problems.append(f"{where}: `run {parsed.arg}`, but tests/e2e/test_readme.py knows {sorted(recipes)}")
    problems += [f"recipe {name!r} is run by more than one block" for name in sorted(set(used)) if used.count(name) > 1]
    problems += [f"recipe {name!r} has no README block marked `run {name}`" for name in sorted(recipes - set(used))]
    return problems


def recipe(found: list[Block], name: str) -> Block:
    """The one block marked ``run <name>``.

    Raises:
        LookupError: No block (or several) is marked so.
    """
    matching = [b for b in found if marker(b) == Marker("run", name)]
    if len(matching) != 1:
        raise LookupError(f"{len(matching)} README blocks are marked `run {name}`")
    return matching[0]


def retarget(command: str, run_py: Path) -> str:
    """``command`` as typed from another directory: ``python run.py`` -> ``python <run_py>``.

    Raises:
        ValueError: ``command`` does not call ``python run.py``.
    """
    retargeted, n = re.subn(r"(?<![\w/.-])python run\.py(?=\s|$)", f"python {shlex.quote(str(run_py))}", command)
    if not n:
        raise ValueError(f"no `python run.py` in {command!r}")
    return retargeted


def swept_job_names(command: str) -> set[str]:
    """The job names a multirun of ``command`` makes: one per combination of its comma lists.

    Names carry the swept factors only, in command-line order (``clarifier=none,k=2``; cts._util.naming).
    """
    swept = [
        (key, value.split(","))
        for key, _, value in (word.partition("=") for word in shlex.split(command))
        if _ and "," in value
    ]
    return {
        ",".join(f"{key}={v}" for (key, _), v in zip(swept, combo, strict=True))
        for combo in itertools.product(*(values for _, values in swept))
    }
