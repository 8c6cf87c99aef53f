"""Independent implementations the agreement tests check cts against (no cts code).

Kappa comes from scikit-learn; Krippendorff's alpha is the textbook coincidence-matrix formula
(Krippendorff 2011, "Computing Krippendorff's Alpha-Reliability", ordinal metric) in loops; the
cluster bootstrap draws one cluster at a time from ``numpy.random.default_rng(seed)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from sklearn.metrics import cohen_kappa_score


def textbook_ordinal_alpha(data: np.ndarray) -> float:
    """Krippendorff's alpha, ordinal metric, of a raters x units matrix (NaN = missing)."""
    c = 3
    o = np.zeros((c, c))
    for unit in data.T:
        vals = [int(v) for v in unit if not np.isnan(v)]
        m = len(vals)
        if m < 2:
            continue
        for i, x in enumerate(vals):
            for j, y in enumerate(vals):
                if i != j:
                    o[x, y] += 1.0 / (m - 1)
    n_c = o.sum(axis=1)
    n = n_c.sum()

    def delta(a: int, b: int) -> float:
        lo, hi = min(a, b), max(a, b)
        return (sum(n_c[g] for g in range(lo, hi + 1)) - (n_c[lo] + n_c[hi]) / 2) ** 2

    d_o = sum(o[a, b] * delta(a, b) for a in range(c) for b in range(c))
    d_e = sum(n_c[a] * n_c[b] * delta(a, b) for a in range(c) for b in range(c))
    return 1.0 - (n - 1) * d_o / d_e


def sklearn_kappa(a: Sequence[int], b: Sequence[int], weights: str = "linear") -> float:
    """scikit-learn's weighted kappa over the codes 0..2."""
    return float(cohen_kappa_score(list(a), list(b), weights=weights, labels=[0, 1, 2]))


def loop_bootstrap(
    clusters: Sequence[Any], stat: Callable[[list[int]], float], n_resamples: int, seed: int, confidence: float
) -> tuple[float, float]:
    """Percentile interval of ``stat(items)`` over resamples of whole clusters (first-seen order), one draw at a time."""
    order = list(dict.fromkeys(clusters))
    members = {c: [i for i, x in enumerate(clusters) if x == c] for c in order}
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(n_resamples):
        items = [i for _ in order for i in members[order[int(rng.integers(0, len(order)))]]]
        values.append(stat(items))
    finite = [v for v in values if np.isfinite(v)]
    alpha = (1 - confidence) / 2
    low, high = np.quantile(finite, [alpha, 1 - alpha])
    return float(low), float(high)
