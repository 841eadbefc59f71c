"""Training seeds as a level of the model (audit/stats/selection/seeds.py, audit/checks/seeds.py, fixtures/study/seeds/)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from scipy.special import expit

from honestci.audit.checks.seeds import seeds_check
from honestci.audit.data.claims import load_claim
from honestci.audit.errors import ClaimError, EstimationError, InputError
from honestci.audit.gate_registry import evidence_given, run_gate
from honestci.audit.pipeline import audit_context
from honestci.audit.policy import Verdict
from honestci.audit.stats.estimands import standard_normal_nodes
from honestci.audit.stats.selection.seeds import seed_decomposition, seed_table, variance_component_interval
from honestci.audit.stats.selection.systems import k_system_winrates
from honestci.fixtures.population_studies import SEED_SYSTEMS, SEEDS_DIR
from honestci.fixtures.simulate import DEFAULT_STUDY_DIR

SEEDS = DEFAULT_STUDY_DIR / SEEDS_DIR


def _table(k: int, g: int, rng: np.random.Generator) -> np.ndarray:
    a, b, c = rng.normal(0, 0.3, k), rng.normal(0, 0.8, g), rng.normal(0, 0.3, (k, g))
    return rng.binomial(10, expit(0.8 + a[:, None] + b[None, :] + c)) / 10


def test_mean_squares_match_statsmodels_two_way_anova():
    statsmodels = pytest.importorskip("statsmodels.formula.api")
    from statsmodels.stats.anova import anova_lm

    y = _table(4, 7, np.random.default_rng(191))
    d = seed_decomposition(y)
    frame = pd.DataFrame(
        {"y": y.ravel(), "seed": np.repeat(np.arange(4), 7).astype(str), "vig": np.tile(np.arange(7), 4).astype(str)}
    )
    # anova_lm(ols("y ~ C(seed) + C(vig)", frame).fit()): the mean_sq column, rows seed, vig, residual.
    table = anova_lm(statsmodels.ols("y ~ C(seed) + C(vig)", frame).fit())
    assert d.ms_seed == pytest.approx(table["mean_sq"].iloc[0], rel=1e-10)
    assert d.ms_vignette == pytest.approx(table["mean_sq"].iloc[1], rel=1e-10)
    assert d.ms_error == pytest.approx(table["mean_sq"].iloc[2], rel=1e-10)


def test_these_vignettes_interval_is_the_t_interval_on_the_seed_means():
    y = _table(5, 9, np.random.default_rng(192))
    d = seed_decomposition(y, level=0.9)
    means = y.mean(axis=1)
    # scipy.stats.t.interval(0.9, df=K-1, loc=mean, scale=sem) on the K seed means.
    low, high = stats.t.interval(0.9, df=4, loc=means.mean(), scale=stats.sem(means))
    assert d.ci_these == pytest.approx((low, high), rel=1e-12)
    assert d.estimate == pytest.approx(y.mean())
    assert d.ci_new[0] <= d.ci_these[0] and d.ci_new[1] >= d.ci_these[1]


def test_variance_component_interval_is_exact_chi_square_without_error_term():
    # S2 = 0: c1 S1 n1 / chi2_{n1} quantiles (closed form).
    low, high = variance_component_interval(0.5, 2.0, 4, 0.5, 0.0, 20, 0.95)
    assert low == pytest.approx(0.5 * 2.0 * 4 / stats.chi2.ppf(0.975, 4))
    assert high == pytest.approx(0.5 * 2.0 * 4 / stats.chi2.ppf(0.025, 4))


def test_decomposition_refuses_incomplete_or_tiny_tables():
    with pytest.raises(InputError):
        seed_decomposition(np.array([[0.5, np.nan], [0.2, 0.3]]))
    with pytest.raises(EstimationError, match="two or more seeds"):
        seed_decomposition(np.array([[0.5, 0.6, 0.7]]))
    frame = pd.DataFrame({"seed": ["a", "a", "b"], "vignette_id": ["v1", "v2", "v1"], "score": [1.0, 0.5, 0.0]})
    table, seeds, vignettes = seed_table(frame)
    assert seeds == ("a", "b") and vignettes == ("v1",) and table.tolist() == [[1.0], [0.0]]


# --- coverage: seeded simulation of the logit-normal crossed model ------------------------------


def _coverage(k: int, g: int, reps: int, seed: int) -> tuple[float, float, float]:
    """Coverage of the new-seed intervals (new vignettes; these vignettes) and its MC-SE.

    Contest scores: n = 10 Bernoulli draws per cell at expit(0.8 + a_s + b_g + c_sg), sd(a) = 0.3,
    sd(b) = 0.8, sd(c) = 0.3 (logit scale); truths by 96-node Gauss–Hermite quadrature.
    """
    rng = np.random.default_rng(seed)
    x, w = standard_normal_nodes(96)
    sa, sb, sc = 0.3, 0.8, 0.3
    truth_new = float(w @ expit(0.8 + np.sqrt(sa**2 + sb**2 + sc**2) * x))
    hit_new = hit_these = 0
    for _ in range(reps):
        a, b, c = rng.normal(0, sa, k), rng.normal(0, sb, g), rng.normal(0, sc, (k, g))
        d = seed_decomposition(rng.binomial(10, expit(0.8 + a[:, None] + b[None, :] + c)) / 10)
        truth_these = float(np.mean(expit(0.8 + b[:, None] + np.hypot(sa, sc) * x[None, :]) @ w))
        hit_new += d.ci_new[0] <= truth_new <= d.ci_new[1]
        hit_these += d.ci_these[0] <= truth_these <= d.ci_these[1]
    return hit_new / reps, hit_these / reps, float(np.sqrt(0.95 * 0.05 / reps))


@pytest.mark.coverage
@pytest.mark.parametrize("k", [3, 5, 10])
@pytest.mark.parametrize("g", [6, 12, 30])
def test_new_seed_intervals_cover_modest(k, g):
    new, these, mc_se = _coverage(k, g, 200, 1900 + 100 * k + g)
    assert abs(new - 0.95) <= 3 * mc_se, new
    assert abs(these - 0.95) <= 3 * mc_se, these


@pytest.mark.slow
@pytest.mark.coverage
@pytest.mark.parametrize("k", [3, 5, 10])
@pytest.mark.parametrize("g", [6, 12, 30])
def test_new_seed_intervals_cover_full(k, g):
    new, these, mc_se = _coverage(k, g, 2000, 1000 * k + g)
    assert abs(new - 0.95) <= 3 * mc_se, new
    assert abs(these - 0.95) <= 3 * mc_se, these


def _lower_error(k: int, g: int, reps: int, seed: int) -> tuple[float, float]:
    """Share of replications whose new-seed CI-low (new vignettes) lies above the truth, and its
    MC-SE at the nominal 2.5%: what the ``new_seeds`` bar gate reads. Model as in :func:`_coverage`."""
    rng = np.random.default_rng(seed)
    x, w = standard_normal_nodes(96)
    sa, sb, sc = 0.3, 0.8, 0.3
    truth = float(w @ expit(0.8 + np.sqrt(sa**2 + sb**2 + sc**2) * x))
    above = 0
    for _ in range(reps):
        a, b, c = rng.normal(0, sa, k), rng.normal(0, sb, g), rng.normal(0, sc, (k, g))
        above += seed_decomposition(rng.binomial(10, expit(0.8 + a[:, None] + b[None, :] + c)) / 10).ci_new[0] > truth
    return above / reps, float(np.sqrt(0.025 * 0.975 / reps))


# The one-sided error of the CI-low the new_seeds bar gate reads (2,000 replications a cell, ~1 s
# each; seeds 7000 + 100K + G; 5,000 replications gave 2.6% at K = 3, G = 6 and 5.0% at K = 10,
# G = 6). Two-sided coverage is nominal (above) but the lower tail is heavy for rates near 0.7: the
# built-in policy therefore does not allow new_seeds (audit/policy.py, BUILTIN_POPULATIONS).
@pytest.mark.coverage
@pytest.mark.parametrize(
    "k, g",
    [
        (3, 6),
        pytest.param(
            10, 6, marks=pytest.mark.xfail(strict=True, reason="measured 5.0% at nominal 2.5% (BUILTIN_POPULATIONS)")
        ),
    ],
)
def test_new_seed_ci_low_one_sided_error(k, g):
    above, mc_se = _lower_error(k, g, 2000, 7000 + 100 * k + g)
    assert above <= 0.025 + 3 * mc_se, above


@pytest.mark.coverage
def test_between_seed_variance_interval_covers():
    # Normal crossed model on the cell means (σ²_seed = 0.02² truth, σ_vig 0.1, σ_e 0.03): 400 reps.
    rng = np.random.default_rng(1919)
    reps, hits = 400, 0
    for _ in range(reps):
        y = 0.5 + rng.normal(0, 0.02, (5, 1)) + rng.normal(0, 0.1, (1, 12)) + rng.normal(0, 0.03, (5, 12))
        low, high = seed_decomposition(y).var_seed_ci
        hits += low <= 0.02**2 <= high
    mc_se = np.sqrt(0.95 * 0.05 / reps)
    assert abs(hits / reps - 0.95) <= 3 * mc_se, hits / reps


# --- the check on the seeds fixture ------------------------------------------------------------


@pytest.fixture(scope="module")
def seeds_context():
    return audit_context(SEEDS / "claim-seeds.yaml", bayes=False)


def test_check_equals_the_estimators_called_directly(seeds_context):
    check = seeds_context.checks["seeds"]
    claim = load_claim(SEEDS / "claim-seeds.yaml")
    assert [row["seed"] for row in check.table()] == list(SEED_SYSTEMS)
    assert [row["seed"] for row in check.table() if row["policy"]] == [claim.spec.policy]
    judgments = pd.read_json(SEEDS / "judgments.jsonl", lines=True)
    responses = pd.read_json(SEEDS / "responses.jsonl", lines=True).set_index("response_id")["system"]
    # Score each contest from its two orders, as the audit does (1 both won, 0 both lost, ½ else).
    seed_first = judgments[judgments["response_first"].map(responses).isin(SEED_SYSTEMS)]
    seed_second = judgments[judgments["response_second"].map(responses).isin(SEED_SYSTEMS)]
    merged = seed_first.merge(
        seed_second,
        left_on=["response_first", "response_second"],
        right_on=["response_second", "response_first"],
        suffixes=("_a", "_b"),
    )
    won = (merged["verdict_a"] == "first") & (merged["verdict_b"] == "second")
    lost = (merged["verdict_a"] == "second") & (merged["verdict_b"] == "first")
    scores = pd.DataFrame(
        {
            "system": merged["response_first_a"].map(responses),
            "vignette_id": merged["vignette_id_a"],
            "score": np.where(won, 1.0, np.where(lost, 0.0, 0.5)),
        }
    )
    direct = k_system_winrates(scores, opponent="gpt-4-0314", rng=seeds_context.seed)
    rates = direct.to_frame().set_index("system")
    for row in check.table():
        assert row["win_rate"] == pytest.approx(rates.loc[row["seed"], "estimate"])
        assert row["ci_low"] == pytest.approx(rates.loc[row["seed"], "ci_low"])
    table, names, _ = seed_table(scores.rename(columns={"system": "seed"}))
    d = seed_decomposition(table, names)
    assert check.decomposition.ci_new == pytest.approx(d.ci_new)
    # The released seed is the best observed one: the selection is corrected.
    assert check.selection is not None and check.selection.winner == claim.spec.policy
    truth = json.loads((SEEDS / "truth.json").read_text(encoding="utf-8"))
    assert check.decomposition.ci_new[0] <= truth["new_seed"]["new_vignettes"] <= check.decomposition.ci_new[1]
    assert any(line.startswith("a new seed on new vignettes") for line in check.report_section().lines)


def _copy_seeds_study(tmp_path) -> str:
    """Copy the seeds study's tables into ``tmp_path``; the text of its claim."""
    for name in ("vignettes.jsonl", "responses.jsonl", "judgments.jsonl"):
        shutil.copy(SEEDS / name, tmp_path / name)
    return (SEEDS / "claim-seeds.yaml").read_text(encoding="utf-8")


