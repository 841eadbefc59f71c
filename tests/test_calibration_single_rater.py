"""calibrate-judge with one rater (gold labels) and invalid verdicts as scored rows (issue 16).

References: statsmodels ``cohens_kappa`` for kappa (invalid verdicts as a fourth judge row),
hand counts for the invalid-verdict conventions, and a seeded coverage simulation of the
vignette-clustered kappa interval.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from honestci.audit.checks.calibration import calibrate_judge
from honestci.audit.checks.calibration_agreement import cohen_kappa, confusion_table
from honestci.audit.checks.calibration_items import (
    CLASSES,
    INVALID_AS,
    INVALID_AS_FROM_POLICY,
    calibration_items,
    judged_rows,
)
from honestci.audit.errors import InputError
from honestci.audit.gates import gate_judge_calibrated
from honestci.audit.policy import INVALID_SCORING, Verdict

STUDY = Path(__file__).resolve().parents[1] / "fixtures" / "study"


@pytest.fixture(scope="module")
def one_rater_pairs() -> pd.DataFrame:
    """The fixture's human pairs from rater-1 only: gold labels, one per item."""
    rows = [json.loads(line) for line in (STUDY / "human_pairs.jsonl").read_text().splitlines() if line]
    return pd.DataFrame([r for r in rows if r["rater_id"] == "rater-1"])


@pytest.fixture(scope="module")
def judgments() -> pd.DataFrame:
    return pd.read_json(STUDY / "judgments.jsonl", lines=True)


def _kappa_reference(table: np.ndarray, weights: np.ndarray):
    """statsmodels' kappa of a 4 x 3 judge x human table: padded to 4 x 4 (no human is 'invalid'),
    with statsmodels' disagreement weights 1 - w (the invalid row disagrees with every class)."""
    from statsmodels.stats.inter_rater import cohens_kappa

    square = np.hstack([table, np.zeros((4, 1))])
    agree = np.hstack([weights, np.zeros((4, 1))])
    agree[3, 3] = 1.0  # diagonal: an empty cell, kept at zero disagreement as statsmodels expects
    return cohens_kappa(square, weights=1.0 - agree)


# --- one rater ------------------------------------------------------------------------------------


def test_cli_single_rater_runs_and_says_no_ceiling(tmp_path, one_rater_pairs):
    from honestci.audit.cli.checks import calibrate_judge_command

    pairs = tmp_path / "gold.jsonl"
    one_rater_pairs.to_json(pairs, orient="records", lines=True)
    out = CliRunner().invoke(
        calibrate_judge_command,
        ["--judgments", str(STUDY / "judgments.jsonl"), "--human-pairs", str(pairs), "--judge", "llama-3.1-70b"],
    )
    assert isinstance(out.exception, SystemExit), out.output  # a verdict's exit, not a traceback
    assert "one rater: no inter-rater ceiling" in out.output
    assert "Cohen's kappa" in out.output and "human ceiling" not in out.output
    # rater-1 alone, 6 vignettes: agreement 0.799 [0.642, 0.956], CI-low under the 0.65 bar
    assert out.exit_code == 1 and "gate judge_calibrated: FAIL" in out.output


def test_single_rater_result_matches_statsmodels_and_hand_counts(one_rater_pairs, judgments):
    result = calibrate_judge("small-judge", judgments=judgments, human_pairs=one_rater_pairs, other_judges=())
    assert result.single_rater and result.n_raters == 1
    assert result.ceiling is None and result.gap_to_ceiling is None and result.alpha is None
    items = calibration_items(human_pairs=one_rater_pairs)
    rows = judged_rows(items, judgments, "small-judge")
    assert (rows["status"] == "invalid").sum() == result.n_invalid > 0  # the fixture has invalid verdicts
    # agreement by hand: human-decided rows, invalid verdicts counted as disagreements
    decided = rows[rows["human"] != 0]
    hand = (decided["judge_code"] == decided["human"]).mean()
    assert result.agreement_for("human_decided").estimate == pytest.approx(hand, abs=1e-12)
    assert result.agreement_for("human_decided").n == len(decided)
    # kappa and weighted kappa against statsmodels, with the invalid row in the table
    table = confusion_table(rows["judge_code"], rows["human"])
    assert table[3].sum() == result.n_invalid
    eye = np.vstack([np.eye(3), np.zeros((1, 3))])
    linear = np.vstack([1 - np.abs(np.subtract.outer(np.arange(3), np.arange(3))) / 2, np.zeros((1, 3))])
    assert result.kappa.estimate == pytest.approx(_kappa_reference(table, eye).kappa, abs=1e-12)
    assert result.weighted_kappa.estimate == pytest.approx(_kappa_reference(table, linear).kappa, abs=1e-12)
    # clustered by vignette: G is the fixture's vignettes, not the items
    assert result.kappa.n_clusters == one_rater_pairs["vignette_id"].nunique() < result.kappa.n


