"""Winner's curse: inference on the best of N candidates selected on the same data.

Picking the best of N candidates (best-of-N samples, seeds, checkpoints, prompts, judges) on a
selection pool and reporting the winner's score on that same pool overstates it: the maximum of N
noisy estimates is biased upwards. This module gives, side by side,

- the naive winner estimate and its naive interval (biased; labelled as such);
- the Andrews–Kitagawa–McCloskey (AKM) median-unbiased estimate, equal-tailed conditional
  interval and hybrid interval, which condition on the selection event;
- the held-out replication of the winner (a fresh pool) with its own vignette-clustered CR2
  interval, and the shrinkage from the selection estimate to the held-out one.

The numeric core (:func:`winner_inference`) takes a vector of estimates and their covariance.
:func:`selection_covariance` builds both from contest scores clustered by vignette (candidates
share vignettes, so their estimates are correlated); :func:`analyse_selection` is the thin layer
over a study's tables (responses with ``pool`` = selection/heldout, ``system`` = candidate).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from scipy import special

from honestci.audit.checks.context import AuditContext, ReportSection
from honestci.audit.errors import EstimationError, InputError
from honestci.audit.policy import DEFAULT_SEED, THRESHOLDS, Thresholds
from honestci.audit.stats.estimands import vignette_means
from honestci.audit.stats.frequentist.cluster_robust import cluster_robust_ols
from honestci.audit.stats.intervals import RATE_SPACE, bound_to_space
from honestci.audit.stats.selection.winner import (  # noqa: F401 - the AKM core, re-exported for existing callers
    DEFAULT_PROJECTION_DRAWS,
    SelectionNull,
    WinnerInference,
    selection_null,
    selection_truncation,
    truncated_normal_log_cdf,
    winner_inference,
)

if TYPE_CHECKING:
    from honestci.audit.data.contests import ContestScores
    from honestci.audit.stats.selection.systems import KSystemResult

# --------------------------------------------------------------------------------------------
# Estimates and their clustered covariance from contest scores


@dataclass(frozen=True)
class CandidateEstimates:
    """Per-candidate equal-weight win rates X and their covariance Σ over the common vignettes.

    ``shrinkage`` is the Ledoit–Wolf intensity applied toward the diagonal (0 when Σ was used as
    estimated) and ``shrinkage_reason`` why it was applied; ``condition_number`` is that of the
    candidates' sample correlation matrix before shrinkage (inf when singular).
    """

    candidates: tuple[str, ...]
    estimates: np.ndarray
    covariance: np.ndarray
    n_contests: tuple[int, ...]
    n_clusters: int
    vcov: str
    shrinkage: float = 0.0
    shrinkage_reason: str | None = None
    condition_number: float = math.nan
    n_vignettes_dropped: int = 0

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame(
            {
                "candidate": list(self.candidates),
                "estimate": self.estimates,
                "se": np.sqrt(np.diag(self.covariance)),
                "n_contests": list(self.n_contests),
                "n_clusters": self.n_clusters,
                "vcov": self.vcov,
                "shrinkage": self.shrinkage,
            }
        )


def ledoit_wolf_diagonal(rows: np.ndarray) -> float:
    """Ledoit–Wolf shrinkage intensity of the sample covariance of ``rows`` toward its diagonal.

    With y_k the centred rows (k = 1..n), S = (1/n) Σ_k y_k y_kᵀ and the target F = diag(S), the
    intensity is ρ̂ = min(β̄, δ)/δ with δ = ‖S − F‖² = Σ_{i≠j} s_ij² and
    β̄ = (1/n²) Σ_k Σ_{i≠j} (y_ki y_kj − s_ij)², the Frobenius-loss optimum of
    (1 − ρ)S + ρF estimated consistently (Ledoit & Wolf 2004, section 3.2, with the diagonal
    target: F agrees with S on the diagonal, so only off-diagonal terms enter). Returns 1 when S
    is already diagonal (δ = 0: the target is S).

    References
    ----------
    Ledoit & Wolf (2004), "A well-conditioned estimator for large-dimensional covariance
    matrices", J. Multivariate Analysis 88(2):365–411; Schäfer & Strimmer (2005), Stat. Appl.
    Genet. Mol. Biol. 4(1):32, target D ("diagonal, unequal variance"), the same intensity with
    unbiased moments (larger by n/(n − 1)).

    Validated against
    -----------------
    A direct triple loop over rows and off-diagonal pairs of the formula above
    (tests/test_selection.py).
    """
    y = np.asarray(rows, dtype=float)
    y = y - y.mean(axis=0)
    n = y.shape[0]
    sample = y.T @ y / n
    off = ~np.eye(y.shape[1], dtype=bool)
    delta = float(np.sum(sample[off] ** 2))
    if delta <= 0.0:
        return 1.0
    # Σ_k (y_ki y_kj − s_ij)² = Σ_k y_ki² y_kj² − n s_ij², since s_ij is the mean of y_ki y_kj
    squares = (y**2).T @ (y**2)
    beta = float(np.sum(squares[off] - n * sample[off] ** 2)) / n**2
    return min(max(beta, 0.0), delta) / delta


def _correlation_condition(sample: np.ndarray) -> float:
    """Condition number of the correlation matrix of ``sample`` (inf when singular)."""
    sd = np.sqrt(np.diag(sample))
    if np.any(sd <= 0):
        return math.inf
    values = np.linalg.eigvalsh(sample / np.outer(sd, sd))
    return math.inf if values[0] <= values[-1] * 1e-15 else float(values[-1] / values[0])


def selection_covariance(
    scores: Mapping[str, tuple[np.ndarray, np.ndarray]], max_condition: float = THRESHOLDS.winners_curse_max_condition
) -> CandidateEstimates:
    """Candidates' equal-weight win rates and their covariance from the G x K vignette means.

    Each candidate's rate is the mean of its vignette means (:func:`honestci.audit.stats.
    estimands.vignette_means`) over the G vignettes every candidate was scored on, the estimand
    of both populations; M is the G x K matrix of those vignette means, X its column means and
    Σ = S/G with S the sample covariance of M's rows (vignettes are the independent units, and
    their shared effects correlate the candidates). When K >= G − 1 (S singular or one degree
    of freedom from it) or the condition number of the sample correlation exceeds
    ``max_condition``, S is replaced by (1 − ρ̂)S + ρ̂ diag(S) with the Ledoit–Wolf intensity ρ̂
    (:func:`ledoit_wolf_diagonal`): variances are kept, correlations shrunk toward 0.

    ``scores`` maps candidate → (scores, vignette ids). Raises :class:`EstimationError` with
    fewer than two common vignettes (no covariance can be estimated).
    """
    if len(scores) < 1:
        raise InputError("no candidate scores given", fix="give at least one candidate's contest scores")
    names = tuple(scores)
    arrays = {}
    for name in names:
        values, clusters = (np.asarray(a) for a in scores[name])
        if values.size == 0:
            raise InputError(
                f"candidate {name!r} has no scored contests on the selection pool",
                fix="judge every candidate on the selection pool",
            )
        arrays[name] = (values.astype(float), clusters)
    every = [set(np.unique(clusters).tolist()) for _, clusters in arrays.values()]
    common = set.intersection(*every)
    if len(common) < 2:
        raise EstimationError(
            f"the {len(names)} candidates share {len(common)} vignette(s) on the selection pool: no "
            "covariance between them can be estimated; judge every candidate on the same vignettes"
        )
    columns, counts = [], []
    for values, clusters in arrays.values():
        keep = np.isin(clusters, list(common))
        columns.append(vignette_means(values[keep], clusters[keep]).means)  # sorted by vignette label
        counts.append(int(keep.sum()))
    matrix = np.column_stack(columns)
    g, k = matrix.shape
    sample = np.cov(matrix, rowvar=False, ddof=1).reshape(k, k)
    condition = _correlation_condition(sample) if k > 1 else 1.0
    reason = None
    if k > 1 and k >= g - 1:
        reason = f"{k} candidates on {g} vignettes (K >= G - 1): the sample covariance is singular or nearly so"
    elif k > 1 and condition > max_condition:
        reason = f"the candidates' sample correlation has condition number {condition:.3g} > {max_condition:g}"
    intensity = 0.0
    if reason is not None:
        intensity = ledoit_wolf_diagonal(matrix)
        sample = (1.0 - intensity) * sample + intensity * np.diag(np.diag(sample))
    label = "vignette means, sample covariance / G" + (
        f", Ledoit-Wolf shrinkage {intensity:.2f} toward the diagonal" if reason is not None else ""
    )
    return CandidateEstimates(
        names,
        matrix.mean(axis=0),
        sample / g,
        tuple(counts),
        g,
        label,
        intensity,
        reason,
        condition,
        len(set.union(*every)) - g,
    )


def candidate_winner_inference(
    estimates: CandidateEstimates,
    *,
    level: float = 0.95,
    beta: float | None = None,
    seed: int | np.random.Generator = DEFAULT_SEED,
    n_draws: int = DEFAULT_PROJECTION_DRAWS,
) -> WinnerInference:
    """AKM inference on the winner of candidates' win rates, on the logit scale, shown as rates.

    :func:`winner_inference` assumes X ~ N(μ, Σ) with Σ known; here Σ is estimated from G vignettes
    and the vignette means are bounded and skewed near 0 or 1. Two standard corrections:

    - the logit scale (delta method): Y = logit X, Σ_Y = D Σ D with D = diag(1/(X(1 − X))); the
      winner is the same (logit is increasing), so the selection event is unchanged, and every
      bound maps back through expit;
    - Σ_Y is scaled by (t_{G−1, 1−α/2} / z_{1−α/2})², so that with one candidate the interval is
      the t interval with G − 1 df (the df of a covariance estimated from G vignettes).

    Candidates whose rate is 0 are left out (on the logit scale they impose no bound on the
    winner). Raises :class:`EstimationError` when the winner's rate is 1 or every rate is 0 (no logit
    interval).
    The estimates and covariance of the result stay on the logit scale; every estimate and
    interval of the winner is a rate.

    Validated against
    -----------------
    Seeded coverage simulations with Σ estimated (tests/test_selection.py,
    ``_coverage_estimated_sigma``; figures in docs/leakage.md).
    """
    from dataclasses import replace

    from scipy import stats

    x = np.asarray(estimates.estimates, dtype=float)
    keep = x > 0
    if not keep.any():
        raise EstimationError(
            "every candidate lost every contest on the selection pool (every rate is 0): the winner's rate "
            "has no logit-scale interval and no selection to correct; add vignettes or contests"
        )
    if np.max(x) >= 1:
        raise EstimationError(
            f"the winner {estimates.candidates[int(np.argmax(x))]!r} won every contest on the selection pool: "
            "no logit-scale interval for its rate exists; add vignettes or contests"
        )
    names = tuple(n for n, k in zip(estimates.candidates, keep) if k)
    x = x[keep]
    derivative = 1.0 / (x * (1.0 - x))
    alpha = 1.0 - level
    g = estimates.n_clusters
    small_g = (stats.t.ppf(1 - alpha / 2, g - 1) / stats.norm.ppf(1 - alpha / 2)) ** 2
    covariance = estimates.covariance[np.ix_(keep, keep)] * np.outer(derivative, derivative) * small_g
    logit = np.log(x / (1.0 - x))
    result = winner_inference(logit, covariance, candidates=names, level=level, beta=beta, seed=seed, n_draws=n_draws)

    def rate(value):
        return float(special.expit(value))

    def interval(pair):
        return rate(pair[0]), rate(pair[1])

    top = logit[result.winner_index]
    return replace(
        result,
        naive_estimate=rate(top),
        naive_se=float(
            math.sqrt(covariance[result.winner_index, result.winner_index]) / derivative[result.winner_index]
        ),
        naive_ci=interval(result.naive_ci),
        truncation=interval(result.truncation),
        median_unbiased=rate(result.median_unbiased),
        conditional_ci=interval(result.conditional_ci),
        hybrid_estimate=rate(result.hybrid_estimate),
        hybrid_ci=interval(result.hybrid_ci),
        projection_ci=interval(result.projection_ci),
        inflation=rate(top) - rate(result.median_unbiased),
        inflation_if_equal=rate(top) - rate(top - result.inflation_if_equal),
    )


def best_of_k_inference(rates: KSystemResult, *, level: float, seed: int | np.random.Generator) -> WinnerInference:
    """AKM inference on the best of K systems (or training seeds) judged on the same contests.

    The K equal-weight win rates of :func:`honestci.audit.stats.selection.systems.k_system_winrates` and their
    vignette-clustered CR2 covariance go through :func:`candidate_winner_inference` (the logit
    scale, Σ scaled by (t_{G−1}/z)² with G the fewest vignettes any of them was judged on), the
    path the selection pool's winner takes, whose coverage with an estimated Σ is simulated in
    tests/test_selection.py.
    """
    if rates.covariance is None:
        raise EstimationError("the K-system result carries no covariance of the win rates; AKM needs one")
    table = rates.to_frame()
    estimates = CandidateEstimates(
        candidates=tuple(str(name) for name in table["system"]),
        estimates=table["estimate"].to_numpy(float),
        covariance=np.asarray(rates.covariance, dtype=float),
        n_contests=tuple(int(n) for n in table["n_contests"]),
        n_clusters=int(table["n_vignettes"].min()),
        vcov="CR2",
    )
    return candidate_winner_inference(estimates, level=level, seed=seed)


# --------------------------------------------------------------------------------------------
# The study layer


@dataclass(frozen=True)
class HeldOutReplication:
    """The winner re-evaluated on the fresh held-out pool (CR2 clustered by vignette)."""

    candidate: str
    estimate: float
    se: float
    df: float
    ci_low: float
    ci_high: float
    n_contests: int
    n_clusters: int


@dataclass(frozen=True)
class SelectionAnalysis:
    """Winner's-curse analysis of a selection among candidates, with the held-out replication.

    ``inference`` is None when no selection-corrected interval can be formed from these data
    (too few common vignettes, a winner without variance); ``inference_note`` says why.
    """

    opponent: str
    judge: str
    selection: CandidateEstimates = field(repr=False)
    inference: WinnerInference | None
    heldout: HeldOutReplication | None
    heldout_by_candidate: tuple[tuple[str, float], ...]
    policy: str | None = None
    policy_is_candidate: bool = False
    claim_uses_selection_pool: bool = False
    policy_selection_estimate: float | None = None
    policy_heldout_estimate: float | None = None
    inference_note: str | None = None

    @property
    def winner(self) -> str:
        """The candidate with the highest selection-pool estimate (the first listed among ties)."""
        return self.selection.candidates[int(np.argmax(self.selection.estimates))]

    @property
    def naive_estimate(self) -> float:
        return float(np.max(self.selection.estimates))

    @property
    def policy_is_winner(self) -> bool:
        """The claim's policy is the selected candidate (ties resolve to it: it is listed first)."""
        return self.policy_is_candidate and self.policy == self.winner

    @property
    def shrinkage(self) -> float | None:
        """Naive selection estimate of the winner minus its held-out estimate."""
        return None if self.heldout is None else self.naive_estimate - self.heldout.estimate

    def to_frame(self):
        """One row per method for the winner, plus the held-out replication row."""
        import pandas as pd

        columns = ["winner", "method", "estimate", "ci_low", "ci_high", "level", "n_candidates"]
        frame = self.inference.to_frame() if self.inference is not None else pd.DataFrame(columns=columns)
        if self.heldout is not None:
            h = self.heldout
            level = self.inference.level if self.inference is not None else math.nan
            frame = pd.concat(
                [
                    frame,
                    pd.DataFrame(
                        [
                            {
                                "winner": self.winner,
                                "method": "held-out replication (CR2, Satterthwaite)",
                                "estimate": h.estimate,
                                "ci_low": h.ci_low,
                                "ci_high": h.ci_high,
                                "level": level,
                                "n_candidates": len(self.selection.candidates),
                            }
                        ]
                    ),
                ],
                ignore_index=True,
            )
        frame["opponent"], frame["judge"] = self.opponent, self.judge
        return frame

    def __str__(self) -> str:
        return self.to_frame().to_string(index=False)

    def report_section(self) -> ReportSection:
        inf, sel = self.inference, self.selection
        lines = [
            f"{len(sel.candidates)} candidates judged against {self.opponent} by {self.judge} on the selection pool "
            f"({sel.n_clusters} common vignettes; equal-weight win rates, covariance from the vignette means); "
            f"winner {self.winner}.",
        ]
        if sel.shrinkage_reason is not None:
            lines.append(
                f"Covariance shrunk toward its diagonal (Ledoit-Wolf intensity {sel.shrinkage:.2f}): "
                f"{sel.shrinkage_reason}."
            )
        if inf is None:
            lines.append(f"No selection-corrected interval: {self.inference_note}.")
        else:
            lines.append(
                f"Naive winner estimate {inf.naive_estimate:.3f}; AKM median-unbiased {inf.median_unbiased:.3f} "
                f"(estimated inflation {inf.inflation:+.3f}; {inf.inflation_if_equal:+.3f} if all candidates were "
                f"equal); AKM hybrid {inf.level:.0%} interval [{inf.hybrid_ci[0]:.3f}, {inf.hybrid_ci[1]:.3f}]."
            )
        if self.heldout is not None:
            lines.append(
                f"Held-out replication {self.heldout.estimate:.3f} [{self.heldout.ci_low:.3f}, "
                f"{self.heldout.ci_high:.3f}] (CR2): shrinkage {self.shrinkage:+.3f} from the selection estimate."
            )
        if inf is not None and inf.tied_with:
            lines.append(
                f"The winner ties with {', '.join(inf.tied_with)} on the selection pool; tied candidates are "
                "treated as co-winners (they impose no truncation bound), so the correction is a lower bound."
            )
        if self.policy is not None:
            lines.append(
                f"Claim policy {self.policy}: "
                + (
                    ("the selected candidate; " if self.policy_is_winner else "a candidate, not the winner; ")
                    + (
                        "its evidence includes the selection pool."
                        if self.claim_uses_selection_pool
                        else "its evidence is the held-out pool only."
                    )
                    if self.policy_is_candidate
                    else "not among the candidates."
                )
            )
        table = [
            {k: (float(v) if isinstance(v, (np.floating, float)) else v) for k, v in row.items()}
            for row in self.to_frame().to_dict(orient="records")
        ]
        return ReportSection("winners_curse", "Winner's curse (selection among candidates)", tuple(lines), tuple(table))


def pool_scores(study, candidate: str, opponent: str, judge: str | None) -> tuple[ContestScores, np.ndarray, str]:
    """Contest scores of ``candidate`` vs ``opponent`` split by the pool of the candidate's response."""
    from honestci.audit.data.contests import build_contests

    contests = build_contests(study, policy=candidate, opponent=opponent, judge=judge, single_order="exclude")
    scored = contests.scores("both_orders")
    responses = study.responses.frame
    pool = dict(zip(responses["response_id"], responses["pool"]))
    response_of = dict(zip(contests.frame["contest_id"], contests.frame["policy_response"]))
    pools = scored.frame["contest_id"].map(response_of).map(pool).to_numpy(dtype=object)
    return scored, pools, contests.judge


def analyse_selection(
    study,
    opponent: str,
    judge: str | None = None,
    *,
    candidates: Sequence[str] | None = None,
    level: float = 0.95,
    beta: float | None = None,
    seed: int = DEFAULT_SEED,
    policy: str | None = None,
    claim_contests=None,
    thresholds: Thresholds = THRESHOLDS,
) -> SelectionAnalysis:
    """Winner's-curse analysis of the candidates of a study's selection pool.

    Candidates are the systems with responses in ``pool == "selection"`` (or ``candidates``);
    each is scored against ``opponent`` by ``judge`` (:func:`honestci.audit.data.contests.build_contests`, both
    orders). The selection-pool scores give X and Σ (:func:`selection_covariance`) for
    :func:`winner_inference`; the winner's held-out scores give the replication with a CR2
    interval (intercept-only OLS clustered by vignette, Satterthwaite df). With fewer common
    vignettes than ``thresholds.min_clusters`` no AKM interval is formed (``inference`` None,
    ``inference_note`` the reason).

    ``policy`` and ``claim_contests`` (the claim's ContestTable) decide whether the claim's
    evidence is the selection pool; the policy is listed first, so that a tie at the top selects it.
    """
    responses = study.responses.frame
    if "pool" not in responses or not (responses["pool"] == "selection").any():
        raise InputError(
            "the responses table has no selection pool", fix="mark candidate responses with pool = selection"
        )
    if candidates is None:
        candidates = sorted(set(responses.loc[responses["pool"] == "selection", "system"]))
    if policy is not None and policy in candidates:
        candidates = [policy, *(c for c in candidates if c != policy)]
    selection_scores, heldout_scores, used_judge = {}, {}, judge
    for name in candidates:
        scored, pools, used_judge = pool_scores(study, name, opponent, judge)
        frame = scored.frame
        sel = pools == "selection"
        selection_scores[name] = (frame.loc[sel, "score"].to_numpy(float), frame.loc[sel, "vignette_id"].to_numpy())
        held = pools == "heldout"
        heldout_scores[name] = (frame.loc[held, "score"].to_numpy(float), frame.loc[held, "vignette_id"].to_numpy())
        if not sel.any() and used_judge is not None and (pools_judged := _judged_pools(study, name, opponent, judge)):
            # judged on the selection pool, but every verdict there is invalid (left out of the scores)
            raise EstimationError(
                f"candidate {name!r} has no valid verdict on the selection pool ({pools_judged} judged contest(s), "
                "every one with an invalid verdict): no selection-corrected estimate; re-judge the invalid verdicts"
            )
    # raises without candidates, or with fewer than two common vignettes
    estimates = selection_covariance(selection_scores, max_condition=thresholds.winners_curse_max_condition)
    if used_judge is None:  # only when no candidate was scored, which selection_covariance refuses
        raise InputError("no candidate was judged", fix="give at least one candidate with selection-pool responses")
    inference, note = None, None
    if estimates.n_clusters < thresholds.min_clusters:
        note = (
            f"the candidates share {estimates.n_clusters} vignette(s) on the selection pool, fewer than "
            f"{thresholds.min_clusters}: their covariance cannot be estimated with any reliability"
        )
    else:
        try:
            inference = candidate_winner_inference(estimates, level=level, beta=beta, seed=seed)
        except EstimationError as error:
            note = str(error)
    winner = estimates.candidates[int(np.argmax(estimates.estimates))]
    heldout = _replication(winner, *heldout_scores[winner], level)
    heldout_by_candidate = tuple((n, vignette_means(*v).estimate) for n, v in heldout_scores.items() if v[0].size)

    policy_is_candidate = False
    uses_selection = False
    policy_sel = policy_held = None
    if policy is not None and policy in candidates:
        policy_is_candidate = True
        policy_sel = float(estimates.estimates[estimates.candidates.index(policy)])
        if claim_contests is not None:
            pool = dict(zip(responses["response_id"], responses["pool"]))
            claim_pools = claim_contests.frame["policy_response"].map(pool)
            uses_selection = bool((claim_pools == "selection").any())
            scored = claim_contests.scores("both_orders")
            policy_held = vignette_means(scored.values, scored.clusters).estimate if scored.values.size else None
        else:
            policy_held = dict(heldout_by_candidate).get(policy)
    return SelectionAnalysis(
        opponent,
        used_judge,
        estimates,
        inference,
        heldout,
        heldout_by_candidate,
        policy,
        policy_is_candidate,
        uses_selection,
        policy_sel,
        policy_held,
        note,
    )


def _judged_pools(study, candidate: str, opponent: str, judge: str | None) -> int:
    """Contests of ``candidate`` on the selection pool, invalid verdicts included."""
    from honestci.audit.data.contests import build_contests

    contests = build_contests(study, policy=candidate, opponent=opponent, judge=judge, single_order="exclude")
    responses = study.responses.frame
    pool = dict(zip(responses["response_id"], responses["pool"]))
    return int((contests.frame["policy_response"].map(pool) == "selection").sum())


def _replication(candidate: str, values: np.ndarray, clusters: np.ndarray, level: float) -> HeldOutReplication | None:
    """The CR2 interval of ``candidate``'s held-out rate; None without two held-out vignettes (or variation)."""
    if values.size == 0 or np.unique(clusters).size < 2:
        return None
    try:
        fit = cluster_robust_ols(np.ones(values.size), values, clusters, vcov="CR2", level=level, df="satterthwaite")
    except EstimationError:
        return None
    low, high = bound_to_space(fit.ci_low[0], fit.ci_high[0], RATE_SPACE)
    return HeldOutReplication(
        candidate,
        float(fit.coef[0]),
        float(fit.se[0]),
        float(fit.df[0]),
        low,
        high,
        int(values.size),
        fit.n_clusters,
    )


# --------------------------------------------------------------------------------------------
# The audit check


def winners_curse_check(context: AuditContext) -> SelectionAnalysis | None:
    """Winner's-curse analysis of the study's selection pool as the claim's judge judged it; None
    without a selection pool the claim's judge judged (or before anything is judged)."""
    responses = context.study.responses.frame
    if "pool" not in responses or not (responses["pool"] == "selection").any():
        return None
    # A selection pool the claim's judge never judged is no evidence about this claim.
    selection_ids = set(responses.loc[responses["pool"] == "selection", "response_id"])
    contests = context.contests
    if contests is None:  # nothing judged yet (the training pipeline's preflight)
        return None
    if contests.panel:
        raise EstimationError(
            f"the winner's-curse analysis of a panel ({', '.join(contests.panel)}) is not implemented; "
            "analyse the selection pool per judge with `honestci winners-curse`"
        )
    judgments = context.study.judgments.frame
    by_judge = judgments[judgments["judge"] == contests.judge]
    if not (by_judge["response_first"].isin(selection_ids) | by_judge["response_second"].isin(selection_ids)).any():
        return None
    spec, thresholds = context.claim.spec, context.claim.thresholds
    return analyse_selection(
        context.study,
        spec.opponent,
        contests.judge,
        level=thresholds.confidence_level,
        seed=context.seed,
        policy=spec.policy,
        claim_contests=contests,
        thresholds=thresholds,
    )
