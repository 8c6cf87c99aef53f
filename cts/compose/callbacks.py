"""Hydra callbacks of a launch (:class:`LaunchCallbacks`): each hook walks the launch's steps in order.

The steps (check, probe, plan, store, run, report) are :data:`cts.compose.launch.steps.STEPS`;
a single run and a multirun walk the same ones. The callbacks own the launch
(:class:`cts._util.launch.Launch`): they begin it first and end it last.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from hydra.core.utils import JobReturn
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from cts import tracking
from cts._util.launch import Launch, unbind
from cts._util.naming import register_resolver
from cts.compose.launch import steps
from cts.compose.secret_files import hide_written_secrets
from cts.core.errors import exit_on_error

# Hydra imports this module (to build the callbacks) in the launching process and in
# launcher workers before any job's sub-dir is resolved: the naming resolver must exist by then.
register_resolver()


class LaunchCallbacks(Callback):
    """The launch's lifecycle, in the launching process (``hydra.callbacks.cts`` in ``conf/config.yaml``).

    Before any job: :func:`~cts.compose.launch.steps.begin`, then the steps before ``run``
    (check, probe, plan, store). After the jobs: the steps after it (report). Each hook turns a
    :class:`~cts.core.errors.CtsError` into its ``error:`` lines and exit status (Hydra would only warn).
    """

    def __init__(self) -> None:
        self._launch: Launch | None = None

    @property
    def launch(self) -> Launch | None:
        """The running launch (None before the start, after the end, and in a launcher's worker process)."""
        return self._launch

    def __getstate__(self) -> dict[str, Any]:
        """Without the launch: joblib and submitit pickle the callbacks for their workers, which read ``sweep.json``."""
        return {**self.__dict__, "_launch": None}

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Before any job of the sweep: every job's config is checked and its endpoints probed, once."""
        self._start(config, multirun=True)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Before a single run's job: the same steps, over its one job."""
        self._start(config, multirun=False)

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        """In the job's process, right after Hydra saved its ``.hydra/*.yaml``: mask the keys in them."""
        hide_written_secrets(config)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """After the sweep's jobs: the paper-style sweep report and where the results are. The launch ends."""
        self._finish(config, multirun=True)

    def on_run_end(self, config: DictConfig, job_return: JobReturn | None = None, **kwargs: Any) -> None:
        """After a single run's job: where its results are and how to look at them. The launch ends."""
        self._finish(config, multirun=False, job_return=job_return)

    def _start(self, config: DictConfig, *, multirun: bool) -> None:
        with exit_on_error(), self._ended_on_error():
            at = steps.begin(config, multirun=multirun)
            self._begin(at.launch)
            steps.walk(steps.before_jobs(), at)

    def _finish(self, config: DictConfig, *, multirun: bool, job_return: JobReturn | None = None) -> None:
        launch = self._launch or Launch.begin(str(config.hydra.sweep.dir if multirun else "."), multirun=multirun)
        try:
            with exit_on_error():
                steps.walk(steps.after_jobs(), steps.Launching(config, launch, job_return))
        finally:
            self._end()

    def _begin(self, launch: Launch) -> Launch:
        """Start ``launch``: nothing of an earlier one (a notebook's) is reused, its endpoints are probed again."""
        self._launch = launch
        launch.bind()  # for the pre-flight here, and the jobs Hydra runs in this thread (basic launcher, a single run)
        return launch

    def _end(self) -> None:
        self._launch = None
        unbind()

    @contextlib.contextmanager
    def _ended_on_error(self) -> Iterator[None]:
        """A launch that fails (or stops: ``plan=only``) before its jobs ends here: Hydra calls no end hook then."""
        try:
            yield
        except BaseException:
            tracking.close_held_writers()  # started for traces the launch will not write
            self._end()
            raise