def test_best_seed_is_a_selection_the_winners_curse_gate_reads(seeds_context):
    # The policy is the observed best of five seeds on the claim's own contests: winners_curse is
    # required and reads the best seed's AKM hybrid interval against the bar.
    check = seeds_context.checks["seeds"]
    assert "winners_curse" in evidence_given(seeds_context)
    gate = run_gate("winners_curse", seeds_context)
    s, bar = check.selection, seeds_context.claim.spec.bar
    assert gate.evidence["hybrid_ci_low"] == s.hybrid_ci[0] and gate.evidence["winner"] == check.policy
    expected = Verdict.FAIL if s.hybrid_ci[1] < bar else Verdict.PASS if s.hybrid_ci[0] >= bar else Verdict.INCONCLUSIVE
    assert gate.verdict == expected and "training seeds" in gate.message
    # The correction lowers the reported figure: the median-unbiased estimate sits below the naive maximum.
    naive = next(row for row in check.table() if row["policy"])
    assert s.naive_estimate == pytest.approx(naive["win_rate"]) and s.median_unbiased < s.naive_estimate


def test_a_seed_that_is_not_the_best_meets_no_selection_gate(tmp_path):
    text = _copy_seeds_study(tmp_path)
    best = load_claim(SEEDS / "claim-seeds.yaml").spec.policy
    other = next(s for s in SEED_SYSTEMS if s != best)
    (tmp_path / "other.yaml").write_text(text.replace(f"policy: {best}", f"policy: {other}"), encoding="utf-8")
    context = audit_context(tmp_path / "other.yaml", bayes=False)
    assert context.checks["seeds"].selection is None
    assert "winners_curse" not in evidence_given(context)
    assert run_gate("winners_curse", context).ran is False  # no selection pool, no selection among the seeds