def test_single_rater_kappa_se_is_fleiss_cohen_everitt_with_singleton_clusters():
    # with invalid verdicts present: one item per cluster, CR2 = CR0 * n/(n-1), CR0 = statsmodels' asymptotic SE
    rng = np.random.default_rng(16)
    n = 400
    human = rng.choice(CLASSES, size=n, p=[0.4, 0.2, 0.4])
    judge = np.where(rng.random(n) < 0.6, human, rng.choice(CLASSES, size=n))
    judge[rng.random(n) < 0.08] = 2.0  # INVALID_CODE
    ours = cohen_kappa(judge, human, np.arange(n), rng=None)
    ref = _kappa_reference(confusion_table(judge, human), np.vstack([np.eye(3), np.zeros((1, 3))]))
    assert ours.estimate == pytest.approx(ref.kappa, abs=1e-12)
    assert ours.se * np.sqrt((n - 1) / n) == pytest.approx(ref.std_kappa, rel=1e-9)


def _labels(n_vignettes: int, per_vignette: int, agree: float, seed: int, raters: int = 1):
    """Synthetic gold labels and both-order verdicts agreeing with them with probability ``agree``."""
    rng = np.random.default_rng(seed)
    pairs, judged = [], []
    for v in range(n_vignettes):
        for k in range(per_vignette):
            a, b = f"a{v}-{k}", f"b{v}-{k}"
            truth = rng.choice(["a", "b"])
            for r in range(raters):
                label = truth if rng.random() < 0.9 else ("b" if truth == "a" else "a")
                pairs.append(
                    {"vignette_id": f"v{v}", "response_a": a, "response_b": b, "label": label, "rater_id": f"r{r}"}
                )
            for first, second in ((a, b), (b, a)):
                right = rng.random() < agree
                names_a = (truth == "a") == right
                verdict = "first" if (first == a) == names_a else "second"
                judged.append(
                    {
                        "judge": "j",
                        "vignette_id": f"v{v}",
                        "response_first": first,
                        "response_second": second,
                        "verdict": verdict,
                    }
                )
    return pd.DataFrame(pairs), pd.DataFrame(judged)


def test_single_rater_gate_decides_on_agreement_alone():
    pairs, judged = _labels(12, 10, 0.92, seed=3)
    good = calibrate_judge("j", judgments=judged, human_pairs=pairs)
    gate = gate_judge_calibrated(good)
    assert gate.verdict == Verdict.PASS and "one rater: no inter-rater ceiling" in gate.message
    assert gate.evidence["single_rater"] is True and gate.evidence["gap_to_ceiling"] is None
    pairs, judged = _labels(12, 10, 0.55, seed=3)
    assert gate_judge_calibrated(calibrate_judge("j", judgments=judged, human_pairs=pairs)).verdict == Verdict.FAIL
    # many raters: today's behaviour, the ceiling is computed and read
    pairs, judged = _labels(12, 10, 0.92, seed=3, raters=3)
    many = calibrate_judge("j", judgments=judged, human_pairs=pairs)
    assert not many.single_rater and many.ceiling is not None and many.gap_to_ceiling is not None
    assert "single_rater" not in gate_judge_calibrated(many).evidence


# --- invalid verdicts ----------------------------------------------------------------------------


