"""``python -m <old module path>`` runs the module at its new path (cts._util.moved)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def python(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_python_m_of_an_old_module_path_runs_the_new_module(tmp_path: Path) -> None:
    usage = python("-m", "cts.gate", "--help", cwd=tmp_path)  # cts.gate is cts.gating.cli now
    assert usage.returncode == 2 and "python -m cts.gating outputs/multirun/" in usage.stderr, usage.stderr[-2000:]
    assert "Traceback" not in usage.stderr
    (tmp_path / "empty").mkdir()
    gated = python("-m", "cts.gate", str(tmp_path / "empty"), "gate=rules", cwd=tmp_path)  # main() itself ran
    assert gated.returncode == 1 and "no clarified job with records found in" in gated.stderr, gated.stderr[-2000:]


def test_python_m_of_an_old_package_path_runs_its_main(tmp_path: Path) -> None:
    """A package moved under an old name: runpy finds ``__main__`` on the new package's path."""
    script = (
        "import runpy, sys\n"
        "from cts._util.moved import MOVED\n"
        "MOVED['cts.old_plan'] = 'cts.plan'\n"
        "sys.argv = ['cts.old_plan', '--help']\n"
        "runpy.run_module('cts.old_plan', run_name='__main__', alter_sys=True)\n"
    )
    done = python("-c", script, cwd=tmp_path)
    assert done.returncode == 0 and "usage: python -m cts.plan" in done.stdout, done.stderr[-2000:]