def test_below_min_seeds_there_is_no_new_seed_interval(tmp_path):
    text = _copy_seeds_study(tmp_path)
    policy = load_claim(SEEDS / "claim-seeds.yaml").spec.policy
    other = next(s for s in SEED_SYSTEMS if s != policy)
    lines = [line for line in text.splitlines() if not line.startswith("seeds:")]
    (tmp_path / "two.yaml").write_text("\n".join([*lines, f"seeds: [{policy}, {other}]", ""]), encoding="utf-8")
    check = seeds_check(audit_context(tmp_path / "two.yaml", bayes=False))
    assert check.decomposition is None and len(check.table()) == 2
    assert any("no new-seed interval" in line for line in check.summary_lines())


def test_seeds_key_is_validated(tmp_path):
    text = _copy_seeds_study(tmp_path)
    lines = [line for line in text.splitlines() if not line.startswith("seeds:")]
    without = tmp_path / "without.yaml"
    without.write_text("\n".join([*lines, "seeds: [reappraisal-4b-grpo-seed9, other]", ""]), encoding="utf-8")
    with pytest.raises(ClaimError, match="does not match|must include the policy"):
        load_claim(without)
    single = tmp_path / "single.yaml"
    single.write_text("\n".join([*lines, f"seeds: [{SEED_SYSTEMS[0]}]", ""]), encoding="utf-8")
    with pytest.raises(ClaimError):
        load_claim(single)


