"""Plan before you pay: a sweep's cost and time forecast, the spend-limit check, and the sample size a claim needs.

- ``python run.py -m ... plan=true``: a calibration slice of every job (:mod:`cts.plan.calibrate`),
  then the forecast (:mod:`cts.plan.forecast`) per job and for the sweep, printed and written to
  ``<sweep>/plan/forecast.{md,csv}`` and MLflow; a forecast over ``services.llm.spend.max_usd``
  stops the sweep before the main run (:mod:`cts.plan.sweep`).
- Every sweep writes what it did to ``<sweep>/sweep_actual.json``; after a forecast, it is compared with it.
- ``python -m cts.plan <sweep dir> --delta 2 --power 0.8``: the sample size (:mod:`cts.plan.sample_size`).
"""

from cts.plan.sweep import SweepPlan, after_sweep, before_launch

__all__ = ["SweepPlan", "after_sweep", "before_launch"]