def test_invalid_conventions_by_hand():
    # 6 vignettes x 1 item, both orders; the gold label prefers a everywhere
    pairs = pd.DataFrame(
        {"vignette_id": [f"v{i}" for i in range(6)], "response_a": [f"a{i}" for i in range(6)],
         "response_b": [f"b{i}" for i in range(6)], "label": "a", "rater_id": "gold"}
    )  # fmt: skip
    # order (a, b) on v0..v5, then order (b, a)
    verdicts = ["first", "second", "invalid", "second", "first", "tie"] + [
        "second",
        "second",
        "invalid",
        "first",
        "first",
        "tie",
    ]
    judged = pd.DataFrame(
        {
            "judge": "j",
            "vignette_id": [f"v{i}" for i in range(6)] * 2,
            "response_first": [f"a{i}" for i in range(6)] + [f"b{i}" for i in range(6)],
            "response_second": [f"b{i}" for i in range(6)] + [f"a{i}" for i in range(6)],
            "verdict": verdicts,
        }
    )
    # names a: (a,b)-first on v0, v4; (b,a)-second on v0, v1 -> 4 right, 2 invalid, 2 ties, 4 wrong
    expected = {"disagreement": (4 / 12, 12), "tie": (4 / 12, 12), "exclude": (4 / 10, 10)}
    for convention, (estimate, n) in expected.items():
        result = calibrate_judge("j", judgments=judged, human_pairs=pairs, invalid_as=convention, min_clusters=2)
        agreement = result.agreement_for("human_decided")
        assert (agreement.estimate, agreement.n) == (pytest.approx(estimate), n), convention
        assert result.n_invalid == 2 and result.n_rows == 12  # counted whatever the convention
    # "decided" (judge ties left out): an invalid verdict is not a tie, it stays a disagreement
    strict = calibrate_judge("j", judgments=judged, human_pairs=pairs, min_clusters=2)
    assert strict.agreement_for("decided").estimate == pytest.approx(4 / 10)
    # accuracy counts a parse failure as wrong (the published-table convention)
    assert strict.metrics.accuracy == pytest.approx(4 / 12) and strict.metrics.n == 12
    with pytest.raises(InputError, match="invalid_as"):
        calibrate_judge("j", judgments=judged, human_pairs=pairs, invalid_as="missing")


def test_invalid_conventions_follow_the_policy_vocabulary():
    assert set(INVALID_AS_FROM_POLICY) == set(INVALID_SCORING)
    assert set(INVALID_AS_FROM_POLICY.values()) == set(INVALID_AS)
    assert INVALID_AS[0] == INVALID_AS_FROM_POLICY["against_claim"] == "disagreement"  # conservative default


# --- coverage of the clustered kappa interval ------------------------------------------------------


def _kappa_coverage(reps: int, n_clusters: int, per_cluster: int, seed: int) -> float:
    # vignette effect: each vignette's agreement probability is logit-normal around 0.7; when the
    # judge errs it names one of the other two classes at random; 5% of verdicts are invalid
    # (disagreements). Population kappa = (P_o - P_e)/(1 - P_e) from the marginals, P_o = E[p_g]
    # by Gauss-Hermite quadrature (equal cluster sizes).
    from scipy.special import expit

    pi = np.array([0.4, 0.2, 0.4])
    centre, spread, invalid = 0.85, 0.7, 0.05
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)
    agree = float(np.sum(weights * expit(centre + spread * nodes)) / weights.sum())
    p_o = (1 - invalid) * agree
    judge_margin = (1 - invalid) * (agree * pi + (1 - agree) * (1 - pi) / 2)  # valid classes only
    p_e = float(judge_margin @ pi)
    truth = (p_o - p_e) / (1 - p_e)
    rng = np.random.default_rng(seed)
    clusters = np.repeat(np.arange(n_clusters), per_cluster)
    covered = 0
    for _ in range(reps):
        p = expit(centre + spread * rng.normal(size=n_clusters))[clusters]
        human = rng.choice(CLASSES, size=clusters.size, p=pi)
        other = np.array(CLASSES)[(np.round(human).astype(int) + 1 + rng.integers(1, 3, clusters.size)) % 3]
        judge = np.where(rng.random(clusters.size) < p, human, other)
        judge[rng.random(clusters.size) < invalid] = 2.0
        result = cohen_kappa(judge, human, clusters, rng=None)
        covered += result.ci_low <= truth <= result.ci_high
    return covered / reps


@pytest.mark.coverage
def test_kappa_cr2_coverage_fast_tier():
    # measured (20 rows per vignette): G = 12 0.948 (1000 reps, seed 16); G = 6 0.943 and G = 30
    # 0.935 (1000 reps, seed 7); G = 30 0.953 (3000 reps, seed 8)
    coverage = _kappa_coverage(1000, 12, 20, seed=16)
    assert 0.92 <= coverage <= 0.975  # nominal 0.95; MC-SE at 1000 reps ~0.007


# --- judge selection: position-biased judges excluded, the winner corrected --------------------------


