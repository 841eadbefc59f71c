"""iid proportion intervals, pinned to statsmodels and Newcombe (1998) Table I."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special, stats
from statsmodels.stats.proportion import proportion_confint

from honestci.audit.errors import InputError
from honestci.audit.stats.frequentist.iid import PROPORTION_METHODS, proportion_ci

# honestci method name -> statsmodels proportion_confint method name
STATSMODELS_METHOD = {
    "wilson": "wilson",
    "wald": "normal",
    "agresti_coull": "agresti_coull",
    "clopper_pearson": "beta",
}

COUNTS = [(0, 1), (1, 1), (0, 20), (1, 29), (15, 148), (81, 263), (360, 720), (719, 720), (50, 50), (3, 7)]


@pytest.mark.reference
@pytest.mark.parametrize("method", PROPORTION_METHODS)
@pytest.mark.parametrize("successes,n", COUNTS)
@pytest.mark.parametrize("level", [0.95, 0.9, 0.99])
def test_matches_statsmodels_on_integer_counts(method, successes, n, level):
    expected = proportion_confint(successes, n, alpha=1 - level, method=STATSMODELS_METHOD[method])
    np.testing.assert_allclose(proportion_ci(successes, n, method, level), expected, rtol=1e-12, atol=1e-14)


@pytest.mark.reference
@pytest.mark.parametrize("method", PROPORTION_METHODS)
@pytest.mark.parametrize("successes,n", [(0.5, 3), (40.5, 120), (359.5, 720), (719.5, 720)])
def test_matches_statsmodels_on_tie_scored_counts(method, successes, n):
    # statsmodels evaluates the same closed forms (and beta quantiles) at a real-valued count.
    expected = proportion_confint(successes, n, alpha=0.05, method=STATSMODELS_METHOD[method])
    np.testing.assert_allclose(proportion_ci(successes, n, method), expected, rtol=1e-12, atol=1e-14)


# Newcombe (1998), Stat. Med. 17:857, Table I, 95% limits to 4 decimals:
# method 1 (simple asymptotic = Wald), method 3 (score = Wilson), method 5 (exact = Clopper-Pearson).
NEWCOMBE_TABLE_I = [
    ("wald", 81, 263, 0.2522, 0.3638),
    ("wald", 15, 148, 0.0527, 0.1500),
    ("wilson", 81, 263, 0.2553, 0.3662),
    ("wilson", 15, 148, 0.0624, 0.1605),
    ("wilson", 0, 20, 0.0000, 0.1611),
    ("wilson", 1, 29, 0.0061, 0.1718),
    ("clopper_pearson", 81, 263, 0.2527, 0.3676),
    ("clopper_pearson", 15, 148, 0.0578, 0.1617),
    ("clopper_pearson", 0, 20, 0.0000, 0.1684),
    ("clopper_pearson", 1, 29, 0.0009, 0.1776),
]


@pytest.mark.reference
@pytest.mark.parametrize("method,successes,n,lower,upper", NEWCOMBE_TABLE_I)
def test_matches_newcombe_1998_table(method, successes, n, lower, upper):
    got = proportion_ci(successes, n, method)
    assert round(got[0], 4) == lower and round(got[1], 4) == upper


def test_clopper_pearson_fractional_count_solves_the_beta_tail_equations():
    x, n, alpha = 40.5, 120, 0.05
    lower, upper = proportion_ci(x, n, "clopper_pearson")
    # Regularised incomplete beta at the limits equals alpha/2 on each side.
    assert special.betainc(x, n - x + 1, lower) == pytest.approx(alpha / 2, rel=1e-10)
    assert special.betainc(x + 1, n - x, upper) == pytest.approx(1 - alpha / 2, rel=1e-10)
    # And it lies between the intervals of the neighbouring whole counts.
    below, above = proportion_ci(40, n, "clopper_pearson"), proportion_ci(41, n, "clopper_pearson")
    assert below[0] < lower < above[0] and below[1] < upper < above[1]


@pytest.mark.parametrize(
    "args",
    [
        dict(successes=5, n=4, method="wilson"),
        dict(successes=-1, n=4, method="wilson"),
        dict(successes=float("nan"), n=4, method="wilson"),
        dict(successes=1, n=0, method="wilson"),
        dict(successes=1, n=2.5, method="wilson"),
        dict(successes=1, n=4, method="wilson", level=1.0),
        dict(successes=1, n=4, method="wilson", level=0.0),
        dict(successes=1, n=4, method="bayes"),
    ],
)
def test_rejects_bad_input_with_domain_error(args):
    with pytest.raises(InputError) as info:
        proportion_ci(**args)
    assert "What to do" in str(info.value)


def exact_coverage(n: int, p: float, method: str) -> float:
    """P(p in CI) summed over the binomial distribution of the count (no Monte Carlo error)."""
    counts = np.arange(n + 1)
    limits = np.array([proportion_ci(x, n, method) for x in counts])
    covered = (limits[:, 0] <= p) & (p <= limits[:, 1])
    return float(stats.binom.pmf(counts, n, p)[covered].sum())


@pytest.mark.coverage
def test_exact_coverage_on_independent_binomial_data():
    grid = [(n, p) for n in (20, 60, 200) for p in (0.1, 0.3, 0.5, 0.7)]
    clopper = [exact_coverage(n, p, "clopper_pearson") for n, p in grid]
    wilson = [exact_coverage(n, p, "wilson") for n, p in grid]
    # Clopper-Pearson is conservative by construction; Wilson is close to nominal on average
    # (Brown, Cai & DasGupta 2001, Stat. Sci. 16:101); Wald under-covers for small n p.
    assert min(clopper) >= 0.95
    assert abs(np.mean(wilson) - 0.95) < 0.01
    assert exact_coverage(20, 0.1, "wald") < 0.90
