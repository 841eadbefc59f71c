"""Position bias: the fixture's biased judge is flagged and its truth covered, single-order data is
not identifiable, the sign-flip test is exact, and the order-effect interval covers by simulation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from scipy import stats
from scipy.special import logit

from honestci.audit.checks.position_bias import position_bias, position_bias_for_judge, sign_flip_test
from honestci.audit.gates import gate_position_bias
from honestci.audit.policy import Verdict
from honestci.fixtures.truth import JudgeParams, system_estimands

STUDY = Path(__file__).resolve().parents[1] / "fixtures" / "study"
POLICY, OPPONENT = "reappraisal-4b-grpo", "gpt-4-0314"


@pytest.mark.parametrize("judge, verdict", [("llama-3.1-70b", Verdict.PASS), ("llama-3.1-405b", Verdict.FAIL)])
def test_fixture_gate_flags_the_biased_judge(study, judge, verdict):
    result = position_bias_for_judge(study, POLICY, OPPONENT, judge)
    assert gate_position_bias(result).verdict == verdict


@pytest.mark.parametrize("judge", ["llama-3.1-70b", "llama-3.1-405b", "small-judge"])
def test_fixture_intervals_cover_truth(study, truth, judge):
    # truth.json position_bias: order_effect = P(policy wins | shown first) - P(policy wins | shown
    # second), consistency_rate = P(same response both orders, or tie both), conditional on valid
    # verdicts, on the policy-vs-opponent contests; CR2 targets the new-vignette value.
    result = position_bias_for_judge(study, POLICY, OPPONENT, judge)
    for population in ("new_vignette", "these_vignettes"):
        expected = truth["position_bias"][judge][population]
        assert result.order_effect.ci_low <= expected["order_effect"] <= result.order_effect.ci_high
        assert result.consistency.ci_low <= expected["consistency_rate"] <= result.consistency.ci_high


def test_single_order_is_not_identifiable():
    result = position_bias(["win", "loss"], ["invalid", "invalid"], ["v1", "v2"], judge="j")
    assert not result.identifiable and result.order_effect is None and result.verdict == Verdict.INCONCLUSIVE
    assert gate_position_bias(result).verdict == Verdict.INCONCLUSIVE
    assert result.to_frame()["estimate"].isna().all()


def test_single_order_contests_from_tables_are_not_identifiable(study):
    from honestci.audit.checks.position_bias import position_bias_from_contests
    from honestci.audit.data.contests import build_contests

    judgments = study.judgments.frame
    one_order = judgments[judgments["response_first"].str.startswith("grpo")]
    contests = build_contests(
        {"responses": study.responses.frame, "judgments": one_order},
        POLICY,
        OPPONENT,
        judge="llama-3.1-70b",
        single_order="exclude",
    )
    result = position_bias_from_contests(contests)
    assert not result.identifiable and result.n_single_order == 720
    assert (
        "one presentation order" in gate_position_bias(result).message
        or "not identifiable" in gate_position_bias(result).message
    )


def test_hand_example_and_exact_sign_flip():
    first = ["win", "win", "win", "tie", "loss", "win", "win", "loss"]
    second = ["loss", "loss", "win", "tie", "loss", "tie", "loss", "win"]
    result = position_bias(
        first, second, [f"v{i % 5}" for i in range(8)], min_clusters=2, bootstrap_draws=99, permutation_draws=999
    )
    # W1 = 5/8, W2 = 2/8; consistent: (win,win), (tie,tie), (loss,loss)
    assert result.order_effect.estimate == pytest.approx(3 / 8)
    assert result.consistency.estimate == pytest.approx(3 / 8)
    assert result.order_effect_logit.estimate == pytest.approx(logit(5 / 8) - logit(2 / 8))
    # D = W1 - W2: four +1, one -1 -> exact binomial on the five discordant contests
    d = np.array([1, 1, 0, 0, 0, 1, 1, -1])
    assert result.n_discordant == 5
    assert result.exact_p == pytest.approx(stats.binomtest(4, 5, 0.5).pvalue)
    # first-position preference among the 5 inconsistent contests: (w,l) x3, (w,t) first; (l,w) second
    assert result.first_preference.estimate == pytest.approx(4 / 5)
    exact, monte_carlo, m, _ = sign_flip_test(d, draws=20000, rng=3)
    assert m == 5 and abs(exact - monte_carlo) < 0.02


def _sign_flip_one_matrix(d, draws, seed):
    """The previous sign_flip_test Monte Carlo p-value: all signs drawn as one matrix."""
    discordant = np.asarray(d, dtype=float)[np.asarray(d) != 0]
    signs = np.random.default_rng(seed).integers(0, 2, size=(draws, discordant.size), dtype=np.int8) * 2 - 1
    flipped = np.abs(signs @ discordant)
    return float((1 + np.sum(flipped >= abs(discordant.sum()) - 1e-9)) / (draws + 1))


@pytest.mark.parametrize("m, draws", [(5, 999), (443, 9999), (1001, 4097)])
def test_chunked_sign_flip_draws_the_same_signs(m, draws, monkeypatch):
    import honestci.audit.checks.position_bias as module

    d = np.where(np.random.default_rng(m).random(m) < 0.55, 1, -1)
    monkeypatch.setattr(module, "SIGN_FLIP_CHUNK", 4 * 37 * m)  # several chunks, the last one short
    assert sign_flip_test(d, draws=draws, rng=11)[1] == _sign_flip_one_matrix(d, draws, 11)


def test_sign_flip_by_its_binomial_law_above_the_matrix_limit(monkeypatch):
    import honestci.audit.checks.position_bias as module

    # Σ s D with iid random signs is 2 Binomial(m, ½) - m: the Monte Carlo p-value of either route
    # estimates the exact two-sided binomial p-value
    monkeypatch.setattr(module, "SIGN_FLIP_MATRIX_MAX", 0)
    for m, k in ((60, 38), (400, 221), (443803, 222400)):
        d = np.r_[np.ones(k), -np.ones(m - k)]
        exact, monte_carlo, n, _ = sign_flip_test(d, draws=20000, rng=5)
        assert n == m and exact == pytest.approx(stats.binomtest(k, m, 0.5).pvalue)
        assert abs(monte_carlo - exact) < 4 * np.sqrt(exact * (1 - exact) / 20000) + 1e-4


def test_cli_position_bias():
    from honestci.audit.cli.checks import position_bias_command

    # Exit by the gate, like `honestci audit`: 1 when it does not PASS, 0 when it does.
    out = CliRunner().invoke(position_bias_command, [str(STUDY / "claim.yaml"), "--judge", "llama-3.1-405b"])
    assert out.exit_code == 1, out.output
    assert "gate position_bias: FAIL" in out.output and "v6" in out.output
    calibrated = CliRunner().invoke(position_bias_command, [str(STUDY / "claim.yaml")])
    assert calibrated.exit_code == 0 and "gate position_bias: PASS" in calibrated.output


# --- coverage --------------------------------------------------------------------------------------

JUDGE = JudgeParams(kappa=2.5, b=0.5, t=0.15, pi=0.0)
ALPHA_DIFF, SIGMA_U, TAU = 0.5, 0.4, 0.6


def _simulate(rng, n_vignettes: int, per_vignette: int):
    u = rng.normal(0, SIGMA_U, n_vignettes)
    vignette = np.repeat(np.arange(n_vignettes), per_vignette)
    d = ALPHA_DIFF + u[vignette] + rng.normal(0, np.sqrt(2) * TAU, vignette.size)
    z_first = JUDGE.kappa * d + JUDGE.b + rng.logistic(size=d.size)  # policy shown first
    z_second = -JUDGE.kappa * d + JUDGE.b + rng.logistic(size=d.size)  # opponent shown first
    first = np.where(z_first > JUDGE.t, "win", np.where(z_first < -JUDGE.t, "loss", "tie"))
    second = np.where(z_second < -JUDGE.t, "win", np.where(z_second > JUDGE.t, "loss", "tie"))
    return first, second, vignette


def _order_effect_coverage(reps: int, n_vignettes: int, per_vignette: int, seed: int) -> tuple[float, float]:
    truth = system_estimands(ALPHA_DIFF, {"v": 0.0}, SIGMA_U, TAU, JUDGE)["new_vignette"]
    logit_truth = logit(truth["p_win_policy_first"]) - logit(truth["p_win_policy_second"])
    rng = np.random.default_rng(seed)
    covered = covered_logit = 0
    for _ in range(reps):
        first, second, vignette = _simulate(rng, n_vignettes, per_vignette)
        result = position_bias(first, second, vignette, rng=rng, bootstrap_draws=19, permutation_draws=19)
        covered += result.order_effect.ci_low <= truth["order_effect"] <= result.order_effect.ci_high
        covered_logit += result.order_effect_logit.ci_low <= logit_truth <= result.order_effect_logit.ci_high
    return covered / reps, covered_logit / reps


@pytest.mark.coverage
def test_order_effect_coverage_fast_tier():
    # measured: probability scale 0.945, logit scale 0.950 (G = 12, 200 reps, seed 4)
    coverage, coverage_logit = _order_effect_coverage(200, 12, 30, seed=4)
    assert 0.90 <= coverage <= 0.985
    assert 0.88 <= coverage_logit <= 0.985


@pytest.mark.coverage
@pytest.mark.slow
@pytest.mark.parametrize("n_vignettes, most", [(6, 0.995), (30, 0.975)])
def test_order_effect_coverage_slow_tier(n_vignettes, most):
    # The score interval (Tango, Rao-Scott design effect floored at 1, t(df) critical value) is
    # conservative at G = 6: measured 0.9895 (2,000 reps, seed 46); honest, only wider.
    coverage, coverage_logit = _order_effect_coverage(2000, n_vignettes, 40, seed=40 + n_vignettes)
    assert 0.92 <= coverage <= most
    assert 0.90 <= coverage_logit <= 0.975


# --- extremes are decided ----------------------------------------------------------------------


def _extreme(first: str, second: str, vignettes: int = 6, per_vignette: int = 120):
    n = vignettes * per_vignette
    groups = np.repeat([f"v{g}" for g in range(vignettes)], per_vignette)
    return position_bias(np.full(n, first), np.full(n, second), groups, judge="J")


def test_a_judge_that_always_names_the_first_response_fails():
    result = _extreme("win", "loss")  # the policy wins when shown first, loses when shown second
    effect = result.order_effect
    assert effect.reportable and effect.estimate == 1.0 and 0.85 < effect.ci_low <= effect.ci_high <= 1.0
    gate = gate_position_bias(result)
    assert gate.verdict == Verdict.FAIL and "exact, these vignettes" in gate.message


def test_a_judge_whose_verdict_never_depends_on_the_order_passes():
    for outcome in ("win", "tie", "loss"):
        result = _extreme(outcome, outcome)
        effect = result.order_effect
        assert effect.estimate == 0.0 and -0.1 < effect.ci_low < 0 < effect.ci_high < 0.1
        assert gate_position_bias(result).verdict == Verdict.PASS


def test_exact_bounds_are_scipys_clopper_pearson_on_the_pooled_contests():
    from honestci.audit.checks.position_bias import exact_order_effect

    # Pooled over the 40 contests (was: per-vignette bounds at (1 - level)/(4G), averaged, which
    # say nothing with one contest per vignette): each of the four one-sided bounds at 0.05/4.
    groups = np.repeat(["a", "b"], [10, 30])
    effect = exact_order_effect(np.ones(40), groups, 0.95)
    one_sided = 0.05 / 4
    low_plus = stats.binomtest(40, 40).proportion_ci(1 - 2 * one_sided, "exact").low
    high_minus = stats.binomtest(0, 40).proportion_ci(1 - 2 * one_sided, "exact").high
    np.testing.assert_allclose(effect.ci_low, low_plus - high_minus, rtol=1e-10)
    np.testing.assert_allclose(effect.ci_low, 2 * one_sided ** (1 / 40) - 1, rtol=1e-10)  # closed form
    assert effect.ci_high == 1.0 and effect.n_clusters == 2 and effect.method == "exact, these vignettes"


# --- one contest per vignette (LLMBar, MT-Bench, AlpacaEval) -----------------------------------


def _design(sizes, first: str, second: str):
    groups = np.repeat([f"v{g:03d}" for g in range(len(sizes))], sizes)
    return position_bias(np.full(groups.size, first), np.full(groups.size, second), groups, judge="J")


DESIGNS = {
    "one per vignette, G = 20": [1] * 20,
    "one per vignette, G = 54": [1] * 54,
    "one per vignette, G = 200": [1] * 200,
    "two per vignette, G = 27": [2] * 27,
    "120 per vignette, G = 6": [120] * 6,
    "unequal, G = 12": [1, 1, 2, 3, 5, 8, 13, 1, 2, 40, 1, 7],
}


@pytest.mark.parametrize("sizes", DESIGNS.values(), ids=DESIGNS.keys())
@pytest.mark.parametrize("first, second, sign", [("win", "loss", 1), ("loss", "win", -1)])
def test_a_judge_that_always_names_one_position_fails_at_any_design(sizes, first, second, sign):
    result = _design(sizes, first, second)
    effect, n = result.order_effect, sum(sizes)
    assert effect.reportable and effect.estimate == sign
    assert (effect.ci_low > 0) if sign > 0 else (effect.ci_high < 0)  # the interval excludes 0
    assert gate_position_bias(result).verdict == Verdict.FAIL
    # exact McNemar on the n discordant contests, as scipy and statsmodels give it
    from statsmodels.stats.contingency_tables import mcnemar

    assert result.n_discordant == n
    assert result.exact_p == pytest.approx(stats.binomtest(n, n, 0.5).pvalue, rel=1e-12)
    assert result.exact_p == pytest.approx(mcnemar([[0, n], [0, 0]], exact=True).pvalue, rel=1e-12)


def test_the_issue_case_54_contests_one_per_vignette():
    result = _design([1] * 54, "win", "loss")
    effect = result.order_effect
    # exact bound: Clopper-Pearson low of 54/54 minus high of 0/54, each one-sided at 0.0125
    low = stats.binomtest(54, 54).proportion_ci(0.975, "exact").low - stats.binomtest(0, 54).proportion_ci(0.975).high
    assert effect.ci_low == pytest.approx(low, rel=1e-10) and effect.ci_low == pytest.approx(0.8441, abs=1e-4)
    assert effect.ci_high == 1.0 and effect.method == "exact, pooled contests"
    assert result.exact_p == pytest.approx(1.11e-16, rel=0.01)
    gate = gate_position_bias(result)
    assert gate.verdict == Verdict.FAIL and "exact, pooled contests" in gate.message


def test_score_interval_is_tangos():
    from honestci.audit.stats.frequentist.iid import paired_difference_ci

    # k+ = n: Z(δ0) = sqrt(n (1 - δ0)/(1 + δ0)), so the lower end is (n - z²)/(n + z²)
    z = stats.norm.isf(0.025)
    assert paired_difference_ci(54, 0, 54)[0] == pytest.approx((54 - z**2) / (54 + z**2), rel=1e-9)
    assert paired_difference_ci(0, 0, 54) == pytest.approx((-0.0664136, 0.0664136), abs=1e-6)
    # mirror symmetry, and the design effect acts as dividing the counts
    low, high = paired_difference_ci(9, 3, 40)
    assert paired_difference_ci(3, 9, 40) == pytest.approx((-high, -low), rel=1e-9)
    assert paired_difference_ci(9, 3, 40, design_effect=2.0) == pytest.approx(paired_difference_ci(4.5, 1.5, 20))


# --- coverage of the order-effect interval (both-order designs) ----------------------------------

#: P(outcome shown first, outcome shown second) of a judge without position bias, rows and columns
#: win, tie, loss: symmetric, so P(W1) = P(W2). QUIET rarely changes its verdict with the order.
FAIR = np.array([[0.35, 0.05, 0.05], [0.05, 0.10, 0.05], [0.05, 0.05, 0.25]])
QUIET = np.array([[0.45, 0.005, 0.005], [0.005, 0.10, 0.01], [0.005, 0.01, 0.41]])
ALWAYS_FIRST = np.zeros((3, 3))
ALWAYS_FIRST[0, 2] = 1.0  # the policy wins when shown first, loses when shown second


def _contests(rng, sizes, delta, table, concentration=5.0):
    """Both-order outcomes with order effect exactly ``delta``: each vignette's table is drawn from
    Dirichlet(concentration x ((1 - delta) table + delta ALWAYS_FIRST)), whose mean has P(W1) -
    P(W2) = delta; one contest per vignette is then an iid draw from the mean table."""
    base = ((1 - delta) * table + delta * ALWAYS_FIRST).ravel()
    vignette = np.repeat(np.arange(sizes.size), sizes)
    if sizes.max() == 1:
        cells = rng.choice(9, size=vignette.size, p=base)
    else:
        cumulative = np.cumsum(rng.dirichlet(concentration * base, size=sizes.size), axis=1)[vignette]
        cells = np.minimum((rng.random(vignette.size)[:, None] > cumulative).sum(axis=1), 8)
    return cells // 3 == 0, cells % 3 == 0, vignette


def _interval_coverage(reps, sizes, delta, table, seed):
    """(coverage, low-end misses, high-end misses) of the gate's order-effect interval."""
    from honestci.audit.checks.position_bias import order_effect_within_contests

    rng = np.random.default_rng(seed)
    low = high = 0
    for _ in range(reps):
        win_first, win_second, vignette = _contests(rng, sizes(rng), delta, table)
        effect, _ = order_effect_within_contests(win_first, win_second, vignette, rng=None)
        low += effect.ci_low > delta
        high += effect.ci_high < delta
    return 1 - (low + high) / reps, low / reps, high / reps