def test_fixture_position_biased_judge_is_never_selected(study):
    # truth.json: llama-3.1-405b has position bias b_logit 1.2, llama-3.1-70b 0.05, small-judge 0.15
    result = calibrate_judge(
        "llama-3.1-70b", judgments=study.judgments, human_pairs=study.human_pairs, human_ratings=study.human_ratings
    )
    excluded = dict(result.selection.excluded)
    assert set(excluded) == {"llama-3.1-405b"} and "position-bias gate FAILs" in excluded["llama-3.1-405b"]
    assert "llama-3.1-405b" not in result.selection.candidates
    assert result.selection.winner is not None and result.selection.winner.winner == result.selection.selected
    assert any("llama-3.1-405b never selected" in line for line in result.report_section().lines)


def test_biased_judge_with_the_best_agreement_is_not_selected():
    # "biased" names the first-shown response whenever unsure: right 100% when the better response
    # is shown first, 70% when second (agreement 0.85, order effect ~0.3); "fair" is right 75% in both orders
    rng = np.random.default_rng(21)
    pairs, judged = [], []
    for v in range(12):
        for k in range(10):
            a, b = f"a{v}-{k}", f"b{v}-{k}"
            truth = rng.choice(["a", "b"])
            pairs.append({"vignette_id": f"v{v}", "response_a": a, "response_b": b, "label": truth, "rater_id": "g"})
            for first, second in ((a, b), (b, a)):
                truth_first = (first == a) == (truth == "a")
                for judge, right in (("biased", truth_first or rng.random() < 0.7), ("fair", rng.random() < 0.75)):
                    names_first = truth_first == right
                    judged.append(
                        {
                            "judge": judge,
                            "vignette_id": f"v{v}",
                            "response_first": first,
                            "response_second": second,
                            "verdict": "first" if names_first else "second",
                        }
                    )
    pairs, judged = pd.DataFrame(pairs), pd.DataFrame(judged)
    result = calibrate_judge("biased", judgments=judged, human_pairs=pairs)
    assert result.agreement_for().estimate > result.comparisons[0][1].estimate  # biased agrees more...
    assert result.selection is None  # ...yet is excluded, which leaves one candidate: no selection
    assert [judge for judge, _ in result.position_bias_excluded] == ["biased"]
    assert any(line.startswith("biased is never selected") for line in result.report_section().lines)


def _winner_coverage(reps: int, n_judges: int, n_clusters: int, seed: int) -> dict[str, float]:
    # K judges of equal true agreement (the hardest case for a winner's figure): judge k's
    # vignette agreement is expit(1 + u_g + e_gk), u ~ N(0, 0.6²) shared, e ~ N(0, 0.3²) own;
    # 10 human-decided rows per vignette. Truth: E[expit(1 + N(0, 0.45))] by Gauss-Hermite.
    from scipy.special import expit

    from honestci.audit.checks.judge_selection import judge_winner

    nodes, weights = np.polynomial.hermite_e.hermegauss(60)
    truth = float(np.sum(weights * expit(1.0 + np.sqrt(0.45) * nodes)) / weights.sum())
    rng = np.random.default_rng(seed)
    clusters = np.repeat(np.arange(n_clusters), 10)
    covered = {"naive": 0, "hybrid": 0, "projection": 0}
    for _ in range(reps):
        u = rng.normal(scale=0.6, size=n_clusters)
        candidates = {}
        for k in range(n_judges):
            p = expit(1.0 + u + rng.normal(scale=0.3, size=n_clusters))[clusters]
            candidates[f"j{k}"] = ((rng.random(clusters.size) < p).astype(float), clusters)
        winner, note = judge_winner(candidates, seed=int(rng.integers(2**31)), n_draws=2000)  # fast projection
        assert winner is not None, note
        for method, ci in (
            ("naive", winner.naive_ci),
            ("hybrid", winner.hybrid_ci),
            ("projection", winner.projection_ci),
        ):
            covered[method] += ci[0] <= truth <= ci[1]
    return {method: count / reps for method, count in covered.items()}


@pytest.mark.coverage
def test_judge_winner_coverage_fast_tier():
    # measured with this function (2000 projection draws): K = 6, G = 12: naive 0.908, AKM hybrid
    # 0.960, projection 0.990 (400 reps, seed 16); naive 0.889, hybrid 0.969, projection 0.991
    # (1500 reps, seed 17); K = 3, G = 30: naive 0.934, hybrid 0.964, projection 0.994 (1000 reps,
    # seed 18). The hybrid is reported: it holds the level where the naive winner's interval does
    # not, and is narrower than the simultaneous (projection, max-t-like) bound.
    coverage = _winner_coverage(400, 6, 12, seed=16)
    assert coverage["hybrid"] >= 0.93  # MC-SE at 400 reps ~0.011
    assert coverage["naive"] < coverage["hybrid"] <= coverage["projection"]
