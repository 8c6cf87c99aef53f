import math

import pytest

from cts.core.scoring import restore_score
from cts.core.types import Nugget


def nuggets(*weights: int) -> list[Nugget]:
    return [Nugget(id=f"n{i}", text=f"fact {i}", weight=w) for i, w in enumerate(weights, 1)]


@pytest.mark.parametrize(
    ("weights", "labels", "expected"),
    [
        ((3, 2, 1), ("full", "full", "full"), 100.0),
        ((3, 2, 1), ("none", "none", "none"), 0.0),
        ((3, 2, 1), ("full", "none", "none"), 50.0),  # 3 / 6
        ((3, 2, 1), ("partial", "partial", "partial"), 50.0),  # half credit everywhere
        ((3, 2, 1), ("none", "partial", "full"), 100 * 2 / 6),  # (0 + 1 + 1) / 6
        ((1,), ("partial",), 50.0),
        ((2, 2), ("full", "partial"), 75.0),
    ],
)
def test_weighted_recall_with_partial_credit(weights, labels, expected):
    ns = nuggets(*weights)
    got = restore_score({n.id: lab for n, lab in zip(ns, labels)}, ns)
    assert got is not None and math.isclose(got, expected)


def test_weight_matters_not_count():
    ns = nuggets(3, 1)
    heavy = restore_score({"n1": "full", "n2": "none"}, ns)
    light = restore_score({"n1": "none", "n2": "full"}, ns)
    assert heavy == 75.0 and light == 25.0


def test_zero_total_weight_is_unscorable_not_zero():
    assert restore_score({}, []) is None
    assert restore_score({"n1": "full"}, nuggets(0)) is None


def test_missing_or_invalid_label_is_an_error():
    with pytest.raises(ValueError, match="no judge label"):
        restore_score({"n1": "full"}, nuggets(1, 1))
    with pytest.raises(ValueError, match="invalid label"):
        restore_score({"n1": "mostly"}, nuggets(1))


def test_extra_labels_are_ignored():
    assert restore_score({"n1": "full", "zzz": "none"}, nuggets(2)) == 100.0


def test_a_search_failure_is_read_from_the_result_then_from_an_old_trace() -> None:
    """``search_call_error`` reads the typed failure; a result without one falls back to its trace."""
    from cts.core.records import search_call_error
    from cts.core.types import SearchFailure, SearchResult

    event = {"type": "error", "kind": "server", "message": "from the trace", "endpoint": "http://t:1/v1"}
    typed = SearchResult(answer="", end_reason="error", trace=(event,), failure=SearchFailure("timeout", "typed", "e"))
    assert (search_call_error(typed).kind, search_call_error(typed).message) == ("timeout", "typed")
    old = SearchResult(answer="", end_reason="error", trace=(event,))
    assert (search_call_error(old).kind, search_call_error(old).endpoint) == ("server", "http://t:1/v1")
