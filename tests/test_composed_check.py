"""The composed-interval audit check on the fixture study: built from the claim's human-labelled
contests, leaked vignettes excluded, its report section, and the bar gate reading its row when the
policy's gate method is "composed"."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from honestci.audit.checks.composed import composed_check
from honestci.audit.checks.leakage import LeakageCheck, LeakageScan
from honestci.audit.data.claims import load_claim
from honestci.audit.data.contests import build_contests
from honestci.audit.data.io import load_study
from honestci.audit.gate_registry import run_gate
from honestci.audit.policy import DEFAULT_SEED, Verdict
from honestci.audit.stats.frequentist.iid import proportion_ci
from honestci.audit.stats.intervals import IntervalTable

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "study"


class _Context:
    """The parts of an AuditContext the composed check and the bar gate read."""

    def __init__(self, claim, study, contests, gate_method="bayes_logit_normal", intervals=None):
        self.claim, self.study, self.contests, self.checks = claim, study, contests, {}
        self.seed, self.gate_method, self.intervals = DEFAULT_SEED, gate_method, intervals


@pytest.fixture(scope="module")
def fixture_claim():
    claim = load_claim(FIXTURE / "claim.yaml")
    study = load_study(claim.data_paths)
    return claim, study, build_contests(study, claim.spec.policy, claim.spec.opponent, claim.spec.judge)


def test_composed_check_on_the_claims_labelled_contests(fixture_claim):
    claim, study, contests = fixture_claim
    check = composed_check(_Context(claim, study, contests))
    assert check is not None and check.n_labelled > 0
    scored = contests.scores("both_orders", invalid=claim.policy.invalid_verdicts)
    table = check.to_frame().set_index("method")
    assert (table.loc["naive", "ci_low"], table.loc["naive", "ci_high"]) == pytest.approx(
        proportion_ci(scored.values.sum(), scored.values.size)
    )
    # 6 vignettes < the policy's floor: the composed row says so instead of giving a number
    composed = check.interval.composed
    assert composed.verdict == Verdict.INCONCLUSIVE and composed.ci_low is None and "< 12" in composed.note
    section = check.report_section()
    assert section.key == "composed" and len(section.table) == 6 and "INCONCLUSIVE" in " ".join(section.lines)


def test_leaked_answers_exclude_their_vignettes(fixture_claim):
    claim, study, contests = fixture_claim
    frame = contests.scores("both_orders").frame
    leaked_response = frame["policy_response"].iloc[0]
    scan = LeakageScan(
        3, 0.5, pd.DataFrame({"item_id": [leaked_response], "leaked": [True]}), pd.DataFrame(), 0, 0, 0.0
    )
    ctx = _Context(claim, study, contests)
    ctx.checks["leakage"] = LeakageCheck(scan, None)
    check = composed_check(ctx)
    vignette = frame["vignette_id"].iloc[0]
    assert check.interval.leaked_vignettes == (vignette,)
    leak_row = check.interval.row("leakage")
    clean = frame["vignette_id"].to_numpy() != vignette
    assert leak_row.n_contests == int(clean.sum()) and leak_row.n_clusters == frame["vignette_id"].nunique() - 1


def test_bar_gate_reads_the_composed_row_when_the_policy_names_it(fixture_claim):
    claim, study, contests = fixture_claim
    check = composed_check(_Context(claim, study, contests))
    # the row below the floor: the gate has no number and says why
    ctx = _Context(claim, study, contests, "composed", IntervalTable("win rate", (check.interval_row(),)))
    gate = run_gate("ci_low_clears_bar", ctx)
    assert gate.verdict == Verdict.INCONCLUSIVE and "composed" in gate.message
    # a reportable composed row: the gate compares its CI-low with the bar
    row = replace(check.interval_row(), ci_low=claim.spec.bar + 0.01, ci_high=0.99, estimate=0.9, verdict=Verdict.PASS)
    ctx = _Context(claim, study, contests, "composed", IntervalTable("win rate", (row,)))
    gate = run_gate("ci_low_clears_bar", ctx)
    assert gate.verdict == Verdict.PASS and gate.evidence["method"] == "composed"
    assert np.isclose(gate.evidence["ci_low"], claim.spec.bar + 0.01)


@pytest.mark.e2e
def test_audit_with_a_composed_gate_policy_adds_the_row_the_gate_reads():
    from honestci.audit.pipeline import audit_context
    from honestci.audit.policy import Policy

    policy = Policy(gate_methods=(("new_vignettes", "composed"), ("these_vignettes", "stratified")))
    context = audit_context(FIXTURE / "claim.yaml", policy=policy, bayes=False)
    row = context.intervals.get("composed", "new_vignettes")
    assert row.verdict == Verdict.INCONCLUSIVE and "< 12" in row.note  # 6 vignettes
    assert run_gate("ci_low_clears_bar", context).verdict == Verdict.INCONCLUSIVE


def test_a_policy_selected_on_the_selection_pool_is_corrected_for_selection(tmp_path):
    # The fixture's best-of-8 checkpoints, with human labels added on every third selection-pool
    # contest of every candidate (label: the judge's contest score rounded, so that they agree
    # mostly): the check uses the 8 candidates' selection-pool contests and selects.
    import json
    import shutil

    from honestci.audit.checks.selection import pool_scores, winners_curse_check

    for path in FIXTURE.iterdir():
        if path.is_file():  # the fixture's sub-studies (offdist/, seeds/, composed/) are not this claim's
            shutil.copy(path, tmp_path / path.name)
    text = (FIXTURE / "claim.yaml").read_text().replace("policy: reappraisal-4b-grpo", "policy: grpo-ckpt-5")
    (tmp_path / "claim.yaml").write_text("\n".join(x for x in text.splitlines() if not x.startswith("claimed:")) + "\n")
    claim = load_claim(tmp_path / "claim.yaml")
    study = load_study(claim.data_paths)
    candidates = sorted(set(study.responses.frame.query("pool == 'selection'")["system"]))
    rows = []
    for name in candidates:
        scored, pools, _ = pool_scores(study, name, claim.spec.opponent, claim.spec.judge)
        frame = scored.frame.loc[pools == "selection"].iloc[::3]
        for r in frame.itertuples():
            label = "a" if r.score > 0.5 else ("b" if r.score < 0.5 else "tie")
            rows.append(
                {
                    "label": label,
                    "rater_id": "rater-x",
                    "response_a": r.policy_response,
                    "response_b": r.opponent_response,
                    "vignette_id": r.vignette_id,
                }
            )
    with open(tmp_path / "human_pairs.jsonl", "a") as handle:
        handle.write("".join(json.dumps(row) + "\n" for row in rows))
    study = load_study(claim.data_paths)
    contests = build_contests(study, "grpo-ckpt-5", claim.spec.opponent, claim.spec.judge)
    ctx = _Context(claim, study, contests)
    ctx.checks["winners_curse"] = winners_curse_check(ctx)
    assert ctx.checks["winners_curse"].claim_uses_selection_pool
    check = composed_check(ctx)
    assert check is not None and check.interval.selected
    assert set(check.interval.candidates) == set(candidates) and len(candidates) == 8
    assert check.interval.row("selection").note in (
        "AKM hybrid",
        "projection (claimed is not the argmax of the estimates)",
    )
    assert check.interval.composed.verdict == Verdict.INCONCLUSIVE  # 6 vignettes < 12
    assert "selection pool" in check.source


# --- the composed sub-study (fixtures/study/composed/): all four problems at once, 30 vignettes ---

COMPOSED = FIXTURE / "composed"


def _composed_context(policy=None):
    """The composed claim's context with the checks the composed check reads (leakage, selection)."""
    from honestci.audit.checks.leakage import leakage_check
    from honestci.audit.checks.selection import winners_curse_check

    claim = load_claim(COMPOSED / "claim-composed.yaml", policy=policy)
    study = load_study(claim.data_paths)
    contests = build_contests(study, claim.spec.policy, claim.spec.opponent, claim.spec.judge)
    ctx = _Context(claim, study, contests, claim.policy.gate_method(claim.spec.population))
    ctx.checks["leakage"] = leakage_check(ctx)
    ctx.checks["winners_curse"] = winners_curse_check(ctx)
    return ctx


