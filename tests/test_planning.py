"""The planner (audit/stats/design/planning.py): its approximation against closed forms, its monotonicity,
the pilot estimates, and the key property: the recommended design's simulated power (with the
real gate interval) is within 3 points of the target."""

from __future__ import annotations

import math

import numpy as np
import pytest
from click.testing import CliRunner
from scipy import stats

from honestci.audit.cli import main
from honestci.audit.errors import InputError
from honestci.audit.policy import THRESHOLDS
from honestci.audit.stats.design.coverage_study import simulate_scores
from honestci.audit.stats.design.planning import (
    SimulatedPower,
    Truth,
    VignetteSearch,
    _Simulator,
    _verify,
    approximate_power,
    approximate_vignettes,
    calibrate_vignettes,
    fit_power_curve,
    plan_design,
    sd_for_icc,
    simulated_power,
    truth_from_pilot,
)
from honestci.audit.stats.frequentist.design_effect import icc_oneway


def test_no_spread_no_ties_reduces_to_the_binomial_closed_forms():
    # σ = 0, no ties, no order bias: each order is Bernoulli(X), a contest scores the mean of two,
    # so V_b = 0 and V_w = X(1 − X)/2.
    rate, bar, level = 0.7, 0.65, 0.95
    between, within, floored = Truth(rate, 0.0).components()
    assert between == pytest.approx(0.0, abs=1e-14)
    assert within == pytest.approx(rate * (1 - rate) / 2, rel=1e-10)
    assert floored == pytest.approx(within, rel=1e-10)
    g, m = 20, 5
    # These vignettes: the one-sided normal power of a binomial test on 2Gm judged orders.
    se = math.sqrt(rate * (1 - rate) / (2 * g * m))
    expected = stats.norm.cdf((rate - bar) / se - stats.norm.ppf(0.975))
    assert approximate_power(Truth(rate, 0.0), g, m, bar, "these_vignettes", level) == pytest.approx(expected, rel=1e-9)
    # New vignettes: the one-sample t test on the G vignette means (statsmodels' TTestPower,
    # effect size (X − bar) / sd of a vignette mean, one-sided at α = (1 − level)/2).
    from statsmodels.stats.power import TTestPower

    effect = (rate - bar) / math.sqrt(rate * (1 - rate) / (2 * m))
    reference = TTestPower().power(effect_size=effect, nobs=g, alpha=0.025, alternative="larger")
    assert approximate_power(Truth(rate, 0.0), g, m, bar, "new_vignettes", level) == pytest.approx(reference, rel=1e-6)


def test_power_rises_with_vignettes_contests_and_rate_and_falls_with_spread():
    truth = Truth(0.75, 0.8, 1.0, 0.5)
    for population in ("new_vignettes", "these_vignettes"):
        by_g = [approximate_power(truth, g, 5, 0.7, population) for g in (6, 12, 24, 48)]
        by_m = [approximate_power(truth, 20, m, 0.7, population) for m in (1, 2, 5, 20)]
        by_rate = [approximate_power(Truth(r, 0.8, 1.0, 0.5), 20, 5, 0.7, population) for r in (0.72, 0.75, 0.8)]
        assert np.all(np.diff(by_g) > 0) and np.all(np.diff(by_m) > 0) and np.all(np.diff(by_rate) > 0)
    # More vignette spread at the same rate costs power on new vignettes. Not on these vignettes:
    # there the spread is not uncertainty, and more extreme vignettes have less noise within.
    by_sd = [approximate_power(Truth(0.75, s, 1.0, 0.5), 20, 5, 0.7) for s in (0.0, 0.5, 1.0, 2.0)]
    assert np.all(np.diff(by_sd) < 0)
    # More contests per vignette never need more vignettes.
    needed = [approximate_vignettes(truth, m, 0.7, 0.8) for m in (2, 5, 10, 20)]
    assert needed == sorted(needed, reverse=True)
    assert approximate_vignettes(Truth(0.7, 0.5), 5, 0.7, 0.8) is None  # rate at the bar