def test_seeds_truth_has_per_seed_rates_and_a_real_between_seed_spread():
    truth = json.loads((SEEDS / "truth.json").read_text(encoding="utf-8"))
    assert sorted(truth["per_seed"]) == list(SEED_SYSTEMS)
    assert truth["seed_alpha_sd_judge_logit"] == pytest.approx(0.3)
    rates = [truth["per_seed"][s]["these_vignettes"] for s in SEED_SYSTEMS]
    assert max(rates) - min(rates) > 0.02 and truth["between_seed_sd_rate_these_vignettes"] > 0.01
    assert min(rates) < truth["new_seed"]["these_vignettes"] < max(rates)


# --- the best seed as a selection: coverage of the path the check takes ------------------------


def _best_seed_coverage(k: int, g: int, reps: int, seed: int, per: int = 10) -> dict[str, float]:
    """Coverage of the best seed's true new-vignette rate by its AKM hybrid interval, on the check's path.

    K seeds of one recipe with equal true rates (where the winner's curse is largest), G vignettes with a
    shared logit effect (sd 0.8) and a seed-by-vignette one (sd 0.3), ``per`` contests per vignette
    judged in both orders; :func:`k_system_winrates` (CR2) then :func:`best_of_k_inference`.
    """
    from scipy import optimize

    from honestci.audit.checks.selection import best_of_k_inference
    from honestci.audit.stats.estimands import new_vignette_rate

    rng = np.random.default_rng(seed)
    shared_sd, own_sd = 0.8, 0.3
    mu = optimize.brentq(lambda m: new_vignette_rate(m, np.hypot(shared_sd, own_sd)) - 0.75, -10, 10)
    truth = new_vignette_rate(mu, np.hypot(shared_sd, own_sd))
    names = np.array([f"seed{j}" for j in range(k)])
    vignette = np.tile(np.repeat(np.arange(g), per), k)
    system = np.repeat(names, g * per)
    counts = dict.fromkeys(("covered", "low_above", "naive_low_above"), 0)
    for _ in range(reps):
        eta = mu + rng.normal(0, shared_sd, (1, g)) + rng.normal(0, own_sd, (k, g))
        p = np.repeat(expit(eta), per, axis=1).reshape(-1)
        score = ((rng.random(p.size) < p).astype(float) + (rng.random(p.size) < p)) / 2
        scores = pd.DataFrame({"system": system, "vignette_id": vignette, "score": score})
        rates = k_system_winrates(scores, opponent="o", rng=1)
        r = best_of_k_inference(rates, level=0.95, seed=rng)
        counts["covered"] += r.hybrid_ci[0] <= truth <= r.hybrid_ci[1]
        counts["low_above"] += r.hybrid_ci[0] > truth
        counts["naive_low_above"] += rates.to_frame().set_index("system").loc[r.winner, "ci_low"] > truth
    return {key: value / reps for key, value in counts.items()}


