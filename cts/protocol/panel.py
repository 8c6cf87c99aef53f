"""Agreement between a judge panel's members: metrics over the labels each member gave (pure functions).

Units are the nuggets of every judged arm (clarified and orig) of every record. Empty for a job
whose judge is not a panel (its metrics stay as they were).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from cts.core.records import Record
from cts.core.scoring import ORDINAL
from cts.stats.agreement import krippendorff_alpha, weighted_kappa

NAN = float("nan")


def member_matrix(records: Sequence[Record]) -> tuple[list[str], np.ndarray]:
    """The members and a ``members x nuggets`` matrix of their codes (0 none, 1 partial, 2 full; NaN = missing)."""
    arms = [a for r in records for a in (r.clarified, r.orig) if a is not None and a.judge_members]
    names = list(dict.fromkeys(m for a in arms for m in a.judge_members))
    if not names:
        return [], np.empty((0, 0))
    columns = []
    for arm in arms:
        nuggets = sorted({n for labels in arm.judge_members.values() for n in labels})
        for n in nuggets:
            columns.append([ORDINAL.get(arm.judge_members.get(m, {}).get(n, ""), NAN) for m in names])  # type: ignore[call-overload]  # an absent label, "", maps to NaN
    return names, np.array(columns, dtype=float).T.reshape(len(names), -1)


def panel_metrics(records: Sequence[Record]) -> dict[str, float]:
    """``judge_members``, ``judge_members_agreement`` (share of nuggets all members label alike),
    ``judge_members_alpha`` (ordinal Krippendorff's alpha) and ``judge_members_kappa.<a>.<b>``
    (linear weighted kappa of each pair) over the nuggets of every arm a panel judged."""
    names, data = member_matrix(records)
    if not names:
        return {}
    complete = data[:, ~np.isnan(data).any(axis=0)]
    out = {
        "judge_members": float(len(names)),
        "judge_members_n_labels": float(complete.shape[1]),
        "judge_members_agreement": float(np.mean(np.all(complete == complete[:1], axis=0))) if complete.size else NAN,
        "judge_members_alpha": krippendorff_alpha(data),
    }
    for (i, a), (j, b) in itertools.combinations(enumerate(names), 2):
        both = ~np.isnan(data[i]) & ~np.isnan(data[j])
        out[f"judge_members_kappa.{a}.{b}"] = weighted_kappa(
            data[i, both].astype(int).tolist(), data[j, both].astype(int).tolist()
        )
    return out