@pytest.fixture(scope="module")
def composed_study():
    import json

    ctx = _composed_context()
    return ctx, composed_check(ctx), json.loads((COMPOSED / "truth.json").read_text())


def test_the_composed_study_gives_a_numeric_composed_interval_with_every_row(composed_study):
    _, check, truth = composed_study
    result = check.interval
    assert result.selected and set(result.candidates) == set(truth["candidates"]) and len(result.candidates) == 4
    # the leakage check finds exactly the planted leaks, and their vignettes are excluded
    assert list(result.leaked_vignettes) == truth["leaked_vignettes"]
    assert check.n_labelled == sum(1 for _ in open(COMPOSED / "human_pairs.jsonl"))
    table = check.to_frame().set_index("method")
    assert list(table.index) == ["naive", "clustering", "judge", "leakage", "selection", "composed"]
    assert table["ci_low"].notna().all() and table["ci_high"].notna().all()
    assert (table["verdict"] == str(Verdict.PASS)).all()
    composed = result.composed
    assert composed.note == "AKM hybrid" and composed.n_clusters == 25 and composed.n_contests == 250
    assert composed.ci_low < composed.estimate < composed.ci_high
    section = check.report_section()
    assert "INCONCLUSIVE" not in " ".join(section.lines) and len(section.table) == 6