def _one_each(g):
    return lambda rng: np.ones(g, dtype=int)


COVERAGE_CELLS = {
    **{f"G={g} m=1 delta={d}": (_one_each(g), d, FAIR) for g in (20, 54, 200) for d in (0.0, 0.1, 0.3)},
    "G=20 m=1 quiet delta=0": (_one_each(20), 0.0, QUIET),  # mostly no discordant contest: exact
    "G=54 m=1 quiet delta=0.1": (_one_each(54), 0.1, QUIET),  # few discordant contests
    "G=12 m=1..19 delta=0.1": (lambda rng: rng.integers(1, 20, size=12), 0.1, FAIR),
}
SLOW_CELLS = {
    **COVERAGE_CELLS,
    "G=20 m=1 delta=0.97": (_one_each(20), 0.97, FAIR),
    "G=12 m=1..19 delta=0.3": (lambda rng: rng.integers(1, 20, size=12), 0.3, FAIR),
    "G=27 m=2 delta=0.1": (lambda rng: np.full(27, 2), 0.1, FAIR),
    "G=6 m=1..19 delta=0.1": (lambda rng: rng.integers(1, 20, size=6), 0.1, FAIR),
}


def _assert_honest(coverage, reps, level=0.95):
    # no under-coverage beyond 3 Monte Carlo SE; over-coverage (the exact bound, the score interval at
    # G = 20) is conservative and not asserted
    assert coverage >= level - 3 * np.sqrt(level * (1 - level) / reps), coverage


