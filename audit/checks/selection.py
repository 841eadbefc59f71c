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
from scipy import optimize, special

from honestci.audit.checks.context import AuditContext, ReportSection
from honestci.audit.errors import EstimationError, InputError
from honestci.audit.stats.cluster_robust import cluster_robust_ols
from honestci.audit.stats.random_state import resolve_rng

if TYPE_CHECKING:
    from honestci.audit.data.contests import ContestScores

DEFAULT_PROJECTION_DRAWS = 100_000


# --------------------------------------------------------------------------------------------
# Truncated-normal CDF in log space


def _log_normal_mass(lo: float, hi: float) -> float:
    """log(Φ(hi) − Φ(lo)) for lo ≤ hi, accurate in both tails.

    In the upper tail the difference of survival functions is used (Φ(hi) − Φ(lo) =
    S(lo) − S(hi)), so that a mass of 1e-300 far out in either tail is not lost to cancellation.
    """
    if hi <= lo:
        return -math.inf
    if lo > 0:  # both in the upper tail: work with survival functions
        big, small = special.log_ndtr(-lo), special.log_ndtr(-hi)
    else:
        big, small = special.log_ndtr(hi), special.log_ndtr(lo)
    if small == -math.inf:
        return float(big)
    if small >= big:  # lo and hi so close that the mass underflows
        return -math.inf
    return float(big + math.log1p(-math.exp(small - big)))


def truncated_normal_log_cdf(x: float, mean: float, sd: float, low: float, high: float) -> tuple[float, float]:
    """(log F, log(1 − F)) of N(mean, sd²) truncated to [low, high], evaluated at x ∈ [low, high].

    Both are returned because each is accurate where the other saturates (F near 1 or 0).
    """
    a, b, z = (low - mean) / sd, (high - mean) / sd, (x - mean) / sd
    total = _log_normal_mass(a, b)
    if total == -math.inf:
        # all the mass sits beyond one edge: the distribution is a point mass at that edge
        return (0.0, -math.inf) if mean <= low else (-math.inf, 0.0)
    return _log_normal_mass(a, z) - total, _log_normal_mass(z, b) - total


def _solve_truncated_quantile(x: float, sd: float, probability: float, bounds, bracket=None) -> float:
    """The mean μ at which F(x; μ) = probability for N(μ, sd²) truncated to ``bounds(μ)``.

    F decreases in μ (the truncated normal family is stochastically increasing in μ), so the root
    is bracketed by expanding a window around x by doublings of ``sd`` and then found by Brent's
    method. The comparison is made on log F for probability ≤ ½ and on log(1 − F) above ½, so
    levels such as 0.9975 are solved without cancellation.
    """
    use_lower = probability <= 0.5
    target = math.log(probability) if use_lower else math.log1p(-probability)

    def excess(mu: float) -> float:
        low, high = bounds(mu)
        log_f, log_sf = truncated_normal_log_cdf(x, mu, sd, low, high)
        # increasing in μ either way: −log F rises with μ, log(1 − F) rises with μ
        return (target - log_f) if use_lower else (log_sf - target)

    if bracket is None:
        width = sd
        left, right = x - width, x + width
        for _ in range(200):
            if excess(left) < 0 < excess(right):
                break
            width *= 2
            left, right = x - width, x + width
        else:  # pragma: no cover - the CDF always crosses; a failure here is a numerical bug
            raise EstimationError("could not bracket the truncated-normal quantile")
    else:
        left, right = bracket
        if excess(left) > 0:
            return left
        if excess(right) < 0:
            return right
    return float(optimize.brentq(excess, left, right, xtol=1e-12 * max(1.0, abs(x)) + 1e-14 * sd, maxiter=500))


# --------------------------------------------------------------------------------------------
# The numeric core


