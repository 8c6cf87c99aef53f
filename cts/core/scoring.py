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


ORDINAL: Mapping[Label, int] = {"none": 0, "partial": 1, "full": 2}
"""Each label's rank in the order of the credit it gives (none < partial < full)."""
BY_RANK: tuple[Label, ...] = ("none", "partial", "full")


def majority_label(labels: Sequence[Label]) -> Label:
    """The label most of ``labels`` give; a tie goes to the lowest of the tied labels.

    The lower label wins a tie as Prompt E's own rule says ("when unsure between two labels,
    choose the lower one"): with three raters who all differ the majority is ``none``, with
    two who differ it is the lower of the two. The one rule for judge panels and for the
    majority of human annotators.

    Raises:
        ValueError: No label, or a label that is not full/partial/none.
    """
    if not labels:
        raise ValueError("majority_label needs at least one label")
    counts = [0, 0, 0]
    for label in labels:
        if label not in ORDINAL:
            raise ValueError(f"invalid label {label!r}")
        counts[ORDINAL[label]] += 1
    return BY_RANK[counts.index(max(counts))]  # index() finds the lowest rank among the tied
