"""A panel of judges: the panel rules, per-judge results, agreement, judge effect, the policy's say
over the rule, and the panel-mean interval's coverage."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import krippendorff
import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats
from scipy.special import expit
from synthetic_study import OPPONENT, POLICY, TABLE_FILES, claim_dict, write_jsonl

from honestci.audit.data.claims import load_claim
from honestci.audit.data.contests import build_contests, build_panel_contests, panel_score
from honestci.audit.data.io import load_study
from honestci.audit.errors import ClaimError, SchemaError
from honestci.audit.policy import Policy, Verdict
from honestci.audit.stats.estimands import standard_normal_nodes
from honestci.audit.stats.frequentist.winrate import winrate_ci
from honestci.audit.stats.judge_error.panel import judge_differences, krippendorff_alpha, verdict_codes

REPO_ROOT = Path(__file__).resolve().parents[1]
#: Three judges of different leniency toward the policy (logit shifts) and order effects.
LENIENCY = {"judge-harsh": -0.8, "judge-mid": 0.0, "judge-kind": 0.8}


def panel_rows(
    n_vignettes: int = 10,
    pairs: int = 4,
    seed: int = 11,
    leniency: dict[str, float] | None = None,
    order_bias: dict[str, float] | None = None,
) -> dict:
    """Core tables of a study judged by a panel: every judge saw both orders of every contest.

    Contest c of vignette g has a latent quality q = u_g + e_c (u ~ N(0.4, 0.8²), e ~ N(0, 0.5²));
    judge k prefers the policy in an order with probability expit(q + leniency_k ± order_bias_k)
    (+ when the policy is shown first)."""
    leniency = LENIENCY if leniency is None else leniency
    order_bias = order_bias or {}
    rng = np.random.default_rng(seed)
    vignettes, responses, judgments = [], [], []
    for g in range(n_vignettes):
        vid = f"v{g}"
        vignettes.append({"vignette_id": vid, "text": f"Scenario {g}."})
        u = rng.normal(0.4, 0.8)
        for k in range(pairs):
            pol, opp = f"{vid}-p{k}", f"{vid}-o{k}"
            responses.append({"response_id": pol, "vignette_id": vid, "system": POLICY, "text": f"policy {g} {k}"})
            responses.append({"response_id": opp, "vignette_id": vid, "system": OPPONENT, "text": f"opp {g} {k}"})
            q = u + rng.normal(0, 0.5)
            for judge, shift in leniency.items():
                for first, second, policy_first in ((pol, opp, True), (opp, pol, False)):
                    bias = order_bias.get(judge, 0.0) * (1 if policy_first else -1)
                    wins = rng.random() < expit(q + shift + bias)
                    judgments.append(
                        {
                            "judge": judge,
                            "vignette_id": vid,
                            "response_first": first,
                            "response_second": second,
                            "verdict": "first" if wins == policy_first else "second",
                        }
                    )
    return {"vignettes": vignettes, "responses": responses, "judgments": judgments}


def write_panel_study(folder: Path, claim: dict, **options) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rows = panel_rows(**options)
    for table, name in TABLE_FILES.items():
        write_jsonl(folder / name, rows[table])
    path = folder / "claim.yaml"
    path.write_text(yaml.safe_dump(claim, sort_keys=False), encoding="utf-8")
    return path


def panel_claim(rule: str = "mean", **changes) -> dict:
    claim = claim_dict(panel=list(LENIENCY), panel_rule=rule, **changes)
    del claim["judge"]
    return claim


# --- the rules --------------------------------------------------------------------------------


def test_panel_rules_on_hand_computed_contests():
    scores = np.array([[1, 1, 0], [1, 0.5, 0], [0.5, 0.5, 1], [0, 0, 0.5], [1, 0.5, 0.5], [np.nan, 1, 1]])
    mean = panel_score(scores, "mean")
    np.testing.assert_allclose(mean[:5], [2 / 3, 0.5, 2 / 3, 1 / 6, 2 / 3])
    assert np.isnan(mean[5])
    # majority: 2 of 3 for the policy; 1-1-1 no majority; one for, two ties: none; two against; one for, two ties
    np.testing.assert_array_equal(panel_score(scores, "majority")[:5], [1, 0.5, 0.5, 0, 0.5])
    assert np.isnan(panel_score(scores, "majority")[5])
    # antisymmetry: swapping policy and opponent maps s to 1 - s
    for rule in ("mean", "majority"):
        np.testing.assert_allclose(panel_score(1 - scores[:5], rule), 1 - panel_score(scores[:5], rule))


def test_panel_table_scores_equal_the_rule_on_each_judges_scores(tmp_path):
    write_panel_study(tmp_path, panel_claim())
    study = load_study({t: tmp_path / n for t, n in TABLE_FILES.items()})
    panel = build_panel_contests(study, POLICY, OPPONENT, list(LENIENCY), "mean")
    each = [build_contests(study, POLICY, OPPONENT, judge=j).scores() for j in LENIENCY]
    by_contest = [dict(zip(s.frame["policy_response"], s.values)) for s in each]
    scored = panel.scores()
    expected = [np.mean([b[r] for b in by_contest]) for r in scored.frame["policy_response"]]
    np.testing.assert_allclose(scored.values, expected)
    assert len(scored.values) == 40 and panel.for_judge("judge-kind").frame["judge"].eq("judge-kind").all()


def test_incomplete_panel_is_refused_naming_the_missing_contest(tmp_path):
    rows = panel_rows()
    # judge-mid judged v3-p1 vs v3-o1 with the opponent first only: a mixed design; with
    # allow_single_order that contest is left out for judge-mid alone, so the panel is incomplete
    rows["judgments"] = [
        j for j in rows["judgments"] if not (j["judge"] == "judge-mid" and j["response_first"] == "v3-p1")
    ]
    frames = {t: pd.DataFrame(rows[t]) for t in ("responses", "judgments")}
    with pytest.raises(SchemaError, match="panel is incomplete") as error:
        build_panel_contests(frames, POLICY, OPPONENT, list(LENIENCY), "mean", single_order="exclude")
    assert "judge-mid" in str(error.value) and "v3-p1" in str(error.value)


# --- agreement and judge effect against outside references -------------------------------------


@pytest.mark.parametrize("metric", ["nominal", "interval"])
def test_krippendorff_alpha_matches_the_krippendorff_package(metric):
    rng = np.random.default_rng(5)
    clusters = np.repeat(np.arange(15), 6)
    truth = rng.choice([0.0, 0.5, 1.0], size=90)
    ratings = np.column_stack(
        [np.where(rng.random(90) < 0.7, truth, rng.choice([0.0, 0.25, 0.5, 1.0], size=90)) for _ in range(3)]
    )
    ours = krippendorff_alpha(ratings, clusters, metric=metric, rng=1)
    data = verdict_codes(ratings).T.astype(float) if metric == "nominal" else ratings.T
    reference = krippendorff.alpha(reliability_data=data, level_of_measurement=metric)
    assert ours.estimate == pytest.approx(reference, abs=1e-12)
    assert ours.ci_low < ours.estimate < ours.ci_high


def test_alpha_bootstrap_resamples_vignettes_not_contests():
    # Judges agree perfectly within a vignette's contests and at random between vignettes: with
    # few vignettes the clustered interval must be wider than one that treats contests as units.
    rng = np.random.default_rng(2)
    clusters = np.repeat(np.arange(8), 20)
    per_vignette = rng.choice([0.0, 1.0], size=(8, 3))
    ratings = per_vignette[clusters]
    clustered = krippendorff_alpha(ratings, clusters, rng=3)
    as_units = krippendorff_alpha(ratings, np.arange(len(clusters)), rng=3)
    assert clustered.estimate == pytest.approx(as_units.estimate)
    assert (clustered.ci_high - clustered.ci_low) > 2 * (as_units.ci_high - as_units.ci_low)


def test_judge_differences_are_bonferroni_t_intervals_on_vignette_means():
    rng = np.random.default_rng(9)
    clusters = np.repeat(np.arange(12), 5)
    scores = rng.choice([0.0, 0.5, 1.0], size=(60, 3))
    result = judge_differences(scores, clusters, ("a", "b", "c"), level=0.95)
    row = result.table.iloc[1]  # a - c
    means = np.bincount(clusters, weights=scores[:, 0] - scores[:, 2]) / 5
    reference = stats.ttest_1samp(means, 0.0).confidence_interval(1 - 0.05 / 3)
    assert row["estimate"] == pytest.approx(means.mean())
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((reference.low, reference.high))


# --- coverage of the panel-mean interval --------------------------------------------------------


def _panel_truth(mu: float, sd: float, shifts: np.ndarray) -> float:
    """E over a new contest of the mean of the judges' both-orders expected scores (no order bias):
    f_k(q) = p² + p(1 − p) with p = expit(q + shift_k), q ~ N(mu, sd²) by Gauss-Hermite."""
    nodes, weights = standard_normal_nodes(96)
    p = expit(mu + sd * nodes[:, None] + shifts[None, :])
    return float(weights @ (p**2 + p * (1 - p)).mean(axis=1))


@pytest.mark.coverage
@pytest.mark.parametrize(
    "method, reps",
    [
        ("cr2", 2000),
        # the new-vignette gate's interval: 0.5 s a call, so 400 replications (MC-SE 1.1 points) in the slow tier
        pytest.param("bayes_logit_normal", 400, marks=pytest.mark.slow),
    ],
)
def test_panel_mean_interval_covers_the_true_panel_rate(method, reps):
    # 3 judges of different leniency, 20 vignettes x 6 contests, vignette sd 0.8 and contest sd 0.5
    # on the logit scale; with 2000 replications the MC-SE of the coverage is 0.49 points.
    n_vignettes, pairs, shifts = 20, 6, np.array(list(LENIENCY.values()))
    mu, sd_vignette, sd_contest = 0.4, 0.8, 0.5
    truth = _panel_truth(mu, np.hypot(sd_vignette, sd_contest), shifts)
    rng = np.random.default_rng(20260501)
    clusters = np.repeat(np.arange(n_vignettes), pairs)
    covered = 0
    for _ in range(reps):
        q = rng.normal(mu, sd_vignette, n_vignettes)[clusters] + rng.normal(0, sd_contest, clusters.size)
        p = expit(q[:, None] + shifts[None, :])
        wins = rng.random((2, *p.shape)) < p  # both orders, independent given q
        judge_scores = np.where(wins.all(axis=0), 1.0, np.where(~wins.any(axis=0), 0.0, 0.5))
        row = winrate_ci(panel_score(judge_scores, "mean"), clusters, method, seed=1)
        covered += row.ci_low <= truth <= row.ci_high
    coverage = covered / reps
    print(f"{method}: coverage {coverage:.4f} of truth {truth:.4f} in {reps} replications")
    mc_se = np.sqrt(0.95 * 0.05 / reps)
    assert abs(coverage - 0.95) <= max(0.015, 3 * mc_se), coverage


# --- the policy decides the rule ------------------------------------------------------------------


def test_claim_naming_a_rule_the_policy_disallows_is_refused(tmp_path):
    path = write_panel_study(tmp_path, panel_claim("majority"))
    with pytest.raises(ClaimError) as error:
        load_claim(path, policy=Policy(panel_rules=("mean",)))
    problem = error.value.problems[0]
    assert problem.field == "panel_rule" and "'majority'" in problem.message and "policy" in problem.message
    assert "mean" in problem.fix
    assert load_claim(path).spec.panel_rule == "majority"  # the built-in policy allows both


def test_claim_with_judge_and_panel_or_panel_without_rule_is_refused(tmp_path):
    both = write_panel_study(tmp_path / "both", {**panel_claim(), "judge": "judge-mid"})
    with pytest.raises(ClaimError, match="does not match"):
        load_claim(both)
    claim = panel_claim()
    del claim["panel_rule"]
    with pytest.raises(ClaimError, match="does not match"):
        load_claim(write_panel_study(tmp_path / "norule", claim))


# --- the audit ----------------------------------------------------------------------------------


def test_audit_of_a_panel_reads_the_panel_score_and_reports_each_judge(tmp_path):
    from honestci.audit.pipeline import run_audit

    path = write_panel_study(tmp_path, panel_claim(bar=0.3), n_vignettes=12)
    result = run_audit(path, bayes=False)
    study = load_study({t: tmp_path / n for t, n in TABLE_FILES.items()})
    panel_scores = build_panel_contests(study, POLICY, OPPONENT, list(LENIENCY), "mean").scores(invalid="against_claim")
    gate_row = result.gate_interval()
    assert gate_row.estimate == pytest.approx(panel_scores.values.mean())
    section = next(s for s in result.sections if s["key"] == "panel")
    rates = {r["judge"]: r["estimate"] for r in section["table"] if r["figure"] == "win rate"}
    assert rates["judge-harsh"] < rates["judge-mid"] < rates["judge-kind"]
    assert np.mean(list(rates.values())) == pytest.approx(panel_scores.values.mean())
    gates = {g.name: g for g in result.gates}
    assert len(gates["position_bias"].evidence["judges"]) == 3
    data = result.to_dict()
    assert data["claim"]["panel"] == list(LENIENCY) and data["claim"]["panel_rule"] == "mean"


def test_one_position_biased_panel_judge_fails_the_position_bias_gate(tmp_path):
    from honestci.audit.pipeline import run_audit

    path = write_panel_study(tmp_path, panel_claim(), n_vignettes=12, pairs=8, order_bias={"judge-kind": 2.5})
    gate = next(g for g in run_audit(path, bayes=False).gates if g.name == "position_bias")
    assert gate.verdict == Verdict.FAIL and "judge-kind" in gate.message
    assert "judge-mid" not in gate.message  # the message names the judges that set the verdict


@pytest.mark.e2e
def test_cli_audits_a_small_panel_and_refuses_a_disallowed_rule(tmp_path):
    path = write_panel_study(tmp_path / "study", panel_claim("majority", bar=0.3), n_vignettes=8)
    out = tmp_path / "out"
    run = subprocess.run(
        [sys.executable, "-m", "honestci", "audit", path, "--out", out, "--no-bayes"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=600,
    )
    assert run.returncode in (0, 1), run.stderr
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["claim"]["panel_rule"] == "majority"
    assert any(s["key"] == "panel" for s in verdict["sections"])
    assert "Panel of judges" in (out / "report.md").read_text()

    policy = tmp_path / "policy.yaml"
    policy.write_text("version: 1\nname: mean-only\npanel_rules: [mean]\n")
    refused = subprocess.run(
        [sys.executable, "-m", "honestci", "audit", path, "--out", out, "--no-bayes", "--policy", policy],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=600,
    )
    assert refused.returncode == 2
    assert "panel_rule" in refused.stderr and "mean-only" in refused.stderr and "name one of: mean" in refused.stderr