def test_the_composed_interval_covers_the_studys_truth(composed_study):
    ctx, check, truth = composed_study
    estimand = truth["estimand"]
    assert estimand["claimed"] == ctx.claim.spec.policy
    value = estimand["value"]  # human-scale rate of the claimed checkpoint on new non-leaked vignettes
    composed = check.interval.composed
    assert composed.ci_low <= value <= composed.ci_high
    # A fact of this seed, not a property of the methods: every single correction, and the naive
    # interval, lies wholly above the truth (their CI-lows were 0.746, 0.746, 0.692, 0.718, 0.739
    # against a truth of 0.640 when the fixture was generated); only the composed one covers it.
    for method in ("naive", "clustering", "judge", "leakage", "selection"):
        assert check.interval.row(method).ci_low > value, method


def test_a_composed_gate_policy_makes_the_bar_gate_read_the_composed_row(composed_study):
    from honestci.audit.policy import Policy

    _, check, _ = composed_study
    policy = Policy(gate_methods=(("new_vignettes", "composed"), ("these_vignettes", "stratified")))
    ctx = _composed_context(policy)
    assert ctx.gate_method == "composed"
    ctx.intervals = IntervalTable("win rate", (composed_check(ctx).interval_row(),))
    gate = run_gate("ci_low_clears_bar", ctx)
    assert gate.evidence["method"] == "composed"
    assert gate.evidence["ci_low"] == pytest.approx(check.interval.composed.ci_low)
    # the naive CI-low clears the bar; the composed one does not, and the gate says so
    assert check.interval.row("naive").ci_low > ctx.claim.spec.bar > check.interval.composed.ci_low
    assert gate.verdict == Verdict.FAIL


@pytest.mark.e2e
def test_audit_of_the_composed_study_with_a_composed_gate_policy_gates_on_the_composed_row():
    from honestci.audit.pipeline import audit_context
    from honestci.audit.policy import Policy

    policy = Policy(gate_methods=(("new_vignettes", "composed"), ("these_vignettes", "stratified")))
    context = audit_context(COMPOSED / "claim-composed.yaml", policy=policy, bayes=False)
    row = context.intervals.get("composed", "new_vignettes")
    assert row.verdict == Verdict.PASS and row.ci_low is not None and row.n_clusters == 25
    gate = run_gate("ci_low_clears_bar", context)
    assert gate.evidence["method"] == "composed" and gate.evidence["ci_low"] == pytest.approx(row.ci_low)
    assert gate.verdict == (Verdict.PASS if row.ci_low >= context.claim.spec.bar else Verdict.FAIL)
