"""Judging designs (both orders, one randomised order, one fixed order, mixed) and continuous
preferences: contest assembly, scores, position bias and its gate, and an end-to-end audit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from synthetic_study import JUDGE, OPPONENT, POLICY, claim_dict, study_rows, write_study

from honestci.audit.checks.position_bias import position_bias_between_contests, position_bias_from_contests
from honestci.audit.data.contests import (
    BOTH_ORDERS,
    MIXED,
    ONE_ORDER_FIXED,
    ONE_ORDER_RANDOMISED,
    build_contests,
)
from honestci.audit.errors import SchemaError
from honestci.audit.gates import gate_position_bias
from honestci.audit.policy import THRESHOLDS, Verdict


def _tables(rows):
    return {"responses": pd.DataFrame(rows["responses"]), "judgments": pd.DataFrame(rows["judgments"])}


def _one_order(rows, keep_policy_first):
    """``rows`` with one judgment per contest: the policy-first one where ``keep_policy_first(i)``."""
    judgments = rows["judgments"]  # study_rows writes policy-first then policy-second per contest
    kept = [judgments[2 * i + (0 if keep_policy_first(i) else 1)] for i in range(len(judgments) // 2)]
    return {**rows, "judgments": kept}


def test_design_is_detected_and_named():
    rows = study_rows(n_vignettes=6, pairs=4, seed=3)
    assert build_contests(_tables(rows), POLICY, OPPONENT).design == BOTH_ORDERS
    randomised = build_contests(_tables(_one_order(rows, lambda i: i % 3 == 0)), POLICY, OPPONENT)
    assert randomised.design == ONE_ORDER_RANDOMISED and "shown first in 8 of 24 contests" in randomised.design_note
    fixed = build_contests(_tables(_one_order(rows, lambda i: False)), POLICY, OPPONENT)
    assert fixed.design == ONE_ORDER_FIXED and "always shown second" in fixed.design_note
    assert len(fixed.frame) == 24 and dict(fixed.dropped) == {}


def test_single_order_score_is_that_orders_outcome():
    rows = study_rows(n_vignettes=6, pairs=4, seed=3)
    one = _one_order(rows, lambda i: i % 2 == 0)
    contests = build_contests(_tables(one), POLICY, OPPONENT)
    scores = contests.scores("both_orders").values
    # expected from the kept judgments alone: the policy wins when the verdict names its position
    expected = [
        1.0 if (j["verdict"] == "first") == j["response_first"].split("-")[1].startswith("p") else 0.0
        for j in one["judgments"]
    ]
    np.testing.assert_array_equal(scores, expected)
    assert contests.scores("both_orders").rule == "one order"


def test_mixed_design_is_refused_with_what_why_and_fix_or_handled_as_the_policy_says():
    rows = study_rows(n_vignettes=4, pairs=2, seed=1)
    rows["judgments"] = rows["judgments"][:-1]  # the last contest loses its policy-second order
    with pytest.raises(SchemaError) as caught:
        build_contests(_tables(rows), POLICY, OPPONENT, single_order="refuse")
    text = str(caught.value)
    assert "1 contest(s)" in text and "7 in both (a mixed design)" in text and "cannot be pooled" in text
    assert "missing_orders:" in text
    contests = build_contests(_tables(rows), POLICY, OPPONENT, single_order="exclude")
    assert contests.design == MIXED and dict(contests.dropped) == {"single_order": 1} and len(contests.frame) == 7
    kept = build_contests(_tables(rows), POLICY, OPPONENT, single_order="against_claim")
    assert kept.design == MIXED and not kept.dropped and len(kept.frame) == 8 and kept.n_missing_orders == 1
    assert kept.trials_per_contest == 2


def _preference_rows(preferences_first):
    """Two contests in one vignette, judged once each with a continuous preference for the first response."""
    responses = [
        {"response_id": r, "vignette_id": "v", "system": POLICY if r[0] == "p" else OPPONENT, "text": r}
        for r in ("p1", "o1", "p2", "o2")
    ]
    judgments = []
    for (first, second), p in zip((("p1", "o1"), ("o2", "p2")), preferences_first):
        verdict = "first" if p > 0.5 else "second" if p < 0.5 else "tie"
        judgments.append(
            {
                "judge": JUDGE,
                "vignette_id": "v",
                "response_first": first,
                "response_second": second,
                "verdict": verdict,
                "preference_first": p,
            }
        )
    return {"responses": pd.DataFrame(responses), "judgments": pd.DataFrame(judgments)}


def test_continuous_score_equals_the_policys_preference():
    contests = build_contests(_preference_rows([0.83, 0.3]), POLICY, OPPONENT)
    assert contests.continuous and contests.design == ONE_ORDER_RANDOMISED
    # p1 shown first with P(first better) = 0.83; p2 shown second with P(first better) = 0.3 -> 0.7
    np.testing.assert_allclose(contests.scores("both_orders").values, [0.83, 0.7])


def test_continuous_both_orders_average_the_preferences():
    responses = [
        {"response_id": "p1", "vignette_id": "v", "system": POLICY, "text": "a"},
        {"response_id": "o1", "vignette_id": "v", "system": OPPONENT, "text": "b"},
    ]
    judgments = [
        {"judge": JUDGE, "vignette_id": "v", "response_first": "p1", "response_second": "o1", "verdict": "first"}
        | {"preference_first": 0.9},
        {"judge": JUDGE, "vignette_id": "v", "response_first": "o1", "response_second": "p1", "verdict": "first"}
        | {"preference_first": 0.6},
    ]
    contests = build_contests(
        {"responses": pd.DataFrame(responses), "judgments": pd.DataFrame(judgments)}, POLICY, OPPONENT
    )
    # policy first: 0.9; policy second: 1 - 0.6 = 0.4; mean 0.65 (the both-orders rule would give 1/2)
    np.testing.assert_allclose(contests.scores("both_orders").values, [0.65])
    assert contests.design == BOTH_ORDERS


def test_bad_preferences_name_line_and_field():
    frames = _preference_rows([1.4, 0.3])
    frames["judgments"].loc[1, "verdict"] = "first"  # 0.3 favours the second response
    with pytest.raises(SchemaError) as caught:
        build_contests(frames, POLICY, OPPONENT)
    lines = {(p.line, p.field) for p in caught.value.problems}
    assert lines == {(1, "preference_first"), (2, "preference_first")}
    assert "outside [0, 1]" in str(caught.value) and "favours 'second' but the verdict is 'first'" in str(caught.value)


def test_fixed_order_gate_is_inconclusive_with_the_reason_and_a_policy_may_make_it_warn():
    rows = study_rows(n_vignettes=6, pairs=4, seed=3)
    contests = build_contests(_tables(_one_order(rows, lambda i: True)), POLICY, OPPONENT)
    result = position_bias_from_contests(contests)
    assert not result.identifiable and result.design == ONE_ORDER_FIXED and result.order_effect is None
    gate = gate_position_bias(result)
    assert gate.verdict == Verdict.INCONCLUSIVE and gate.ran
    assert "not identifiable" in gate.message and "always shown first" in gate.message
    assert "randomise the order" in gate.message
    lenient = dataclasses.replace(THRESHOLDS, fixed_order_position_bias_warn=True)
    assert gate_position_bias(result, lenient).verdict == Verdict.WARN


def _simulate_randomised(rng, n_vignettes, per_vignette, effect, sd=1.0):
    """One order per contest, order a fair coin; P(win) = expit(u_v ± logit shift) so that the
    true order effect on the probability scale is ``effect`` at u_v = 0, averaged over u_v below."""
    vignette = np.repeat(np.arange(n_vignettes), per_vignette)
    u = rng.normal(0, sd, n_vignettes)[vignette]
    first = rng.random(vignette.size) < 0.5
    p = 1 / (1 + np.exp(-(u + np.where(first, effect, -effect))))
    return (rng.random(vignette.size) < p).astype(float), first, vignette


def _true_effect(effect, sd=1.0):
    # E_u[expit(u + e) - expit(u - e)], u ~ N(0, sd): Gauss-Hermite quadrature (numpy), 80 nodes
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)
    u = sd * nodes
    return float(np.sum(weights * (1 / (1 + np.exp(-(u + effect))) - 1 / (1 + np.exp(-(u - effect))))) / weights.sum())


@pytest.mark.parametrize(
    "reps", [150, pytest.param(1000, marks=pytest.mark.slow)], ids=["default-150-reps", "slow-1000-reps"]
)
def test_randomised_order_effect_is_recovered_with_coverage(reps):
    # Seeded studies of 25 vignettes x 8 contests, true effect 0.164 (probability points); nominal 95%,
    # coverage within 3 MC-SE (sqrt(.95 .05 / reps): 0.018 at 150, 0.0069 at 1000) of 0.95. Measured:
    # this simulation gave 0.943 at 300 reps (seed 20260516) and 0.952 at 1000 reps (seed 1).
    rng = np.random.default_rng(20260516)
    effect = 0.4
    truth = _true_effect(effect)
    covered, estimates = 0, []
    for _ in range(reps):
        values, first, vignette = _simulate_randomised(rng, 25, 8, effect)
        result = position_bias_between_contests(values, first, vignette)
        low, high = result.order_effect.bounds
        covered += low <= truth <= high
        estimates.append(result.order_effect.estimate)
        np.testing.assert_allclose(result.order_effect.estimate, values[first].mean() - values[~first].mean())
    coverage = covered / reps
    assert abs(coverage - 0.95) <= 3 * np.sqrt(0.95 * 0.05 / reps), coverage
    # unbiased under randomisation: mean estimate within 3 MC-SE of the truth
    assert abs(np.mean(estimates) - truth) <= 3 * np.std(estimates) / np.sqrt(reps)


def test_randomised_order_from_contests_feeds_the_gate():
    rng = np.random.default_rng(5)
    rows = study_rows(n_vignettes=12, pairs=6, seed=5)
    contests = build_contests(_tables(_one_order(rows, lambda i: rng.random() < 0.5)), POLICY, OPPONENT)
    result = position_bias_from_contests(contests)
    assert result.identifiable and result.design == ONE_ORDER_RANDOMISED and result.order_effect.bounds is not None
    # study_rows' judge has no position bias: the estimate is the difference of the two positions' means
    scores = contests.scores("both_orders").values
    first = contests.policy_first
    assert result.order_effect.estimate == pytest.approx(scores[first].mean() - scores[~first].mean())
    gate = gate_position_bias(result)
    assert gate.verdict in (Verdict.PASS, Verdict.WARN, Verdict.FAIL)
    assert gate.evidence["design"] == ONE_ORDER_RANDOMISED and "order effect" in gate.message


def test_audit_of_a_single_order_study_gives_a_verdict(tmp_path):
    from honestci.audit.pipeline import run_audit

    rng = np.random.default_rng(11)
    rows = _one_order(study_rows(n_vignettes=12, pairs=8, seed=11), lambda i: rng.random() < 0.5)
    result = run_audit(write_study(tmp_path, rows, claim_dict()), bayes=False)
    assert result.design == ONE_ORDER_RANDOMISED and result.n_contests == 96
    gates = {g.name: g for g in result.gates}
    assert gates["ci_low_clears_bar"].ran and gates["ci_low_clears_bar"].verdict in (Verdict.PASS, Verdict.FAIL)
    assert gates["position_bias"].ran and gates["position_bias"].evidence["design"] == ONE_ORDER_RANDOMISED
    assert result.to_dict()["contests"]["design"] == ONE_ORDER_RANDOMISED