def selection_truncation(
    estimates: np.ndarray, covariance: np.ndarray, winner: int, exclude: np.ndarray | None = None
) -> tuple[float, float]:
    """Bounds [L, U] on X_k implied by k = argmax X, given Z = X − Σ_{·k} X_k / Σ_kk.

    With c_j = 1 − Σ_jk/Σ_kk: X_k ≥ Z_j/c_j for c_j > 0 (L = the max of these) and
    X_k ≤ Z_j/c_j for c_j < 0 (U = the min); c_j = 0 constrains Z only. Candidates flagged in
    ``exclude`` (ties with the winner) impose no bound. AKM (2024), Proposition 1; the same
    bounds as the authors' replication code.
    """
    sigma_kk = covariance[winner, winner]
    ratio = covariance[:, winner] / sigma_kk
    z = estimates - ratio * estimates[winner]
    c = 1.0 - ratio
    others = np.arange(len(estimates)) != winner
    if exclude is not None:
        others &= ~exclude
    tol = 1e-12
    with np.errstate(divide="ignore", invalid="ignore"):
        bound = z / c
    lower = others & (c > tol)
    upper = others & (c < -tol)
    low = float(np.max(bound[lower])) if lower.any() else -math.inf
    high = float(np.min(bound[upper])) if upper.any() else math.inf
    return low, high


@dataclass(frozen=True)
class SelectionNull:
    """Monte Carlo summaries of ξ ~ N(0, Σ) that depend on Σ only (reusable across replicates).

    ``critical_value``: c_β, the 1 − β quantile of max_j |ξ_j|/√Σ_jj (AKM's projection
    critical value). ``expected_max``: E[max_j ξ_j], the inflation of the naive winner estimate
    when all K means are equal.
    """

    beta: float
    critical_value: float
    expected_max: float
    n_draws: int
    seed: int | None