def test_icc_converts_to_the_sd_and_matches_the_oneway_estimate_on_simulated_data():
    truth = Truth(0.8, 1.0, 1.0, 0.5)
    assert sd_for_icc(truth.icc, 0.8, 1.0, 0.5) == pytest.approx(1.0, abs=1e-6)
    # icc_oneway on a large seeded simulation: its SE at G = 3000 × 10 is about 0.004
    # (Donner & Koval 1980); 0.015 is over 3 SE.
    scores, clusters, _ = simulate_scores(np.random.default_rng(5), 3000, 10, 1.0, 0.8, 1.0, order_bias=0.5)
    assert icc_oneway(scores, clusters) == pytest.approx(truth.icc, abs=0.015)
    with pytest.raises(InputError):
        sd_for_icc(1.0, 0.8)


def test_pilot_estimates_are_unbiased_within_monte_carlo_error():
    truth = Truth(0.75, 0.8, 0.5, 0.0)  # no order bias: the pilot model is then the truth's
    rng = np.random.default_rng(17)
    estimates = [truth_from_pilot(*simulate_scores(rng, 200, 8, 0.8, 0.75, 0.5, order_bias=0.0)[:2]) for _ in range(12)]
    for name in ("rate", "sd", "ties"):
        values = np.array([getattr(e, name) for e in estimates])
        tolerance = 3 * values.std(ddof=1) / math.sqrt(values.size) + 1e-3  # 3 MC-SE (+ the solvers' tolerance)
        assert abs(values.mean() - getattr(truth, name)) <= tolerance, (name, values.mean())


def _binomial_points(intercept, slope, vignettes, reps, seed):
    rng = np.random.default_rng(seed)
    return [
        SimulatedPower(rng.binomial(reps, stats.norm.cdf(intercept + slope * math.sqrt(g))) / reps, reps, seed, g)
        for g in vignettes
    ]


def test_power_curve_fit_matches_statsmodels_probit_and_recovers_a_known_curve():
    import statsmodels.api as sm

    # A known curve Φ(−2 + 0.35√G): power 0.8 at G = ((Φ⁻¹(0.8) + 2)/0.35)² = 65.9.
    points = _binomial_points(-2.0, 0.35, (40, 50, 60, 70, 80, 95), 400, seed=7)
    curve = fit_power_curve(points)
    # Reference: statsmodels' binomial GLM with the probit link on the same counts.
    passes = np.array([p.passes for p in points])
    exog = sm.add_constant(np.sqrt([p.vignettes for p in points]))
    reference = sm.GLM(
        np.column_stack([passes, 400 - passes]), exog, family=sm.families.Binomial(sm.families.links.Probit())
    ).fit()
    np.testing.assert_allclose([curve.intercept, curve.slope], reference.params, rtol=1e-6)
    np.testing.assert_allclose(np.array(curve.covariance), reference.cov_params(), rtol=1e-4)
    truth = ((stats.norm.ppf(0.8) + 2.0) / 0.35) ** 2
    low, high = curve.vignettes_interval(0.8)
    assert low < truth < high and low < curve.vignettes_at(0.8) < high
    g = curve.vignettes_for(0.8, minimum=5)
    assert curve.power(g) >= 0.8 > curve.power(g - 1)
    # The power's delta-method SE at G: about √(p(1 − p)/N) near the data's centre (N = 2,400).
    assert 0.5 < curve.power_se(65) / math.sqrt(0.8 * 0.2 / 2400) < 2.0


def test_power_curve_fit_refuses_flat_or_falling_evidence():
    assert fit_power_curve(_binomial_points(3.0, 0.0, (10, 20), 50, seed=1)) is None  # every replication passes
    assert fit_power_curve(_binomial_points(1.0, -0.2, (10, 20, 40), 400, seed=1)) is None  # falling
    assert fit_power_curve(_binomial_points(-2.0, 0.35, (40, 40), 400, seed=1)) is None  # one G