@pytest.mark.coverage
@pytest.mark.parametrize("cell", COVERAGE_CELLS, ids=COVERAGE_CELLS.keys())
def test_order_effect_interval_coverage_fast_tier(cell):
    sizes, delta, table = COVERAGE_CELLS[cell]
    coverage, _, _ = _interval_coverage(300, sizes, delta, table, seed=sum(map(ord, cell)))
    _assert_honest(coverage, 300)


@pytest.mark.coverage
@pytest.mark.slow
@pytest.mark.parametrize("cell", SLOW_CELLS, ids=SLOW_CELLS.keys())
def test_order_effect_interval_coverage_slow_tier(cell):
    sizes, delta, table = SLOW_CELLS[cell]
    coverage, _, _ = _interval_coverage(2000, sizes, delta, table, seed=7 + sum(map(ord, cell)))
    _assert_honest(coverage, 2000)


@pytest.mark.parametrize("sizes", [[1] * 20, [1] * 54, [3] * 12], ids=["G=20 m=1", "G=54 m=1", "G=12 m=3"])
@pytest.mark.parametrize("table", [FAIR, QUIET], ids=["fair", "quiet"])
def test_a_fair_judge_rarely_fails(sizes, table):
    rng, reps = np.random.default_rng(len(sizes) + int(table[0, 0] * 100)), 150
    fails = 0
    for _ in range(reps):
        win_first, win_second, vignette = _contests(rng, np.asarray(sizes), 0.0, table)
        outcomes = [np.where(w, "win", "loss") for w in (win_first, win_second)]
        result = position_bias(*outcomes, vignette, rng=rng, bootstrap_draws=19, permutation_draws=19)
        fails += gate_position_bias(result).verdict == Verdict.FAIL
    assert fails / reps <= 0.025 + 3 * np.sqrt(0.025 * 0.975 / reps)