def selection_null(
    covariance, beta: float, rng: int | np.random.Generator, n_draws: int = DEFAULT_PROJECTION_DRAWS
) -> SelectionNull:
    """c_β and E[max_j ξ_j] for ξ ~ N(0, Σ), from one set of ``n_draws`` seeded draws.

    Σ may be singular (a clustered covariance of K > G candidates has rank ≤ G); draws use the
    eigen-decomposition with negative eigenvalues clipped to 0.
    """
    rng, seed = resolve_rng(rng)
    covariance = np.asarray(covariance, dtype=float)
    values, vectors = np.linalg.eigh((covariance + covariance.T) / 2)
    root = vectors * np.sqrt(np.clip(values, 0.0, None))
    sd = np.sqrt(np.diag(covariance))
    abs_max, plain_max = np.empty(n_draws), np.empty(n_draws)
    step = max(1, 2_000_000 // max(1, len(sd)))
    for start in range(0, n_draws, step):
        stop = min(n_draws, start + step)
        xi = rng.standard_normal((stop - start, len(sd))) @ root.T
        abs_max[start:stop] = np.max(np.abs(xi) / sd, axis=1)
        plain_max[start:stop] = np.max(xi, axis=1)
    return SelectionNull(beta, float(np.quantile(abs_max, 1 - beta)), float(plain_max.mean()), n_draws, seed)


@dataclass(frozen=True)
class WinnerInference:
    """Inference on the winner k̂ = argmax_k X_k of K candidates, X ~ N(μ, Σ).

    ``to_frame()`` has one row per method (naive, AKM conditional, AKM hybrid, projection) with
    the estimate and interval for μ_k̂; ``str()`` derives from it.
    """

    candidates: tuple[str, ...]
    estimates: tuple[float, ...]
    covariance: tuple[tuple[float, ...], ...] = field(repr=False)
    winner: str
    winner_index: int
    level: float
    beta: float
    naive_estimate: float
    naive_se: float
    naive_ci: tuple[float, float]
    truncation: tuple[float, float]
    tied_with: tuple[str, ...]
    median_unbiased: float
    conditional_ci: tuple[float, float]
    hybrid_estimate: float
    hybrid_ci: tuple[float, float]
    projection_ci: tuple[float, float]
    projection_critical_value: float
    inflation: float
    inflation_if_equal: float
    seed: int | None
    n_draws: int

    def to_frame(self):
        """One row per method: estimate and interval for the winner's true score."""
        import pandas as pd

        rows = [
            ("naive (selection pool, biased)", self.naive_estimate, self.naive_ci, self.level),
            ("AKM conditional (median-unbiased, equal-tailed)", self.median_unbiased, self.conditional_ci, self.level),
            ("AKM hybrid", self.hybrid_estimate, self.hybrid_ci, self.level),
            ("projection (level 1-beta, simultaneous)", self.naive_estimate, self.projection_ci, 1 - self.beta),
        ]
        return pd.DataFrame(
            [
                {
                    "winner": self.winner,
                    "method": m,
                    "estimate": e,
                    "ci_low": ci[0],
                    "ci_high": ci[1],
                    "level": lvl,
                    "n_candidates": len(self.candidates),
                }
                for m, e, ci, lvl in rows
            ]
        )

    def __str__(self) -> str:
        return self.to_frame().to_string(index=False)


def winner_inference(
    estimates: Sequence[float] | np.ndarray,
    covariance,
    *,
    candidates: Sequence[str] | None = None,
    level: float = 0.95,
    beta: float | None = None,
    seed: int | np.random.Generator = 20240101,
    n_draws: int = DEFAULT_PROJECTION_DRAWS,
    null: SelectionNull | None = None,
    tie_tolerance: float = 1e-9,
) -> WinnerInference:
    """Conditional and hybrid inference on the winner (Andrews, Kitagawa & McCloskey 2024).

    Estimand: μ_k̂, the true score of the candidate with the highest estimate, k̂ = argmax_k X_k,
    X ~ N(μ, Σ) with Σ known (here: a vignette-clustered estimate).

    Conditionally on k̂ = k and Z = X − Σ_{·k} X_k/Σ_kk, X_k ~ N(μ_k, Σ_kk) truncated to [L, U]
    (:func:`selection_truncation`). With F(x; μ) that truncated normal's CDF:

    - median-unbiased estimate: μ̂ with F(X_k; μ̂) = ½;
    - equal-tailed conditional interval: F(X_k; μ) = 1 − α/2 (lower end) and = α/2 (upper end);
    - hybrid: c_β = the 1 − β quantile of max_j |ξ_j|/√Σ_jj, ξ ~ N(0, Σ); the projection interval
      X_k ± c_β√Σ_kk; then F_H, the normal truncated to [L, U] ∩ [μ − c_β√Σ_kk, μ + c_β√Σ_kk];
      the hybrid interval solves F_H(X_k; μ) = 1 − γ/2 and γ/2 with γ = (α − β)/(1 − β), inside
      the projection interval; the hybrid estimate solves F_H = ½. β defaults to α/10.
    - naive: X_k ± z_{1−α/2}√Σ_kk, which ignores the selection.
    - inflation = X_k − μ̂ (the estimated winner's-curse bias); ``inflation_if_equal`` =
      E[max_j X_j − μ] if all K means were equal, E[max_j ξ_j], from the same draws as c_β.

    Parameters
    ----------
    estimates, covariance
        X (K) and Σ (K x K, symmetric positive semi-definite with Σ_kk > 0 for the winner).
    candidates
        Names of the K candidates (default ``c0..``).
    level
        1 − α.
    beta
        Level of the first-stage projection interval in the hybrid (default α/10).
    seed, n_draws
        Monte Carlo draws for c_β and E[max ξ] (:func:`selection_null`; recorded in the result).
    null
        A precomputed :class:`SelectionNull` for this Σ and β (simulations reuse it).
    tie_tolerance
        Candidates within this (relative) distance of the winner's estimate are ties: they impose
        no truncation bound and are listed in ``tied_with``.

    References
    ----------
    Andrews, Kitagawa & McCloskey (2024), "Inference on Winners", QJE 139(1):305–358, sections
    3–4 (conditional and hybrid inference).

    Validated against
    -----------------
    A brute-force Monte Carlo of the conditional distribution (X_k drawn with Z fixed, argmax
    recomputed; tests/test_selection.py), closed forms for K = 1 bounds, and seeded coverage
    simulations for K in {2, 16, 37}.
    """
    x = np.asarray(estimates, dtype=float).reshape(-1)
    sigma = np.asarray(covariance, dtype=float)
    k = x.size
    names = tuple(candidates) if candidates is not None else tuple(f"c{j}" for j in range(k))
    problems = []
    if k < 1 or not np.all(np.isfinite(x)):
        problems.append("estimates must be a non-empty vector of finite numbers")
    if sigma.shape != (k, k) or not np.all(np.isfinite(sigma)):
        problems.append(f"covariance must be a finite {k} x {k} matrix (got shape {sigma.shape})")
    elif not np.allclose(sigma, sigma.T, rtol=1e-8, atol=1e-14):
        problems.append("covariance must be symmetric")
    if len(names) != k:
        problems.append(f"{len(names)} candidate names for {k} estimates")
    if not 0 < level < 1:
        problems.append(f"level {level} must lie strictly between 0 and 1")
    alpha = 1 - level
    beta = alpha / 10 if beta is None else beta
    if not 0 < beta < alpha:
        problems.append(f"beta {beta} must lie strictly between 0 and alpha = {alpha:g}")
    if problems:
        raise InputError(
            "cannot run inference on the winner: " + "; ".join(problems),
            fix="pass K estimates and their K x K covariance",
        )
    winner = int(np.argmax(x))
    xk = float(x[winner])
    variance = float(sigma[winner, winner])
    if not variance > 0:
        raise EstimationError(f"the winner {names[winner]!r} has variance {variance}: no interval can be formed")
    sd = math.sqrt(variance)
    # Ties at the top (discrete win rates tie often) put X_k on the edge of its own truncation
    # set, where F(X_k) = 0 for every μ. Tied candidates are treated as co-winners: they impose
    # no bound, which understates the correction slightly; the result lists them.
    tied = np.abs(x - xk) <= tie_tolerance * max(1.0, abs(xk))
    tied[winner] = False
    low, high = selection_truncation(x, sigma, winner, exclude=tied)
    z_crit = float(special.ndtri(1 - alpha / 2))

    def fixed(mu):
        return low, high

    median = _solve_truncated_quantile(xk, sd, 0.5, fixed)
    cond_lo = _solve_truncated_quantile(xk, sd, 1 - alpha / 2, fixed)
    cond_hi = _solve_truncated_quantile(xk, sd, alpha / 2, fixed)

    if null is None:
        null = selection_null(sigma, beta, seed, n_draws)
    elif not math.isclose(null.beta, beta, rel_tol=1e-9):
        raise InputError(
            f"the precomputed null is for beta = {null.beta}, not {beta}", fix="recompute it for this beta"
        )
    c_beta = null.critical_value
    proj = (xk - c_beta * sd, xk + c_beta * sd)

    def hybrid(mu):
        return max(low, mu - c_beta * sd), min(high, mu + c_beta * sd)

    gamma = (alpha - beta) / (1 - beta)
    hyb_lo = _solve_truncated_quantile(xk, sd, 1 - gamma / 2, hybrid, bracket=proj)
    hyb_hi = _solve_truncated_quantile(xk, sd, gamma / 2, hybrid, bracket=proj)
    hyb_med = _solve_truncated_quantile(xk, sd, 0.5, hybrid, bracket=proj)

    return WinnerInference(
        candidates=names,
        estimates=tuple(map(float, x)),
        covariance=tuple(tuple(map(float, r)) for r in sigma),
        winner=names[winner],
        winner_index=winner,
        level=level,
        beta=beta,
        naive_estimate=xk,
        naive_se=sd,
        naive_ci=(xk - z_crit * sd, xk + z_crit * sd),
        truncation=(low, high),
        tied_with=tuple(names[j] for j in np.flatnonzero(tied)),
        median_unbiased=median,
        conditional_ci=(cond_lo, cond_hi),
        hybrid_estimate=hyb_med,
        hybrid_ci=(max(hyb_lo, proj[0]), min(hyb_hi, proj[1])),
        projection_ci=proj,
        projection_critical_value=c_beta,
        inflation=xk - median,
        inflation_if_equal=null.expected_max,
        seed=null.seed,
        n_draws=null.n_draws,
    )


# --------------------------------------------------------------------------------------------
# Estimates and their clustered covariance from contest scores


@dataclass(frozen=True)
class CandidateEstimates:
    """Per-candidate mean contest scores X and their vignette-clustered covariance Σ."""

    candidates: tuple[str, ...]
    estimates: np.ndarray
    covariance: np.ndarray
    n_contests: tuple[int, ...]
    n_clusters: int
    vcov: str

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
            }
        )


