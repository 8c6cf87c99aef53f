"""Why PPI: a judge that over-credits partial nuggets misses the human mean; PPI's interval covers it at 95%.

The synthetic sweep (:mod:`tests.agreement.synthetic`): 1000 instances, a judge that calls half the
partial nuggets full (its mean 52.5 against the people's 45), labels for a random share of the
instances, 2000 seeded repetitions. docs/judges.md quotes the coverages.
"""

from __future__ import annotations

import pytest

from tests.agreement.synthetic import TRUE_MEAN, coverage, sweep


def test_the_synthetic_judge_is_biased_as_built() -> None:
    import numpy as np

    human, judge = sweep(np.random.default_rng(1), 200_000, 0.5)
    assert human.mean() == pytest.approx(TRUE_MEAN, abs=0.2) and pytest.approx(45.0) == TRUE_MEAN
    assert judge.mean() == pytest.approx(52.5, abs=0.2)


@pytest.mark.parametrize(
    "fraction", [pytest.param(0.05, marks=pytest.mark.slow), 0.10, pytest.param(0.25, marks=pytest.mark.slow)]
)
def test_ppi_covers_the_human_mean_where_the_judge_alone_does_not(fraction: float) -> None:
    found = coverage(fraction)
    assert found.judge_only < 0.5  # measured 0.0 at every fraction: the bias dwarfs the judge's own noise
    assert 0.93 <= found.ppi <= 0.97  # measured 94.0%, 94.8%, 95.1% at 5%, 10%, 25% labelled
    assert found.ppi_width < found.classical_width  # the judge's scores narrow what the labels alone give
