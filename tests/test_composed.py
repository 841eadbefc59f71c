"""The composed interval (clustered PPI++ × leakage exclusion × AKM selection): its estimator against
the one-candidate clustered PPI++ and the vignette-means covariance, its decomposition, its
INCONCLUSIVE floor, and seeded coverage where judge error, clustering, leakage and selection all occur
(default tier: one cell; slow tier: the grid of docs/coverage.md, "The composed interval")."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special, stats

from honestci.audit.checks.selection import selection_covariance
from honestci.audit.policy import THRESHOLDS, Verdict
from honestci.audit.stats.frequentist.iid import proportion_ci
from honestci.audit.stats.judge_error.composed import composed_coverage, composed_interval, joint_ppi
from honestci.audit.stats.judge_error.ppi import ppi_mean_clustered
from honestci.audit.stats.selection.winner import winner_inference


def _contests(seed, G=14, m=10, n_lab=3, K=1, shift=0.0):
    """K candidates, m contests per vignette each, the first n_lab of every vignette human-labelled."""
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(G), m)
    u = rng.normal(size=G)
    cand, vig, judge, human = [], [], [], []
    for k in range(K):
        p = 1 / (1 + np.exp(-(0.3 + shift * k + u[g] + 0.3 * rng.normal(size=G)[g])))
        y = (rng.random((2, g.size)) < p).mean(axis=0)
        f = np.where(rng.random(g.size) < 0.25, np.clip(y + 0.5, 0, 1), y)
        cand.append(np.full(g.size, f"c{k}"))
        vig.append(g)
        judge.append(f)
        human.append(np.where(np.tile(np.arange(m) < n_lab, G), y, np.nan))
    return tuple(map(np.concatenate, (cand, vig, judge, human)))


@pytest.mark.reference
def test_one_candidate_is_clustered_ppi_on_balanced_vignettes():
    cand, g, f, y = _contests(1)
    lab = np.isfinite(y)
    for lam in (None, 0.4):
        ours = joint_ppi(cand, g, f, y, lam=lam)
        ref = ppi_mean_clustered(y[lab], f[lab], f[~lab], g[lab], g[~lab], lam=lam)
        assert ours.estimates[0] == pytest.approx(ref.estimate, rel=1e-12)
        assert np.sqrt(ours.covariance[0, 0]) == pytest.approx(ref.se, rel=1e-10)
        assert ours.lam[0] == pytest.approx(ref.lam, rel=1e-12)
        assert ours.df == ref.df


@pytest.mark.reference
def test_joint_covariance_at_lambda_zero_is_the_vignette_means_covariance():
    # λ = 0: θ̂_k is the mean of the labelled vignette means; with equal labels per vignette the
    # joint covariance is the sample covariance of the G x K vignette means over G
    # (selection_covariance, an independent code path).
    cand, g, f, y = _contests(2, K=3, shift=0.1)
    ours = joint_ppi(cand, g, f, y, lam=0.0)
    lab = np.isfinite(y)
    ref = selection_covariance({c: (y[lab & (cand == c)], g[lab & (cand == c)]) for c in ("c0", "c1", "c2")})
    np.testing.assert_allclose(ours.estimates, ref.estimates, rtol=1e-12)
    np.testing.assert_allclose(ours.covariance, ref.covariance, rtol=1e-10)
    assert ref.shrinkage == 0.0


def test_decomposition_rows_without_selection():
    cand, g, f, y = _contests(3, G=16)
    leaked = [0, 5]
    result = composed_interval(cand, g, f, y, claimed="c0", selected=False, leaked_vignettes=leaked)
    table = result.to_frame().set_index("method")
    assert list(table.index) == ["naive", "clustering", "judge", "leakage", "selection", "composed"]
    assert (table.loc["naive", "ci_low"], table.loc["naive", "ci_high"]) == pytest.approx(
        proportion_ci(f.sum(), f.size)
    )
    clean = ~np.isin(g, leaked)
    assert (table.loc["leakage", "ci_low"], table.loc["leakage", "ci_high"]) == pytest.approx(
        proportion_ci(f[clean].sum(), int(clean.sum()))
    )
    lab = np.isfinite(y) & clean
    ref = ppi_mean_clustered(y[lab], f[lab], f[clean & ~lab], g[lab], g[clean & ~lab])
    # the same t(G − 2) interval on the logit scale (delta method: se / (θ̂(1 − θ̂)))
    half = stats.t.ppf(0.975, ref.df) * ref.se / (ref.estimate * (1 - ref.estimate))
    expected = special.expit(special.logit(ref.estimate) + np.array([-half, half]))
    assert table.loc["composed", "estimate"] == pytest.approx(ref.estimate, rel=1e-12)
    assert (table.loc["composed", "ci_low"], table.loc["composed", "ci_high"]) == pytest.approx(
        tuple(expected), rel=1e-10
    )
    np.testing.assert_allclose(table["change_in_ci_low"], table["ci_low"] - table.loc["naive", "ci_low"])
    assert table.loc["composed", "n_clusters"] == 14


def test_selected_claim_gets_akm_hybrid_on_the_joint_ppi_estimates():
    cand, g, f, y = _contests(4, K=3, shift=0.05)
    joint = joint_ppi(cand, g, f, y)
    claimed = joint.candidates[int(np.argmax(joint.estimates))]
    result = composed_interval(cand, g, f, y, claimed=claimed, selected=True, seed=11, n_draws=4000)
    # AKM hybrid on logit θ̂ with Σ_Y = D Σ D (t(G − 2)/z)², mapped back to rates
    x = joint.estimates
    d = 1 / (x * (1 - x))
    scale = (stats.t.ppf(0.975, joint.df) / stats.norm.ppf(0.975)) ** 2
    ref = winner_inference(
        special.logit(x), joint.covariance * np.outer(d, d) * scale, candidates=joint.candidates, seed=11, n_draws=4000
    )
    row = result.composed
    assert (row.ci_low, row.ci_high) == pytest.approx(tuple(special.expit(ref.hybrid_ci)), rel=1e-10)
    assert row.note == "AKM hybrid"


def test_composed_is_inconclusive_below_the_policy_floor():
    G = THRESHOLDS.composed_min_vignettes
    cand, g, f, y = _contests(5, G=G)
    result = composed_interval(cand, g, f, y, claimed="c0", selected=False, leaked_vignettes=[0])
    assert result.composed.verdict == Verdict.INCONCLUSIVE and result.composed.ci_low is None
    assert result.row("naive").ci_low is not None


@pytest.mark.coverage
def test_composed_coverage_one_cell_all_four_problems():
    # G = 30, K = 4 candidates selected by max judge score, judge error 0.2, 20% of vignettes
    # leaked: the composed interval is nominal (3 MC-SE), the naive interval is not.
    cell = composed_coverage(30, 4, 0.2, reps=150, rng=20261201).to_frame().set_index("method")
    composed = cell.loc["composed"]
    assert abs(composed.coverage - 0.95) <= 3 * np.sqrt(0.95 * 0.05 / 150)
    assert composed.low_above_truth <= 0.025 + 3 * composed.low_mc_se
    assert cell.loc["naive", "coverage"] < 0.5


@pytest.mark.slow
@pytest.mark.coverage
def test_composed_coverage_grid():
    # The grid of docs/coverage.md, "The composed interval" (same seed and reps; about 3 minutes).
    # One-sided: CI-low above the truth at most 2.5% + 3 MC-SE in every cell, G = 6 included.
    # Two-sided: at least 95 − 1.5 points from the policy's floor (THRESHOLDS.composed_min_vignettes).
    for G in (6, 12, 30, 100):
        for K in (1, 4):
            for e in (0.1, 0.3):
                row = composed_coverage(G, K, e, reps=800, rng=20261201).to_frame().set_index("method").loc["composed"]
                assert row.low_above_truth <= 0.025 + 3 * row.low_mc_se, (G, K, e)
                if THRESHOLDS.composed_min_vignettes <= G:
                    assert row.coverage >= 0.935, (G, K, e)
