"""Properties of the core estimators (hypothesis, derandomized so every run tries the same cases).

* invariance to row order and to renaming the clusters (vignettes);
* swapping policy and opponent maps every contest score s to 1 - s, the estimate p to 1 - p and,
  for the symmetric methods, the interval [l, h] to [1 - h, 1 - l];
* every reported interval contains its point estimate and has positive width: a zero-width interval
  is never reported as a number (it is INCONCLUSIVE).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from honestci.audit.data.contests import score_contests
from honestci.audit.policy import Verdict
from honestci.audit.stats.frequentist.cluster_robust import cluster_robust_ols
from honestci.audit.stats.frequentist.winrate import ALL_METHODS, winrate_ci

settings.register_profile("estimators", derandomize=True, max_examples=60, deadline=None)
PROFILE = settings.get_profile("estimators")

CORE_METHODS = ("wilson", "stratified", "cr1", "cr2", "cr2_logit", "wild_webb")
#: Methods whose interval for 1 - p is exactly the mirror image of the interval for p.
SYMMETRIC_METHODS = ("wilson", "wald", "stratified", "cr0", "cr1", "cr2", "cr2_logit", "wild_webb")
#: Methods whose intervals stay in [0, 1] (clipped, or by construction as on the logit scale); the
#: other regression-based ones (CR, wild bootstrap) do not.
CLIPPED_METHODS = (
    "wilson",
    "wald",
    "agresti_coull",
    "clopper_pearson",
    "stratified",
    "cr2_logit",
    "cluster_bootstrap_percentile",
    "cluster_bootstrap_bca",
)
DRAWS = 199
SEED = 20261129
OUTCOMES = ("win", "loss", "tie", "invalid")
SWAPPED = {"win": "loss", "loss": "win", "tie": "tie", "invalid": "invalid"}


@st.composite
def clustered_scores(draw, min_clusters: int = 5, max_clusters: int = 9, max_size: int = 6):
    """Scores in {0, 1/2, 1} for G clusters of 2..max_size contests each, with cluster labels."""
    n_clusters = draw(st.integers(min_clusters, max_clusters))
    sizes = draw(st.lists(st.integers(2, max_size), min_size=n_clusters, max_size=n_clusters))
    scores = draw(st.lists(st.sampled_from((0.0, 0.5, 1.0)), min_size=sum(sizes), max_size=sum(sizes)))
    clusters = np.repeat([f"v{g}" for g in range(n_clusters)], sizes)
    return np.array(scores), clusters


def interval(scores, clusters, method):
    return winrate_ci(scores, clusters, method=method, seed=SEED, bootstrap_draws=DRAWS)


def same_interval(a, b, tol=1e-9):
    assert a.verdict == b.verdict
    assert a.estimate == pytest.approx(b.estimate, abs=tol)
    if a.reportable:
        assert (a.ci_low, a.ci_high) == pytest.approx((b.ci_low, b.ci_high), abs=tol)


# --- invariance ---------------------------------------------------------------------------------


@pytest.mark.parametrize("method", CORE_METHODS)
@settings(PROFILE, max_examples=30)
@given(data=clustered_scores(), order_seed=st.integers(0, 2**32 - 1))
def test_row_order_does_not_change_the_interval(method, data, order_seed):
    scores, clusters = data
    order = np.random.default_rng(order_seed).permutation(scores.size)
    same_interval(interval(scores, clusters, method), interval(scores[order], clusters[order], method))


@pytest.mark.parametrize("method", ("wilson", "stratified", "cr1", "cr2"))
@settings(PROFILE, max_examples=30)
@given(data=clustered_scores(), relabel_seed=st.integers(0, 2**32 - 1))
def test_renaming_the_clusters_does_not_change_the_interval(method, data, relabel_seed):
    scores, clusters = data
    names = np.unique(clusters)
    new_names = dict(zip(names, np.random.default_rng(relabel_seed).permutation([f"w{i}" for i in range(names.size)])))
    renamed = np.array([new_names[c] for c in clusters])
    same_interval(interval(scores, clusters, method), interval(scores, renamed, method))


@settings(PROFILE, max_examples=10)
@given(data=clustered_scores(max_clusters=5, max_size=4), relabel_seed=st.integers(0, 2**32 - 1))
def test_renaming_clusters_does_not_change_the_enumerated_wild_bootstrap(data, relabel_seed):
    # With 5 clusters all 6^5 Webb draws are enumerated, so the interval depends on the data only.
    scores, clusters = data
    names = np.unique(clusters)
    new_names = dict(zip(names, np.random.default_rng(relabel_seed).permutation([f"w{i}" for i in range(names.size)])))
    renamed = np.array([new_names[c] for c in clusters])
    a = winrate_ci(scores, clusters, method="wild_webb")
    b = winrate_ci(scores, renamed, method="wild_webb")
    same_interval(a, b, tol=1e-7)


@settings(PROFILE, max_examples=40)
@given(data=clustered_scores(), order_seed=st.integers(0, 2**32 - 1), slope=st.floats(-1, 1))
def test_cluster_robust_ols_is_invariant_to_row_order_and_cluster_names(data, order_seed, slope):
    scores, clusters = data
    rng = np.random.default_rng(order_seed)
    x = rng.normal(size=scores.size)
    X = np.column_stack([np.ones(scores.size), x])
    y = scores + slope * x + 0.1 * rng.normal(size=scores.size)  # never an exact fit (that is refused)
    order = rng.permutation(scores.size)
    renamed = np.array([f"renamed-{c[::-1]}" for c in clusters])
    for vcov in ("CR1", "CR2"):
        base = cluster_robust_ols(X, y, clusters, vcov=vcov)
        for other in (
            cluster_robust_ols(X[order], y[order], clusters[order], vcov=vcov),
            cluster_robust_ols(X, y, renamed, vcov=vcov),
        ):
            np.testing.assert_allclose(other.coef, base.coef, rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(other.se, base.se, rtol=1e-8, atol=1e-12)
            np.testing.assert_allclose(other.df, base.df, rtol=1e-8)


# --- swapping policy and opponent -----------------------------------------------------------------


@settings(PROFILE, max_examples=100)
@given(
    st.lists(st.tuples(st.sampled_from(OUTCOMES), st.sampled_from(OUTCOMES)), min_size=1, max_size=40),
    st.sampled_from(("both_orders", "order_average")),
)
def test_swapping_policy_and_opponent_scores_one_minus(pairs, rule):
    first, second = map(np.array, zip(*pairs))
    # The opponent's "shown first" order is the policy's "shown second" one, with the outcome reversed.
    swapped_first = np.array([SWAPPED[o] for o in second])
    swapped_second = np.array([SWAPPED[o] for o in first])
    scores = score_contests(first, second, rule)
    swapped = score_contests(swapped_first, swapped_second, rule)
    np.testing.assert_array_equal(np.isnan(scores), np.isnan(swapped))
    np.testing.assert_allclose(swapped[~np.isnan(swapped)], 1 - scores[~np.isnan(scores)])


@pytest.mark.parametrize("method", SYMMETRIC_METHODS)
@settings(PROFILE, max_examples=30)
@given(data=clustered_scores())
def test_swapped_interval_is_the_mirror_image(method, data):
    scores, clusters = data
    forward, swapped = interval(scores, clusters, method), interval(1 - scores, clusters, method)
    assert swapped.estimate == pytest.approx(1 - forward.estimate, abs=1e-12)
    assert swapped.verdict == forward.verdict
    if forward.reportable:
        assert (swapped.ci_low, swapped.ci_high) == pytest.approx((1 - forward.ci_high, 1 - forward.ci_low), abs=1e-7)


# --- what an interval may report ------------------------------------------------------------------


@st.composite
def any_scores(draw):
    """Also degenerate data: one cluster, singleton clusters, constant scores, equal cluster means."""
    kind = draw(st.sampled_from(("random", "constant", "equal_means", "one_cluster", "singletons")))
    if kind == "equal_means":  # every vignette one win and one loss: between-vignette variance 0
        n_clusters = draw(st.integers(2, 9))
        return np.tile([1.0, 0.0], n_clusters), np.repeat([f"v{g}" for g in range(n_clusters)], 2)
    if kind == "constant":
        value = draw(st.sampled_from((0.0, 0.5, 1.0)))
        n_clusters = draw(st.integers(1, 9))
        return np.full(3 * n_clusters, value), np.repeat([f"v{g}" for g in range(n_clusters)], 3)
    if kind == "one_cluster":
        scores = draw(st.lists(st.sampled_from((0.0, 0.5, 1.0)), min_size=2, max_size=12))
        return np.array(scores), np.array(["v0"] * len(scores))
    if kind == "singletons":
        scores = draw(st.lists(st.sampled_from((0.0, 0.5, 1.0)), min_size=2, max_size=12))
        return np.array(scores), np.array([f"v{i}" for i in range(len(scores))])
    return draw(clustered_scores(min_clusters=1))


@pytest.mark.parametrize("method", ALL_METHODS)
@settings(PROFILE, max_examples=40)
@given(data=any_scores())
def test_reported_interval_has_width_and_contains_its_estimate(method, data):
    scores, clusters = data
    result = interval(scores, clusters, method)
    if not result.reportable:
        assert result.verdict == Verdict.INCONCLUSIVE and result.ci_low is None and result.ci_high is None
        return
    assert result.ci_high > result.ci_low, f"zero-width interval reported as {result.verdict}: {result}"
    if method in CLIPPED_METHODS:
        assert result.ci_low >= 0 and result.ci_high <= 1
    if method in CORE_METHODS:  # percentile-type bootstrap intervals need not contain the estimate
        assert result.ci_low <= result.estimate + 1e-9 and result.estimate - 1e-9 <= result.ci_high