def test_search_gives_every_batch_its_own_recorded_seed_stream_and_is_reproducible():
    truth, bar = Truth(0.7, 0.5, 1.0, 0.5), 0.6
    kwargs = dict(start=10, reps=40, seed=5)
    search = calibrate_vignettes(truth, 5, bar, 0.8, "these_vignettes", **kwargs)
    streams = [p.stream for p in search.curve.points]
    assert len(set(streams)) == len(streams) and all(
        p.seed == 5 and p.stream[0] == p.vignettes for p in search.curve.points
    )
    assert search.seed == 5 and search.reps == sum(p.reps for p in search.curve.points)
    again = calibrate_vignettes(truth, 5, bar, 0.8, "these_vignettes", **kwargs)
    assert again == search
    # The simulated span brackets the chosen G, and its fitted power reaches the target.
    simulated = [p.vignettes for p in search.curve.points]
    assert min(simulated) <= search.vignettes <= max(simulated) and search.fitted_power >= 0.8


def test_search_finds_the_target_from_a_start_far_above_or_below_it():
    # These vignettes, m = 5: the approximation's G is 16. From G = 3000 every replication passes
    # (no rising fit) until the bracket has come down; from the minimum it widens upwards.
    truth, bar = Truth(0.7, 0.5, 1.0, 0.5), 0.6
    assert approximate_vignettes(truth, 5, bar, 0.8, "these_vignettes") == 16
    for start in (3000, 5):
        search = calibrate_vignettes(truth, 5, bar, 0.8, "these_vignettes", start=start, reps=40, seed=1)
        assert 12 <= search.vignettes <= 20, (start, search.vignettes)


def test_verification_moves_a_wrong_curve_along_the_refitted_one():
    # A curve fitted to fabricated points that claim G = 8 reaches 0.8 (the truth needs about 44 at
    # m = 2): the fresh-seed check misses by far more than 2 MC-SE, so G moves up and is checked again.
    truth, bar = Truth(0.7, 0.5, 1.0, 0.5), 0.6
    fake = _binomial_points(-1.5, 0.85, (6, 8, 10), 200, seed=3)
    curve = fit_power_curve(fake)
    wrong = VignetteSearch(2, curve.vignettes_for(0.8, 5), curve, curve.vignettes_interval(0.8), 9)
    assert wrong.vignettes <= 10
    simulator = _Simulator(truth, 2, bar, "stratified", THRESHOLDS, 9)
    moved, check = _verify(simulator, wrong, 0.8, 400, THRESHOLDS.min_clusters)
    assert moved.vignettes > wrong.vignettes and check.vignettes == moved.vignettes
    assert check.stream == (moved.vignettes, 1_000_001) and len(moved.curve.points) == len(fake) + 1


def _recommended_within(truth, bar, population, contests, plan_reps, verify_reps, tolerance, plan_verify_reps=1600):
    plan = plan_design(truth, bar, 0.8, population, contests, reps=plan_reps, verify_reps=plan_verify_reps, seed=11)
    best = plan.recommended
    assert best is not None and best.search is not None
    assert (best.verified is not None) == (plan_verify_reps > 0)  # the recommended row is the checked one
    # The check: fresh replications on a seed (2026) the plan never used.
    check = simulated_power(
        truth, best.vignettes, best.contests_per_vignette, bar, population, reps=verify_reps, seed=2026
    )
    assert abs(check.power - 0.8) <= tolerance(best.search, check), (plan.to_frame(), check)
    return plan, check


def test_recommended_design_reaches_its_power_default_tier():
    # 50 replications per simulated G to plan, 300 to check (a fresh seed): 3 combined SE.
    def three_se(search, check):
        return 3 * math.hypot(search.fitted_se, check.mc_se)

    _recommended_within(Truth(0.7, 0.5, 1.0, 0.5), 0.6, "these_vignettes", (10,), 50, 300, three_se, 0)


