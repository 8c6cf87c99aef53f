"""Plan before you pay: a sweep's cost and time forecast, the spend-limit check, and the sample size a claim needs.

- ``python run.py -m ... plan=true``: the slice's own cost said first (:mod:`cts.plan.prior`), a
  calibration slice of every job (:mod:`cts.plan.calibrate`), then the forecast (:mod:`cts.plan.forecast`:
  unknown where the slice could not measure) per job and for the sweep, its wall time from the simulated
  schedule (:mod:`cts.plan.schedule`, :mod:`cts.plan.walltime`, :mod:`cts.plan.clock`,
  :mod:`cts.plan.report_time`), printed and written to ``<sweep>/plan/forecast.{md,csv}`` and MLflow;
  a forecast over ``services.llm.spend.max_usd`` stops the sweep before the main run
  (:mod:`cts.plan.limit`, :mod:`cts.plan.sweep`). ``plan=only`` stops after the forecast.
- Every sweep writes what it did to ``<sweep>/sweep_actual.json``; after a forecast, it is compared with it.
- ``python -m cts.plan <sweep dir> --delta 2 --power 0.8``: the sample size (:mod:`cts.plan.sample_size`).
"""

from cts.plan.sweep import SweepPlan, after_sweep, before_launch

__all__ = ["SweepPlan", "after_sweep", "before_launch"]
