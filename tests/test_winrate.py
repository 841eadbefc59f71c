from pathlib import Path

import numpy as np
import pytest
import statsmodels.api as sm
from scipy import stats

from honestci.audit.policy import Verdict
from honestci.audit.stats.frequentist.winrate import ALL_METHODS, winrate_ci, winrate_table

REFERENCE_DIR = Path(__file__).resolve().parent / "reference"


def _clustered_scores(rng, n_clusters=6, per_cluster=40, mean_logit=1.2, sigma=0.6):
    """Tie-scored contests: each of two orders won with a vignette-specific probability."""
    clusters = np.repeat(np.arange(n_clusters), per_cluster)
    u = rng.normal(0, sigma, n_clusters)
    p = 1 / (1 + np.exp(-(mean_logit + u[clusters])))
    wins = rng.random((2, clusters.size)) < p
    return (wins.sum(axis=0) / 2.0), clusters, p


def test_stratified_matches_hc2_cell_means_contrast_in_statsmodels():
    # Var(Σ w_g ȳ_g) = Σ w_g² s_g²/n_g equals the HC2 variance of the cell-means OLS contrast:
    # sm.OLS(y, dummies).fit(cov_type="HC2").t_test(weights) is the outside reference; the weights
    # are equal (1/G) on unequal sizes: the these-vignettes rate weights vignettes, not contests.
    rng = np.random.default_rng(1)
    sizes = np.array([30, 45, 25, 60, 40, 35])
    clusters = np.repeat(np.arange(6), sizes)
    scores = rng.choice([0.0, 0.5, 1.0], size=clusters.size, p=[0.2, 0.2, 0.6])
    result = winrate_ci(scores, clusters, method="stratified")
    dummies = (clusters[:, None] == np.arange(6)[None, :]).astype(float)
    fit = sm.OLS(scores, dummies).fit(cov_type="HC2")
    contrast = fit.t_test(np.full(6, 1 / 6))
    assert result.estimate == pytest.approx(float(contrast.effect[0]), rel=1e-12)
    assert result.se == pytest.approx(float(contrast.sd[0][0]), rel=1e-10)
    assert result.population == "these_vignettes"


def test_stratified_df_is_welch_for_two_equal_weight_strata():
    # Welch–Satterthwaite df is scale-free: with two equal-size strata it equals Welch's t-test df
    # (scipy.stats.ttest_ind(equal_var=False).df).
    rng = np.random.default_rng(2)
    a = rng.choice([0.0, 0.5, 1.0], size=50, p=[0.3, 0.2, 0.5])
    b = rng.choice([0.0, 0.5, 1.0], size=50, p=[0.1, 0.1, 0.8])
    scores = np.concatenate([a, b])
    clusters = np.repeat([0, 1], 50)
    result = winrate_ci(scores, clusters, method="stratified")
    assert result.df == pytest.approx(stats.ttest_ind(a, b, equal_var=False).df, rel=1e-10)


def test_wilson_row_matches_statsmodels_on_the_score_total():
    from statsmodels.stats.proportion import proportion_confint

    rng = np.random.default_rng(3)
    scores, clusters, _ = _clustered_scores(rng)
    row = winrate_ci(scores, clusters, method="wilson")
    low, high = proportion_confint(scores.sum(), scores.size, alpha=0.05, method="wilson")
    assert (row.ci_low, row.ci_high) == pytest.approx((low, high), rel=1e-12)
    assert row.population == "iid"


def test_too_few_clusters_is_inconclusive_never_zero_width():
    rng = np.random.default_rng(4)
    scores, clusters, _ = _clustered_scores(rng, n_clusters=3)
    for method in ("cr2", "cr1", "wild_webb", "cluster_bootstrap_percentile"):
        row = winrate_ci(scores, clusters, method=method)
        assert row.verdict == Verdict.INCONCLUSIVE
        assert row.ci_low is None and row.ci_high is None
        assert "3 vignette" in row.note


def test_constant_scores_are_inconclusive_for_new_vignettes_and_floored_for_these():
    # Every contest won: no spread between vignettes (CR2 INCONCLUSIVE), while the these-vignettes
    # interval floors each vignette's variance at the plus-two value, (11/12)(1/12)/2 here.
    clusters = np.repeat(np.arange(6), 10)
    scores = np.ones(clusters.size)
    row = winrate_ci(scores, clusters, method="cr2")
    assert row.verdict == Verdict.INCONCLUSIVE and row.ci_low is None
    row = winrate_ci(scores, clusters, method="stratified")
    assert row.se == pytest.approx(np.sqrt((11 / 12) * (1 / 12) / 2 / 10 / 6), rel=1e-12)
    assert row.ci_low < 1.0 and row.ci_high == 1.0


