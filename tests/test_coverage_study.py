import numpy as np
import pytest
from scipy import stats

from honestci.audit.stats.design.coverage_study import (
    FULL_GRID,
    HONEST_METHODS,
    UNBALANCED_RANGE,
    CoverageStudy,
    Grid,
    _power,
    run_coverage_study,
    simulate_scores,
)

#: The worst cells of issue 15's grid for intervals built on the vignette means' spread: rates
#: near 1 with vignette logit sd 1 (the mean of skewed vignette rates, and a spread that is
#: understated whenever the rare low vignettes are missed).
WORST = dict(sizes=("balanced",), sd=(1.0,), tie_halfwidth=(0.0,))


@pytest.mark.coverage
def test_small_tier_runs_and_is_deterministic():
    kwargs = dict(
        reps=20,
        methods=("wilson", "stratified", "cr2"),
        grid=Grid((6,), ("unbalanced",), (1.0,), (0.8,), (1.0,)),
        seed=5,
    )
    first, second = run_coverage_study(**kwargs), run_coverage_study(**kwargs)
    assert first.to_frame().equals(second.to_frame())
    frame = first.to_frame()
    assert set(frame["truth"]) == {"new_vignettes", "these_vignettes"}
    text = first.to_markdown()
    assert "## Verdict" in text and "CI-low above the new vignettes truth" in text


@pytest.mark.coverage
def test_gate_interval_keeps_its_one_sided_error_where_the_logit_interval_does_not():
    # G = 6, rate 0.9, sd 1: CR2 on the logit scale puts its CI-low above the truth in 5-6% of
    # replications (4,000-rep exploration, docs/coverage.md); the gate's posterior quantile must
    # stay within nominal 2.5% + 3 MC-SE, and below the logit interval's error.
    study = run_coverage_study(
        reps=150, methods=("cr2_logit", "bayes_logit_normal"), grid=Grid((6,), rate=(0.9,), **WORST), seed=41
    )
    frame = study.to_frame().set_index("method")
    assert frame.loc["bayes_logit_normal", "low_above_truth"] <= study.one_sided_bound
    assert frame.loc["bayes_logit_normal", "low_above_truth"] < frame.loc["cr2_logit", "low_above_truth"]


@pytest.mark.coverage
def test_gate_interval_is_honest_when_contest_counts_follow_quality_and_precision_weighting_is_not():
    # Vignettes where the policy does well get more contests (about x3 per sd of quality), vignette
    # logit sd 0.3: weighting each vignette by its precision (its own size in the likelihood) makes
    # the posterior target the contest-weighted rate, above the equal-weight truth (an outside
    # check measured 21% false passes at G = 30); the gate's equal-weight posterior keeps nominal.
    study = run_coverage_study(
        reps=100,
        methods=("bayes_logit_normal", "bayes_precision_weighted"),
        grid=Grid((30,), ("informative",), (0.3,), (0.8,), (0.0,)),
        seed=17,
    )
    frame = study.to_frame().set_index("method")
    assert frame.loc["bayes_logit_normal", "low_above_truth"] <= study.one_sided_bound
    assert frame.loc["bayes_precision_weighted", "low_above_truth"] > study.one_sided_bound


def test_informative_size_laws_follow_quality_on_the_unbalanced_range():
    rng = np.random.default_rng(3)
    taus = {}
    for sizes in ("unbalanced", "mildly_informative", "informative"):
        scores, clusters, _ = simulate_scores(rng, 2000, sizes, 1.0, 0.7, 0.0)
        counts = np.bincount(clusters)
        assert UNBALANCED_RANGE[0] <= counts.min() and counts.max() <= UNBALANCED_RANGE[1]
        means = np.bincount(clusters, weights=scores) / counts
        taus[sizes] = stats.kendalltau(counts, means).statistic
    # Kendall's tau's sd is about 0.015 at 2,000 vignettes (measured: 0.005, 0.117, 0.565).
    assert abs(taus["unbalanced"]) < 0.05 < taus["mildly_informative"] < 0.3 < taus["informative"]


def test_power_counts_passes_at_a_bar_below_the_truth_and_size_adjusts_by_the_upper_quantile():
    # CI-low minus truth in 200 replications: 10 above the truth (5% false passes, twice nominal).
    shortfall = np.concatenate([np.full(10, 0.01), np.full(90, -0.03), np.full(80, -0.06), np.full(20, -np.inf)])
    raw, adjusted = _power(shortfall, 0.95)
    assert raw == pytest.approx(100 / 200)
    # The critical value is the 97.5% quantile (0.01, the 5 largest of 200 lie there): shifted by
    # it, the -0.03 group falls to -0.04 (still passes at -0.05), the 0.01 group to 0.
    assert adjusted == pytest.approx(100 / 200)
    assert _power(shortfall + 0.02, 0.95)[1] == pytest.approx(adjusted)  # a shift changes nothing adjusted


