"""Populations beyond the eval vignettes (issue 19): the transfer gap, family-restricted claims,
the per-family table of the report, and the off-distribution fixture."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from honestci.audit.checks.populations import populations_check
from honestci.audit.data.claims import load_claim
from honestci.audit.errors import ClaimError, EstimationError, InputError
from honestci.audit.pipeline import audit_context
from honestci.audit.stats.design.coverage_study import simulate_scores
from honestci.audit.stats.estimands import unique_inverse, vignette_means
from honestci.audit.stats.frequentist.populations import transfer_gap, vignette_transfer_gap
from honestci.audit.stats.frequentist.winrate import winrate_ci
from honestci.fixtures.design import CLAIM_JUDGE
from honestci.fixtures.population_studies import OFFDIST_DIR
from honestci.fixtures.simulate import DEFAULT_STUDY_DIR

OFFDIST = DEFAULT_STUDY_DIR / OFFDIST_DIR


# --- the transfer gap against outside references ----------------------------------------------


def _two_groups(rng, sizes_in, sizes_fresh):
    sizes = list(sizes_in) + list(sizes_fresh)
    clusters = np.repeat([f"v{i:02d}" for i in range(len(sizes))], sizes)
    fresh = np.repeat([False] * len(sizes_in) + [True] * len(sizes_fresh), sizes)
    scores = rng.choice([0.0, 0.5, 1.0], size=clusters.size, p=[0.3, 0.2, 0.5])
    return scores, clusters, fresh


def test_transfer_gap_is_welch_on_vignette_means_with_imbens_kolesar_df():
    scores, clusters, fresh = _two_groups(np.random.default_rng(19), [5, 7, 6, 5, 8, 4], [6, 5, 7, 3])
    gap = transfer_gap(scores, clusters, fresh, level=0.9)
    means = pd.Series(scores).groupby(clusters).mean()
    is_fresh = pd.Series(fresh).groupby(clusters).first()
    a, b = means[~is_fresh].to_numpy(), means[is_fresh].to_numpy()
    # Reference SE: Welch's, from scipy.stats.ttest_ind(a, b, equal_var=False).
    welch = stats.ttest_ind(a, b, equal_var=False)
    assert gap.estimate == pytest.approx(a.mean() - b.mean(), abs=1e-12)
    assert gap.se == pytest.approx(gap.estimate / welch.statistic, rel=1e-10)
    # Reference df: Imbens & Kolesár (2016, eq. 10), Bell–McCaffrey df of HC2 under homoskedasticity.
    g0, g1 = a.size, b.size
    df = (1 / g0 + 1 / g1) ** 2 / (1 / (g0**2 * (g0 - 1)) + 1 / (g1**2 * (g1 - 1)))
    assert gap.df == pytest.approx(df, rel=1e-10)
    half = stats.t.ppf(0.95, df) * gap.se
    assert (gap.ci_low, gap.ci_high) == pytest.approx((gap.estimate - half, gap.estimate + half), rel=1e-10)
    assert gap.rate_in == pytest.approx(a.mean()) and gap.rate_fresh == pytest.approx(b.mean())
    assert list(gap.to_frame().columns)[:5] == ["in", "fresh", "rate_in", "rate_fresh", "gap"]


def test_vignette_transfer_gap_is_transfer_gap_from_the_vignette_means():
    # the populations check computes the vignette means once and splits them by family
    scores, clusters, fresh = _two_groups(np.random.default_rng(23), [5, 7, 6, 5, 8, 4], [6, 5, 7, 3])
    labels, codes = unique_inverse(clusters)
    fresh_vignettes = np.bincount(codes, weights=fresh) > 0
    for vignettes in (labels, np.arange(labels.size)):
        gap = vignette_transfer_gap(vignette_means(scores, codes).means, vignettes, fresh_vignettes, level=0.9)
        assert gap == transfer_gap(scores, clusters, fresh, level=0.9)  # every field, exactly
    with pytest.raises(InputError, match="one length"):
        vignette_transfer_gap(np.zeros(3), np.arange(4), np.zeros(4, dtype=bool))
    with pytest.raises(EstimationError, match="two or more vignettes"):
        vignette_transfer_gap(np.zeros(3), np.arange(3), np.array([True, False, False]))


def test_transfer_gap_refuses_overlapping_groups_and_single_vignette_groups():
    scores, clusters, fresh = _two_groups(np.random.default_rng(3), [5, 5, 5], [5, 5])
    mixed = fresh.copy()
    mixed[0] = True  # the first vignette now has contests in both groups
    with pytest.raises(InputError, match="both groups"):
        transfer_gap(scores, clusters, mixed)
    one = np.isin(clusters, ["v04"])
    with pytest.raises(EstimationError, match="two or more vignettes in each group"):
        transfer_gap(scores, clusters, one)


def _gap_coverage(reps: int, seed: int) -> tuple[float, float]:
    """Two-sided coverage of the true new-vignette gap: 6 + 6 vignettes, unbalanced sizes, ties and
    order bias (the coverage study's data-generating process, whose θ_new equals ``rate`` exactly)."""
    rng = np.random.default_rng(seed)
    rate_in, rate_fresh, sd, ties = 0.8, 0.6, 1.0, 1.0
    covered = 0
    for _ in range(reps):
        s_in, c_in, _ = simulate_scores(rng, 6, "unbalanced", sd, rate_in, ties)
        s_fr, c_fr, _ = simulate_scores(rng, 6, "unbalanced", sd, rate_fresh, ties)
        scores = np.concatenate([s_in, s_fr])
        clusters = np.concatenate([c_in, c_fr + 100])
        fresh = np.concatenate([np.zeros(s_in.size, bool), np.ones(s_fr.size, bool)])
        gap = transfer_gap(scores, clusters, fresh)
        covered += gap.ci_low <= rate_in - rate_fresh <= gap.ci_high
    coverage = covered / reps
    return coverage, float(np.sqrt(0.95 * 0.05 / reps))


def test_transfer_gap_coverage_modest():
    # 400 replications, seed 1919: within 3 Monte Carlo SE of 95%.
    coverage, mc_se = _gap_coverage(400, 1919)
    assert abs(coverage - 0.95) <= 3 * mc_se, coverage


@pytest.mark.slow
@pytest.mark.coverage
def test_transfer_gap_coverage_full():
    coverage, mc_se = _gap_coverage(4000, 19190)
    assert abs(coverage - 0.95) <= 3 * mc_se, coverage


# --- family-restricted claims -------------------------------------------------------------------


@pytest.fixture(scope="module")
def fresh_context():
    return audit_context(OFFDIST / "claim-fresh.yaml", bayes=False)


def _fresh_only_copy(tmp_path):
    """The off-distribution study with every in-distribution vignette and its rows removed."""
    vignettes = pd.read_json(OFFDIST / "vignettes.jsonl", lines=True)
    keep = set(vignettes.loc[vignettes["family"] == "fresh", "vignette_id"])
    for name in ("vignettes.jsonl", "responses.jsonl", "judgments.jsonl"):
        lines = (OFFDIST / name).read_text(encoding="utf-8").splitlines(keepends=True)
        kept = [line for line in lines if json.loads(line)["vignette_id"] in keep]
        (tmp_path / name).write_text("".join(kept), encoding="utf-8")
    shutil.copy(OFFDIST / "claim-fresh.yaml", tmp_path / "claim-fresh.yaml")
    return tmp_path / "claim-fresh.yaml"


def test_fresh_claim_never_borrows_the_in_distribution_vignettes(fresh_context, tmp_path):
    alone = audit_context(_fresh_only_copy(tmp_path), bayes=False)
    assert fresh_context.contests.frame["vignette_id"].str.startswith("f").all()
    assert fresh_context.contests.dropped["not_in_claim_families"] == 90
    with_in = {(r.method, r.population): r.as_row() for r in fresh_context.intervals.rows}
    without = {(r.method, r.population): r.as_row() for r in alone.intervals.rows}
    assert with_in.keys() == without.keys()
    for key, row in with_in.items():
        assert row == without[key], key
    # With the in-distribution vignettes gone there is one family: no per-family section.
    assert populations_check(alone) is None


def test_per_family_rows_equal_the_estimators_called_directly(fresh_context):
    check = fresh_context.checks["populations"]
    assert [row.family for row in check.families] == ["fresh", "interpersonal"]
    assert check.claim_families == ("fresh",)
    scored = fresh_context.family_contests.scores("both_orders", invalid="against_claim")
    vignettes = pd.read_json(OFFDIST / "vignettes.jsonl", lines=True)
    family_of = dict(zip(vignettes["vignette_id"], vignettes["family"]))
    families = np.array([family_of[v] for v in scored.clusters])
    clusters = np.asarray(scored.clusters)
    for row in check.families:
        inside = families == row.family
        direct = winrate_ci(
            scored.values[inside], clusters[inside], method="bayes_logit_normal", level=0.95, seed=fresh_context.seed
        )
        assert (row.interval.estimate, row.interval.ci_low, row.interval.ci_high) == (
            direct.estimate,
            direct.ci_low,
            direct.ci_high,
        )
        gap = transfer_gap(scored.values, clusters, inside)
        assert row.gap.estimate == pytest.approx(gap.estimate) and row.gap.ci_low == pytest.approx(gap.ci_low)
    # The claim's gate interval is the fresh family's row.
    gate = fresh_context.intervals.get("bayes_logit_normal", "new_vignettes")
    assert check.families[0].interval.ci_low == gate.ci_low
    transfer = check.transfer
    assert transfer.estimate == pytest.approx(check.families[1].interval.estimate - check.families[0].interval.estimate)
    assert any(line.startswith("transfer:") for line in check.report_section().lines)


def test_family_keys_are_validated(tmp_path):
    text = (OFFDIST / "claim-fresh.yaml").read_text(encoding="utf-8")
    for name in ("vignettes.jsonl", "responses.jsonl", "judgments.jsonl"):
        shutil.copy(OFFDIST / name, tmp_path / name)
    both = tmp_path / "both.yaml"
    both.write_text(text + "families: [fresh, interpersonal]\n", encoding="utf-8")
    with pytest.raises(ClaimError, match="does not match"):
        load_claim(both)
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text(text.replace("family: fresh", "family: galactic"), encoding="utf-8")
    with pytest.raises(ClaimError, match="no vignette belongs to"):
        audit_context(unknown, bayes=False)
    repeated = tmp_path / "repeated.yaml"
    repeated.write_text(text.replace("family: fresh", "families: [fresh, fresh]"), encoding="utf-8")
    with pytest.raises(ClaimError, match="does not match"):
        load_claim(repeated)


# --- the off-distribution fixture ---------------------------------------------------------------


def test_offdist_truth_has_the_family_rates_and_a_real_transfer_gap():
    truth = json.loads((OFFDIST / "truth.json").read_text(encoding="utf-8"))
    rates = {
        family: truth["families"][family]["estimands"][CLAIM_JUDGE]["new_vignette"]["contest_score"]
        for family in ("interpersonal", "fresh")
    }
    gap = truth["transfer_gap"][CLAIM_JUDGE]["new_vignette"]
    assert gap == pytest.approx(rates["interpersonal"] - rates["fresh"], abs=1e-8)
    assert gap > 0.1  # the design's point: the policy transfers only part of its edge
    vignettes = pd.read_json(OFFDIST / "vignettes.jsonl", lines=True)
    assert vignettes.groupby("family")["vignette_id"].count().to_dict() == {"fresh": 6, "interpersonal": 6}