def selection_covariance(scores: Mapping[str, tuple[np.ndarray, np.ndarray]], vcov: str = "CR2") -> CandidateEstimates:
    """Candidates' mean scores and their covariance, clustered by vignette.

    Stacks every candidate's contest scores and fits y ~ 0 + candidate (one indicator per
    candidate) by OLS with a cluster-robust covariance clustered by vignette
    (:func:`honestci.audit.stats.cluster_robust.cluster_robust_ols`): the coefficients are the candidates' mean
    scores and the K x K covariance carries the correlation that shared vignettes induce between
    candidates, Σ_jk = Σ_g a_gj a_gk with a_g the (CR2-adjusted) per-vignette score sums.

    ``scores`` maps candidate → (scores, vignette ids).
    """
    if len(scores) < 1:
        raise InputError("no candidate scores given", fix="give at least one candidate's contest scores")
    names = tuple(scores)
    ys, groups, design_rows, counts = [], [], [], []
    for j, name in enumerate(names):
        values, clusters = (np.asarray(a) for a in scores[name])
        if values.size == 0:
            raise InputError(
                f"candidate {name!r} has no scored contests on the selection pool",
                fix="judge every candidate on the selection pool",
            )
        ys.append(values.astype(float))
        groups.append(clusters)
        onehot = np.zeros((values.size, len(names)))
        onehot[:, j] = 1.0
        design_rows.append(onehot)
        counts.append(int(values.size))
    fit = cluster_robust_ols(
        np.vstack(design_rows), np.concatenate(ys), np.concatenate(groups), vcov=vcov, df="z", coef_names=names
    )
    return CandidateEstimates(names, fit.coef.copy(), fit.vcov.copy(), tuple(counts), fit.n_clusters, vcov)


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
    """Winner's-curse analysis of a selection among candidates, with the held-out replication."""

    opponent: str
    judge: str
    selection: CandidateEstimates = field(repr=False)
    inference: WinnerInference
    heldout: HeldOutReplication | None
    heldout_by_candidate: tuple[tuple[str, float], ...]
    policy: str | None = None
    policy_is_candidate: bool = False
    claim_uses_selection_pool: bool = False
    policy_selection_estimate: float | None = None
    policy_heldout_estimate: float | None = None

    @property
    def shrinkage(self) -> float | None:
        """Naive selection estimate of the winner minus its held-out estimate."""
        return None if self.heldout is None else self.inference.naive_estimate - self.heldout.estimate

    def to_frame(self):
        """One row per method for the winner, plus the held-out replication row."""
        import pandas as pd

        frame = self.inference.to_frame()
        if self.heldout is not None:
            h = self.heldout
            frame = pd.concat(
                [
                    frame,
                    pd.DataFrame(
                        [
                            {
                                "winner": self.inference.winner,
                                "method": "held-out replication (CR2, Satterthwaite)",
                                "estimate": h.estimate,
                                "ci_low": h.ci_low,
                                "ci_high": h.ci_high,
                                "level": self.inference.level,
                                "n_candidates": len(self.inference.candidates),
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
        inf = self.inference
        lines = [
            f"{len(inf.candidates)} candidates judged against {self.opponent} by {self.judge} on the selection pool "
            f"({self.selection.n_clusters} vignettes; covariance {self.selection.vcov} clustered by vignette); "
            f"winner {inf.winner}.",
            f"Naive winner estimate {inf.naive_estimate:.3f}; AKM median-unbiased {inf.median_unbiased:.3f} "
            f"(estimated inflation {inf.inflation:+.3f}; {inf.inflation_if_equal:+.3f} if all candidates were equal).",
        ]
        if self.heldout is not None:
            lines.append(
                f"Held-out replication {self.heldout.estimate:.3f} [{self.heldout.ci_low:.3f}, "
                f"{self.heldout.ci_high:.3f}] (CR2): shrinkage {self.shrinkage:+.3f} from the selection estimate."
            )
        if inf.tied_with:
            lines.append(
                f"The winner ties with {', '.join(inf.tied_with)} on the selection pool; tied candidates are "
                "treated as co-winners (they impose no truncation bound), so the correction is a lower bound."
            )
        if self.selection.n_clusters < len(inf.candidates):
            lines.append(
                f"Only {self.selection.n_clusters} vignettes for {len(inf.candidates)} candidates: the "
                "clustered covariance is singular and noisy, so the AKM intervals are approximate."
            )
        if self.policy is not None:
            lines.append(
                f"Claim policy {self.policy}: "
                + (
                    "a candidate; "
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


def _pool_scores(study, candidate: str, opponent: str, judge: str | None) -> tuple[ContestScores, np.ndarray, str]:
    """Contest scores of ``candidate`` vs ``opponent`` split by the pool of the candidate's response."""
    from honestci.audit.data.contests import build_contests

    contests = build_contests(study, policy=candidate, opponent=opponent, judge=judge, allow_single_order=True)
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
    seed: int = 20240101,
    vcov: str = "CR2",
    policy: str | None = None,
    claim_contests=None,
) -> SelectionAnalysis:
    """Winner's-curse analysis of the candidates of a study's selection pool.

    Candidates are the systems with responses in ``pool == "selection"`` (or ``candidates``);
    each is scored against ``opponent`` by ``judge`` (:func:`honestci.audit.data.contests.build_contests`, both
    orders). The selection-pool scores give X and Σ (:func:`selection_covariance`) for
    :func:`winner_inference`; the winner's held-out scores give the replication with a CR2
    interval (intercept-only OLS clustered by vignette, Satterthwaite df).

    ``policy`` and ``claim_contests`` (the claim's ContestTable) decide whether the claim's
    evidence is the selection pool.
    """
    responses = study.responses.frame
    if "pool" not in responses or not (responses["pool"] == "selection").any():
        raise InputError(
            "the responses table has no selection pool", fix="mark candidate responses with pool = selection"
        )
    if candidates is None:
        candidates = sorted(set(responses.loc[responses["pool"] == "selection", "system"]))
    selection_scores, heldout_scores, used_judge = {}, {}, judge
    for name in candidates:
        scored, pools, used_judge = _pool_scores(study, name, opponent, judge)
        frame = scored.frame
        sel = pools == "selection"
        selection_scores[name] = (frame.loc[sel, "score"].to_numpy(float), frame.loc[sel, "vignette_id"].to_numpy())
        held = pools == "heldout"
        heldout_scores[name] = (frame.loc[held, "score"].to_numpy(float), frame.loc[held, "vignette_id"].to_numpy())
    estimates = selection_covariance(selection_scores, vcov=vcov)  # raises without candidates
    if used_judge is None:  # only when no candidate was scored, which selection_covariance refuses
        raise InputError("no candidate was judged", fix="give at least one candidate with selection-pool responses")
    inference = winner_inference(
        estimates.estimates, estimates.covariance, candidates=estimates.candidates, level=level, beta=beta, seed=seed
    )
    heldout = _replication(inference.winner, *heldout_scores[inference.winner], level)
    heldout_by_candidate = tuple((n, float(v[0].mean())) for n, v in heldout_scores.items() if v[0].size)

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
            policy_held = float(scored.values.mean()) if scored.values.size else None
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
    )


def _replication(candidate: str, values: np.ndarray, clusters: np.ndarray, level: float) -> HeldOutReplication | None:
    if values.size == 0:
        return None
    try:
        fit = cluster_robust_ols(np.ones(values.size), values, clusters, vcov="CR2", level=level, df="satterthwaite")
    except EstimationError:
        return None
    return HeldOutReplication(
        candidate,
        float(fit.coef[0]),
        float(fit.se[0]),
        float(fit.df[0]),
        float(fit.ci_low[0]),
        float(fit.ci_high[0]),
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
        policy=spec.policy,
        claim_contests=contests,
    )
