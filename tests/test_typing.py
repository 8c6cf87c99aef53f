"""What mypy checks: the entry point and the benchmarks too, and no silenced error without its code and why."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IGNORE = re.compile(r"#\s*type:\s*ignore(?P<rest>.*)$")
EXPLAINED = re.compile(r"^\[[a-z-]+(,[a-z-]+)*\]\s+#\s*\S")  # [code] then a comment saying why


def checked_files() -> list[Path]:
    files = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    return [p for f in files for p in ([REPO / f] if f.endswith(".py") else sorted((REPO / f).rglob("*.py")))]


def test_mypy_checks_run_py_and_the_benchmarks() -> None:
    files = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    assert {"cts", "hydra_plugins", "run.py", "benchmarks"} <= set(files)


def test_every_type_ignore_names_its_error_code_and_says_why() -> None:
    bare = [
        f"{path.relative_to(REPO)}:{n}"
        for path in checked_files()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if (m := IGNORE.search(line)) and not EXPLAINED.match(m["rest"])
    ]
    assert not bare, bare
