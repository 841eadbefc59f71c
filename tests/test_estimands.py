"""The estimands written once (audit/stats/estimands.py): truths, weighting, informative sizes."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, stats

from honestci.audit.stats import estimands
from honestci.audit.stats.design.coverage_study import simulate_scores
from honestci.audit.stats.frequentist.winrate import winrate_ci


@pytest.mark.parametrize("mu,sd,bias,tie", [(0.4, 0.3, 0.0, 0.0), (2.2, 1.0, 0.5, 1.0), (3.5, 1.0, 0.5, 0.0)])
def test_new_vignette_rate_matches_scipy_quad(mu, sd, bias, tie):
    # Outside reference: scipy.integrate.quad of p(mu + sd z) against the standard normal density.
    def integrand(z):
        return float(estimands.vignette_rate(mu + sd * z, bias, tie)) * stats.norm.pdf(z)

    reference = integrate.quad(integrand, -12, 12, epsabs=1e-14, epsrel=1e-13)[0]
    assert estimands.new_vignette_rate(mu, sd, bias, tie) == pytest.approx(reference, abs=1e-12)


def test_location_for_rate_inverts_the_truth():
    for rate in (0.6, 0.9, 0.95):
        mu = estimands.location_for_rate(rate, 1.0, 0.5, 1.0)
        assert estimands.new_vignette_rate(mu, 1.0, 0.5, 1.0) == pytest.approx(rate, abs=1e-12)


def test_the_simulator_draws_the_truth_it_states():
    # Many vignettes: the equal-weight mean of vignette means converges to the stated rate, and the
    # share of half scores to what the tie width and order bias imply (both orders independent).
    rng = np.random.default_rng(12)
    scores, clusters, these = simulate_scores(rng, 4000, "balanced", 1.0, 0.8, 1.0)
    means = estimands.vignette_means(scores, clusters)
    assert means.estimate == pytest.approx(0.8, abs=0.006)
    assert these == pytest.approx(0.8, abs=0.01)
    assert abs(means.estimate - these) < 0.002  # given the vignettes, only contest noise is left


def test_size_association_is_scipy_kendalltau_of_sizes_and_means():
    rng = np.random.default_rng(3)
    sizes = rng.integers(5, 60, 15)
    clusters = np.repeat(np.arange(15), sizes)
    scores = rng.choice([0.0, 0.5, 1.0], clusters.size)
    result = estimands.size_association(scores, clusters)
    means = np.bincount(clusters, weights=scores) / sizes
    reference = stats.kendalltau(sizes, means)
    assert result.tau == pytest.approx(reference.statistic, abs=1e-12)
    assert result.p_value == pytest.approx(reference.pvalue, abs=1e-12)
    assert result.equal_weight == pytest.approx(means.mean(), abs=1e-12)
    assert result.contest_weighted == pytest.approx(scores.mean(), abs=1e-12)


def test_equal_weight_estimate_is_unbiased_under_informative_sizes_and_pooling_is_not():
    # Vignettes where the policy does well get 8x the contests. Over 400 seeded replications the
    # equal-weight estimate (what every population interval is built on) centres on the
    # new-vignette rate; the pooled share of contests is biased upward, and the association is detected.
    rng = np.random.default_rng(2026)
    rate, sd = 0.7, 1.0
    mu = estimands.location_for_rate(rate, sd)
    equal, pooled, detected = [], [], 0
    for _ in range(400):
        eta = mu + sd * rng.standard_normal(20)
        sizes = np.where(eta > mu, 80, 10)
        clusters = np.repeat(np.arange(20), sizes)
        scores = (rng.random((2, clusters.size)) < estimands.vignette_rate(eta)[clusters]).mean(axis=0)
        association = estimands.size_association(scores, clusters)
        equal.append(association.equal_weight)
        pooled.append(association.contest_weighted)
        detected += association.informative(0.05)
    mc_se = np.std(equal) / np.sqrt(len(equal))
    assert abs(np.mean(equal) - rate) < 3 * mc_se
    assert np.mean(pooled) - rate > 0.05
    assert detected / 400 > 0.8


def test_clustered_interval_is_the_one_sample_t_interval_of_the_vignette_means_on_unequal_sizes():
    # Outside reference: scipy.stats.ttest_1samp's confidence interval on the G vignette means
    # (CR2 on one row per vignette is s^2/G with G - 1 df).
    rng = np.random.default_rng(7)
    scores, clusters, _ = simulate_scores(rng, 9, "unbalanced", 1.0, 0.8, 1.0)
    means = estimands.vignette_means(scores, clusters).means
    reference = stats.ttest_1samp(means, 0.0).confidence_interval(0.95)
    result = winrate_ci(scores, clusters, method="cr2")
    assert result.estimate == pytest.approx(means.mean(), abs=1e-12)
    assert (result.ci_low, result.ci_high) == pytest.approx((reference.low, reference.high), abs=1e-10)


def test_unique_inverse_is_np_unique():
    from honestci.audit.stats.estimands import unique_inverse

    rng = np.random.default_rng(4)
    words = np.array(["v10", "v2", "V2", "é", "e\u0301", "", "ß", "v1 ", "10", "2"], dtype=object)
    for values in (
        words[rng.integers(0, words.size, 5000)],
        rng.integers(-3, 40, 1000),
        rng.integers(0, 5000, 1_000_000),  # codes: counted, not sorted
        rng.integers(-128, 127, 300).astype(np.int8),  # the offset from the smallest does not overflow
        np.array([2**64 - 1, 2**64 - 3, 2**64 - 1], dtype=np.uint64),  # beyond intp: sorted
        np.array([7, 10**12, 7]),  # a range much wider than the count: sorted
        rng.integers(0, 9, 20).astype(np.uint16),
        rng.normal(size=50).round(1),
        np.array(["b", "a"], dtype=object),
        np.array([3, 1, 3], dtype=object),  # not strings: np.unique's own order
    ):
        labels, codes = unique_inverse(values)
        expected_labels, expected_codes = np.unique(values, return_inverse=True)
        np.testing.assert_array_equal(labels, expected_labels)
        assert labels.dtype == expected_labels.dtype
        np.testing.assert_array_equal(codes, expected_codes.ravel())
        assert codes.dtype == np.intp
    with pytest.raises(TypeError):  # mixed types cannot be ordered, as with np.unique
        unique_inverse(np.array(["a", 1], dtype=object))
