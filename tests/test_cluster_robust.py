"""Cluster-robust OLS, pinned to R clubSandwich, statsmodels and the defining matrix formulas.

R values: tests/reference/cluster_robust_reference.csv (script cluster_robust_reference.R beside
it) and ../shared/data/reference/clubSandwich_pandalm_reference.csv (clubSandwich_pandalm.R).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from scipy import stats

from honestci.audit.errors import EstimationError, InputError
from honestci.audit.stats.frequentist.cluster_robust import ClusterRobustFit, cluster_robust_ols, linear_contrast
from honestci.audit.stats.frequentist.iid import proportion_ci

REPO_ROOT = Path(__file__).resolve().parents[1]
REFERENCE_DIR = REPO_ROOT / "tests" / "reference"
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
VCOV_TYPES = ("CR0", "CR1", "CR1S", "CR2")
REF_COLUMNS = ["estimate", "SE", "t", "df_Satt", "p_Satt", "ci_lower", "ci_upper"]


def _read(name: str) -> pd.DataFrame:
    return pd.read_csv(REFERENCE_DIR / name)


def reference_designs() -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]]:
    """The designs fitted by cluster_robust_reference.R, as (X, y, clusters, coef names)."""
    a = _read("input_winrate_order.csv")
    b = _read("input_paired_systems.csv")
    c = _read("input_unequal_clusters.csv")
    ones = np.ones
    stacked_y = np.concatenate([b.score_a.to_numpy(), b.score_b.to_numpy()])
    stacked_system_b = np.r_[np.zeros(len(b)), np.ones(len(b))]
    stacked_vignette = np.r_[b.vignette.to_numpy(), b.vignette.to_numpy()]
    return {
        "winrate_order": (
            np.column_stack([ones(len(a)), a.order]),
            a.y.to_numpy(),
            a.vignette.to_numpy(),
            ["(Intercept)", "order"],
        ),
        "paired_diff": (
            ones((len(b), 1)),
            (b.score_a - b.score_b).to_numpy(),
            b.vignette.to_numpy(),
            ["(Intercept)"],
        ),
        "paired_stacked": (
            np.column_stack([ones(2 * len(b)), stacked_system_b]),
            stacked_y,
            stacked_vignette,
            ["(Intercept)", "systemb"],
        ),
        "unequal_clusters": (
            np.column_stack([ones(len(c)), c.x, c.z]),
            c.y.to_numpy(),
            c.cluster.to_numpy(),
            ["(Intercept)", "x", "z"],
        ),
        # Cluster 0 has full leverage on its dummy: CR2's generalised inverse square root.
        "cluster_dummy": (
            np.column_stack([ones(len(c)), c.x, (c.cluster == 0).astype(float)]),
            c.y.to_numpy(),
            c.cluster.to_numpy(),
            ["(Intercept)", "x", "first"],
        ),
    }


# Contrasts of cluster_robust_reference.R: (analysis of the contrast, fitted design, label, weights).
REFERENCE_CONTRASTS = [
    ("winrate_order_contrast", "winrate_order", "policy_first", {"(Intercept)": 1, "order": 0.5}),
    ("winrate_order_contrast", "winrate_order", "policy_second", {"(Intercept)": 1, "order": -0.5}),
    ("unequal_clusters_contrast", "unequal_clusters", "x_minus_z", {"x": 1, "z": -1}),
]


def _fit_row(fit: ClusterRobustFit, name: str) -> np.ndarray:
    j = fit.coef_names.index(name)
    return np.array([fit.coef[j], fit.se[j], fit.t[j], fit.df[j], fit.p[j], fit.ci_low[j], fit.ci_high[j]])


@pytest.mark.reference
@pytest.mark.parametrize("vcov", VCOV_TYPES)
@pytest.mark.parametrize(
    "analysis", ["winrate_order", "paired_diff", "paired_stacked", "unequal_clusters", "cluster_dummy"]
)
def test_coefficients_match_clubsandwich(analysis, vcov):
    reference = _read("cluster_robust_reference.csv")
    X, y, clusters, names = reference_designs()[analysis]
    fit = cluster_robust_ols(X, y, clusters, vcov=vcov, coef_names=names)
    rows = reference[(reference.analysis == analysis) & (reference.vcov == vcov)]
    assert list(rows.coef) == names
    for _, row in rows.iterrows():
        np.testing.assert_allclose(_fit_row(fit, row.coef), row[REF_COLUMNS].to_numpy(float), rtol=1e-6)
        assert (fit.n, fit.n_clusters) == (row.n_obs, row.n_clusters)


@pytest.mark.reference
@pytest.mark.parametrize("vcov", VCOV_TYPES)
@pytest.mark.parametrize("analysis,design,label,weights", REFERENCE_CONTRASTS)
def test_contrasts_match_clubsandwich_linear_contrast(analysis, design, label, weights, vcov):
    reference = _read("cluster_robust_reference.csv")
    row = reference[(reference.analysis == analysis) & (reference.vcov == vcov) & (reference.coef == label)].iloc[0]
    X, y, clusters, names = reference_designs()[design]
    result = linear_contrast((X, y, clusters), weights, label=label, vcov=vcov, coef_names=names)
    got = [result.estimate, result.se, result.t, result.df, result.p, result.ci_low, result.ci_high]
    np.testing.assert_allclose(got, row[REF_COLUMNS].to_numpy(float), rtol=1e-6)


@pytest.mark.reference
@pytest.mark.shared_data
@pytest.mark.parametrize("vcov", ["CR0", "CR1", "CR2"])
def test_pandalm_agreement_matches_clubsandwich(vcov):
    folder = SHARED_DATA / "reference"
    if not (folder / "clubSandwich_pandalm_reference.csv").exists():
        pytest.skip(f"shared reference data not found at {folder}")
    data = pd.read_csv(folder / "input_pandalm_gpt35_agreement.csv")
    reference = pd.read_csv(folder / "clubSandwich_pandalm_reference.csv")
    row = reference[reference.vcov == vcov].iloc[0]
    fit = cluster_robust_ols(
        np.ones(len(data)), data.agree.to_numpy(), data.prompt_cluster.to_numpy(), vcov=vcov, coef_names=["(Intercept)"]
    )
    np.testing.assert_allclose(_fit_row(fit, "(Intercept)"), row[REF_COLUMNS].to_numpy(float), rtol=1e-6)
    assert (fit.n, fit.n_clusters) == (999, 170)


@pytest.mark.reference
@pytest.mark.parametrize("analysis", ["winrate_order", "paired_diff", "paired_stacked", "unequal_clusters"])
def test_cr1s_matches_statsmodels_cluster_covariance(analysis):
    X, y, clusters, _names = reference_designs()[analysis]
    expected = sm.OLS(y, X).fit(cov_type="cluster", cov_kwds={"groups": clusters})
    fit = cluster_robust_ols(X, y, clusters, vcov="CR1S", df="z")
    np.testing.assert_allclose(fit.coef, expected.params, rtol=1e-10)
    np.testing.assert_allclose(fit.se, expected.bse, rtol=1e-8)


def brute_force_cr2(X, y, clusters, contrast):
    """CR2 variance and Satterthwaite df of c'β from the defining n x n formulas.

    Pustejovsky & Tipton (2018), eqs. (5)-(11), with working model Φ = I:
    A_g = (I - H_gg)^(-1/2), p_g = c'M X_g'A_g, Ω_gh = p_g (I - H)_gh p_h', df = (tr Ω)²/‖Ω‖²_F.
    """
    bread = np.linalg.inv(X.T @ X)
    resid = y - X @ bread @ X.T @ y
    residual_maker = np.eye(len(y)) - X @ bread @ X.T
    labels = np.unique(clusters)
    p_rows, blocks, variance = [], [], 0.0
    for label in labels:
        rows = np.flatnonzero(clusters == label)
        values, vectors = np.linalg.eigh(residual_maker[np.ix_(rows, rows)])
        adjust = vectors @ np.diag(values**-0.5) @ vectors.T
        p_g = contrast @ bread @ X[rows].T @ adjust
        variance += float(p_g @ resid[rows]) ** 2
        p_rows.append(p_g)
        blocks.append(rows)
    omega = np.array(
        [
            [p_rows[g] @ residual_maker[np.ix_(blocks[g], blocks[h])] @ p_rows[h] for h in range(len(labels))]
            for g in range(len(labels))
        ]
    )
    return variance, np.trace(omega) ** 2 / np.sum(omega**2)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_cr2_and_df_match_defining_formulas(seed):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 15, size=7)
    clusters = np.repeat(np.arange(7), sizes)
    n = clusters.size
    X = np.column_stack([np.ones(n), rng.normal(size=n), rng.random(n) < 0.5, rng.normal(size=7)[clusters]])
    y = X @ np.array([0.2, 0.5, -0.3, 0.1]) + rng.normal(size=7)[clusters] + rng.normal(size=n)
    fit = cluster_robust_ols(X, y, clusters, vcov="CR2")
    for contrast in [np.eye(4)[j] for j in range(4)] + [np.array([1.0, 0.5, -2.0, 0.3])]:
        variance, dof = brute_force_cr2(X, y, clusters, contrast)
        result = linear_contrast(fit, contrast)
        assert result.se**2 == pytest.approx(variance, rel=1e-10)
        assert result.df == pytest.approx(dof, rel=1e-10)


def test_intercept_only_cr2_closed_form():
    # H_gg = J/n, so A_g 1 = (1 - n_g/n)^(-1/2) 1 and V = Σ_g (Σ_i e_gi)² / (1 - n_g/n) / n².
    rng = np.random.default_rng(7)
    clusters = np.repeat(np.arange(5), [3, 10, 40, 7, 25])
    y = rng.normal(size=clusters.size) + rng.normal(size=5)[clusters]
    n = y.size
    resid = y - y.mean()
    sums = np.bincount(clusters, weights=resid)
    sizes = np.bincount(clusters)
    fit = cluster_robust_ols(np.ones(n), y, clusters, vcov="CR2")
    assert fit.vcov[0, 0] == pytest.approx(np.sum(sums**2 / (1 - sizes / n)) / n**2, rel=1e-12)


def test_balanced_intercept_only_cr2_is_the_t_test_on_cluster_means():
    # Equal sizes: CR2 SE = sd(cluster means)/sqrt(G) and the Satterthwaite df = G - 1 exactly.
    rng = np.random.default_rng(11)
    clusters = np.repeat(np.arange(6), 40)
    y = rng.integers(0, 3, size=clusters.size) / 2
    means = np.bincount(clusters, weights=y) / 40
    fit = cluster_robust_ols(np.ones(y.size), y, clusters, vcov="CR2")
    assert fit.se[0] == pytest.approx(means.std(ddof=1) / np.sqrt(6), rel=1e-12)
    assert fit.df[0] == pytest.approx(5.0, rel=1e-12)
    expected = stats.ttest_1samp(means, 0.0).confidence_interval(0.95)
    assert (fit.ci_low[0], fit.ci_high[0]) == pytest.approx((expected.low, expected.high), rel=1e-12)


def test_df_options_and_level():
    X, y, clusters, names = reference_designs()["winrate_order"]
    satterthwaite = cluster_robust_ols(X, y, clusters, vcov="CR1", level=0.9, coef_names=names)
    naive_t = cluster_robust_ols(X, y, clusters, vcov="CR1", df="G-1", level=0.9)
    normal = cluster_robust_ols(X, y, clusters, vcov="CR1", df="z", level=0.9)
    np.testing.assert_allclose(naive_t.se, satterthwaite.se)
    np.testing.assert_array_equal(naive_t.df, [5.0, 5.0])
    np.testing.assert_array_equal(normal.df, [np.inf, np.inf])
    np.testing.assert_allclose(naive_t.ci_high, naive_t.coef + stats.t.ppf(0.95, 5) * naive_t.se, rtol=1e-12)
    np.testing.assert_allclose(normal.ci_low, normal.coef - stats.norm.ppf(0.95) * normal.se, rtol=1e-12)
    np.testing.assert_allclose(normal.p, 2 * stats.norm.sf(np.abs(normal.t)), rtol=1e-10)
    order_first = linear_contrast(naive_t, [1, 0.5])
    assert order_first.df == 5.0
    frame = satterthwaite.to_frame()
    assert list(frame.coef) == names and list(frame.columns[:8]) == [
        "coef",
        "estimate",
        "se",
        "df",
        "t",
        "p",
        "ci_low",
        "ci_high",
    ]
    assert "order" in str(satterthwaite)


def test_contrast_from_fit_equals_contrast_from_inputs_and_coefficient():
    X, y, clusters, names = reference_designs()["winrate_order"]
    fit = cluster_robust_ols(X, y, clusters, coef_names=names)
    by_name = linear_contrast(fit, {"order": 1.0})
    assert (by_name.estimate, by_name.se, by_name.df) == pytest.approx((fit.coef[1], fit.se[1], fit.df[1]), rel=1e-12)
    from_inputs = linear_contrast((X, y, clusters), [1, 0.5], coef_names=names)
    from_fit = linear_contrast(fit, [1, 0.5])
    assert from_inputs.to_frame().equals(from_fit.to_frame())


def test_results_are_frozen():
    X, y, clusters, _ = reference_designs()["paired_diff"]
    fit = cluster_robust_ols(X, y, clusters)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fit.kind = "CR0"
    with pytest.raises(dataclasses.FrozenInstanceError):
        linear_contrast(fit, [1.0]).se = 0.0


def test_errors():
    rng = np.random.default_rng(3)
    y = rng.normal(size=20)
    clusters = np.repeat([0, 1, 2, 3], 5)
    with pytest.raises(EstimationError):
        cluster_robust_ols(np.ones(20), y, np.zeros(20))
    with pytest.raises(InputError, match="singular"):
        cluster_robust_ols(np.column_stack([np.ones(20), 2 * np.ones(20)]), y, clusters)
    with pytest.raises(InputError):
        cluster_robust_ols(np.ones(19), y, clusters)
    with pytest.raises(InputError):
        cluster_robust_ols(np.ones(20), y, clusters, vcov="HC3")
    with pytest.raises(InputError):
        cluster_robust_ols(np.ones(20), y, clusters, df="kenward-roger")
    with pytest.raises(InputError):
        cluster_robust_ols(np.ones(20), np.r_[y[:-1], np.nan], clusters)
    with pytest.raises(InputError):
        cluster_robust_ols(np.ones(20), y, np.r_[clusters[:-1], np.nan].astype(float))
    with pytest.raises(InputError, match="mixed types"):
        cluster_robust_ols(np.ones(20), y, np.array([1, "a"] * 10, dtype=object))
    with pytest.raises(EstimationError, match="exactly"):
        cluster_robust_ols(np.ones(20), np.ones(20), clusters)
    fit = cluster_robust_ols(np.ones(20), y, clusters, coef_names=["mean"])
    with pytest.raises(InputError):
        linear_contrast(fit, [0.0])
    with pytest.raises(InputError):
        linear_contrast(fit, {"slope": 1.0})
    with pytest.raises(InputError):
        linear_contrast(fit, [1.0], vcov="CR0")


def simulate_clustered_scores(rng, sizes, mean, concentration):
    """Contest scores (w1 + w2)/2 in {0, ½, 1} with per-vignette win probability ~ Beta.

    With p_g ~ Beta(mean·a, (1 - mean)·a), a = concentration, the score ICC is
    Var(p)/(Var(p) + E[p(1-p)]/2) = 2/(a + 2); a = 18 gives ICC = 0.1.
    """
    clusters = np.repeat(np.arange(sizes.size), sizes)
    p_win = rng.beta(mean * concentration, (1 - mean) * concentration, sizes.size)[clusters]
    return (rng.binomial(1, p_win) + rng.binomial(1, p_win)) / 2, clusters


@pytest.mark.coverage
def test_cr2_satterthwaite_covers_the_new_vignette_mean_and_wilson_does_not():
    seed, reps, mean = 20240611, 2000, 0.6
    rng = np.random.default_rng(seed)
    sizes = np.array([20, 28, 36, 44, 52, 60, 60, 68, 76, 84, 92, 100])  # G = 12, n = 720
    X = np.ones(sizes.sum())
    covered_cr2 = covered_wilson = 0
    for _ in range(reps):
        y, clusters = simulate_clustered_scores(rng, sizes, mean, concentration=18.0)
        fit = cluster_robust_ols(X, y, clusters, vcov="CR2")
        covered_cr2 += fit.ci_low[0] <= mean <= fit.ci_high[0]
        low, high = proportion_ci(y.sum(), y.size, "wilson")
        covered_wilson += low <= mean <= high
    coverage_cr2, coverage_wilson = covered_cr2 / reps, covered_wilson / reps
    mc_se = np.sqrt(0.95 * 0.05 / reps)  # 0.0049 at 2000 replications
    # Measured with this seed: CR2 0.948, Wilson 0.653 (design effect 7.9 at ICC 0.1).
    assert abs(coverage_cr2 - 0.95) < 3 * mc_se, coverage_cr2
    assert coverage_wilson < 0.80, coverage_wilson
