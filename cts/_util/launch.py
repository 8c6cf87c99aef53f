"""One launch (:class:`Launch`): what a ``python run.py`` knows while its jobs run.

A launch is one single run, or one sweep from Hydra's ``on_multirun_start`` to its end. What it
knows lives in one object, never in module state: the sweep dir, the swept keys and the resume
command (:class:`SweepRecord`), the jobs' composed configs, the pre-flight's memo (endpoints
probed, completions checked, inputs read: :class:`Preflight`), the compose memo, the plan, the
tracking store and, under ``hydra/launcher=cts``, the sweep session that schedules the jobs.

:class:`cts.compose.callbacks.LaunchCallbacks` creates it at the start and ends it at the end,
and hands it explicitly to the pre-flight, the plan and the store's preparation. The cts
launcher takes it from the callbacks (Hydra's ``hydra_context.callbacks``) and runs each job in
a context where it is bound. A job's code, which Hydra calls with its config alone, finds it
with :func:`current_launch`: a context variable, so a job thread sees its own launch and a
second launch in one process (a notebook, a test session) starts from nothing.

Jobs in other processes or on other nodes (joblib, Slurm) have no launch: they read the record
the launching process wrote to ``<sweep dir>/sweep.json`` before the launch. This is the only
module that may hold launch state (``tests/test_launch_state.py``).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RECORD_FILE = "sweep.json"


@dataclass(frozen=True)
class SweepRecord:
    """One sweep, as its launching process saw it.

    Attributes:
        sweep_dir: The sweep's dir (absolute; a single run's dir for a single run).
        swept: The keys of the command-line overrides that sweep (``clarifier``, ``k``).
        resume: The command that reruns the sweep into the same dir (finished instances skipped).
    """

    sweep_dir: str
    swept: tuple[str, ...]
    resume: str

    def write(self) -> Path:
        """Write ``<sweep dir>/sweep.json`` (for jobs in other processes); returns its path."""
        path = Path(self.sweep_dir) / RECORD_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {"swept": list(self.swept), "resume": self.resume}
        path.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")
        return path

    @classmethod
    def read(cls, sweep_dir: str) -> SweepRecord | None:
        """The record in ``<sweep dir>/sweep.json``, or None when there is none (or it is unreadable)."""
        where = os.path.abspath(sweep_dir)
        try:
            data = json.loads((Path(where) / RECORD_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return cls(where, tuple(str(k) for k in data.get("swept", ())), str(data.get("resume") or ""))


@dataclass
class Preflight:
    """What the launch's pre-flight checked and read, for its jobs in this process to reuse.

    Attributes:
        probed: ``(api_base, api_key)`` of every endpoint that answered ``GET /models``.
        completed: Keys of the minimal completions that succeeded (:mod:`cts.compose.completion_probe`).
        inputs: Task inputs read before the start, by their input key (:func:`cts.compose.app.preload_inputs`).
        scoped: Per job config (by ``id``, with the config kept so the id stays its own): the copy of
            the keys its task calls that every check reads (:func:`cts.compose.probes.scoped_copy`).
        checked: The overrides of each job whose values and pre-flight passed here (its run does not repeat them).
    """

    probed: set[tuple[str, str | None]] = field(default_factory=set)
    completed: set[str] = field(default_factory=set)
    inputs: dict[str, Any] = field(default_factory=dict)
    scoped: dict[int, tuple[Any, Any]] = field(default_factory=dict)
    checked: set[tuple[str, ...]] = field(default_factory=set)


@dataclass(eq=False)
class Launch:
    """What one launch knows (see the module docstring).

    The record is frozen; ``jobs``, ``plan`` and ``store`` are set once by the callbacks before
    the jobs start; the memos grow while the launch runs and end with it.

    Attributes:
        record: The sweep dir, swept keys and resume command (a single run: its dir, no keys).
        multirun: Whether this is a sweep (``-m``).
        jobs: Every job's composed config (``DictConfig``), as the pre-flight saw them.
        plan: The plan (``cts.plan.SweepPlan``: forecast, actuals), a sweep's only.
        store: The tracking URI the callbacks prepared before the jobs (None: the jobs open it).
        preflight: Endpoints probed, completions checked, inputs read.
        composed: The compose memo of the sweep's job configs (``cts.sweep._compose.ComposedJobs``).
        instance_ids: The plan's instance ids per dataset and limit (jobs of a sweep share one read).
        store_failures: Why a tracking store could not be opened, by URI (later jobs fail at once).
        session: The sweep session (``cts.sweep.SweepSession``) while the cts launcher runs the jobs.
        stop_announced: The launcher keeps the stop signal and prints the sweep's resume command once.
    """

    record: SweepRecord
    multirun: bool = False
    jobs: tuple[Any, ...] = ()
    plan: Any = None
    store: str | None = None
    preflight: Preflight = field(default_factory=Preflight)
    composed: Any = None
    instance_ids: dict[str, tuple[str, ...]] = field(default_factory=dict)
    store_failures: dict[str, str] = field(default_factory=dict)
    session: Any = None
    stop_announced: bool = False

    @classmethod
    def begin(cls, run_dir: str, swept: Sequence[str] = (), resume: str = "", *, multirun: bool = False) -> Launch:
        """A launch into ``run_dir`` (the sweep dir, or a single run's dir) with nothing checked or read yet."""
        return cls(SweepRecord(os.path.abspath(run_dir), tuple(swept), resume), multirun=multirun)

    @property
    def sweep_dir(self) -> str:
        """The sweep's dir (absolute)."""
        return self.record.sweep_dir

    @contextlib.contextmanager
    def bound(self) -> Iterator[Launch]:
        """Within the block, :func:`current_launch` in this context is this launch."""
        token = _BOUND.set(self)
        try:
            yield self
        finally:
            _BOUND.reset(token)

    def bind(self) -> None:
        """Make this the launch of the calling context until :func:`unbind` (Hydra's start and end callbacks)."""
        _BOUND.set(self)

    def context(self) -> contextvars.Context:
        """A fresh context where this launch is bound and nothing else is set (a job thread runs in it)."""
        ctx = contextvars.Context()
        ctx.run(_BOUND.set, self)
        return ctx


_BOUND: contextvars.ContextVar[Launch | None] = contextvars.ContextVar("cts_launch", default=None)


def current_launch() -> Launch | None:
    """The launch this context runs in (None: no launch, e.g. a job in a joblib or Slurm worker, a test)."""
    return _BOUND.get()


def unbind() -> None:
    """The calling context runs in no launch any more (the launch has ended)."""
    _BOUND.set(None)


def sweep_record(sweep_dir: str) -> SweepRecord | None:
    """The record of the sweep whose dir is ``sweep_dir``: this context's launch's, else its ``sweep.json``, else None.

    An empty ``sweep_dir`` (a config whose job-name resolver predates the argument) means the
    sweep this context's launch runs, if any.
    """
    launch = current_launch()
    mine = launch.record if launch is not None and launch.multirun else None
    if not sweep_dir or (mine is not None and mine.sweep_dir == os.path.abspath(sweep_dir)):
        return mine
    return SweepRecord.read(sweep_dir)


def swept_keys_of(sweep_dir: str) -> tuple[str, ...] | None:
    """The swept keys of the sweep in ``sweep_dir`` (None when no record says)."""
    record = sweep_record(sweep_dir)
    return None if record is None else record.swept