def test_table_carries_clustering_summary_and_every_method_runs():
    rng = np.random.default_rng(5)
    scores, clusters, _ = _clustered_scores(rng, n_clusters=8, per_cluster=30)
    table = winrate_table(scores, clusters, methods=ALL_METHODS, seed=7)
    frame = table.to_frame()
    assert list(frame["method"]) == list(ALL_METHODS)
    assert (frame["n"] == 240).all() and (frame["n_clusters"] == 8).all()
    assert (frame["n_effective"] <= 240 + 1e-9).all()
    reportable = frame[frame["verdict"] != "INCONCLUSIVE"]
    assert len(reportable) == len(ALL_METHODS)
    assert ((reportable["ci_low"] <= reportable["estimate"]) & (reportable["estimate"] <= reportable["ci_high"])).all()


@pytest.mark.coverage
def test_stratified_interval_covers_the_these_vignettes_rate():
    # Vignette effects fixed once; contests redrawn each replication. Truth is the mean of the
    # per-vignette expected scores: E[score] = p² + (1 - p² - (1-p)²)/2 = p for two iid orders.
    rng = np.random.default_rng(20261129)
    n_clusters, per_cluster, reps = 6, 40, 600
    u = rng.normal(0, 0.6, n_clusters)
    p = 1 / (1 + np.exp(-(1.2 + u)))
    truth = p.mean()
    clusters = np.repeat(np.arange(n_clusters), per_cluster)
    hits = 0
    for _ in range(reps):
        wins = rng.random((2, clusters.size)) < p[clusters]
        row = winrate_ci(wins.sum(axis=0) / 2.0, clusters, method="stratified")
        hits += row.ci_low <= truth <= row.ci_high
    coverage = hits / reps
    mc_se = np.sqrt(0.95 * 0.05 / reps)  # ≈ 0.0089
    assert abs(coverage - 0.95) < 3 * mc_se, coverage


# --------------------------------------------------------------------------------------------
# CR2 on the logit scale


def _logit_reference_inputs(analysis: str) -> tuple[np.ndarray, np.ndarray]:
    """The inputs winrate_logit_reference.R read, shaped as that script shapes them."""
    import pandas as pd

    if analysis == "balanced_icc":
        frame = pd.read_csv(REFERENCE_DIR / "input_balanced_icc.csv")
        return frame["y"].to_numpy(), frame["cluster"].to_numpy()
    frame = pd.read_csv(REFERENCE_DIR / "input_winrate_order.csv").groupby("vignette").head(236)
    return frame["y"].to_numpy(), frame["vignette"].to_numpy()


@pytest.mark.reference
@pytest.mark.parametrize("row", range(4))
def test_cr2_logit_matches_r_survey_svyciprop_logit(row):
    # tests/reference/winrate_logit_reference.R: svyciprop(~y, svydesign(ids = ~cluster), method = "logit").
    # R's estimate comes from IRLS (off the exact mean by ~5e-10), hence rtol 1e-8.
    import pandas as pd

    reference = pd.read_csv(REFERENCE_DIR / "winrate_logit_reference.csv").iloc[row]
    scores, clusters = _logit_reference_inputs(reference["analysis"])
    assert scores.size == reference["n_obs"]
    result = winrate_ci(scores, clusters, method="cr2_logit", level=float(reference["level"]))
    np.testing.assert_allclose(
        [result.estimate, result.ci_low, result.ci_high],
        reference[["estimate", "ci_lower", "ci_upper"]].to_numpy(float),
        rtol=1e-8,
    )
    assert result.df == pytest.approx(reference["n_clusters"] - 1)


def test_cr2_logit_is_the_cr2_interval_on_the_logit_scale():
    rng = np.random.default_rng(3)
    clusters = np.repeat(np.arange(9), rng.integers(10, 60, 9))
    scores = rng.integers(0, 3, clusters.size) / 2.0
    cr2 = winrate_ci(scores, clusters, method="cr2")
    logit = winrate_ci(scores, clusters, method="cr2_logit")
    assert (logit.estimate, logit.se, logit.df) == (cr2.estimate, cr2.se, cr2.df)
    to_logit = lambda p: np.log(p / (1 - p))  # noqa: E731
    half = stats.t.ppf(0.975, cr2.df) * cr2.se / (cr2.estimate * (1 - cr2.estimate))
    np.testing.assert_allclose(
        [to_logit(logit.ci_low), to_logit(logit.ci_high)],
        [to_logit(cr2.estimate) - half, to_logit(cr2.estimate) + half],
        rtol=1e-12,
    )


def test_cr2_logit_is_inconclusive_when_every_contest_is_won():
    clusters = np.repeat(np.arange(6), 10)
    scores = np.ones(clusters.size)
    scores[0] = 0.5  # one tie is variance enough: the estimate is then strictly inside (0, 1)
    assert winrate_ci(scores, clusters, method="cr2_logit").reportable
    result = winrate_ci(np.ones(clusters.size), clusters, method="cr2_logit")
    assert result.verdict is Verdict.INCONCLUSIVE and result.ci_low is None