@pytest.mark.coverage
def test_best_seed_interval_covers_at_six_vignettes():
    # The fewest vignettes the audit gives an interval at, five equal seeds: the bar gate's side (the
    # CI-low above the truth) within 3 MC-SE of 2.5%, while the winner's own CR2 interval overshoots.
    # (1000 reps, seed 7065: hybrid CI-low above the truth 2.5%, coverage 97.4%; AKM on the rate
    # scale with normal quantiles, the path before: 14.1% and 85.7%; the winner's CR2 CI-low 15.6%.)
    reps = 150
    cov = _best_seed_coverage(5, 6, reps, seed=2026)
    assert cov["covered"] >= 0.95 - 3 * np.sqrt(0.05 * 0.95 / reps), cov
    assert cov["low_above"] <= 0.025 + 3 * np.sqrt(0.025 * 0.975 / reps), cov
    assert cov["naive_low_above"] > cov["low_above"], cov


@pytest.mark.slow
@pytest.mark.coverage
@pytest.mark.parametrize("k", [3, 10])
@pytest.mark.parametrize("g", [6, 30])
def test_best_seed_interval_covers(k, g):
    reps = 400
    cov = _best_seed_coverage(k, g, reps, seed=4000 + 10 * g + k)
    print(f"K={k} G={g} reps={reps}: {cov}")
    assert cov["covered"] >= 0.95 - 3 * np.sqrt(0.05 * 0.95 / reps), cov
    assert cov["low_above"] <= 0.025 + 3 * np.sqrt(0.025 * 0.975 / reps), cov
