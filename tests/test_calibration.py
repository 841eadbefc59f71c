"""Judge calibration: PandaLM published figures, clubSandwich CR2 parity, outside packages, the
fixture's truth, gates, CLI, and seeded coverage of the agreement interval."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from honestci.audit.checks.calibration import calibrate_judge
from honestci.audit.checks.calibration_agreement import (
    agreement_ci,
    classification_metrics,
    cohen_kappa,
    human_ceiling,
    krippendorff_alpha,
)
from honestci.audit.checks.calibration_items import (
    CLASSES,
    INVALID_CODE,
    calibration_items,
    judged_rows,
    majority_preference,
    verdict_to_preference,
)
from honestci.audit.checks.judge_selection import select_judge
from honestci.audit.gates import gate_judge_calibrated
from honestci.audit.policy import Verdict
from honestci.audit.stats.judge_error.ppi import ppi_mean, ppi_mean_clustered

REPO = Path(__file__).resolve().parents[1]
STUDY = REPO / "fixtures" / "study"
REFERENCE = REPO / "tests" / "reference"


# --- mapping and references ---------------------------------------------------------------------


def test_verdict_mapping_is_explicit():
    # item (a = x, b = y); judged in both orders
    codes = verdict_to_preference(
        ["first", "second", "first", "second", "tie", "invalid"],
        ["x", "x", "y", "y", "x", "y"],
        ["y", "y", "x", "x", "y", "x"],
        ["x"] * 6,
        ["y"] * 6,
    )
    np.testing.assert_array_equal(codes[:5], [1, -1, -1, 1, 0])
    assert codes[5] == INVALID_CODE  # default: an invalid verdict is a class of its own, never a match
    assert verdict_to_preference(["invalid"], ["x"], ["y"], ["x"], ["y"], invalid_as="tie")[0] == 0
    assert np.isnan(verdict_to_preference(["invalid"], ["x"], ["y"], ["x"], ["y"], invalid_as="exclude")[0])


def test_majority_with_explicit_ties():
    codes = np.array([[1, 1, -1], [1, -1, 0], [np.nan, -1, -1], [np.nan, np.nan, np.nan], [0, 1, np.nan]])
    np.testing.assert_array_equal(majority_preference(codes)[:3], [1, 0, -1])
    assert np.isnan(majority_preference(codes)[3])
    assert majority_preference(codes)[4] == 0  # 1-1 split of two labels is a tie
    np.testing.assert_array_equal(majority_preference(codes, split="first_rater")[[1, 4]], [1, 0])


def test_ratings_reference_respects_min_margin():
    ratings = pd.DataFrame(
        {
            "response_id": ["a1", "b1", "a1", "b1", "a2", "b2", "a2", "b2"],
            "rater_id": ["r1", "r1", "r2", "r2"] * 2,
            "score": [5, 4, 5, 5, 6, 3, 6, 4],
        }
    )
    pairs = pd.DataFrame(
        {
            "vignette_id": ["v", "v"],
            "response_a": ["a1", "a2"],
            "response_b": ["b1", "b2"],
            "label": ["a", "a"],
            "rater_id": ["r1", "r1"],
        }
    )
    strict = calibration_items(human_ratings=ratings, human_pairs=pairs, source="ratings")
    np.testing.assert_array_equal(strict.items["human"], [1, 1])  # mean differences 0.5 and 2.5
    margin = calibration_items(human_ratings=ratings, human_pairs=pairs, source="ratings", min_margin=0.5)
    np.testing.assert_array_equal(margin.items["human"], [0, 1])


# --- PandaLM: published figures and clubSandwich ---------------------------------------------------


@pytest.fixture(scope="module")
def pandalm_rows():
    data = REPO.parent / "shared" / "data"
    if not data.is_dir():
        pytest.skip(f"{data} is absent")
    from honestci.judges.importers_alpaca import import_pandalm

    folder = data / "pandalm"
    imported = import_pandalm(
        folder / "testset-v1.json", [folder / "gpt-3.5-turbo-testset-v1.json", folder / "pandalm-7b-testset-v1.json"]
    )
    # PandaLM's rules: majority of three annotators, a three-way split goes to annotator1; Tie and
    # garbage count as class 0.
    items = calibration_items(human_pairs=imported.human_pairs, source="pairs", split="first_rater")
    rows = {
        judge: judged_rows(items, imported.judgments, judge, invalid_as="tie")
        for judge in ("gpt-3.5-turbo", "pandalm-7b")
    }
    return data, items, rows


@pytest.mark.reference
@pytest.mark.shared_data
@pytest.mark.parametrize(
    "judge, accuracy, macro_f1", [("gpt-3.5-turbo", 0.7107, 0.5755), ("pandalm-7b", 0.6677, 0.5743)]
)
def test_pandalm_published_accuracy_and_macro_f1(pandalm_rows, judge, accuracy, macro_f1):
    # Published table of PandaLM's data/compute_metrics.py (shared/data/README.md).
    _, _, rows = pandalm_rows
    metrics = classification_metrics(rows[judge]["judge_code"], rows[judge]["human"])
    assert metrics.n == 999
    assert round(metrics.accuracy, 4) == accuracy
    assert round(metrics.macro_f1, 4) == macro_f1


@pytest.mark.reference
@pytest.mark.shared_data
def test_pandalm_gpt35_agreement_cr2_matches_clubsandwich(pandalm_rows):
    data, items, rows = pandalm_rows
    reference = pd.read_csv(data / "reference" / "clubSandwich_pandalm_reference.csv").set_index("vcov").loc["CR2"]
    gpt = rows["gpt-3.5-turbo"]
    result = agreement_ci(gpt["judge_code"], gpt["human"], gpt["vignette_id"], ties="as_class", rng=None)
    assert result.n == reference["n_obs"] and result.n_clusters == reference["n_clusters"]
    for ours, theirs in (
        (result.estimate, "estimate"),
        (result.se, "SE"),
        (result.df, "df_Satt"),
        (result.ci_low, "ci_lower"),
        (result.ci_high, "ci_upper"),
    ):
        assert ours == pytest.approx(reference[theirs], abs=1e-6), theirs
    # the same items agree as in the reference input (same clusters, same majority rule)
    agreement_input = pd.read_csv(data / "reference" / "input_pandalm_gpt35_agreement.csv")
    idx = items.items["response_a"].str.extract(r"pandalm-(\d+)-1")[0].astype(int).to_numpy()[gpt["item"]]
    ours = pd.Series((gpt["judge_code"] == gpt["human"]).astype(int).to_numpy(), index=idx).sort_index()
    np.testing.assert_array_equal(ours.to_numpy(), agreement_input.sort_values("idx")["agree"].to_numpy())


# --- outside packages --------------------------------------------------------------------------------


def _random_codes(seed: int, n: int = 200):
    rng = np.random.default_rng(seed)
    human = rng.choice(CLASSES, size=n, p=[0.4, 0.2, 0.4])
    judge = np.where(rng.random(n) < 0.6, human, rng.choice(CLASSES, size=n))
    return judge, human


@pytest.mark.reference
@pytest.mark.parametrize("weights", [None, "linear"])
def test_kappa_matches_statsmodels(weights):
    from statsmodels.stats.inter_rater import cohens_kappa

    judge, human = _random_codes(3)
    from honestci.audit.checks.calibration_agreement import confusion_table

    ref = cohens_kappa(confusion_table(judge, human)[:3], wt=weights)  # no invalid row here
    ours = cohen_kappa(judge, human, np.arange(judge.size), weights=weights, rng=None)
    assert ours.estimate == pytest.approx(ref.kappa, abs=1e-12)
    if weights is None:
        # one item per cluster: CR2 = CR0 * n/(n-1), and CR0 of the influence values is the
        # Fleiss-Cohen-Everitt large-sample variance that statsmodels reports
        n = judge.size
        assert ours.se * np.sqrt((n - 1) / n) == pytest.approx(ref.std_kappa, rel=1e-9)


@pytest.mark.reference
@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval"])
def test_krippendorff_alpha_matches_package(level):
    krippendorff = pytest.importorskip("krippendorff")
    rng = np.random.default_rng(11)
    truth = rng.choice(CLASSES, size=80)
    codes = np.where(rng.random((80, 4)) < 0.7, truth[:, None], rng.choice(CLASSES, size=(80, 4))).astype(float)
    codes[rng.random((80, 4)) < 0.15] = np.nan
    ours = krippendorff_alpha(codes, level_of_measurement=level, rng=None)
    theirs = krippendorff.alpha(reliability_data=codes.T, level_of_measurement=level)
    assert ours.estimate == pytest.approx(theirs, abs=1e-12)


@pytest.mark.reference
def test_ppi_matches_ppi_py_reference_values():
    # Values from ppi_py 0.2.3 (tests/reference/make_ppi_reference.py).
    data = pd.read_csv(REFERENCE / "input_ppi.csv")
    reference = pd.read_csv(REFERENCE / "ppi_reference.csv")
    labelled = data["labelled"].to_numpy()
    for row in reference.itertuples():
        lam = None if row.lam == "tuned" else float(row.lam)
        ours = ppi_mean(data["human"][labelled], data["judge"][labelled], data["judge"][~labelled], lam=lam)
        assert (ours.estimate, ours.ci_low, ours.ci_high) == pytest.approx(
            (row.estimate, row.ci_low, row.ci_high), abs=1e-12
        )


@pytest.mark.reference
def test_ppi_matches_ppi_py_live():
    ppi_py = pytest.importorskip("ppi_py")
    rng = np.random.default_rng(5)
    y, f, fu = rng.random(60), rng.random(60), rng.random(500)
    f = 0.5 * f + 0.5 * y
    low, high = ppi_py.ppi_mean_ci(y, f, fu, alpha=0.05)
    ours = ppi_mean(y, f, fu)
    assert (ours.ci_low, ours.ci_high) == pytest.approx((float(np.ravel(low)[0]), float(np.ravel(high)[0])), abs=1e-12)


def test_clustered_ppi_is_inconclusive_with_too_few_clusters_or_no_variance():
    rng = np.random.default_rng(3)
    y, f = rng.integers(0, 2, 30).astype(float), rng.integers(0, 2, 30).astype(float)
    few = ppi_mean_clustered(y, f, f, np.arange(30) % 3, np.arange(30) % 3)
    assert few.verdict == Verdict.INCONCLUSIVE and few.ci_low is None and "3 cluster(s) < 5" in few.note
    same = np.ones(30)
    flat = ppi_mean_clustered(same, same, same, np.arange(30) % 6, np.arange(30) % 6)
    assert flat.verdict == Verdict.INCONCLUSIVE and flat.note == "zero variance"


def test_clustered_ppi_reduces_to_iid_with_singleton_clusters():
    rng = np.random.default_rng(8)
    y, f, fu = rng.random(40), rng.random(40), rng.random(300)
    iid = ppi_mean(y, f, fu, lam=0.7)
    clustered = ppi_mean_clustered(y, f, fu, np.arange(40), np.arange(40, 340), lam=0.7)
    assert clustered.estimate == pytest.approx(iid.estimate)
    assert clustered.se == pytest.approx(iid.se * np.sqrt(340 / 339), rel=1e-12)


# --- the fixture -------------------------------------------------------------------------------------


@pytest.mark.parametrize("judge", ["llama-3.1-70b", "llama-3.1-405b", "small-judge"])
def test_fixture_agreement_intervals_cover_truth(study, truth, judge):
    # truth.json: human-preferred = higher summed (= mean) rating over all raters, equal sums no
    # preference; agreement = P(a judged order names it | humans prefer one, valid verdict), judge
    # ties counted as disagreement -> source="ratings", ties="human_decided"; "decided" excludes
    # judge ties too.
    result = calibrate_judge(
        judge,
        judgments=study.judgments,
        human_ratings=study.human_ratings,
        human_pairs=study.human_pairs,
        source="ratings",
        other_judges=(),
        invalid_as="exclude",  # the truth is defined on valid verdicts
    )
    expected = truth["human_agreement"][judge]
    for ties, key in (("human_decided", "agreement"), ("decided", "agreement_excluding_judge_ties")):
        estimate = result.agreement_for(ties)
        assert estimate.ci_low <= expected[key] <= estimate.ci_high, (ties, estimate.text(), expected[key])
    assert result.n_items == 120 and result.n_orders_per_item == 2.0


def test_fixture_gates(study):
    calibrated = calibrate_judge(
        "llama-3.1-70b", judgments=study.judgments, human_pairs=study.human_pairs, human_ratings=study.human_ratings
    )
    assert gate_judge_calibrated(calibrated).verdict == Verdict.PASS
    small = calibrate_judge(
        "small-judge",
        judgments=study.judgments,
        human_pairs=study.human_pairs,
        human_ratings=study.human_ratings,
        other_judges=(),
    )
    assert gate_judge_calibrated(small).verdict == Verdict.FAIL  # CI-low below min_judge_agreement
    assert gate_judge_calibrated(None).verdict == Verdict.INCONCLUSIVE
    # the selection among three judges is reported on held-out vignettes, apart from the selection ones
    selection = calibrated.selection
    assert set(selection.selection_vignettes).isdisjoint(selection.heldout_vignettes)
    assert selection.seed == calibrated.seed


def test_ceiling_and_selection_by_hand():
    # three raters on two vignettes; rater 3 always disagrees with the other two
    codes = np.array([[1, 1, -1], [-1, -1, 1], [1, 1, -1], [-1, -1, 1]], float)
    ceiling = human_ceiling(codes, ["v1", "v1", "v2", "v2"], min_clusters=2, rng=None)
    # raters 1 and 2: the rest is a 1-1 split -> tie -> left out under human_decided; rater 3
    # against the unanimous others: always wrong
    assert ceiling.estimate == 0.0 and ceiling.n == 4
    selection = select_judge(
        {
            "A": (np.array([1, 1, 0, 0.0]), np.array(["v1", "v2", "v3", "v4"])),
            "B": (np.array([0, 0, 1, 1.0]), np.array(["v1", "v2", "v3", "v4"])),
        },
        rng=1,
    )
    held = np.isin(["v1", "v2", "v3", "v4"], selection.heldout_vignettes)
    chosen = {"A": np.array([1, 1, 0, 0.0]), "B": np.array([0, 0, 1, 1.0])}[selection.selected]
    assert selection.heldout.estimate == chosen[held].mean()


def test_audit_shows_calibration_section_and_gate():
    from honestci.audit.pipeline import run_audit

    result = run_audit(STUDY / "claim.yaml", bayes=False)
    gates = {g.name: g for g in result.gates}
    assert gates["judge_calibrated"].verdict == Verdict.PASS
    assert gates["position_bias"].verdict == Verdict.PASS
    keys = {section["key"] for section in result.sections}
    assert {"calibration", "position_bias"} <= keys


def test_cli_calibrate_judge(tmp_path):
    from honestci.audit.cli.checks import calibrate_judge_command

    runner = CliRunner()
    out = runner.invoke(calibrate_judge_command, [str(STUDY / "claim.yaml"), "--source", "ratings"])
    assert out.exit_code == 0, out.output
    assert "llama-3.1-70b agreement (human_decided)" in out.output and "human ceiling" in out.output
    missing = runner.invoke(calibrate_judge_command, ["--judgments", str(STUDY / "judgments.jsonl")])
    assert missing.exit_code == 2 and "needs human preferences" in missing.output


# --- coverage --------------------------------------------------------------------------------------


def _agreement_coverage(reps: int, n_clusters: int, per_cluster: int, seed: int) -> float:
    # per-vignette agreement probability logit-normal around 0.75; the estimand (rows weighted
    # equally, equal cluster sizes) is E[p_g], computed by Gauss-Hermite quadrature
    from scipy.special import expit

    nodes, weights = np.polynomial.hermite_e.hermegauss(80)
    centre, spread = 1.1, 0.6
    truth = float(np.sum(weights * expit(centre + spread * nodes)) / weights.sum())
    rng = np.random.default_rng(seed)
    clusters = np.repeat(np.arange(n_clusters), per_cluster)
    covered = 0
    for _ in range(reps):
        p = expit(centre + spread * rng.normal(size=n_clusters))
        human = rng.choice([-1.0, 1.0], size=clusters.size)
        agree = rng.random(clusters.size) < p[clusters]
        judge = np.where(agree, human, -human)
        result = agreement_ci(judge, human, clusters, rng=None)
        covered += result.ci_low <= truth <= result.ci_high
    return covered / reps


@pytest.mark.coverage
def test_agreement_cr2_coverage_fast_tier():
    # measured: 0.926 (G = 12, 1000 reps, seed 1); G = 30: 0.937; G = 6: 0.937 (1000 reps each)
    coverage = _agreement_coverage(1000, 12, 20, seed=1)
    assert 0.90 <= coverage <= 0.98


@pytest.mark.coverage
@pytest.mark.slow
@pytest.mark.parametrize("n_clusters", [6, 30])
def test_agreement_cr2_coverage_slow_tier(n_clusters):
    # measured: G = 6 0.9315, G = 30 0.951 (2000 reps, seed 7)
    coverage = _agreement_coverage(2000, n_clusters, 20, seed=7)
    assert 0.92 <= coverage <= 0.975


@pytest.mark.coverage
def test_clustered_ppi_coverage_fast_tier():
    # clustered labels: a vignette effect shared by the human label and the judge's score
    # measured: 0.963 (G = 20, 300 reps, seed 99; 0.953 before λ̂ took a df, issue 15)
    rng = np.random.default_rng(99)
    G, m, n_lab = 20, 30, 6
    covered, reps, truth = 0, 300, 0.5
    for _ in range(reps):
        u = rng.normal(scale=0.5, size=G)
        latent = np.repeat(u, m) + rng.normal(size=G * m)
        y = (latent + rng.normal(scale=0.7, size=latent.size) > 0).astype(float)
        f = (latent + rng.normal(scale=0.7, size=latent.size) + 0.3 > 0).astype(float)  # biased judge
        clusters = np.repeat(np.arange(G), m)
        labelled = np.tile(np.arange(m) < n_lab, G)
        result = ppi_mean_clustered(y[labelled], f[labelled], f[~labelled], clusters[labelled], clusters[~labelled])
        covered += result.ci_low <= truth <= result.ci_high
    assert 0.90 <= covered / reps <= 0.985