#: Replications per cell of the full grid in the slow tier (the gate methods only, single-threaded
#: BLAS in each worker); docs/coverage-full.md is the same run (same seed and reps). At 200
#: replications the bound nominal + 2 MC-SE is 4.7%.
FULL_GRID_REPS = 200
FULL_GRID_SEED = 20261201
#: Cells where the gate is known to exceed nominal + 2 MC-SE, with the share above which this test
#: still fails (issue 31 stays open on them). G = 100, contests ×3 per sd of quality, sd 1, rate
#: 0.95, no ties: flagged at 5.5% in the 200-replication first stage, the equal-weight posterior's
#: CI-low then lay above the truth in 64 of 2,400 fresh replications (2.67%; 1.5% / 2.75% / 2.25% /
#: 3.5% in runs of 600 / 400 / 400 / 1,000), where the precision-weighted posterior it replaced lay
#: above in 11.5-14.7% and CR2-logit in 3-4%.
KNOWN_EXCESS = {((100, "informative", 1.0, 0.95, 0.0), "bayes_logit_normal"): 0.045}


@pytest.mark.coverage
@pytest.mark.slow
def test_gate_intervals_one_sided_error_on_every_cell_of_the_full_grid():
    # G 6-100; balanced, unbalanced and informative sizes (contest counts that follow quality,
    # strongly and mildly); sd 0.3 and 1, rates 0.6-0.95, ties 0-35%, order bias. Fails when a gate
    # interval's CI-low lies above its truth more often than 2.5% + 2 MC-SE in any cell.
    study = run_coverage_study(
        reps=FULL_GRID_REPS, methods=HONEST_METHODS, grid="full", seed=FULL_GRID_SEED, processes=2
    )
    # A cell above the bound at 200 replications is run again on 1,000 fresh ones (bound 3.5%),
    # and fails only if it exceeds it there too (CoverageStudy.confirmed_gate_misses). Seen: the
    # gate's cells G = 100, informative, sd 1, rate 0.95 were at 5% at 200 replications and at
    # 1.5% and 1.8% on 600 fresh ones each (the precision-weighted posterior: 14.7% and 11.5%).
    assert len(study.to_frame()) == len(FULL_GRID.cells()) * len(HONEST_METHODS)
    confirmed = study.confirmed_gate_misses(reps=1000, seed=FULL_GRID_SEED + 1, processes=2)
    cells = list(
        zip(confirmed["n_clusters"], confirmed["sizes"], confirmed["sd"], confirmed["rate"], confirmed["tie_halfwidth"])
    )
    known = [KNOWN_EXCESS.get((cell, method)) for cell, method in zip(cells, confirmed["method"])]
    unexplained = confirmed[
        [ceiling is None or share > ceiling for ceiling, share in zip(known, confirmed["low_above_truth"])]
    ]
    assert unexplained.empty, (study.gate_misses(), confirmed)


def test_result_does_not_depend_on_the_number_of_processes():
    kwargs = dict(reps=5, methods=("wilson", "cr2"), grid=Grid((6, 12), ("balanced",), (1.0,), (0.8,), (0.0,)), seed=9)
    assert run_coverage_study(**kwargs).to_frame().equals(run_coverage_study(processes=2, **kwargs).to_frame())


def test_the_gate_methods_are_the_certified_ones():
    from honestci.audit.policy import CERTIFIED_GATE_METHODS, NEW_SEED_METHOD

    # "composed" and the new-seed interval are certified by their own coverage studies (judge error,
    # leakage, selection and seeds are not in this grid's design):
    # tests/test_composed.py::test_composed_coverage_grid, tests/test_seeds.py::test_new_seed_ci_low_one_sided_error.
    certified = {m for methods in CERTIFIED_GATE_METHODS.values() for m in methods}
    assert certified == set(HONEST_METHODS) | {"composed", NEW_SEED_METHOD}


@pytest.mark.coverage
def test_a_miss_by_chance_is_cleared_on_fresh_replications():
    # The gate at a cell where it is honest, its first sample's one-sided error overwritten with 20%
    # (a chance excess): run again on 200 fresh replications, the cell is cleared.
    cell = Grid((12,), ("unbalanced",), (1.0,), (0.8,), (0.0,))
    study = run_coverage_study(reps=40, methods=("bayes_logit_normal",), grid=cell, seed=4)
    rows = [dict(row, low_above_truth=0.2) for row in study.rows]  # as if 8 of 40 had been above
    noisy = CoverageStudy(tuple(rows), study.reps, study.seed, study.level, study.grid)
    assert len(noisy.gate_misses()) == 1
    assert noisy.confirmed_gate_misses(reps=200, seed=5).empty
