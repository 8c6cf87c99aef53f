"""A launch's steps (check, probe, plan, store, run, report), walked in order by its Hydra callbacks.

:mod:`cts.compose.launch.steps` declares them (:data:`~cts.compose.launch.steps.STEPS`);
:mod:`cts.compose.launch.jobs` says what the launch runs and where; :mod:`cts.compose.launch.report`
ends it. A single run and a multirun walk the same steps (:mod:`cts.compose.callbacks`).
"""
