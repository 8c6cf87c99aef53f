"""``python run.py ...`` for tests, forked from a process that has already imported what it needs.

A fresh ``python run.py`` spends about 2 s of CPU importing MLflow, Hydra, pandas, SciPy and cts
before it runs a line of the job, and the suite starts about 200 of them. :func:`run_script` runs
the same command in a child forked from a *warm* process, which imported those modules once and
then waits, single-threaded, for commands. The child takes the command's working directory,
environment, ``sys.argv`` and standard streams, runs the script as ``__main__``, joins its threads
and runs its exit handlers as an interpreter would, and exits with the command's status. It is a
process of its own: its own pid, signals, files and exit status.

What the warm process imports:

- :data:`PRELOAD` at its start;
- after each command, what that command imported from the interpreter's own libraries (stdlib and
  site-packages), so the next command finds it imported;
- cts and ``hydra_plugins`` only in the warm process for this checkout's own scripts (``run.py``,
  ``-m cts...`` from the checkout). A script elsewhere (a test's copy of the repo, an old commit) gets a warm process
  that never imports them: its own code is what it runs.

What a fork cannot give is a fresh interpreter. So a command runs as a plain subprocess when:

- it passes interpreter options (``python -X importtime run.py``; ``-m module`` is not one);
- its environment differs in what the interpreter or a preloaded library reads as it starts
  (:data:`START_UP`: ``PYTHON*``, ``LANG``, ``LC_*``, ``LITELLM_*``);
- ``CTS_TEST_FORK=0`` is set: the whole suite then runs on plain subprocesses, the check that
  forking changes no result.

Tests about start-up itself (what a process imports, how long it takes, how it takes a signal)
call :mod:`subprocess` directly, as do tests that signal or stream a command while it runs. The
hash seed is the warm process's, so two commands of one session share it: a test that compares two
runs for an order that must not depend on it runs them as plain subprocesses.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PRELOAD = ("mlflow", "mlflow.tracking", "hydra", "omegaconf", "pandas", "numpy", "scipy.stats", "sqlalchemy")
"""What a warm process imports as it starts: the stack's costly part."""

START_UP = ("PYTHON", "LANG", "LC_", "LITELLM_")
"""Prefixes of the variables read as an interpreter or a preloaded library starts: a command that sets
one of them otherwise than this process gets a fresh interpreter."""

FORK_SWITCH = "CTS_TEST_FORK"

_WARM = """
import sys
sys.path.insert(0, sys.argv[1])
from tests.prewarmed import PRELOAD, serve
if "--own" not in sys.argv:
    del sys.path[0]  # this checkout stays first only where its scripts run: python run.py starts so
if "" in sys.path:
    sys.path.remove("")  # -c's working dir: a script's sys.path starts with its own dir instead
for name in PRELOAD:
    __import__(name)
serve(sys.argv[2:])
"""

_idle: dict[bool, list[subprocess.Popen[str]]] = {True: [], False: []}
_lock = threading.Lock()
_learn = True
"""False once a warm process exited because an import it learned left a thread running."""


