"""One family of cts errors, turned into an exit in one place (cts.core.errors).

The rule: library code raises a ``CtsError``; only ``cts.core.errors`` (its ``_exit``, reached
through ``exit_on_error`` at run.py, the launch callbacks and the CLIs) ends the process.
"""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cts.core import errors
from cts.core.errors import (
    ConfigError,
    CtsError,
    Interrupted,
    LaunchDone,
    TrackingStoreError,
    exit_on_error,
    run_cli,
)
from tests.prewarmed import run_script

REPO = Path(__file__).resolve().parents[2]
PKG = REPO / "cts"
_EXIT = re.compile(r"SystemExit|sys\.exit")


def test_only_one_place_in_cts_ends_the_process() -> None:
    """``grep -rn "SystemExit\\|sys.exit" cts/`` finds the one function that turns errors into exits."""
    hits = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for path in sorted(PKG.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _EXIT.search(line)
    ]
    assert hits and all(h.startswith("cts/core/errors.py:") for h in hits), "\n".join(hits)
    tree = ast.parse((PKG / "core" / "errors.py").read_text(encoding="utf-8"))
    holders = {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and any(_EXIT.search(ast.unparse(s)) for s in node.body)
    }
    assert holders == {"_exit"}, holders


def test_the_scan_would_see_an_exit_elsewhere(tmp_path: Path) -> None:
    """The pattern matches both spellings the rule forbids (a scan that never matches proves nothing)."""
    assert _EXIT.search("    sys.exit(f'error: {e}')") and _EXIT.search("raise SystemExit(1)")
    assert not _EXIT.search("raise ConfigError('error: x')")


def test_every_cts_error_is_an_exception_not_an_exit() -> None:
    family = [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, CtsError)]
    assert len(family) >= 10
    for cls in family:
        assert issubclass(cls, Exception) and not issubclass(cls, SystemExit), cls
    from cts import tracking

    assert tracking.TrackingStoreError is TrackingStoreError
    assert not issubclass(tracking.TrackingStoreError, SystemExit)


def test_an_error_becomes_its_message_and_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop, exit_on_error():
        raise ConfigError("error: k: 0 is below 1")
    assert stop.value.code == "error: k: 0 is below 1"  # Python prints it on stderr, exit status 1
    with pytest.raises(SystemExit) as stop, exit_on_error():
        raise Interrupted(exit_code=130)  # its line was printed where the stop was seen
    assert stop.value.code == 130 and capsys.readouterr().err == ""
    with pytest.raises(SystemExit) as stop, exit_on_error():
        raise TrackingStoreError("the store is broken", exit_code=3)
    assert stop.value.code == 3 and capsys.readouterr().err == "the store is broken\n"
    with pytest.raises(SystemExit) as stop, exit_on_error():
        raise LaunchDone()
    assert stop.value.code == 0


def test_a_bug_keeps_its_traceback() -> None:
    with pytest.raises(KeyError), exit_on_error():
        raise KeyError("not a cts error")


def test_a_cli_exits_with_what_main_returns() -> None:
    for status, expected in ((0, 0), (None, 0), (2, 2)):
        with pytest.raises(SystemExit) as stop:
            run_cli(lambda status=status: status)
        assert stop.value.code == expected

    def failing() -> int:
        raise ConfigError("error: --labels: no such file")

    with pytest.raises(SystemExit) as stop:
        run_cli(failing)
    assert stop.value.code == "error: --labels: no such file"


def test_run_py_says_a_retired_name_in_one_line_and_exits_1() -> None:
    """The command line's refusal, raised as a ConfigError in run.py, reaches the user as before."""
    done = run_script(
        [str(REPO / "run.py"), "services.llm.model=x"],
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: services.llm.model=x: services.llm.model was renamed to services.llm.served_name")
    assert "Traceback" not in done.stderr
