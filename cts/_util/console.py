"""What a run prints: a console filter (details stay in ``run.log``) and the closing lines.

Hydra's logging configs (``conf/hydra/job_logging/cts.yaml``, ``conf/hydra/hydra_logging/cts.yaml``)
put :class:`ConsoleFilter` on the console handler only, so the job's ``run.log`` keeps every line.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Sequence

DETAIL = {"cts_detail": True}
"""``extra=`` of a log call whose line is a detail: ``run.log`` only (e.g. each built component)."""


class ConsoleFilter(logging.Filter):
    """Pass warnings and errors, and the INFO lines of the project's own loggers that are not details.

    Args:
        own: Logger name prefixes whose INFO lines reach the console (third-party INFO and DEBUG do not).
    """

    def __init__(self, own: Sequence[str] = ("cts", "hydra_plugins", "__main__")) -> None:
        super().__init__()
        self.own = tuple(own)

    def filter(self, record: logging.LogRecord) -> bool:
        """Whether ``record`` is printed on the console."""
        if record.levelno >= logging.WARNING:
            return True
        if record.levelno < logging.INFO or getattr(record, "cts_detail", False):
            return False
        return any(record.name == p or record.name.startswith(p + ".") for p in self.own)


def ui_command(tracking_uri: str) -> str:
    """The one command that shows a tracking store's runs (a server's address needs none: open it)."""
    if tracking_uri.startswith(("http://", "https://")):
        return f"open {tracking_uri}"
    return f"mlflow ui --backend-store-uri {shlex.quote(tracking_uri)}   (then open http://127.0.0.1:5000)"


def job_closing_lines(job_dir: str, run_id: str | None, experiment: str, tracking_uri: str) -> list[str]:
    """Where a finished single run's results are, and how to look at them.

    Args:
        job_dir: The job dir (records, summary, ``run.log``).
        run_id: The job's MLflow run (None when it has none).
        experiment: The run's MLflow experiment.
        tracking_uri: The MLflow store.
    """
    lines = [f"job dir:  {job_dir}  (summary.json, records.jsonl, run.log)"]
    if run_id:
        lines.append(f"MLflow:   run {run_id} in experiment '{experiment}'; look at it with:")
        lines.append(f"  {ui_command(tracking_uri)}")
    return lines


def sweep_closing_lines(sweep_dir: str, report: str | None, experiment: str, tracking_uri: str) -> list[str]:
    """Where a finished multirun's results are (once for the sweep), and how to look at them.

    Args:
        sweep_dir: The sweep dir (one dir per job).
        report: The sweep report's ``report.md`` (None when none was built).
        experiment: The jobs' MLflow experiment.
        tracking_uri: The MLflow store.
    """
    lines = [f"sweep dir: {sweep_dir}  (one dir per job)"]
    if report:
        lines.append(f"report:    {report}")
    lines.append(f"MLflow:    experiment '{experiment}', runs tagged cts.sweep_dir; look at them with:")
    lines.append(f"  {ui_command(tracking_uri)}")
    return lines
