"""Statistics over per-instance scores: percentiles, paired bootstrap CIs, agreement (``bootstrap``)."""

from cts.stats.bootstrap import (
    MAX_BATCH_VALUES,
    Resampling,
    bootstrap_batch,
    cohen_kappa,
    kendall_tau,
    mean_ci,
    paired_bootstrap_ci,
)

__all__ = [
    "MAX_BATCH_VALUES",
    "Resampling",
    "bootstrap_batch",
    "cohen_kappa",
    "kendall_tau",
    "mean_ci",
    "paired_bootstrap_ci",
]
