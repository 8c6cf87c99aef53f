"""tests/prewarmed.py: a forked command behaves as the same command in a fresh interpreter."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.prewarmed import FORK_SWITCH, run_script

SCRIPT = """
import atexit, json, os, sys, threading, time
atexit.register(lambda: print("atexit ran"))
threading.Thread(target=lambda: (time.sleep(0.2), print("thread joined"))).start()
print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "mark": os.environ.get("MARK"), "path0": sys.path[0]}))
print("to stderr, 中文", file=sys.stderr)
what = sys.argv[1]
if what == "raise":
    raise KeyError("boom")
if what == "message":
    sys.exit("a message")
sys.exit(int(what))
"""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "tool" / "script.py"
    path.parent.mkdir()
    path.write_text(SCRIPT, encoding="utf-8")
    return path


def both(monkeypatch: pytest.MonkeyPatch, *args: str, **kwargs: object) -> tuple[subprocess.CompletedProcess[str], ...]:
    forked = run_script(list(args), **kwargs)  # type: ignore[arg-type]
    monkeypatch.setenv(FORK_SWITCH, "0")
    fresh = run_script(list(args), **kwargs)  # type: ignore[arg-type]
    monkeypatch.delenv(FORK_SWITCH)
    return forked, fresh


@pytest.mark.parametrize("what", ["0", "3", "raise", "message"])
def test_a_forked_command_ends_as_a_fresh_one(script: Path, tmp_path: Path, monkeypatch, what: str) -> None:
    env = {**os.environ, "MARK": "m"}
    forked, fresh = both(monkeypatch, str(script), what, cwd=tmp_path, env=env, timeout=60)
    assert forked.returncode == fresh.returncode == {"0": 0, "3": 3}.get(what, 1)
    assert forked.stdout == fresh.stdout  # argv, cwd, env, sys.path[0]; the thread joined, then atexit
    assert forked.stdout.endswith("thread joined\natexit ran\n")
    assert forked.stderr.splitlines()[0] == fresh.stderr.splitlines()[0] == "to stderr, 中文"
    assert forked.stderr.splitlines()[-1] == fresh.stderr.splitlines()[-1]  # the traceback's last line, or the message


def test_a_command_is_forked_from_a_warm_process_unless_its_start_up_differs(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("import os, sys; print('mlflow' in sys.modules, os.getppid() == int(sys.argv[1]))")
    here = str(os.getpid())
    assert run_script([str(probe), here], cwd=tmp_path).stdout.split() == ["True", "False"]  # a warm process's child
    assert run_script([str(probe), here], cwd=tmp_path, env={**os.environ, "PYTHONHASHSEED": "1"}).stdout.split() == [
        "False",
        "True",
    ]
    assert run_script(["-X", "utf8", str(probe), here], cwd=tmp_path).stdout.split() == ["False", "True"]


def test_a_copy_of_the_repo_imports_its_own_cts_never_the_checkouts(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    (copy / "cts").mkdir(parents=True)
    (copy / "cts" / "__init__.py").write_text("WHERE = 'copy'\n")
    (copy / "run.py").write_text("import cts; print(getattr(cts, 'WHERE', 'checkout'))\n")
    for _ in range(2):  # the second runs after the warm process learned the first's imports
        assert run_script([str(copy / "run.py")], cwd=tmp_path).stdout == "copy\n"
    (copy / "cts").rename(copy / "gone")
    assert run_script([str(copy / "run.py")], cwd=tmp_path).stdout == "checkout\n"  # installed cts, as in a shell


def test_a_module_runs_as_with_dash_m(tmp_path: Path) -> None:
    done = run_script(["-m", "json.tool", "--help"], cwd=tmp_path, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("usage: python -m json.tool"), done
    done = run_script(["-m", "cts.agreement", "--help"], cwd=tmp_path, timeout=120)
    assert done.returncode == 0 and "usage" in done.stdout.lower(), done.stderr[-2000:]


def test_a_command_past_its_timeout_is_killed_and_the_next_one_runs(tmp_path: Path) -> None:
    sleeper = tmp_path / "sleep.py"
    sleeper.write_text("import time; print('started', flush=True); time.sleep(60)")
    with pytest.raises(subprocess.TimeoutExpired) as caught:
        run_script([str(sleeper)], cwd=tmp_path, timeout=2)
    assert caught.value.stdout == "started\n"
    quick = tmp_path / "quick.py"
    quick.write_text("print('ok')")
    assert run_script([str(quick)], cwd=tmp_path, timeout=60).stdout == "ok\n"
