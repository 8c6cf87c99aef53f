"""Interaction diagnostics on hand-built records, and the statistics behind the reports."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from cts.core.records import Record
from cts.core.types import UNKNOWN
from cts.protocol.diagnostics import diagnostics
from cts.stats import Resampling
from cts.stats.bootstrap import cohen_kappa, kendall_tau, mean_ci, paired_bootstrap_ci

U = UNKNOWN


def rec(rid: str, types: list[tuple[str, ...]], answers: list[str], k: int = 2) -> Record:
    return Record(
        id=rid,
        k=k,
        questions=tuple(f"{rid} question {i}" for i in range(len(types))),
        question_types=tuple(types),
        answers=tuple(answers),
    )


RECORDS = [
    rec("r1", [("region",), ("time",)], [U, "2019"]),
    rec("r2", [("region",), ("region",)], [U, U]),
    rec("r3", [("scope",), ("region", "time")], ["the film", U]),
    rec("r4", [("region",), ("definition",)], ["Europe"]),  # stopped before the 2nd answer
    Record(id="r5", k=2),  # failed before any question
]


def test_diagnostics_exact_numbers() -> None:
    d = diagnostics(RECORDS)
    assert d["cq_region_rate"] == 5 / 8
    assert d["region_only_count"] == 4
    assert d["region_only_rate"] == 4 / 8
    assert d["region_only_unknown_rate"] == 3 / 4  # the answered region-only questions
    assert d["unknown_rate_region"] == 4 / 5
    assert d["unknown_rate_time"] == 1 / 2
    assert d["unknown_rate_scope"] == 0.0
    assert math.isnan(d["unknown_rate_definition"])  # asked but never answered
    assert math.isnan(d["unknown_rate_other"])
    assert d["qtype_rate_time"] == 2 / 8
    assert (d["region_only_count_t1"], d["region_only_unknown_rate_t1"]) == (3, 2 / 3)
    assert (d["region_only_count_t2"], d["region_only_unknown_rate_t2"]) == (1, 1.0)
    assert "region_only_count_t3" not in d


def test_diagnostics_without_questions_are_nan_not_zero() -> None:
    d = diagnostics([Record(id="a", k=3), Record(id="b", k=3)])  # the orig (clarifier=none) job
    assert math.isnan(d["cq_region_rate"]) and math.isnan(d["region_only_unknown_rate"])
    assert d["region_only_count"] == 0 and d["region_only_count_t3"] == 0
    assert math.isnan(d["region_only_unknown_rate_t3"])
    assert diagnostics([])["region_only_count"] == 0


def test_untyped_questions_fall_back_to_the_lexicon() -> None:
    r = Record(id="a", k=1, questions=("您想了解哪个城市？",), answers=(U,))
    d = diagnostics([r])
    assert (d["cq_region_rate"], d["region_only_count"], d["region_only_unknown_rate"]) == (1.0, 1, 1.0)


# ------------------------------------------------------------------ statistics


def _percentile_bootstrap(diffs: np.ndarray, n_resamples: int, seed: int) -> tuple[float, float]:
    """Independent reference: plain numpy resampling of instances, percentile interval."""
    rng = np.random.default_rng(seed)
    means = diffs[rng.integers(0, diffs.size, size=(n_resamples, diffs.size))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


@pytest.fixture(scope="module")
def paired_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(2024)
    baseline = rng.uniform(0, 60, size=40).round(1)  # instances differ a lot ...
    system = (baseline + 2.0 + rng.normal(0, 3, size=40)).round(1)  # ... the delta only a little
    return system, baseline


def test_paired_bootstrap_matches_independent_computation(paired_data: tuple[np.ndarray, np.ndarray]) -> None:
    system, baseline = paired_data
    mean, low, high = paired_bootstrap_ci(system, baseline, Resampling(20_000, seed=1))
    ref_low, ref_high = _percentile_bootstrap(system - baseline, 400_000, seed=7)
    assert mean == pytest.approx(float(np.mean(system - baseline)), abs=1e-12)
    # Monte-Carlo error of the 2.5/97.5 percentiles is ~0.02 here; the interval is ~1.9 wide.
    assert low == pytest.approx(ref_low, abs=0.1)
    assert high == pytest.approx(ref_high, abs=0.1)
    # The pairing matters: an unpaired bootstrap of the two means is several times wider.
    rng = np.random.default_rng(3)
    idx = rng.integers(0, 40, size=(20_000, 2, 40))
    unpaired = system[idx[:, 0]].mean(axis=1) - baseline[idx[:, 1]].mean(axis=1)
    assert np.subtract(*np.percentile(unpaired, [97.5, 2.5])) > 3 * (high - low)


def test_paired_bootstrap_is_reproducible_and_degenerate_cases() -> None:
    a, b = [10.0, 20.0, 35.0, 40.0], [5.0, 20.0, 30.0, 50.0]
    assert paired_bootstrap_ci(a, b, Resampling(seed=0)) == paired_bootstrap_ci(a, b, Resampling(seed=0))
    assert paired_bootstrap_ci([3.0, 4.0], [1.0, 2.0]) == (2.0, 2.0, 2.0)
    assert all(math.isnan(v) for v in paired_bootstrap_ci([], []))


def test_mean_ci_is_the_unpaired_special_case() -> None:
    values = [10.0, 20.0, 30.0, 45.0, 50.0]
    mean, low, high = mean_ci(values, Resampling(5000))
    assert mean == 31.0 and 10.0 < low < mean < high < 50.0


def _tau_by_pairs(x: list[float], y: list[float]) -> float:
    """Kendall's tau-a by counting concordant and discordant pairs (no ties in the data)."""
    signs = [np.sign(x[i] - x[j]) * np.sign(y[i] - y[j]) for i, j in itertools.combinations(range(len(x)), 2)]
    return float(sum(signs) / len(signs))


@pytest.mark.parametrize(
    ("x", "y"),
    [
        ([19.4, 23.5, 26.5], [27.7, 29.5, 29.8]),
        ([1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0]),
        ([1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 1.0, 4.0, 3.0, 5.0]),
    ],
)
def test_kendall_tau_against_pair_counting(x: list[float], y: list[float]) -> None:
    assert kendall_tau(x, y) == pytest.approx(_tau_by_pairs(x, y))


def test_kendall_tau_undefined_cases() -> None:
    assert math.isnan(kendall_tau([1.0], [2.0]))
    assert math.isnan(kendall_tau([1.0, 1.0], [1.0, 2.0]))
    with pytest.raises(ValueError):
        kendall_tau([1.0, 2.0], [1.0])


def test_cohen_kappa_by_hand() -> None:
    a = ["full", "full", "partial", "none", "none", "none"]
    b = ["full", "partial", "partial", "none", "none", "full"]
    # p_o = 4/6; p_e = (2*2 + 1*2 + 3*2) / 36 = 12/36
    assert cohen_kappa(a, b) == pytest.approx((4 / 6 - 12 / 36) / (1 - 12 / 36))
    assert cohen_kappa(a, a) == pytest.approx(1.0)
    assert math.isnan(cohen_kappa(["none"] * 3, ["none"] * 3))  # chance agreement is 1
    assert math.isnan(cohen_kappa([], []))


def test_cohen_kappa_matches_scikit_learn() -> None:
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    a = list(rng.choice(["full", "partial", "none"], size=200))
    b = [x if rng.random() < 0.7 else str(rng.choice(["full", "partial", "none"])) for x in a]
    assert cohen_kappa(a, b, ["full", "partial", "none"]) == pytest.approx(metrics.cohen_kappa_score(a, b))
