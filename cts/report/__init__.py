"""Paper-style sweep reports: tables (Markdown, CSV, LaTeX) and plots from a sweep's jobs.

A sweep is read from a Hydra multirun dir (one subdir per job with
``summary.json`` + ``records.jsonl``) or from an MLflow experiment (job runs
tagged ``cts.kind=job``, artifacts downloaded). Every number is recomputed
from the records, so a report never depends on which metrics a job logged:

* Tables 2/6  ``scores``: mean (delta vs orig), p50, p90 per system and k;
  the orig row pools the orig arms of the jobs at that k.
* Table 3     ``delta_ci``: paired bootstrap CI of the delta (:func:`cts.stats.bootstrap.paired_bootstrap_ci`).
* Table 4     ``ua_diagnostics``: ua_unknown_rate, cq_region_rate.
* Table 5     ``region_only``: #region-only questions, region-only unknown rate.
* Table 7     ``all_unknown``: all_unknown rate and known_cnt distribution.
* Table 8     ``region_only_range``: range of turn-level region-only unknown rates.
* Table 10    ``turn_region_only``: region-only count and unknown rate per turn.
* extra       ``qtype_unknown``: question-type shares and unknown rate per type.
* beyond      ``batch_vs_sequential``, ``gating`` (post hoc, :mod:`cts.report.gate_evaluation`) and
  ``frontier`` (cost-quality), from :mod:`cts.report.beyond`.

Plots: ``score_vs_k.png`` (mean score and delta vs k per clarifier, 95% CI bars),
``unknown_vs_region.png`` (UA unknown rate vs region-question rate), and
``frontier.png`` / ``score_vs_questions.png`` (the cost-quality frontier).

Command line::

    python -m cts.report outputs/multirun/2025-01-01_12-00-00
    python -m cts.report cts --tracking-uri sqlite:///outputs/mlflow.db --out outputs/reports/cts
"""

from cts.report.build import ReportResult, ReportSettings, build_sweep_report, log_sweep_report
from cts.report.jobs import Job, load_jobs
from cts.report.tables import Table

__all__ = ["Job", "ReportResult", "ReportSettings", "Table", "build_sweep_report", "load_jobs", "log_sweep_report"]