@pytest.mark.slow
@pytest.mark.parametrize(
    "truth, bar",
    [(Truth(0.7, 0.5, 1.0, 0.5), 0.6), (Truth(0.85, 1.0, 0.0, 0.5), 0.8), (Truth(0.6, 0.3, 1.0, 0.0), 0.55)],
)
def test_recommended_design_reaches_its_power_these_vignettes(truth, bar):
    _recommended_within(truth, bar, "these_vignettes", (2, 5, 10, 20), 100, 2000, lambda search, check: 0.03)


@pytest.mark.slow
def test_recommended_design_reaches_its_power_new_vignettes():
    # The gate's posterior at X = 0.6, bar 0.55, σ = 0.3, t = 1 (ties), no order bias, m = 10: the
    # approximation's G = 23 has a simulated power near 0.56, so the search decides; G is about
    # 35, where one vignette moves the power by about one point. 2000 fresh replications (seed
    # 2026, never used by the plan): MC-SE 0.9 points.
    _recommended_within(Truth(0.6, 0.3, 1.0, 0.0), 0.55, "new_vignettes", (10,), 100, 2000, lambda search, check: 0.03)


def test_plan_command_prints_the_table_and_a_recommendation():
    args = ["plan", "--rate", "0.7", "--sd", "0.5", "--ties", "0.28", "--bar", "0.6"]
    result = CliRunner().invoke(
        main,
        [*args, "--population", "these_vignettes", "--contests", "5,10", "--reps", "40", "--verify-reps", "200"]
        + ["--agreement", "0.8"],
    )
    assert result.exit_code == 0, result.output
    assert "human labels: about " in result.output
    assert "recommendation:" in result.output and "fitted power" in result.output
    assert "fresh-seed check" in result.output and "(200 replications)" in result.output
    assert "contests_per_vignette" in result.output
    missing = CliRunner().invoke(main, ["plan", "--rate", "0.7", "--bar", "0.6"])
    assert missing.exit_code == 2 and "--sd or --icc" in missing.output
    below = CliRunner().invoke(main, ["plan", "--rate", "0.6", "--sd", "0.5", "--bar", "0.6", "--reps", "0"])
    assert below.exit_code == 2 and "not above the bar" in below.output


@pytest.mark.e2e
def test_plan_command_reads_a_pilot_claim():
    from honestci.fixtures.simulate import DEFAULT_STUDY_DIR

    claim = DEFAULT_STUDY_DIR / "claim.yaml"
    result = CliRunner().invoke(main, ["plan", str(claim), "--reps", "0", "--population", "these_vignettes"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("pilot ") and "recommendation:" in result.output


def test_human_labels_match_the_one_sample_proportion_power_of_statsmodels():
    from statsmodels.stats.power import NormalIndPower

    from honestci.audit.stats.design.planning import human_labels_needed, observed_agreement

    a, minimum = 0.8, 0.65  # the policy's min_judge_agreement
    # One order per item, no clustering: the one-sample normal power (ratio=0), one-sided at 2.5%.
    reference = NormalIndPower().solve_power(
        effect_size=(a - minimum) / math.sqrt(a * (1 - a)), alpha=0.025, power=0.8, ratio=0, alternative="larger"
    )
    assert human_labels_needed(a, 0.8, orders_per_item=1) == math.ceil(reference)
    # A noisy rater lowers the observed agreement and so needs more labels; clustering too.
    assert observed_agreement(0.8, 0.9) == pytest.approx(0.8 * 0.9 + 0.2 * 0.1)
    assert human_labels_needed(a, rater_accuracy=0.9) > human_labels_needed(a)
    assert human_labels_needed(a, items_per_vignette=5, icc=0.2) > human_labels_needed(a)
    assert human_labels_needed(0.7, rater_accuracy=0.8) is None  # observed 0.62: below the minimum