def run_script(
    argv: Sequence[str],
    *,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([sys.executable, *argv], capture_output=True, text=True, ...)``, forked when it can be.

    ``argv`` starts with a script (``run.py``) or with ``-m`` and a module.
    """
    cwd = str(cwd if cwd is not None else os.getcwd())
    env = dict(os.environ if env is None else env)
    if not _forkable(argv, env):
        done = subprocess.run(
            [sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    else:
        own = _own(argv, cwd)
        warm = _take(own)
        try:
            done = _run_in(warm, list(argv), cwd, env, timeout)
        except BaseException:
            warm.kill()  # it may still owe an answer: never handed out again
            raise
        _give_back(warm, own)
    return done


def _forkable(argv: Sequence[str], env: Mapping[str, str]) -> bool:
    """A script or a module (no interpreter options), under this interpreter's start-up environment."""
    if (
        not argv
        or (argv[0].startswith("-") and argv[0] != "-m")
        or "0" in (env.get(FORK_SWITCH), os.environ.get(FORK_SWITCH))
    ):
        return False
    here = {k: v for k, v in os.environ.items() if k.startswith(START_UP)}
    return here == {k: v for k, v in env.items() if k.startswith(START_UP)}


def _own(argv: Sequence[str], cwd: str) -> bool:
    """This checkout's own script or module (it may import this checkout's cts), not a copy's."""
    if argv[0] == "-m":
        return Path(cwd).resolve() == REPO
    return (Path(cwd) / argv[0]).resolve().parent == REPO


def _take(own: bool) -> subprocess.Popen[str]:
    global _learn
    with _lock:
        while _idle[own]:
            warm = _idle[own].pop()
            if warm.poll() is None:
                return warm
            _learn = _learn and warm.returncode != 3
    flags = [*(["--learn"] if _learn else []), *(["--own"] if own else [])]
    return subprocess.Popen(
        [sys.executable, "-c", _WARM, str(REPO), *flags],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


def _give_back(warm: subprocess.Popen[str], own: bool) -> None:
    with _lock:
        if warm.poll() is None:
            _idle[own].append(warm)


def _run_in(
    warm: subprocess.Popen[str], argv: list[str], cwd: str, env: dict[str, str], timeout: float | None
) -> subprocess.CompletedProcess[str]:
    assert warm.stdin is not None and warm.stdout is not None
    answers = warm.stdout
    with tempfile.TemporaryDirectory(prefix="cts-cli-") as tmp:
        out, err, learn = (str(Path(tmp) / name) for name in ("stdout", "stderr", "learn"))
        request = {"argv": argv, "cwd": cwd, "env": env, "stdout": out, "stderr": err, "learn": learn}
        warm.stdin.write(json.dumps(request) + "\n")
        warm.stdin.flush()
        started = answers.readline()
        if not started:
            raise RuntimeError(f"the warm process exited ({warm.wait()}) before it forked {argv}")
        pid = int(json.loads(started)["pid"])
        done: list[int] = []
        reader = threading.Thread(
            target=lambda: done.append(int(json.loads(answers.readline())["status"])), daemon=True
        )
        reader.start()
        reader.join(timeout)
        if not done:
            os.kill(pid, signal.SIGKILL)
            reader.join()
            stdout, stderr = Path(out).read_text(errors="replace"), Path(err).read_text(errors="replace")
            raise subprocess.TimeoutExpired([sys.executable, *argv], timeout or 0, stdout, stderr)
        stdout, stderr = Path(out).read_text(errors="replace"), Path(err).read_text(errors="replace")
        return subprocess.CompletedProcess([sys.executable, *argv], done[0], stdout, stderr)


def serve(flags: Sequence[str]) -> None:
    """The warm process: for each request line, fork a child that runs it; answer its pid, then its status.

    With ``--learn`` it then imports what the child imported (see the module docstring; ``--own``:
    cts and ``hydra_plugins`` too). An import that leaves a thread running would make the next fork
    unsafe: the process then exits with status 3, and the tests start warm processes that learn nothing.
    """
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request, "--own" in flags)  # never returns
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        learned = Path(request["learn"])
        names = learned.read_text().split() if "--learn" in flags and learned.exists() else []  # before the answer
        print(json.dumps({"status": os.waitstatus_to_exitcode(status)}), flush=True)
        _import(names)


def _import(names: list[str]) -> None:
    for name in names:
        try:
            __import__(name)
        except BaseException:  # noqa: BLE001, S112 - a module that imports only in its own context: left to the child
            continue
    if threading.active_count() > 1:
        os._exit(3)


def _child(request: dict, own: bool) -> None:
    """Become the command: its cwd, environment, argv and streams; run it; exit as an interpreter would."""
    import atexit
    import runpy
    import traceback

    code = 1
    warm = set(sys.modules)
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
        script, *args = request["argv"]
        try:
            if script == "-m":  # python -m module: sys.path starts with the working dir
                sys.path.insert(0, os.getcwd())
                sys.argv = ["-m", *args[1:]]
                runpy.run_module(args[0], run_name="__main__", alter_sys=True)
            else:
                sys.path.insert(0, os.path.dirname(os.path.realpath(script)))
                sys.argv = [script, *args]
                runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = _exit_code(exc.code)
        except BaseException:  # noqa: BLE001 - what an interpreter prints for an uncaught exception
            traceback.print_exc()
        threading._shutdown()  # type: ignore[attr-defined]  # join non-daemon threads, as at interpreter exit
        atexit._run_exitfuncs()
        Path(request["learn"]).write_text("\n".join(_imported_since(warm, own)))
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001, S110 - a closed stream: nothing left to write
                pass
        os._exit(code)


def _imported_since(warm: set[str], own: bool) -> list[str]:
    """Modules imported since ``warm`` from the interpreter's libraries (``own``: and cts's), in import order."""
    import sysconfig

    roots = tuple({sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")})
    ours = ("cts", "hydra_plugins") if own else ()
    return [
        name
        for name, module in list(sys.modules.items())
        if name not in warm
        and name != "__main__"
        and (str(getattr(module, "__file__", None) or "").startswith(roots) or name.split(".")[0] in ours)
    ]


def _exit_code(code: object) -> int:
    """``sys.exit``'s argument as the status an interpreter exits with (a message goes to stderr)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1
