"""Winner's curse: AKM conditional/hybrid inference, clustered covariance, study layer, gate."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import special, stats

from honestci.audit.checks.selection import (
    analyse_selection,
    candidate_winner_inference,
    ledoit_wolf_diagonal,
    selection_covariance,
    selection_null,
    selection_truncation,
    truncated_normal_log_cdf,
    winner_inference,
)
from honestci.audit.data.claims import load_claim
from honestci.audit.data.contests import ContestTable
from honestci.audit.data.io import load_study
from honestci.audit.errors import EstimationError, InputError
from honestci.audit.gate_registry import run_gate
from honestci.audit.gates import gate_winners_curse
from honestci.audit.policy import DEFAULT_SEED, Verdict

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "fixtures" / "study"
ALPACA = ROOT.parent / "shared" / "data" / "alpaca_eval"


# ---------------------------------------------------------------------------- truncated normal


@pytest.mark.parametrize(
    "x, mean, low, high",
    [
        (0.3, 0.0, -1.0, 2.0),
        (1.5, -2.0, 1.0, math.inf),  # far upper tail relative to the mean
        (-4.0, 3.0, -math.inf, -3.5),  # far lower tail
        (9.0, 0.0, 8.5, 9.5),
    ],
)
def test_truncated_normal_cdf_matches_scipy_truncnorm(x, mean, low, high):
    log_f, log_sf = truncated_normal_log_cdf(x, mean, 1.0, low, high)
    # scipy.stats.truncnorm(a, b, loc, scale).logcdf / .logsf
    dist = stats.truncnorm((low - mean), (high - mean), loc=mean, scale=1.0)
    assert log_f == pytest.approx(dist.logcdf(x), rel=1e-9, abs=1e-12)
    assert log_sf == pytest.approx(dist.logsf(x), rel=1e-9, abs=1e-12)


def test_single_candidate_reduces_to_the_normal_interval():
    # K = 1: no selection, so the conditional interval is X ± z·σ and the estimate is X.
    result = winner_inference([0.7], [[0.01]], seed=1, n_draws=20_000)
    assert result.truncation == (-math.inf, math.inf)
    assert result.median_unbiased == pytest.approx(0.7, abs=1e-10)
    assert result.conditional_ci == pytest.approx(result.naive_ci, abs=1e-9)
    assert result.naive_ci == pytest.approx((0.7 - 1.959964 * 0.1, 0.7 + 1.959964 * 0.1), abs=1e-6)


def test_truncation_bounds_match_the_authors_formula():
    # AKM replication code: L = max_{j: Σ_jk < Σ_kk} Σ_kk (Z_j − Z_k)/(Σ_kk − Σ_jk), U likewise for Σ_jk > Σ_kk.
    rng = np.random.default_rng(3)
    a = rng.normal(size=(5, 5))
    sigma = a @ a.T + np.diag([0.1, 2.0, 0.1, 0.1, 0.1])
    x = rng.normal(size=5)
    k = int(np.argmax(x))
    z = x - sigma[k] / sigma[k, k] * x[k]
    lows = [sigma[k, k] * (z[j] - z[k]) / (sigma[k, k] - sigma[j, k]) for j in range(5) if sigma[j, k] < sigma[k, k]]
    highs = [sigma[k, k] * (z[j] - z[k]) / (sigma[k, k] - sigma[j, k]) for j in range(5) if sigma[j, k] > sigma[k, k]]
    low, high = selection_truncation(x, sigma, k)
    assert low == pytest.approx(max(lows) if lows else -math.inf)
    assert high == pytest.approx(min(highs) if highs else math.inf)
    assert low <= x[k] <= high


def _brute_force_cdf(x, sigma, mu_k, rng, n=400_000, critical_value=None):
    """P(X_k* ≤ X_k | argmax X* = k, Z* = Z) by simulation, with argmax recomputed on every draw.

    X_k* is drawn from a wide proposal N(X_k, (4σ)²) and weighted by the N(μ_k, σ²) density
    (importance sampling, so far-off μ still get draws in the selection region); the selection
    event is decided by recomputing argmax of X* = Z + Σ_{·k}/Σ_kk X_k*, not by [L, U].
    Returns the conditional CDF and the effective sample size.
    """
    k = int(np.argmax(x))
    sd = math.sqrt(sigma[k, k])
    z = x - sigma[:, k] / sigma[k, k] * x[k]
    draws = rng.normal(x[k], 4 * sd, n)
    log_w = stats.norm.logpdf(draws, mu_k, sd) - stats.norm.logpdf(draws, x[k], 4 * sd)
    keep = np.argmax(z[None, :] + np.outer(draws, sigma[:, k] / sigma[k, k]), axis=1) == k
    if critical_value is not None:
        keep &= np.abs(draws - mu_k) <= critical_value * sd
    w = np.exp(log_w[keep] - log_w[keep].max())
    ess = w.sum() ** 2 / (w**2).sum()
    return float(np.sum(w * (draws[keep] <= x[k])) / w.sum()), float(ess)


@pytest.mark.parametrize("case", ["correlated-5", "akm-37-example"])
def test_akm_quantiles_agree_with_brute_force_conditional_simulation(case):
    rng = np.random.default_rng(11)
    if case == "correlated-5":
        a = rng.normal(size=(5, 5))
        sigma = 0.01 * (a @ a.T / 5 + np.eye(5))
        x = np.array([0.62, 0.70, 0.58, 0.69, 0.66])
    else:
        # The 37-arm example shipped with AKM's general-use replication script (estimates and a
        # diagonal variance matrix; first 8 arms here keep the test fast, the rest are far below).
        x = np.array(
            [
                0.8133,
                0.6121,
                0.7137,
                0.9223,
                0.8127,
                0.9806,
                0.8919,
                0.7804,
                1.5162,
                0.7866,
                0.9257,
                1.2708,
                1.0291,
                1.4218,
                0.8127,
                1.5070,
                0.5751,
                1.3362,
                1.0205,
                0.5286,
                0.8621,
                1.1153,
                1.1012,
                1.2231,
                0.8082,
                1.2438,
                0.9052,
                1.4028,
                0.8112,
                0.8813,
                0.6907,
                1.2605,
                0.5793,
                0.7026,
                0.8903,
                0.9644,
                0.9217,
            ]
        )
        sigma = np.diag(
            [
                0.0040,
                0.0301,
                0.1020,
                0.0887,
                0.1043,
                0.0737,
                0.0654,
                0.0518,
                0.1208,
                0.0685,
                0.0645,
                0.2555,
                0.1026,
                0.1532,
                0.0593,
                0.2115,
                0.0401,
                0.1849,
                0.0660,
                0.0213,
                0.0517,
                0.0817,
                0.0996,
                0.0917,
                0.0711,
                0.1214,
                0.0621,
                0.1301,
                0.0460,
                0.0564,
                0.0372,
                0.0955,
                0.0330,
                0.0397,
                0.0910,
                0.0893,
                0.0531,
            ]
        )
    result = winner_inference(x, sigma, seed=5, n_draws=50_000)
    checks = [(result.median_unbiased, 0.5), (result.conditional_ci[0], 0.975), (result.conditional_ci[1], 0.025)]
    for mu, expected in checks:
        observed, kept = _brute_force_cdf(x, sigma, mu, rng)
        assert kept > 500
        assert observed == pytest.approx(expected, abs=4 * math.sqrt(expected * (1 - expected) / kept) + 1e-3)
    gamma = (0.05 - result.beta) / (1 - result.beta)
    for mu, expected in [
        (result.hybrid_estimate, 0.5),
        (result.hybrid_ci[0], 1 - gamma / 2),
        (result.hybrid_ci[1], gamma / 2),
    ]:
        if mu in result.projection_ci:  # clipped at the projection interval: no equality to check
            continue
        observed, kept = _brute_force_cdf(x, sigma, mu, rng, critical_value=result.projection_critical_value)
        assert observed == pytest.approx(expected, abs=4 * math.sqrt(expected * (1 - expected) / kept) + 1e-3)


def test_extreme_tail_levels_are_solved_without_cancellation():
    # the winner barely above a close competitor: the truncation point sits just below X_k
    x = np.array([1.0, 1.0 - 1e-6])
    result = winner_inference(x, np.eye(2), level=0.999, seed=2, n_draws=20_000)
    lo, hi = result.conditional_ci
    assert math.isfinite(lo) and math.isfinite(hi) and lo < result.median_unbiased < hi
    assert result.median_unbiased < x[0] - 1  # a near-tie forces a large correction


def test_precomputed_null_must_match_beta_and_inputs_are_checked():
    null = selection_null(np.eye(3), 0.005, 1, 10_000)
    with pytest.raises(InputError):
        winner_inference([1, 2, 3], np.eye(3), beta=0.001, null=null)
    with pytest.raises(InputError):
        winner_inference([1, 2], np.eye(3))
    # the normal max of 3 iid: E[max] = 3/(2√π) = 0.8463 (closed form)
    assert null.expected_max == pytest.approx(1.5 / math.sqrt(math.pi), abs=0.03)


# ---------------------------------------------------------------------------- coverage


def _coverage(n_candidates, reps, seed):
    """Coverage of μ_winner by naive, conditional and hybrid 95% intervals, all means equal."""
    rng = np.random.default_rng(seed)
    sd = np.linspace(1.0, 1.5, n_candidates)
    corr = np.full((n_candidates, n_candidates), 0.3) + 0.7 * np.eye(n_candidates)
    sigma = corr * np.outer(sd, sd)
    null = selection_null(sigma, 0.005, rng, 50_000)
    mu = np.zeros(n_candidates)
    root = np.linalg.cholesky(sigma)
    hits = {"naive": 0, "conditional": 0, "hybrid": 0}
    for _ in range(reps):
        x = mu + root @ rng.standard_normal(n_candidates)
        r = winner_inference(x, sigma, null=null)
        truth = mu[r.winner_index]
        hits["naive"] += r.naive_ci[0] <= truth <= r.naive_ci[1]
        hits["conditional"] += r.conditional_ci[0] <= truth <= r.conditional_ci[1]
        hits["hybrid"] += r.hybrid_ci[0] <= truth <= r.hybrid_ci[1]
    return {k: v / reps for k, v in hits.items()}


@pytest.mark.coverage
@pytest.mark.parametrize("n_candidates", [2, 16, 37])
def test_akm_coverage_fast_tier(n_candidates):
    reps = 300
    cov = _coverage(n_candidates, reps, seed=100 + n_candidates)
    print(f"N={n_candidates} reps={reps} coverage {cov}")
    slack = 3 * math.sqrt(0.95 * 0.05 / reps)
    assert cov["conditional"] >= 0.95 - slack
    assert cov["hybrid"] >= 0.95 - slack
    if n_candidates >= 16:
        assert cov["naive"] < 0.85  # the naive interval under-covers the winner


@pytest.mark.slow
@pytest.mark.coverage
@pytest.mark.parametrize("n_candidates", [2, 16, 37])
def test_akm_coverage_slow_tier(n_candidates):
    reps = 4000
    cov = _coverage(n_candidates, reps, seed=200 + n_candidates)
    print(f"N={n_candidates} reps={reps} coverage {cov}")
    slack = 3 * math.sqrt(0.95 * 0.05 / reps)
    assert abs(cov["conditional"] - 0.95) <= slack
    assert cov["hybrid"] >= 0.95 - slack


def _coverage_estimated_sigma(n_vignettes, n_candidates, reps, seed, per=10, n_draws=20_000):
    """Coverage of the winner's true new-vignette rate with Σ estimated from the vignette means.

    K candidates of equal true rate 0.75 (the selection the winner's curse is largest for), G
    vignettes with a shared logit effect (sd 0.6) and a candidate-by-vignette one (sd 0.3), so
    candidates correlate through their vignettes; ``per`` contests per vignette, each judged in
    both orders. The path is the audit's: :func:`selection_covariance` (equal-weight rates,
    Ledoit-Wolf shrinkage when it applies) and :func:`candidate_winner_inference`.
    """
    from scipy import optimize
    from scipy.special import expit

    from honestci.audit.checks.selection import candidate_winner_inference
    from honestci.audit.stats.estimands import new_vignette_rate

    rng = np.random.default_rng(seed)
    shared_sd, own_sd = 0.6, 0.3
    total_sd = math.hypot(shared_sd, own_sd)
    # truth: θ_new = E[expit(μ + σZ)] (a contest score with no ties or order effect has mean expit(η))
    mu = optimize.brentq(lambda m: new_vignette_rate(m, total_sd) - 0.75, -10, 10)
    truth = new_vignette_rate(mu, total_sd)
    clusters = np.repeat(np.arange(n_vignettes), per)
    counts = dict.fromkeys(("covered", "low_above", "high_below", "naive_covered", "shrunk"), 0)
    for _ in range(reps):
        eta = mu + rng.normal(0, shared_sd, (n_vignettes, 1)) + rng.normal(0, own_sd, (n_vignettes, n_candidates))
        y = (rng.random((2, clusters.size, n_candidates)) < expit(eta)[clusters]).mean(axis=0)
        est = selection_covariance({f"c{j}": (y[:, j], clusters) for j in range(n_candidates)})
        r = candidate_winner_inference(est, seed=rng, n_draws=n_draws)
        low, high = r.hybrid_ci
        counts["covered"] += low <= truth <= high
        counts["low_above"] += low > truth
        counts["high_below"] += high < truth
        counts["naive_covered"] += r.naive_ci[0] <= truth <= r.naive_ci[1]
        counts["shrunk"] += est.shrinkage_reason is not None
    return {key: value / reps for key, value in counts.items()}


# ---------------------------------------------------------------------------- covariance of the candidates


def _ledoit_wolf_by_loops(rows):
    """ρ̂ of Ledoit & Wolf (2004, sec. 3.2) with target diag(S), written term by term."""
    n, k = len(rows), len(rows[0])
    means = [sum(r[i] for r in rows) / n for i in range(k)]
    y = [[r[i] - means[i] for i in range(k)] for r in rows]
    s = [[sum(y[t][i] * y[t][j] for t in range(n)) / n for j in range(k)] for i in range(k)]
    delta = sum(s[i][j] ** 2 for i in range(k) for j in range(k) if i != j)
    beta = sum((y[t][i] * y[t][j] - s[i][j]) ** 2 for t in range(n) for i in range(k) for j in range(k) if i != j)
    return min(beta / n**2, delta) / delta


@pytest.mark.parametrize("shape, seed", [((6, 8), 1), ((12, 3), 2), ((30, 10), 3)])
def test_ledoit_wolf_intensity_matches_the_formula_term_by_term(shape, seed):
    rng = np.random.default_rng(seed)
    rows = rng.normal(size=shape) + rng.normal(size=(shape[0], 1))  # correlated columns
    assert ledoit_wolf_diagonal(rows) == pytest.approx(_ledoit_wolf_by_loops(rows.tolist()), rel=1e-12)


def test_ledoit_wolf_intensity_bounds():
    rng = np.random.default_rng(5)
    # independent columns, few rows: the off-diagonal covariances are mostly noise, ρ̂ near 1
    assert ledoit_wolf_diagonal(rng.normal(size=(6, 10))) > 0.5
    # one strong common factor over many rows: the correlations are real, ρ̂ near 0
    rows = rng.normal(size=(400, 1)) * 3 + rng.normal(size=(400, 4))
    assert ledoit_wolf_diagonal(rows) < 0.05


def _vignette_scores(rng, n_candidates, n_vignettes, sizes):
    clusters = np.repeat(np.arange(n_vignettes), sizes)
    return {f"c{j}": (rng.integers(0, 3, clusters.size) / 2, clusters) for j in range(n_candidates)}


def test_selection_covariance_weights_vignettes_equally_on_the_common_vignettes():
    rng = np.random.default_rng(4)
    scores = _vignette_scores(rng, 3, 10, rng.integers(2, 30, 10))  # unequal sizes
    values, clusters = scores["c2"]
    scores["c2"] = (np.append(values, [1.0, 1.0]), np.append(clusters, [99, 99]))  # a vignette only c2 has
    est = selection_covariance(scores)
    # pandas: per-vignette means over the common vignettes, then their column means and covariance / G
    wide = pd.DataFrame({name: pd.Series(v).groupby(c).mean() for name, (v, c) in scores.items()}).dropna()
    assert est.n_clusters == 10 and est.n_vignettes_dropped == 1 and est.shrinkage_reason is None
    np.testing.assert_allclose(est.estimates, wide.mean().to_numpy(), rtol=1e-12)
    np.testing.assert_allclose(est.covariance, wide.cov().to_numpy() / 10, rtol=1e-12)


def test_selection_covariance_shrinks_toward_the_diagonal_when_candidates_outnumber_vignettes():
    rng = np.random.default_rng(6)
    scores = _vignette_scores(rng, 8, 6, 10)
    est = selection_covariance(scores)
    wide = pd.DataFrame({name: pd.Series(v).groupby(c).mean() for name, (v, c) in scores.items()})
    sample = wide.cov().to_numpy()
    rho = ledoit_wolf_diagonal(wide.to_numpy())
    assert est.shrinkage == rho and 0 < rho <= 1 and "K >= G - 1" in est.shrinkage_reason
    assert est.condition_number == math.inf  # 8 candidates, 6 vignettes: rank <= 5
    np.testing.assert_allclose(est.covariance, ((1 - rho) * sample + rho * np.diag(np.diag(sample))) / 6)
    assert np.linalg.eigvalsh(est.covariance)[0] > 0  # positive definite once shrunk


def test_selection_covariance_shrinks_an_ill_conditioned_estimate():
    rng = np.random.default_rng(7)
    scores = _vignette_scores(rng, 3, 40, 10)
    values, clusters = scores["c0"]
    scores["c1"] = (values + 1e-4 * rng.normal(size=values.size), clusters)  # nearly a copy of c0
    est = selection_covariance(scores, max_condition=1e4)
    assert est.condition_number > 1e4 and "condition number" in est.shrinkage_reason and est.shrinkage > 0
    assert selection_covariance(scores, max_condition=math.inf).shrinkage_reason is None


def test_selection_covariance_needs_two_common_vignettes():
    scores = {"a": (np.array([1.0, 0.0]), np.array([1, 2])), "b": (np.array([1.0, 0.5]), np.array([2, 3]))}
    with pytest.raises(EstimationError, match="share 1 vignette"):
        selection_covariance(scores)


def test_one_candidate_gives_the_t_interval_on_the_logit_scale():
    # K = 1: no selection; the interval is expit(logit x ± t_{G-1} · se_logit), se_logit = se / (x(1 - x)).
    rng = np.random.default_rng(8)
    scores = _vignette_scores(rng, 1, 7, 12)
    est = selection_covariance(scores)
    r = candidate_winner_inference(est, seed=1, n_draws=20_000)
    x = est.estimates[0]
    se_logit = math.sqrt(est.covariance[0, 0]) / (x * (1 - x))
    half = stats.t.ppf(0.975, 6) * se_logit
    expected = special.expit([special.logit(x) - half, special.logit(x) + half])
    np.testing.assert_allclose(r.naive_ci, expected, rtol=1e-10)
    np.testing.assert_allclose(r.conditional_ci, expected, rtol=1e-7)
    assert r.median_unbiased == pytest.approx(x, rel=1e-9)


def test_a_winner_that_won_everything_has_no_logit_interval():
    clusters = np.repeat(np.arange(6), 5)
    rng = np.random.default_rng(9)
    est = selection_covariance({"a": (np.ones(30), clusters), "b": (rng.integers(0, 3, 30) / 2, clusters)})
    with pytest.raises(EstimationError, match="won every contest"):
        candidate_winner_inference(est)


# ---------------------------------------------------------------------------- coverage, Σ estimated


@pytest.mark.coverage
def test_hybrid_coverage_with_estimated_covariance_fast_tier():
    """The worst cell of the slow grid below (G = 6, K = 10), 100 replications."""
    reps = 100
    cov = _coverage_estimated_sigma(6, 10, reps, seed=3060)
    print(f"G=6 K=10 reps={reps}: {cov}")
    assert cov["covered"] >= 0.95 - 3 * math.sqrt(0.05 * 0.95 / reps)
    assert cov["low_above"] <= 0.025 + 3 * math.sqrt(0.025 * 0.975 / reps)
    assert cov["naive_covered"] < cov["covered"]


@pytest.mark.slow
@pytest.mark.coverage
@pytest.mark.parametrize("n_vignettes", [6, 12, 30])
@pytest.mark.parametrize("n_candidates", [3, 10])
def test_hybrid_coverage_with_estimated_covariance_slow_tier(n_vignettes, n_candidates):
    reps = 400
    cov = _coverage_estimated_sigma(n_vignettes, n_candidates, reps, seed=3000 + 10 * n_vignettes + n_candidates)
    print(f"G={n_vignettes} K={n_candidates} reps={reps}: {cov}")
    assert cov["covered"] >= 0.95 - 3 * math.sqrt(0.05 * 0.95 / reps)
    # the gate reads the CI-low: its one-sided error within 3 MC-SE of 2.5%
    assert cov["low_above"] <= 0.025 + 3 * math.sqrt(0.025 * 0.975 / reps)


# ---------------------------------------------------------------------------- the fixture study


@pytest.fixture(scope="module")
def fixture_study():
    claim = load_claim(FIXTURE / "claim.yaml")
    return claim, load_study(claim.data_paths)


def test_fixture_selection_pool_recovers_truth(fixture_study):
    _claim, study = fixture_study
    truth = json.loads((FIXTURE / "truth.json").read_text())["best_of_n"]
    analysis = analyse_selection(study, "gpt-4-0314", truth["judge"], seed=3)
    assert set(analysis.inference.candidates) == set(truth["candidates"])
    true_rate = truth["candidates"][analysis.inference.winner]["win_rate_new_vignette"]
    h = analysis.heldout
    assert h.n_clusters == 6 and h.ci_low <= true_rate <= h.ci_high
    inf = analysis.inference
    assert inf.conditional_ci[0] <= true_rate <= inf.conditional_ci[1]
    assert inf.median_unbiased < inf.naive_estimate
    frame = analysis.to_frame()
    assert list(frame["method"].str.split(" ").str[0]) == ["naive", "AKM", "AKM", "projection", "held-out"]
    section = analysis.report_section()
    assert section.key == "winners_curse" and section.table
    print(analysis)


def _claim_copy(tmp_path, policy):
    tmp_path.mkdir(parents=True, exist_ok=True)
    for path in FIXTURE.iterdir():
        if path.is_file():  # the fixture's sub-studies (offdist/, seeds/) are not this claim's
            shutil.copy(path, tmp_path / path.name)
    text = (FIXTURE / "claim.yaml").read_text().replace("policy: reappraisal-4b-grpo", f"policy: {policy}")
    text = "\n".join(line for line in text.splitlines() if not line.startswith("claimed:"))
    (tmp_path / "claim.yaml").write_text(text + "\n")
    return tmp_path / "claim.yaml"


class _Context:
    """The parts of an AuditContext the winner's-curse check reads (the audit's seed included)."""

    def __init__(self, claim, study, contests):
        self.claim, self.study, self.contests, self.checks = claim, study, contests, {}
        self.seed = DEFAULT_SEED


def test_gate_pass_when_the_policy_is_not_a_candidate(fixture_study):
    from honestci.audit.data.contests import build_contests

    claim, study = fixture_study
    from honestci.audit.checks.selection import winners_curse_check

    ctx = _Context(claim, study, build_contests(study, claim.spec.policy, claim.spec.opponent, claim.spec.judge))
    ctx.checks["winners_curse"] = winners_curse_check(ctx)
    assert run_gate("winners_curse", ctx).verdict == Verdict.PASS


def test_gate_fails_when_the_claim_rests_on_its_selection_pool(tmp_path):
    from honestci.audit.checks.selection import winners_curse_check
    from honestci.audit.data.contests import build_contests

    claim = load_claim(_claim_copy(tmp_path, "grpo-ckpt-5"))
    study = load_study(claim.data_paths)
    ctx = _Context(claim, study, build_contests(study, "grpo-ckpt-5", "gpt-4-0314", "llama-3.1-70b"))
    ctx.checks["winners_curse"] = winners_curse_check(ctx)
    gate = run_gate("winners_curse", ctx)
    assert gate.verdict == Verdict.FAIL and "selection pool" in gate.message


@pytest.mark.parametrize("policy, verdict", [("grpo-ckpt-8", Verdict.WARN), ("grpo-ckpt-5", Verdict.PASS)])
def test_gate_on_held_out_evidence_warns_on_material_shrinkage(fixture_study, policy, verdict):
    # A claim resting on the held-out pool only: ckpt-8 scores 0.800 on selection and 0.717 on
    # held-out (shrinkage 0.083 > 0.05: WARN); ckpt-5 0.800 and 0.800 (PASS). A bar of 0.4, below
    # both winners' hybrid CI-lows (0.49, 0.52 at G = 6, K = 8), isolates the shrinkage rule.
    from honestci.audit.data.contests import build_contests

    _claim, study = fixture_study
    contests = build_contests(study, policy, "gpt-4-0314", "llama-3.1-70b")
    pool = dict(zip(study.responses.frame["response_id"], study.responses.frame["pool"]))
    held = contests.frame[contests.frame["policy_response"].map(pool) == "heldout"].reset_index(drop=True)
    heldout_only = ContestTable(held, policy, "gpt-4-0314", contests.judge)
    analysis = analyse_selection(study, "gpt-4-0314", "llama-3.1-70b", policy=policy, claim_contests=heldout_only)
    assert analysis.policy_is_candidate and not analysis.claim_uses_selection_pool
    gate = gate_winners_curse(analysis, bar=0.4)
    assert gate.verdict == verdict, gate
    # both tie at the top of the selection pool: the claim's policy is listed first, so it is the winner
    assert analysis.policy_is_winner and gate.evidence["hybrid_ci_low"] >= 0.4


@pytest.fixture(scope="module")
def heldout_analysis(fixture_study):
    """grpo-ckpt-5 claimed on the held-out pool: the selected candidate (tied with ckpt-8)."""
    from honestci.audit.data.contests import build_contests

    _claim, study = fixture_study
    contests = build_contests(study, "grpo-ckpt-5", "gpt-4-0314", "llama-3.1-70b")
    pool = dict(zip(study.responses.frame["response_id"], study.responses.frame["pool"]))
    held = contests.frame[contests.frame["policy_response"].map(pool) == "heldout"].reset_index(drop=True)
    heldout_only = ContestTable(held, "grpo-ckpt-5", "gpt-4-0314", contests.judge)
    return analyse_selection(study, "gpt-4-0314", "llama-3.1-70b", policy="grpo-ckpt-5", claim_contests=heldout_only)


@pytest.mark.parametrize(
    "hybrid, verdict, words",
    [
        ((0.65, 0.87), Verdict.PASS, "clears the bar"),
        ((0.60, 0.87), Verdict.INCONCLUSIVE, "reaches below the bar"),
        ((0.40, 0.60), Verdict.FAIL, "lies below the bar"),
        ((0.608, 0.87), Verdict.PASS, "clears the bar"),  # at the bar clears it (clears_bar)
    ],
)
def test_gate_reads_the_hybrid_ci_low_of_the_selected_candidate(heldout_analysis, hybrid, verdict, words):
    from dataclasses import replace

    analysis = replace(heldout_analysis, inference=replace(heldout_analysis.inference, hybrid_ci=hybrid))
    gate = gate_winners_curse(analysis, bar=0.608)
    assert gate.verdict == verdict and words in gate.message, gate
    assert (gate.evidence["hybrid_ci_low"], gate.evidence["hybrid_ci_high"]) == hybrid
    assert gate.evidence["bar"] == 0.608 and gate.evidence["covariance_shrinkage"] > 0  # 8 candidates, 6 vignettes
    for key in ("winner", "naive", "median_unbiased", "heldout", "policy_is_candidate", "claim_uses_selection_pool"):
        assert key in gate.evidence


def test_gate_is_inconclusive_with_the_reason_below_min_clusters(fixture_study, heldout_analysis):
    from dataclasses import replace

    from honestci.audit.policy import Thresholds

    _claim, study = fixture_study
    analysis = analyse_selection(
        study, "gpt-4-0314", "llama-3.1-70b", policy="grpo-ckpt-5", thresholds=Thresholds(min_clusters=7)
    )
    assert analysis.inference is None and "fewer than 7" in analysis.inference_note
    held = replace(analysis, claim_uses_selection_pool=False, policy_heldout_estimate=0.8)
    gate = gate_winners_curse(held, bar=0.608)
    assert gate.verdict == Verdict.INCONCLUSIVE and "fewer than 7" in gate.message
    # reusing the selection pool fails whether or not an interval could be formed
    reused = replace(analysis, claim_uses_selection_pool=True)
    assert gate_winners_curse(reused, bar=0.608).verdict == Verdict.FAIL
    assert "No selection-corrected interval" in "\n".join(analysis.report_section().lines)


def test_check_returns_none_without_a_selection_pool(fixture_study):
    from honestci.audit.checks.selection import winners_curse_check
    from honestci.audit.data.contests import build_contests
    from honestci.audit.data.io import table_from_frame

    claim, study = fixture_study
    responses = study.responses.frame.copy()
    responses["pool"] = None
    study_nopool = type(study)(study.vignettes, table_from_frame(responses, "responses"), study.judgments)
    ctx = _Context(claim, study_nopool, build_contests(study, claim.spec.policy, claim.spec.opponent, claim.spec.judge))
    assert winners_curse_check(ctx) is None
    ctx.checks["winners_curse"] = None
    gate = run_gate("winners_curse", ctx)
    assert gate.verdict == Verdict.INCONCLUSIVE and gate.message.startswith("not run")


# ---------------------------------------------------------------------------- AlpacaEval real cases

ALPACA_PAIRS = [
    ("ultralm-13b-v2.0", "ultralm-13b-v2.0-best-of-16"),
    ("tulu-2-dpo-13b", "pairrm-tulu-2-13b"),
    ("zephyr-7b-beta", "pairrm-zephyr-7b-beta"),
]


@pytest.mark.reference
@pytest.mark.parametrize("base, selected", ALPACA_PAIRS)
def test_alpaca_eval_best_of_n_pairs(base, selected):
    """Real selections: a best-of-N re-ranked model beside its base, same 805 prompts, GPT-4 judge.

    Win rate vs text_davinci_003 (draws ½), paired by prompt and clustered by prompt; AKM on the
    two-candidate selection {base, selected} and the clustered paired difference.
    """
    path = ALPACA / "alpaca_eval_gpt4_preferences_long.csv"
    if not path.exists():
        pytest.skip("../shared/data/alpaca_eval is absent")
    from honestci.audit.stats.frequentist.compare import paired_difference

    long = pd.read_csv(path)
    long = long[long["model"].isin([base, selected]) & long["preference"].notna()]
    # preference 1 → baseline wins (0), 2 → model wins (1), 0 or 1.5 → draw (½), as the recount does
    long = long.assign(score=long["preference"].map({1.0: 0.0, 2.0: 1.0, 0.0: 0.5, 1.5: 0.5}))
    wide = long.pivot_table(index="prompt_id", columns="model", values="score").dropna()
    scores = {m: (wide[m].to_numpy(), wide.index.to_numpy()) for m in (base, selected)}
    est = selection_covariance(scores)
    r = winner_inference(est.estimates, est.covariance, candidates=est.candidates, seed=1)
    diff = paired_difference(
        *scores[selected], *scores[base], system_a=selected, system_b=base, opponent="text_davinci_003"
    )
    corr = est.covariance[0, 1] / math.sqrt(est.covariance[0, 0] * est.covariance[1, 1])
    print(
        f"\n{selected} vs {base}: n={len(wide)} prompts; win rates {dict(zip(est.candidates, est.estimates.round(4)))}; "
        f"corr {corr:.3f}; winner {r.winner}: naive {r.naive_estimate:.4f} {np.round(r.naive_ci, 4)}, "
        f"AKM median {r.median_unbiased:.4f} {np.round(r.conditional_ci, 4)}, hybrid {np.round(r.hybrid_ci, 4)}; "
        f"paired diff {diff.estimate:+.4f} [{diff.ci_low:+.4f}, {diff.ci_high:+.4f}] (CR2 by prompt)"
    )
    # published leaderboard win rates (percent) are the naive estimates of each model
    board = pd.read_csv(ALPACA / "alpaca_eval_gpt4_leaderboard_recount.csv").set_index("model")
    assert r.winner == selected
    assert r.naive_estimate == pytest.approx(board.loc[selected, "published_win_rate"] / 100, abs=0.005)
    assert r.conditional_ci[0] <= r.median_unbiased <= r.naive_estimate
    assert diff.n_clusters == len(wide) and corr > 0


def test_cli_winners_curse(tmp_path):
    from click.testing import CliRunner

    from honestci.audit.cli.selection import winners_curse

    ok = CliRunner().invoke(winners_curse, [str(FIXTURE / "claim.yaml"), "--out", str(tmp_path)])
    assert ok.exit_code == 0, ok.output
    assert "AKM" in ok.output and (tmp_path / "winners_curse.csv").exists()
    failing = CliRunner().invoke(winners_curse, [str(_claim_copy(tmp_path / "c", "grpo-ckpt-5"))])
    assert failing.exit_code == 1 and "FAIL" in failing.output
