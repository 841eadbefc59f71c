"""Every gate rule and the one gate registry.

A gate reads the figures of the checks (frozen results in the
:class:`honestci.audit.checks.context.AuditContext`) and the policy's thresholds, and returns a
:class:`honestci.audit.policy.GateResult`. Each rule is written once here, as a function of the
figures it reads (``gate_*``), so a command that computed one check alone (``honestci
position-bias``, ``winners-curse``, ...) applies the very rule the audit applies; :data:`GATES`
maps each gate of :data:`honestci.audit.policy.GATE_ORDER` to its function of the audit context.

A gate whose check did not run (its inputs are absent) is INCONCLUSIVE ("not run: needs …"),
never PASS. Every comparison of an interval's lower bound with a bar goes through
:func:`honestci.audit.policy.clears_bar`. The numbers the rules compare against live in
:mod:`honestci.audit.policy`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from honestci.audit.policy import (
    GATE_TIE_POLICY,
    THRESHOLDS,
    GateResult,
    Thresholds,
    Verdict,
    clears_bar,
    worst,
)

if TYPE_CHECKING:  # the rules read these results' figures; importing them would load pandas and scipy
    from honestci.audit.checks.calibration import CalibrationResult
    from honestci.audit.checks.claimed import ClaimedFigureAudit
    from honestci.audit.checks.context import BayesCheck, ComparisonCheck
    from honestci.audit.checks.evidence import EvidenceCheck
    from honestci.audit.checks.leakage import LeakageScan
    from honestci.audit.checks.position_bias import PositionBiasResult
    from honestci.audit.checks.seeds import SeedsCheck
    from honestci.audit.checks.selection import SelectionAnalysis, WinnerInference
    from honestci.audit.checks.systems import SystemsCheck
    from honestci.audit.checks.training_health import TrainingHealth
    from honestci.audit.checks.verdicts import MissingOrders, VerdictValidity
    from honestci.audit.stats.judge_error.length_bias import LengthBiasResult

# --- the win rate -----------------------------------------------------------------------------


def gate_enough_clusters(n_clusters: int, thresholds: Thresholds = THRESHOLDS) -> GateResult:
    """``enough_clusters``: INCONCLUSIVE below ``min_clusters`` vignettes; otherwise PASS, noting
    when clusters are few."""
    evidence = {
        "n_clusters": n_clusters,
        "min_clusters": thresholds.min_clusters,
        "few_clusters": thresholds.few_clusters,
    }
    if n_clusters < thresholds.min_clusters:
        return GateResult(
            "enough_clusters",
            Verdict.INCONCLUSIVE,
            f"{n_clusters} vignette(s) < {thresholds.min_clusters}: no interval on new vignettes "
            "can be trusted; add vignettes",
            evidence,
        )
    if n_clusters < thresholds.few_clusters:
        return GateResult(
            "enough_clusters",
            Verdict.PASS,
            f"{n_clusters} vignettes: enough for CR2/wild-bootstrap intervals, but few "
            f"(coverage is only approximately nominal below {thresholds.few_clusters})",
            evidence,
        )
    return GateResult("enough_clusters", Verdict.PASS, f"{n_clusters} vignettes", evidence)


def gate_without_result(name: str) -> GateResult:
    """A required gate the audit produced no result for: INCONCLUSIVE, not run (it always blocks)."""
    return GateResult(name, Verdict.INCONCLUSIVE, "no result: the gate did not run", ran=False)


def gate_ci_low_clears_bar(
    ci_low: float | None, bar: float, method: str, population: str, reason_if_missing: str = ""
) -> GateResult:
    """``ci_low_clears_bar``: PASS when the honest interval's lower bound is at or above the bar;
    FAIL when below.

    INCONCLUSIVE when the interval could not be computed honestly (too few clusters, no
    variance): a missing interval never passes, not even under ``--allow-inconclusive`` (the gate
    had no number to compare, so it did not run).
    """
    evidence = {"ci_low": ci_low, "bar": bar, "method": method, "population": population}
    if ci_low is None:
        return GateResult(
            "ci_low_clears_bar",
            Verdict.INCONCLUSIVE,
            f"no honest {method} interval for {population}: {reason_if_missing}",
            evidence,
            ran=False,
        )
    if clears_bar(ci_low, bar):
        return GateResult(
            "ci_low_clears_bar", Verdict.PASS, f"{method} CI-low {ci_low:.3f} >= bar {bar:.3f} ({population})", evidence
        )
    return GateResult(
        "ci_low_clears_bar", Verdict.FAIL, f"{method} CI-low {ci_low:.3f} < bar {bar:.3f} ({population})", evidence
    )


def gate_valid_verdicts(result: VerdictValidity | None, thresholds: Thresholds = THRESHOLDS) -> GateResult:
    """``valid_verdicts``: FAIL when the invalid verdicts alone, or the missing orders alone, could
    move the bar gate's CI-low across the bar: its interval recomputed with every such order lost
    by the policy and with every one won, the two CI-lows fall on different sides of the bar.
    Missing orders also FAIL when the policy leaves their contests out and they are not missing at
    random (the judged order of the single-order contests went worse for the policy than the same
    order of the complete ones: the interval of :func:`~honestci.audit.checks.verdicts.missing_at_random`
    lies below 0), and WARN when they are not missing at random but scored against the claim, or
    when their share exceeds ``missing_orders_max_share``. PASS when neither could change the
    verdict (or there are none); INCONCLUSIVE when an end has no honest interval."""
    name = "valid_verdicts"
    if result is None:
        return GateResult(name, Verdict.INCONCLUSIVE, "not run: nothing has been judged yet", ran=False)
    missing = result.missing
    evidence = {
        "n_contests": result.n_contests,
        "n_invalid_contests": result.n_invalid_contests,
        "invalid_policy_first": result.invalid_policy_first,
        "invalid_policy_second": result.invalid_policy_second,
        "scoring": result.scoring,
        "ci_low_if_all_lost": result.ci_low_against,
        "ci_low_if_all_won": result.ci_low_for,
        "bar": result.bar,
        "by_judge": list(result.by_judge),
        "missing_orders": None if missing is None else missing.as_dict(),
    }
    findings = [
        _gap_finding(
            f"{result.n_invalid_contests} of {result.n_contests} contests have an invalid verdict "
            f"({result.invalid_policy_first} with the policy shown first, {result.invalid_policy_second} second; "
            f"scored {result.scoring.replace('_', ' ')})",
            (result.ci_low_against, result.ci_low_for),
            (result.point_against, result.point_for),
            result,
            "judge them again or explain them",
        )
        if result.n_invalid_contests
        else (Verdict.PASS, f"no invalid verdict among the {result.n_contests} contests")
    ]
    if missing is not None:
        findings.extend(_missing_order_findings(missing, result, thresholds))
    verdict = worst(v for v, _ in findings)
    shown = [message for v, message in findings if v == verdict]
    return GateResult(name, verdict, "; ".join(shown), evidence)


def _gap_finding(
    counted: str,
    ci_lows: tuple[float | None, float | None],
    points: tuple[float | None, float | None],
    result: VerdictValidity,
    remedy: str,
) -> tuple[Verdict, str]:
    """Whether orders without a valid verdict could alone decide the bar gate: ``ci_lows`` and
    ``points`` are its CI-low and the win rate with every such order lost / won by the policy."""
    low, high = ci_lows
    if low is None or high is None:
        # No interval at one end (no variance): the win rates themselves still bound the change.
        lost, won = points
        if lost is not None and won is not None and clears_bar(lost, result.bar) != clears_bar(won, result.bar):
            return Verdict.FAIL, (
                f"{counted}: they alone decide the verdict (win rate {lost:.3f} if every one went against the "
                f"policy, {won:.3f} if every one went for it; bar {result.bar:.3f}); {remedy}"
            )
        return Verdict.INCONCLUSIVE, f"{counted}: no honest interval to bound what they could change"
    bound = (
        f"{result.method} CI-low {low:.3f} if every one went against the policy, {high:.3f} if every one went for it"
    )
    if clears_bar(low, result.bar) != clears_bar(high, result.bar):
        return Verdict.FAIL, (
            f"{counted}: they alone could move the CI-low across the bar {result.bar:.3f} ({bound}); {remedy}"
        )
    side = "at or above" if clears_bar(low, result.bar) else "below"
    return Verdict.PASS, f"{counted}: the CI-low stays {side} the bar {result.bar:.3f} either way ({bound})"


def _missing_order_findings(
    missing: MissingOrders, result: VerdictValidity, thresholds: Thresholds
) -> list[tuple[Verdict, str]]:
    """The missing orders' findings: their bound on the verdict, whether they are missing at
    random with respect to the outcome, and their share."""
    counted = (
        f"{missing.n_single_order} of {missing.n_contests} contests judged in one order only "
        f"({missing.scoring.replace('_', ' ')})"
    )
    findings = [
        _gap_finding(
            counted,
            (missing.ci_low_if_all_lost, missing.ci_low_if_all_won),
            (missing.point_if_all_lost, missing.point_if_all_won),
            result,
            "judge the missing orders",
        )
    ]
    if missing.difference_high is not None and missing.difference_high < 0:
        not_random = (
            f"the single-order contests' judged orders went worse for the policy than the complete contests' "
            f"({missing.difference:+.3f} [{missing.difference_low:+.3f}, {missing.difference_high:+.3f}]): "
            "the orders are not missing at random"
        )
        if missing.scoring == "exclude":
            findings.append((Verdict.FAIL, f"{not_random}, and leaving their contests out raises the win rate"))
        else:
            findings.append((Verdict.WARN, f"{not_random} (scored against the claim, so the CI-low errs low)"))
    if missing.share > thresholds.missing_orders_max_share:
        findings.append(
            (
                Verdict.WARN,
                f"{counted}: {missing.share:.1%} > missing_orders_max_share "
                f"{thresholds.missing_orders_max_share:.0%}; judge the missing orders",
            )
        )
    return findings


def gate_sampler_converged(bayes: BayesCheck | None) -> GateResult:
    """``sampler_converged``: PASS when R-hat, bulk/tail ESS and divergences meet the thresholds
    the fit was judged by and the posterior predictive check flags nothing; INCONCLUSIVE when
    they do not (a flagged check withholds the Bayesian win rates, the reason in the message), or
    when the Bayesian model was disabled."""
    if bayes is None:
        return GateResult(
            "sampler_converged", Verdict.INCONCLUSIVE, "not run: the Bayesian model was disabled", ran=False
        )
    result, d = bayes.result, bayes.result.diagnostics
    evidence = {
        "rhat_max": d.rhat_max,
        "ess_bulk_min": d.ess_bulk_min,
        "ess_tail_min": d.ess_tail_min,
        "divergences": d.divergences,
        "chains": d.chains,
        "draws": d.draws,
        "sampler": result.sampler,
    }
    if d.converged and result.withheld:
        return GateResult(
            "sampler_converged",
            Verdict.INCONCLUSIVE,
            f"the chains converged, but the Bayesian win rate is withheld: {result.withheld}",
            evidence,
        )
    if d.converged:
        return GateResult(
            "sampler_converged",
            Verdict.PASS,
            f"R-hat {d.rhat_max:.3f}, ESS bulk/tail {d.ess_bulk_min:.0f}/{d.ess_tail_min:.0f}, "
            f"{d.divergences} divergences ({result.sampler})",
            evidence,
        )
    return GateResult(
        "sampler_converged",
        Verdict.INCONCLUSIVE,
        "chains did not converge, no posterior reported: " + "; ".join(d.problems),
        evidence,
    )


def gate_comparison_valid(comparisons: Iterable[ComparisonCheck]) -> GateResult:
    """``comparison_valid``: each claimed comparison must be a paired, vignette-clustered test whose
    interval of the difference clears 0; a comparison that is not a test FAILs, one whose data
    could not be assembled is INCONCLUSIVE. PASS when no comparison is claimed."""
    comparisons = tuple(comparisons)
    if not comparisons:
        return GateResult("comparison_valid", Verdict.PASS, "no comparison with another system is claimed")
    verdicts, reasons = [], []
    for check in comparisons:
        paired = check.paired
        if paired is None:  # its contests could not be assembled; check.error says why
            verdicts.append(Verdict.INCONCLUSIVE)
            reasons.append(f"vs {check.against}: {check.error}")
            continue
        honest = (
            f"the honest test, a vignette-clustered difference, gives {paired.estimate:+.3f} "
            f"[{paired.ci_low:+.3f}, {paired.ci_high:+.3f}]"
        )
        if check.bayes is not None and check.bayes.converged:
            honest += (
                f" (Bayesian P({paired.system_a} > {check.against}) on a new vignette: "
                f"{check.bayes.p_a_beats_b_new:.3f})"
            )
        if check.kind != "paired_difference":
            verdicts.append(Verdict.FAIL)
            reasons.append(
                f"vs {check.against}: invalid comparison ({check.kind.replace('_', ' ')} is not a test); " + honest
            )
        elif clears_bar(paired.ci_low, 0.0):
            verdicts.append(Verdict.PASS)
            reasons.append(f"vs {check.against}: {honest}, which excludes 0")
        else:
            verdicts.append(Verdict.FAIL)
            reasons.append(f"vs {check.against}: {honest}, which does not exclude 0")
    return GateResult(
        "comparison_valid", worst(verdicts), "; ".join(reasons), {"comparisons": [c.against for c in comparisons]}
    )


def gate_multiple_comparisons(check: SystemsCheck | None) -> GateResult:
    """``multiple_comparisons``: a family of claimed comparisons (two or more "beats X" claims, or
    "best of the claim's ``systems``") holds only when every member's paired, vignette-clustered
    difference favours the policy with its p-value adjusted over the family by the policy's
    ``multiplicity`` procedure at or below 1 − level (audit/checks/systems.py).

    - PASS: no family is claimed, or every member holds after the correction;
    - FAIL: some member does not hold; members that clear 0 alone but not after the correction are
      named as an uncorrected best-of-many reading.
    """
    name = "multiple_comparisons"
    if check is None or not check.family:
        return GateResult(name, Verdict.PASS, "no family of comparisons is claimed (one comparison at most)")
    evidence = {"multiplicity": check.multiplicity, "family": check.family_frame().to_dict(orient="records")}
    failing = [m for m in check.family if not m.holds]
    how = f"{check.multiplicity.upper() if check.multiplicity == 'bh' else check.multiplicity} over {len(check.family)}"
    if not failing:
        worst_p = max(m.p_adjusted for m in check.family)
        return GateResult(
            name,
            Verdict.PASS,
            f"every claimed comparison holds after {how} (largest adjusted p {worst_p:.3g})",
            evidence,
        )
    uncorrected = [m.against for m in failing if m.holds_uncorrected]
    reason = "; ".join(f"vs {m.against}: {m.estimate:+.3f}, adjusted p {m.p_adjusted:.3g}" for m in failing)
    if uncorrected:
        reason += (
            f"; {', '.join(uncorrected)} clear{'s' if len(uncorrected) == 1 else ''} 0 alone but not after the "
            "correction: an uncorrected best-of-many reading"
        )
    return GateResult(
        name,
        Verdict.FAIL,
        f"{len(failing)} of {len(check.family)} claimed comparisons fail after {how}: {reason}",
        evidence,
    )


def gate_claimed_figures_reproduce(audit: ClaimedFigureAudit | None) -> GateResult:
    """``claimed_figures_reproduce``: FAIL when a stated figure does not reproduce from the raw data
    or its method is misnamed, WARN when it is presented misleadingly (an iid interval on clustered
    data, unlabelled or labelled: "reproduces, but the method ignores clustering"; one table mixing
    interval methods); PASS when the figures reproduce by an honest method or none are claimed."""
    if audit is None:
        return GateResult("claimed_figures_reproduce", Verdict.PASS, "no figures are claimed")
    flags = audit.all_flags()
    evidence = {
        "point": audit.point,
        "n": audit.n,
        "n_effective": audit.n_effective,
        "reproducing_methods": list(audit.reproducing_methods),
        "flags": list(flags),
        "stated": audit.stated,
        "table": {system: list(row.reproducing_methods) for system, row in audit.table_rows},
    }
    # A flag reads "FAIL: ..." or "WARN: ..."; the message keeps what follows the severity.
    failing = [f for f in flags if f.startswith("FAIL")]
    warning = [f for f in flags if f.startswith("WARN")]
    if failing:
        return GateResult("claimed_figures_reproduce", Verdict.FAIL, "; ".join(f[6:] for f in failing), evidence)
    if warning:
        return GateResult("claimed_figures_reproduce", Verdict.WARN, "; ".join(f[6:] for f in warning), evidence)
    methods = ", ".join(audit.reproducing_methods) or "no interval stated"
    return GateResult(
        "claimed_figures_reproduce",
        Verdict.PASS,
        f"stated figures reproduce from the raw data (interval: {methods})",
        evidence,
    )


# --- the judge --------------------------------------------------------------------------------


def gate_judge_calibrated(result: CalibrationResult | None, thresholds: Thresholds = THRESHOLDS) -> GateResult:
    """``judge_calibrated``: PASS when the judge's agreement CI-low clears ``min_judge_agreement``
    and the judge is not materially below the human ceiling; FAIL when either fails with
    confidence; WARN when the gap's point estimate is material but its interval reaches back
    within tolerance; INCONCLUSIVE when there is no human data or no honest interval.

    One rater (at most one human label per item, e.g. gold labels): there is no inter-rater
    ceiling to compare with, so the gate decides on agreement alone: PASS when the agreement's
    CI-low clears ``min_judge_agreement``, FAIL when it does not. The bar is absolute, so it is
    as strict as with many raters; what is lost is only the check against the ceiling, and the
    message says so. With two or more raters but no estimable ceiling the gate WARNs, as before."""
    name = "judge_calibrated"
    if result is None:
        return GateResult(
            name,
            Verdict.INCONCLUSIVE,
            "not run: needs human preference labels (human_pairs or human_ratings) on pairs the judge judged",
            ran=False,
        )
    agreement = result.agreement_for(GATE_TIE_POLICY)
    evidence = {
        "agreement": agreement.as_row(),
        "min_judge_agreement": thresholds.min_judge_agreement,
        "max_judge_ceiling_gap": thresholds.max_judge_ceiling_gap,
        "gap_to_ceiling": None if result.gap_to_ceiling is None else result.gap_to_ceiling.as_row(),
    }
    if agreement.bounds is None:
        return GateResult(
            name, Verdict.INCONCLUSIVE, f"no honest interval for the agreement: {agreement.note}", evidence
        )
    if not clears_bar(agreement.bounds[0], thresholds.min_judge_agreement):
        return GateResult(
            name,
            Verdict.FAIL,
            f"agreement {agreement.text()}: CI-low below {thresholds.min_judge_agreement:.2f}",
            evidence,
        )
    message = f"agreement {agreement.text()} >= {thresholds.min_judge_agreement:.2f}"
    if result.single_rater:
        evidence["single_rater"] = True
        return GateResult(
            name, Verdict.PASS, message + "; one rater: no inter-rater ceiling, decided on agreement alone", evidence
        )
    gap = result.gap_to_ceiling
    if gap is None or gap.bounds is None or gap.estimate is None:
        return GateResult(
            name, Verdict.WARN, message + "; no human ceiling to compare with (needs 2+ raters)", evidence
        )
    tolerance = thresholds.max_judge_ceiling_gap
    if gap.bounds[1] < -tolerance:
        return GateResult(
            name,
            Verdict.FAIL,
            message + f"; but materially below the human ceiling: judge minus "
            f"ceiling {gap.text()} lies below -{tolerance:.2f}",
            evidence,
        )
    if gap.estimate < -tolerance:
        return GateResult(
            name,
            Verdict.WARN,
            message + f"; judge minus ceiling {gap.text()}: possibly more than {tolerance:.2f} below the human ceiling",
            evidence,
        )
    return GateResult(name, Verdict.PASS, message + f"; judge minus human ceiling {gap.text()}", evidence)


def gate_position_bias(result: PositionBiasResult | None, thresholds: Thresholds = THRESHOLDS) -> GateResult:
    """``position_bias``: FAIL when the clustered CI of the order effect lies entirely outside
    ±tolerance, WARN when it straddles a bound, PASS when inside; INCONCLUSIVE when not
    identifiable (one fixed presentation order: WARN instead when the policy sets
    ``fixed_order_position_bias_warn``) or without an honest interval. The order effect is
    within contests when both orders were judged, between contests when one randomised order
    was (:mod:`honestci.audit.checks.position_bias`).

    The tolerance is a closed equivalence band, not a bar: an interval that touches a bound is
    inside on that side.
    """
    from honestci.audit.data.contests import ONE_ORDER_FIXED  # a design label; the module loads pandas

    name = "position_bias"
    if result is None:
        return GateResult(
            name, Verdict.INCONCLUSIVE, "not run: needs both-order verdicts of the claim's judge", ran=False
        )
    tolerance = thresholds.position_bias_tolerance
    evidence = {"tolerance": tolerance, "judge": result.judge}
    evidence["design"] = result.design
    if not result.identifiable:
        message = f"position bias of {result.judge} is not identifiable: {result.note}"
        if result.design == ONE_ORDER_FIXED and thresholds.fixed_order_position_bias_warn:
            return GateResult(
                name,
                Verdict.WARN,
                message + "; the policy accepts this risk (fixed_order_position_bias_warn), never as a PASS",
                evidence,
            )
        fix = (
            "judge both orders, or randomise the order and record it (response_first)"
            if result.design == ONE_ORDER_FIXED
            else "judge both orders"
        )
        return GateResult(name, Verdict.INCONCLUSIVE, f"{message}; {fix}", evidence)
    effect = result.order_effect
    if effect is None:
        return GateResult(name, Verdict.INCONCLUSIVE, f"no order effect was estimated: {result.note}", evidence)
    evidence["order_effect"] = effect.as_row()
    if effect.bounds is None:
        return GateResult(
            name, Verdict.INCONCLUSIVE, f"no honest interval for the order effect: {effect.note}", evidence
        )
    low, high = effect.bounds
    text = f"{result.judge}: order effect {effect.text()}"
    if result.favours_a_position(tolerance):
        return GateResult(
            name, Verdict.FAIL, f"{text} lies outside ±{tolerance:.2f}: the judge favours a position", evidence
        )
    if low >= -tolerance and high <= tolerance:
        return GateResult(name, Verdict.PASS, f"{text} lies within ±{tolerance:.2f}", evidence)
    return GateResult(
        name, Verdict.WARN, f"{text} straddles ±{tolerance:.2f}: cannot rule out a material position bias", evidence
    )


# --- the evidence behind the checkpoint -------------------------------------------------------


def gate_length_bias(result: LengthBiasResult | None, thresholds: Thresholds = THRESHOLDS) -> GateResult:
    """``length_bias``: the judge's length effect (the change in the policy's predicted win rate when
    its answer is one sd longer than the opponent's instead of equally long; AlpacaEval 2.0's GLM,
    vignette-clustered CR2 delta-method interval) against ±``length_bias_tolerance``:

    - FAIL when the interval lies entirely outside ±tolerance (the judge's preference moves with
      length beyond tolerance, with confidence);
    - WARN when it reaches beyond a bound but not entirely (the data cannot rule a material length
      preference out);
    - PASS when it lies inside ±tolerance;
    - INCONCLUSIVE when the effect is not identifiable (no answer texts, lengths that never differ,
      the policy's answer the longer in every contest or the shorter in every one, too few
      vignettes) or nothing was judged.

    Verdicts that follow length in every contest (separation) get Firth's penalised GLM (finite,
    with its cluster-robust interval), so such a judge FAILs rather than being INCONCLUSIVE.
    """
    name, tolerance = "length_bias", thresholds.length_bias_tolerance
    if result is None:
        return GateResult(name, Verdict.INCONCLUSIVE, "not run: nothing has been judged yet", ran=False)
    effect = result.length_effect
    evidence = {
        "tolerance": tolerance,
        "length_effect": None if effect is None else effect.as_row(),
        "raw_win_rate": None if result.length is None else result.length.raw,
        "length_controlled": None if result.length is None else result.length.controlled.as_row(),
        "style_controlled": None if result.style is None else result.style.controlled.as_row(),
        "median_length_policy": result.median_length_policy,
        "median_length_opponent": result.median_length_opponent,
        "n_policy_longer": result.n_policy_longer,
        "n_policy_shorter": result.n_policy_shorter,
        "firth_penalised": result.length is not None and result.length.penalised,
        "note": result.note,
    }
    if effect is None or result.confounded:
        return GateResult(name, Verdict.INCONCLUSIVE, f"length effect not identifiable: {result.note}", evidence)
    if effect.bounds is None:
        return GateResult(
            name, Verdict.INCONCLUSIVE, f"no honest interval for the length effect: {effect.note}", evidence
        )
    low, high = effect.bounds
    text = f"length effect (one sd longer) {effect.text()}, tolerance ±{tolerance:.2f}"
    if low > tolerance or high < -tolerance:
        side = "longer" if low > tolerance else "shorter"
        return GateResult(name, Verdict.FAIL, f"{text}: the judge favours {side} answers beyond tolerance", evidence)
    if high > tolerance or low < -tolerance:
        return GateResult(
            name, Verdict.WARN, f"{text}: a length preference beyond tolerance cannot be ruled out", evidence
        )
    return GateResult(name, Verdict.PASS, f"{text}: within tolerance", evidence)


def gate_winners_curse(result: SelectionAnalysis | None, bar: float, thresholds: Thresholds = THRESHOLDS) -> GateResult:
    """``winners_curse``: the claim's policy against the selection among candidates it may have won.

    - FAIL when the policy is a candidate and the claim's evidence includes the selection pool
      (the pool it was selected on), or when it is the selected candidate (the winner) and the
      AKM hybrid interval for the winner's rate lies entirely below the claim's ``bar``;
    - INCONCLUSIVE when it is the winner and no hybrid interval can be formed (the reason is
      given), or the hybrid interval reaches below the bar (CI-low < bar <= CI-high): selection
      corrected, the selection pool cannot show the winner clears the bar;
    - WARN when its held-out win rate falls more than ``winners_curse_shrinkage_warn`` below its
      selection estimate;
    - PASS when none of these holds: the winner's hybrid CI-low clears the bar
      (:func:`honestci.audit.policy.clears_bar`), or the policy is not the selected candidate
      (the correction concerns the winner, not it);
    - INCONCLUSIVE ("not run") without a selection pool.

    The worst verdict of those that hold is returned, with its messages.
    """
    if result is None:
        return GateResult(
            "winners_curse",
            Verdict.INCONCLUSIVE,
            "not run: needs a selection pool (responses with pool = selection) among the claim's data",
            ran=False,
        )
    inference, shrinkage_warn = result.inference, thresholds.winners_curse_shrinkage_warn
    hybrid = (None, None) if inference is None else inference.hybrid_ci
    selection = result.selection
    evidence = {
        "winner": result.winner,
        "naive": result.naive_estimate,
        "median_unbiased": None if inference is None else inference.median_unbiased,
        "heldout": None if result.heldout is None else result.heldout.estimate,
        "policy_is_candidate": result.policy_is_candidate,
        "claim_uses_selection_pool": result.claim_uses_selection_pool,
        "shrinkage_warn": shrinkage_warn,
        "hybrid_ci_low": hybrid[0],
        "hybrid_ci_high": hybrid[1],
        "bar": bar,
        "policy_is_winner": result.policy_is_winner,
        "n_vignettes": selection.n_clusters,
        "covariance_shrinkage": selection.shrinkage,
        "inference_note": result.inference_note,
    }
    n_candidates = len(selection.candidates)
    if result.policy_is_candidate and result.claim_uses_selection_pool:
        return GateResult(
            "winners_curse",
            Verdict.FAIL,
            f"{result.policy} was selected among {n_candidates} candidates on the "
            "selection pool, and the claim's contests include that pool: evaluate it on a fresh "
            "held-out pool only",
            evidence,
        )
    if not result.policy_is_candidate:
        return GateResult(
            "winners_curse",
            Verdict.PASS,
            f"the claim's policy is not among the {n_candidates} selection candidates "
            f"(winner {result.winner}: naive {result.naive_estimate:.3f}"
            + ("" if inference is None else f", AKM {inference.median_unbiased:.3f}")
            + ("" if result.heldout is None else f", held-out {result.heldout.estimate:.3f}")
            + ")",
            evidence,
        )
    findings: list[tuple[Verdict, str]] = []
    if result.policy_is_winner:
        if inference is None:
            findings.append(
                (Verdict.INCONCLUSIVE, f"no selection-corrected interval for {result.policy}: {result.inference_note}")
            )
        else:
            findings.append(_selected_winner_finding(str(result.policy), inference, n_candidates, bar))
    if result.policy_selection_estimate is None or result.policy_heldout_estimate is None:
        findings.append((Verdict.INCONCLUSIVE, f"{result.policy} lacks a selection or held-out estimate"))
    else:
        drop = result.policy_selection_estimate - result.policy_heldout_estimate
        evidence["policy_shrinkage"] = drop
        if drop > shrinkage_warn:
            findings.append(
                (
                    Verdict.WARN,
                    f"held-out {result.policy_heldout_estimate:.3f} falls {drop:.3f} below the selection "
                    f"estimate {result.policy_selection_estimate:.3f} (> {shrinkage_warn:g})",
                )
            )
        else:
            findings.append((Verdict.PASS, f"claim rests on the held-out pool; shrinkage {drop:+.3f} from selection"))
    verdict = worst([v for v, _ in findings])
    return GateResult("winners_curse", verdict, "; ".join(m for v, m in findings if v == verdict), evidence)


def _selected_winner_finding(
    policy: str, inference: WinnerInference, n_candidates: int, bar: float
) -> tuple[Verdict, str]:
    """The selection-corrected (AKM hybrid) interval of the winner against the bar: FAIL wholly
    below, INCONCLUSIVE reaching below, PASS clearing it (:func:`honestci.audit.policy.clears_bar`)."""
    hybrid = inference.hybrid_ci
    interval = f"AKM hybrid {inference.level:.0%} interval [{hybrid[0]:.3f}, {hybrid[1]:.3f}]"
    if hybrid[1] < bar:
        return Verdict.FAIL, f"{policy}, the best of {n_candidates}: {interval} lies below the bar {bar:.3f}"
    if not clears_bar(hybrid[0], bar):
        return (
            Verdict.INCONCLUSIVE,
            f"{policy}, the best of {n_candidates}: {interval} reaches below the bar {bar:.3f}; "
            "corrected for the selection, these data cannot show it clears the bar",
        )
    return Verdict.PASS, f"{interval} for {policy}, the best of {n_candidates}, clears the bar {bar:.3f}"


def gate_best_of_systems_selection(check: SystemsCheck, bar: float) -> GateResult:
    """``winners_curse`` for a claim that the policy is the best of its ``systems`` (no selection
    pool): the policy's win rate, picked as the largest of K on the same contests, is read through
    the AKM hybrid interval of the winner (audit/checks/selection.py ``winner_inference``, on the K
    win rates and their vignette-clustered CR2 covariance) against the bar, as
    :func:`gate_winners_curse` reads a selection pool's winner. PASS when the policy is not the
    observed best (its figure was not selected; ``multiple_comparisons`` judges the claim)."""
    assert check.selection is not None
    return _gate_best_of(check.policy, check.selection, bar, "systems", "claimed best of its systems")


def gate_best_seed_selection(check: SeedsCheck, bar: float) -> GateResult:
    """``winners_curse`` for a policy that is the observed best of the claim's training ``seeds``:
    reporting the best of K seeds reports a selected maximum whether or not the card says so (the
    audit cannot tell a pre-registered seed from a picked one, so it assumes the pick), and its win
    rate is read through the AKM hybrid interval of the winner on the K seeds' rates and their
    vignette-clustered CR2 covariance, as :func:`gate_best_of_systems_selection` reads systems."""
    assert check.selection is not None
    return _gate_best_of(check.policy, check.selection, bar, "training seeds", "the best of its training seeds")


def _gate_best_of(policy: str, inference: WinnerInference, bar: float, what: str, why: str) -> GateResult:
    k = len(inference.candidates)
    evidence = {
        "winner": inference.winner,
        "naive": inference.naive_estimate,
        "median_unbiased": inference.median_unbiased,
        "hybrid_ci_low": inference.hybrid_ci[0],
        "hybrid_ci_high": inference.hybrid_ci[1],
        "bar": bar,
        "candidates": list(inference.candidates),
    }
    if inference.winner != policy:
        return GateResult(
            "winners_curse",
            Verdict.PASS,
            f"{policy} is not the observed best of its {k} {what} ({inference.winner} is): its figure was not selected",
            evidence,
        )
    verdict, message = _selected_winner_finding(policy, inference, k, bar)
    return GateResult("winners_curse", verdict, f"{message} ({why})", evidence)


def gate_leakage(scan: LeakageScan | None) -> GateResult:
    """``leakage``: FAIL when an eval answer's n-gram overlap with the training corpus reaches the
    scan's ``min_overlap``, WARN on near duplicates (paraphrases) only, INCONCLUSIVE without a
    corpus; PASS otherwise."""
    if scan is None:
        return GateResult(
            "leakage", Verdict.INCONCLUSIVE, "not run: needs a training corpus (the claim's `corpus` table)", ran=False
        )
    leaked, near = scan.leaked_items, scan.near_duplicate_items
    evidence = {"leaked": list(leaked), "near_duplicates": list(near), "n": scan.n, "min_overlap": scan.min_overlap}
    if leaked:
        return GateResult(
            "leakage",
            Verdict.FAIL,
            f"{len(leaked)} held-out eval answer(s) used in the claim occur in the training corpus "
            f"({', '.join(leaked[:5])}{'…' if len(leaked) > 5 else ''})",
            evidence,
        )
    if near:
        return GateResult(
            "leakage",
            Verdict.WARN,
            f"no verbatim leak; {len(near)} near-duplicate(s) of eval answers in the corpus",
            evidence,
        )
    return GateResult(
        "leakage",
        Verdict.PASS,
        f"no eval answer's {scan.n}-grams reach {scan.min_overlap:g} overlap with the corpus",
        evidence,
    )


def gate_training_healthy(result: TrainingHealth | None) -> GateResult:
    """``training_healthy``: the worst of the run's health criteria (each judged against its
    threshold by :func:`honestci.audit.checks.training_health.assess_training_log`), with the
    messages of the criteria that set it; INCONCLUSIVE without a training log."""
    if result is None:
        return GateResult(
            "training_healthy",
            Verdict.INCONCLUSIVE,
            "not run: needs the claim's training_log (the trainer's trainer_state.json or training_log.jsonl)",
            ran=False,
        )
    failing = [c for c in result.criteria if c.verdict == result.verdict and c.verdict != Verdict.PASS]
    message = (
        "healthy: " + "; ".join(c.message for c in result.criteria)
        if not failing
        else "; ".join(c.message for c in failing)
    )
    return GateResult(
        "training_healthy",
        result.verdict,
        message,
        {
            "log": result.log_path,
            "n_steps": result.n_steps,
            "window": result.window,
            "criteria": {c.name: c.value for c in result.criteria},
        },
    )


def _bar_verdict(ci_low: float | None, n_clusters: int, bar: float, thresholds: Thresholds) -> Verdict:
    """What the bar gate says of a CI-low from ``n_clusters`` vignettes (without its notes)."""
    if ci_low is None or n_clusters < thresholds.min_clusters:
        return Verdict.INCONCLUSIVE
    return Verdict.PASS if clears_bar(ci_low, bar) else Verdict.FAIL


def gate_evidence_intact(check: EvidenceCheck | None, thresholds: Thresholds = THRESHOLDS) -> GateResult:
    """``evidence_intact``: FAIL when a finding asks for it (a name the claim reads has a look-alike,
    an opponent's rows under the policy's name) or when the bar gate's verdict on the unmerged
    contests differs from its verdict on the merged ones (the copies decide the verdict); WARN when
    a finding asks for it (copied or near-copied prompts, other look-alike names) or merging removed
    more than ``evidence_merged_share_warn`` of the claim's contests; PASS otherwise (repeats below
    that share are merged and listed). The findings table is read whole: a new kind of finding
    needs no change here."""
    name = "evidence_intact"
    if check is None:
        return GateResult(name, Verdict.INCONCLUSIVE, "not run: nothing has been judged yet", ran=False)
    merged = _bar_verdict(check.ci_low_merged, check.n_clusters_merged, check.bar, thresholds)
    unmerged = _bar_verdict(check.ci_low_unmerged, check.n_clusters_unmerged, check.bar, thresholds)
    limit = thresholds.evidence_merged_share_warn
    evidence = {
        # the findings table is the check's report section; here each finding's kind, count and verdict
        # (and the items of those that decide the verdict)
        "findings": [
            {"kind": f.kind, "count": f.count, "verdict": str(f.verdict)}
            | ({"items": list(f.items)} if f.verdict != Verdict.PASS else {})
            for f in check.findings
        ],
        "method": check.method,
        "population": check.population,
        "bar": check.bar,
        "ci_low_merged": check.ci_low_merged,
        "ci_low_unmerged": check.ci_low_unmerged,
        "n_contests_merged": check.n_contests_merged,
        "n_contests_unmerged": check.n_contests_unmerged,
        "n_clusters_merged": check.n_clusters_merged,
        "n_clusters_unmerged": check.n_clusters_unmerged,
        "merged_share": check.merged_share,
        "merged_share_warn": limit,
    }
    counts: dict[str, int] = {}
    for finding in check.findings:
        counts[finding.kind] = counts.get(finding.kind, 0) + finding.count
    found = "; ".join(f"{kind.replace('_', ' ')}: {n}" for kind, n in counts.items())
    blocking = [f for f in check.findings if f.verdict == Verdict.FAIL]
    if merged != unmerged or blocking:
        reasons = [f"{f.kind.replace('_', ' ')}: {f.detail}" for f in blocking]
        if merged != unmerged:

            def low(value: float | None) -> str:
                return "none" if value is None else f"{value:.3f}"

            reasons.insert(
                0,
                f"merging copies changes the bar verdict from {unmerged} to {merged} ({check.method} CI-low "
                f"{low(check.ci_low_unmerged)} on {check.n_contests_unmerged} contests and "
                f"{check.n_clusters_unmerged} vignettes as given, {low(check.ci_low_merged)} on "
                f"{check.n_contests_merged} and {check.n_clusters_merged} merged)",
            )
        return GateResult(
            name,
            Verdict.FAIL,
            "; ".join(reasons) + ": give each vignette, response and judgment once under one id, and systems and "
            "judges names that cannot be read as each other",
            evidence,
        )
    warned = [f for f in check.findings if f.verdict == Verdict.WARN]
    if warned or check.merged_share > limit:
        why = "; ".join(dict.fromkeys(f.detail for f in warned))
        return GateResult(
            name,
            Verdict.WARN,
            f"copied or look-alike evidence found ({found}){': ' + why if why else ''}; merged before every "
            f"interval, the bar verdict is the same either way ({check.n_contests_unmerged} contests as given, {check.n_contests_merged} merged): "
            "remove the copies (or rename the look-alikes) and re-audit",
            evidence,
        )
    if check.findings:
        return GateResult(
            name,
            Verdict.PASS,
            f"repeats merged before every interval ({found}; {check.merged_share:.1%} of the claim's contests, at "
            f"most {limit:.0%} allowed); the bar verdict is the same either way",
            evidence,
        )
    return GateResult(name, Verdict.PASS, "no copied prompts, responses or judgments and no look-alike names", evidence)


def gate_panel_position_bias(results: Iterable[PositionBiasResult], thresholds: Thresholds = THRESHOLDS) -> GateResult:
    """``position_bias`` for a panel: :func:`gate_position_bias` on every panel judge, and the worst
    verdict (a FAIL when any judge favours a position beyond tolerance, whatever the panel rule:
    a majority may outvote a biased judge on some contests, the mean never does). The message
    names the judges that set the verdict; the evidence holds every judge's."""
    gates = [gate_position_bias(result, thresholds) for result in results]
    verdict = worst(g.verdict for g in gates)
    setting = [g for g in gates if g.verdict == verdict]
    return GateResult(
        "position_bias",
        verdict,
        f"panel of {len(gates)} judges: " + "; ".join(g.message for g in setting),
        {"tolerance": thresholds.position_bias_tolerance, "judges": [g.evidence for g in gates]},
        ran=all(g.ran for g in gates),
    )
