"""restore_score_100: weighted nugget recall with partial credit (paper eq. 1-3)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cts.core.types import Label, Nugget

CREDIT: Mapping[Label, float] = {"full": 1.0, "partial": 0.5, "none": 0.0}


def restore_score(labels: Mapping[str, Label], nuggets: Sequence[Nugget]) -> float | None:
    """100 * sum(w * s) / sum(w) over the gold nuggets.

    Args:
        labels: Judge label per nugget id; every nugget must have one.
        nuggets: The gold nuggets with integer weights.

    Returns:
        The score in [0, 100], or None when the total weight is zero (nothing to
        restore: the instance is unscorable, which is not the same as a score of 0).

    Raises:
        ValueError: A nugget has no label, or a label is not full/partial/none.
    """
    total = sum(n.weight for n in nuggets)
    if total <= 0:
        return None
    gained = 0.0
    for n in nuggets:
        if n.id not in labels:
            raise ValueError(f"no judge label for nugget {n.id!r}")
        if labels[n.id] not in CREDIT:
            raise ValueError(f"invalid label {labels[n.id]!r} for nugget {n.id!r}")
        gained += n.weight * CREDIT[labels[n.id]]
    return 100.0 * gained / total
