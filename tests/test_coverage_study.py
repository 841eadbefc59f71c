import numpy as np
import pytest

from honestci.audit.stats.coverage_study import HONEST_METHODS, run_coverage_study, simulate_scores


def test_simulated_score_icc_matches_the_design():
    # Score ICC = 2/(a + 2) with a = 2/ICC - 2 (module docstring): check by the one-way ANOVA
    # estimator over many vignettes.
    from honestci.audit.stats.design_effect import icc_oneway

    rng = np.random.default_rng(11)
    scores, clusters, _ = simulate_scores(rng, n_clusters=3000, per_vignette=40, rate=0.7, icc=0.3)
    assert icc_oneway(scores, clusters) == pytest.approx(0.3, abs=0.02)
    assert scores.mean() == pytest.approx(0.7, abs=0.01)


@pytest.mark.coverage
def test_small_tier_runs_and_is_deterministic():
    kwargs = dict(
        reps=20, methods=("wilson", "stratified", "cr2"), clusters_grid=(6,), icc_grid=(0.3,), rate_grid=(0.8,), seed=5
    )
    first, second = run_coverage_study(**kwargs), run_coverage_study(**kwargs)
    assert first.to_frame().equals(second.to_frame())
    frame = first.to_frame()
    assert set(frame["truth"]) == {"new_vignettes", "these_vignettes"}
    assert "## Verdict" in first.to_markdown()


@pytest.mark.coverage
@pytest.mark.slow
def test_honest_intervals_cover_at_twelve_or_more_vignettes():
    study = run_coverage_study(
        reps=400,
        methods=HONEST_METHODS + ("wilson",),
        clusters_grid=(12, 30),
        icc_grid=(0.1, 0.3),
        rate_grid=(0.6, 0.8),
        seed=3,
    )
    mc_tolerance = 0.015 + 3 * np.sqrt(0.95 * 0.05 / 400)
    frame = study.to_frame()
    honest = frame[frame["method"] != "wilson"]
    assert ((honest["coverage"] - 0.95).abs() < mc_tolerance).all(), honest
    wilson_new = frame[(frame["method"] == "wilson") & (frame["truth"] == "new_vignettes")]
    assert (wilson_new["coverage"] < 0.85).all()


def test_result_does_not_depend_on_the_number_of_processes():
    kwargs = dict(reps=5, methods=("wilson", "cr2"), clusters_grid=(6, 12), icc_grid=(0.1,), rate_grid=(0.8,), seed=9)
    assert run_coverage_study(**kwargs).to_frame().equals(run_coverage_study(processes=2, **kwargs).to_frame())
