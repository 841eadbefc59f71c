"""K systems on shared vignettes: win rates, pairwise differences, Bradley–Terry strengths, rank
intervals and multiplicity control, all clustered by vignette.

Two views of the same battles, each a :class:`KSystemResult` (one row per system, one per pair):

- **Win rates against a common opponent** (:func:`k_system_winrates`). Estimand of system k:
  θ_k = E_v[p_kv], p_kv = E[contest score | v] (each vignette weighted equally; estimands.py). The
  per-vignette means ȳ_kg are stacked (G·K rows) and regressed on the K system indicators (no
  intercept), so θ̂_k = (1/G) Σ_g ȳ_kg; the covariance is CR2 clustered by vignette with
  Bell–McCaffrey/Satterthwaite df (cluster_robust.py), which carries the pairing of systems through
  shared vignettes into every difference θ_i − θ_j (a linear contrast with its own df). With two
  systems and one contest per vignette this is :func:`honestci.audit.stats.frequentist.compare.paired_difference`.
  Rates' intervals are truncated to [0, 1] and differences' to [−1, 1] (intervals.bound_to_space).
- **Bradley–Terry strengths** (:func:`bradley_terry`) of all battles (systems against each other
  and/or the opponent): logit P(a beats b) = s_a − s_b, s_reference = 0, a tie (or an
  order-inconsistent contest) a half win (quasi-binomial; Bradley & Terry 1952 with the score
  convention of Chatbot Arena rather than Davidson's 1970 tie parameter). Fitted by IRLS as a
  logistic GLM (length_bias.fit_logistic_glm) with a vignette-clustered sandwich (CR2 on the
  working model, Satterthwaite df; CR1S is statsmodels' ``cov_type="cluster"``). The estimand is
  the population BT coefficient: the s solving E_v[Σ x (y − expit(x's))] = 0.
- **Davidson (1970) ties** (``bradley_terry(..., ties="davidson")``): each contest is a win, a tie
  or a loss, P(a wins) = π_a/D, P(tie) = ν√(π_a π_b)/D, P(b wins) = π_b/D,
  D = π_a + π_b + ν√(π_a π_b), π = exp(s), s_reference = 0, log ν free. Score 1 = a wins, 0 = b wins,
  ½ = tie (an order-inconsistent contest is a tie, as under the half-win convention); other scores
  are refused. This is a multinomial logit with linear predictors (s_a, log ν + (s_a + s_b)/2, s_b),
  so the log-likelihood is concave; fitted by Newton with the analytic score and Hessian. The
  clustered covariance is the sandwich A⁻¹(Σ_g u_g u_g')A⁻¹ built, as for the GLM, by
  :func:`cluster_robust_ols` on the working least-squares problem (W_i^½ Z_i, W_i^½ Z_i θ̂ + W_i^{+½}
  (y_i − p_i)), W_i = diag(p_i) − p_i p_i', three rows per contest in its vignette's cluster: its
  Gram matrix is A and its residual scores are the u_i, so CR2 (Bell–McCaffrey on the working
  model, Satterthwaite df) and the max-|t| score bootstrap carry over unchanged. s_a − s_b is the
  log odds of a winning rather than b among decisive contests. No tie in the data: ν̂ = 0 on the
  boundary and the strengths are the logistic BT ones (ν is then fixed at 0, not estimated).

Multiplicity over the K(K − 1)/2 pairwise differences:

- Holm (1979) and Benjamini–Hochberg (1995) adjusted p-values of the CR2 t tests
  (:func:`holm`, :func:`benjamini_hochberg`).
- Single-step max-|t| by the wild cluster bootstrap (Romano & Wolf 2005; Westfall & Young 1993):
  every pair's restricted (H0: difference 0) Webb wild bootstrap t* from
  wild_bootstrap.wild_cluster_tstats on the SAME draws (one seed), c = (1 − α) quantile of
  max_pairs |t*|; adjusted p_j = #{max |t*| ≥ |t_j|}/B; simultaneous intervals d̂_j ± c·se_CR1,j.
  For BT the bootstrap runs on the GLM's working least-squares problem (a score bootstrap,
  Kline & Santos 2012).

Rank intervals (Klein, Wright & Wieczorek 2020): from the pairs declared different by the chosen
simultaneous procedure, system i's ranks (1 = best) run from 1 + #{j certainly better than i} to
K − #{j certainly worse than i}. If the procedure makes no false directional decision with
probability ≥ 1 − α, all K true ranks lie in their intervals with probability ≥ 1 − α.

References
----------
Bradley & Terry (1952), Biometrika 39:324. Davidson (1970), JASA 65:317. Holm (1979), Scand. J.
Statist. 6:65. Benjamini & Hochberg (1995), JRSS-B 57:289. Romano & Wolf (2005), Econometrica
73:1237. Klein, Wright & Wieczorek (2020), "A joint confidence region for an overall ranking of
populations", JRSS-C 69:589. Kline & Santos (2012), J. Econometric Methods 1:23.
Pustejovsky & Tipton (2018), JBES 36:672.

Validated against
-----------------
statsmodels ``GLM(Binomial).fit(cov_type="cluster")`` (BT coefficients and CR1S covariance to
1e-6) and ``multipletests`` (Holm, BH); Davidson: scipy.optimize.minimize of an independently
written negative log-likelihood (1e-6) and a finite-difference score/Hessian sandwich (CR0, 1e-5);
seeded simulations of family-wise error, BT and Davidson strength coverage and rank-interval
coverage (tests/test_systems.py).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy import special

from honestci.audit.errors import EstimationError, InputError
from honestci.audit.policy import THRESHOLDS
from honestci.audit.stats.frequentist.cluster_robust import (
    ClusterRobustFit,
    ContrastResult,
    cluster_robust_ols,
    linear_contrast,
)
from honestci.audit.stats.frequentist.wild_bootstrap import wild_cluster_tstats
from honestci.audit.stats.intervals import DIFFERENCE_SPACE, bound_to_space
from honestci.audit.stats.judge_error.length_bias import fit_logistic_glm, logistic_working_problem
from honestci.audit.stats.random_state import resolve_rng

Simultaneous = Literal["holm", "maxt"]
SIMULTANEOUS = ("holm", "maxt")
Ties = Literal["half", "davidson"]
TIES = ("half", "davidson")
_MAX_NEWTON = 100


def holm(pvalues: Any) -> np.ndarray:
    """Holm (1979) step-down adjusted p-values: p̃_(i) = max_{j ≤ i} min(1, (m − j + 1) p_(j)).

    Validated against: statsmodels ``multipletests(p, method="holm")`` (tests/test_systems.py).
    """
    p = _pvalues(pvalues)
    m = p.size
    order = np.argsort(p, kind="stable")
    adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = adjusted
    return out


def benjamini_hochberg(pvalues: Any) -> np.ndarray:
    """Benjamini–Hochberg (1995) adjusted p-values (FDR): p̃_(i) = min_{j ≥ i} min(1, m p_(j) / j).

    Validated against: statsmodels ``multipletests(p, method="fdr_bh")`` (tests/test_systems.py).
    """
    p = _pvalues(pvalues)
    m = p.size
    order = np.argsort(p, kind="stable")
    scaled = m * p[order] / np.arange(1, m + 1)
    adjusted = np.minimum(1.0, np.minimum.accumulate(scaled[::-1])[::-1])
    out = np.empty(m)
    out[order] = adjusted
    return out


def _pvalues(pvalues: Any) -> np.ndarray:
    p = np.asarray(pvalues, dtype=float).reshape(-1)
    if p.size == 0 or not np.all((p >= 0) & (p <= 1)):
        raise InputError("p-values must be a non-empty set of numbers in [0, 1].", fix="pass the family's p-values")
    return p


@dataclass(frozen=True, eq=False)
class MaxT:
    """Single-step max-|t| over a family of contrasts by the wild cluster bootstrap (shared draws)."""

    t: np.ndarray
    se: np.ndarray
    critical: float
    p_adjusted: np.ndarray
    B: int
    seed: int


def wild_max_t(
    X: np.ndarray,
    y: np.ndarray,
    clusters: Any,
    contrasts: np.ndarray,
    *,
    level: float,
    B: int = 1999,
    rng: int | np.random.Generator = 0,
) -> MaxT:
    """Max-|t| simultaneous test of ``c_j'b = 0`` for every row c_j of ``contrasts`` in ``y = Xb + e``.

    Each contrast's t* is the restricted Webb wild cluster bootstrap t of
    :func:`honestci.audit.stats.frequentist.wild_bootstrap.wild_cluster_tstats`, every contrast on the same
    draws (one integer seed), so max_j |t*_j| has the joint null distribution of the family
    (Romano & Wolf 2005, single step). Adjusted p_j = #{b: max_l |t*_l,b| ≥ |t_j|}/B; the critical
    value c is the ``level`` quantile of max |t*|; t_j uses the CR1S standard error.
    """
    generator, seed = resolve_rng(rng)
    # One integer seed for every contrast: the same cluster weights in each bootstrap draw.
    shared = seed if seed is not None else int(generator.integers(2**31 - 1))
    fit = cluster_robust_ols(X, y, clusters, vcov="CR1S", df="z")
    t_obs, se, t_star = [], [], []
    for c in np.atleast_2d(contrasts):
        stats = wild_cluster_tstats(X, y, clusters, coef=c, theta0=0.0, weights="webb", B=B, rng=shared)
        t_star.append(np.abs(stats.t_bootstrap))
        se.append(math.sqrt(float(c @ fit.vcov @ c)))
        t_obs.append(float(c @ fit.coef) / se[-1])
    max_star = np.nan_to_num(np.max(np.vstack(t_star), axis=0), nan=np.inf)
    t_arr = np.asarray(t_obs)
    p_adj = np.array([np.count_nonzero(max_star >= abs(t) * (1 - 1e-9)) / max_star.size for t in t_arr])
    return MaxT(t_arr, np.asarray(se), float(np.quantile(max_star, level)), p_adj, int(max_star.size), shared)


@dataclass(frozen=True, eq=False)
class KSystemResult:
    """K systems' estimates with intervals and rank intervals, and every pairwise difference.

    ``to_frame()`` (one row per system: estimate, se, df, CR2 interval, point rank, rank interval)
    is the canonical table; ``pairs`` has one row per pair: the difference ``system_a − system_b``
    with its CR2 interval and p, the Holm and BH adjusted p-values, the simultaneous interval and
    adjusted p of the chosen procedure, and the decision (``a>b``, ``a<b`` or ``?``).
    """

    quantity: str
    systems: pd.DataFrame
    pairs: pd.DataFrame
    simultaneous: str
    level: float
    n: int
    n_clusters: int
    reference: str
    B: int | None = None
    seed: int | None = None
    ties: str = "half"
    #: Davidson's log ν with its CR2 interval (``ties="davidson"`` with ties in the data), else None.
    log_nu: ContrastResult | None = None
    #: The CR2 covariance of the systems' estimates, in the order of ``systems`` (win rates only).
    covariance: np.ndarray | None = field(default=None, repr=False, compare=False)

    def to_frame(self) -> pd.DataFrame:
        return self.systems.copy()

    @property
    def nu(self) -> tuple[float, float, float] | None:
        """Davidson's tie parameter ν̂ and its interval (exp of log ν's); (0, nan, nan) with no tie."""
        if self.ties != "davidson":
            return None
        if self.log_nu is None:
            return 0.0, math.nan, math.nan
        r = self.log_nu
        return math.exp(r.estimate), math.exp(r.ci_low), math.exp(r.ci_high)

    def summary_lines(self) -> list[str]:
        how = (
            f"max-|t| wild cluster bootstrap (Webb, B={self.B}, seed={self.seed})"
            if self.simultaneous == "maxt"
            else "Holm-adjusted CR2 t tests"
        )
        return [
            f"{self.quantity}: {len(self.systems)} systems, n = {self.n} rows on G = {self.n_clusters} vignettes "
            f"({self.reference}); CR2 intervals with Satterthwaite df at level {self.level:g}",
            f"rank intervals (1 = best) from {how}: joint coverage of all true ranks ≥ {self.level:g}",
            *self._tie_lines(),
        ]

    def _tie_lines(self) -> list[str]:
        nu = self.nu
        if nu is None:
            return []
        if self.log_nu is None:
            return ["Davidson tie parameter ν̂ = 0: no tie in the battles (strengths are logistic BT's)"]
        return [
            f"Davidson tie parameter ν̂ = {nu[0]:.4g} [{nu[1]:.4g}, {nu[2]:.4g}] "
            f"(exp of log ν's {self.log_nu.kind} interval, df {self.log_nu.df:.1f})"
        ]

    def __str__(self) -> str:
        return "\n".join(
            [*self.summary_lines(), self.systems.to_string(index=False), self.pairs.to_string(index=False)]
        )


def rank_intervals(estimates: Any, decisions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Point ranks (1 = largest estimate) and rank intervals from pairwise decisions.

    ``decisions[i, j]`` is +1 when i is declared better than j, −1 when worse, 0 when undecided.
    Rank interval of i: [1 + #{j: decisions[j, i] = +1}, K − #{j: decisions[j, i] = −1}]
    (Klein, Wright & Wieczorek 2020).
    """
    est = np.asarray(estimates, dtype=float)
    k = est.size
    point = 1 + np.array([np.count_nonzero(est > e) for e in est])
    low = 1 + np.count_nonzero(decisions.T == 1, axis=1)
    high = k - np.count_nonzero(decisions.T == -1, axis=1)
    return point, low, high


def _compare(
    fit: ClusterRobustFit,
    names: list[str],
    contrasts: dict[tuple[str, str], np.ndarray],
    *,
    simultaneous: str,
    bootstrap_problem: tuple[np.ndarray, np.ndarray, Any] | None,
    B: int,
    rng: int | np.random.Generator | None,
    level: float,
    space: tuple[float, float] | None = None,
) -> tuple[pd.DataFrame, np.ndarray, int | None]:
    """Pairwise table and the (K x K) decision matrix of the chosen simultaneous procedure; the
    intervals (``ci_*``, ``sim_*``) truncated to the differences' parameter ``space``
    (:func:`bound_to_space`: [−1, 1] for differences of win rates, None for strengths)."""
    if simultaneous not in SIMULTANEOUS:
        raise InputError(f"simultaneous={simultaneous!r} is not supported.", fix="use 'holm' or 'maxt'")
    pairs = list(contrasts)
    rows = []
    for a, b in pairs:
        r = linear_contrast(fit, contrasts[(a, b)], level=level, label=f"{a} - {b}")
        rows.append({"system_a": a, "system_b": b, "estimate": r.estimate, "se": r.se, "df": r.df, "t": r.t})
        rows[-1].update({"p": r.p, "ci_low": r.ci_low, "ci_high": r.ci_high})
    frame = pd.DataFrame(rows)
    # Two systems with the same mean on every vignette: their difference is 0 with no variation, so
    # there is nothing to test (p = 1, undecided); a nonzero difference with no variation has no
    # clustered SE at all. "No variation" up to rounding: scores lie in [0, 1], so 1e-12 is far below
    # any real SE.
    no_variation = frame["se"].fillna(0) <= 1e-12
    same = no_variation & (frame["estimate"].abs() <= 1e-12)
    frame.loc[same, "p"] = 1.0
    degenerate = (no_variation & ~same) | frame["p"].isna()
    if degenerate.any():
        first = frame[degenerate].iloc[0]
        raise EstimationError(
            f"{first['system_a']} - {first['system_b']}: the difference {first['estimate']:+.4f} is the same on "
            "every vignette, so it has no vignette-clustered standard error and no pairwise test is honest; "
            "add vignettes or contests"
        )
    frame["p_holm"] = holm(frame["p"])
    frame["p_bh"] = benjamini_hochberg(frame["p"])
    alpha = 1 - level
    seed = None
    if simultaneous == "maxt":
        if rng is None:
            raise InputError("the max-t bootstrap needs a seed.", fix="pass rng=<int seed> (recorded in the result)")
        X, y, clusters = bootstrap_problem  # type: ignore[misc]
        maxt = wild_max_t(X, y, clusters, np.vstack([contrasts[p] for p in pairs]), level=level, B=B, rng=rng)
        seed = maxt.seed
        frame["p_simultaneous"] = maxt.p_adjusted
        frame["sim_low"] = frame["estimate"] - maxt.critical * maxt.se
        frame["sim_high"] = frame["estimate"] + maxt.critical * maxt.se
    else:
        from scipy import stats

        frame["p_simultaneous"] = frame["p_holm"]
        # Bonferroni CR2 intervals: simultaneous; Holm's decisions are never fewer than theirs.
        half = stats.t.ppf(1 - alpha / (2 * len(pairs)), frame["df"]) * frame["se"]
        frame["sim_low"], frame["sim_high"] = frame["estimate"] - half, frame["estimate"] + half
    for low, high in (("ci_low", "ci_high"), ("sim_low", "sim_high")):
        frame[low], frame[high] = bound_to_space(frame[low].to_numpy(float), frame[high].to_numpy(float), space)
    reject = frame["p_simultaneous"].to_numpy() <= alpha
    sign = np.sign(frame["estimate"].to_numpy())
    frame["decision"] = np.where(reject & (sign > 0), "a>b", np.where(reject & (sign < 0), "a<b", "?"))
    index = {name: i for i, name in enumerate(names)}
    decisions = np.zeros((len(names), len(names)), dtype=int)
    for (a, b), rej, s in zip(pairs, reject, sign):
        if rej and s != 0:
            decisions[index[a], index[b]], decisions[index[b], index[a]] = int(s), -int(s)
    return frame, decisions, seed


def _require_clusters(n_clusters: int, min_clusters: int, what: str) -> None:
    if n_clusters < max(min_clusters, 2):
        raise EstimationError(
            f"{what} rests on G = {n_clusters} vignettes, fewer than the policy's minimum of {min_clusters}: "
            "no clustered interval is trustworthy there; report the comparison as inconclusive."
        )


def k_system_winrates(
    scores: pd.DataFrame,
    *,
    opponent: str,
    level: float = THRESHOLDS.confidence_level,
    simultaneous: Simultaneous = "holm",
    B: int = 1999,
    rng: int | np.random.Generator | None = None,
    min_clusters: int = THRESHOLDS.min_clusters,
) -> KSystemResult:
    """Win rates of K systems against a common ``opponent`` on shared vignettes, every pairwise
    difference, and rank intervals.

    θ_k = (1/G_k) Σ_g ȳ_kg over the G_k vignettes system k was judged on (per-vignette mean contest
    score, each vignette weighted equally); OLS of the stacked ȳ_kg on the K system indicators with a CR2 covariance clustered by vignette and
    Satterthwaite df; differences are linear contrasts (module docstring).

    Parameters
    ----------
    scores
        One row per contest: ``system``, ``vignette_id``, ``score`` in [0, 1] (against ``opponent``).
    simultaneous
        ``"holm"`` (Holm-adjusted CR2 t; Bonferroni CR2 intervals shown) or ``"maxt"`` (wild cluster
        bootstrap max-|t|, ``B`` draws, seed ``rng``) for the rank intervals and decisions.

    Raises
    ------
    InputError
        Missing columns, or fewer than two systems.
    EstimationError
        A system judged on fewer than ``min_clusters`` vignettes, or no variation in the scores.

    Validated against
    -----------------
    compare.paired_difference (K = 2) and R clubSandwich through cluster_robust_ols; seeded
    simulations of family-wise error and rank-interval coverage (tests/test_systems.py).
    """
    _columns(scores, ("system", "vignette_id", "score"))
    means = scores.groupby(["system", "vignette_id"], sort=True)["score"].mean().unstack("vignette_id")
    names = [str(s) for s in means.index]
    if len(names) < 2:
        raise InputError("a K-system comparison needs at least two systems.", fix="name two or more systems")
    G, K = means.shape[1], len(names)
    _require_clusters(int(means.notna().sum(axis=1).min()), min_clusters, "the K-system comparison")
    # System-major stack; a vignette a system was not judged on is simply absent from its block
    # (its rate is then the mean over its own vignettes, as a leaderboard computes it).
    observed = means.notna().to_numpy().reshape(-1)
    y = means.to_numpy(float).reshape(-1)[observed]
    X = np.kron(np.eye(K), np.ones((G, 1)))[observed]
    clusters = np.tile(means.columns.to_numpy(), K)[observed]
    fit = cluster_robust_ols(X, y, clusters, vcov="CR2", level=level, df="satterthwaite", coef_names=names)
    contrasts = {(a, b): _difference(K, names.index(a), names.index(b)) for a, b in itertools.combinations(names, 2)}
    pairs, decisions, seed = _compare(
        fit,
        names,
        contrasts,
        simultaneous=simultaneous,
        bootstrap_problem=(X, y, clusters),
        B=B,
        rng=rng,
        level=level,
        space=DIFFERENCE_SPACE,
    )
    table = fit.to_frame()[["coef", "estimate", "se", "df", "ci_low", "ci_high"]].rename(columns={"coef": "system"})
    table["ci_low"], table["ci_high"] = bound_to_space(table["ci_low"].to_numpy(), table["ci_high"].to_numpy())
    table.insert(1, "n_contests", scores.groupby("system").size().reindex(names).to_numpy())
    table.insert(2, "n_vignettes", means.notna().sum(axis=1).to_numpy())
    point, low, high = rank_intervals(fit.coef, decisions)
    table["rank"], table["rank_low"], table["rank_high"] = point, low, high
    return KSystemResult(
        f"win rate against {opponent}",
        table,
        pairs,
        simultaneous,
        level,
        len(scores),
        G,
        f"common opponent {opponent}",
        B if simultaneous == "maxt" else None,
        seed,
        covariance=fit.vcov,
    )


def bradley_terry(
    battles: pd.DataFrame,
    *,
    reference: str,
    level: float = THRESHOLDS.confidence_level,
    vcov: str = "CR2",
    simultaneous: Simultaneous = "holm",
    B: int = 1999,
    rng: int | np.random.Generator | None = None,
    min_clusters: int = THRESHOLDS.min_clusters,
    ties: Ties = "half",
) -> KSystemResult:
    """Bradley–Terry strengths of every system in ``battles``, with vignette-clustered intervals,
    pairwise strength differences and rank intervals.

    logit E[y_i] = s_a(i) − s_b(i), s_reference = 0; y_i ∈ [0, 1] is a's contest score (a tie or an
    order-inconsistent contest ½). Quasi-binomial logistic GLM by IRLS with a cluster-robust
    sandwich (``vcov``: ``"CR2"`` with Satterthwaite df, or ``"CR1S"`` = statsmodels'
    ``cov_type="cluster"``). The strengths are log-odds: s_a − s_b = logit P(a beats b).

    With ``ties="davidson"`` the model is Davidson's (1970, JASA 65:317) instead:
    P(a wins) = π_a/D, P(tie) = ν√(π_a π_b)/D, P(b wins) = π_b/D, D = π_a + π_b + ν√(π_a π_b),
    π = exp(s), log ν free; maximum likelihood by Newton, and the same ``vcov`` computed on the
    multinomial working problem (module docstring; CR2 needs no other treatment). ν̂ and its
    interval are in ``result.nu`` / ``result.log_nu`` and the summary lines.

    Parameters
    ----------
    battles
        One row per contest: ``system_a``, ``system_b``, ``vignette_id``, ``score`` (a's score).
    reference
        The system whose strength is fixed at 0 (e.g. the common opponent).
    ties
        ``"half"``: a tie is half a win (quasi-binomial BT). ``"davidson"``: scores must be 0, ½
        or 1 (loss, tie, win) and ties get Davidson's parameter ν.

    Raises
    ------
    InputError
        Missing columns, an unknown reference, a system battling itself, a battle graph that
        does not connect every system to the reference, or (``ties="davidson"``) a score other
        than 0, ½ and 1.
    EstimationError
        Too few vignettes, or the fit did not converge (a system that wins or loses every battle).

    Validated against
    -----------------
    statsmodels ``GLM(y, X, family=Binomial()).fit(cov_type="cluster", cov_kwds={"groups": g})``:
    strengths and CR1S covariance to 1e-6; seeded coverage of the CR2 strength intervals.
    Davidson: scipy.optimize.minimize of an independently written negative log-likelihood (1e-6),
    a finite-difference score/Hessian sandwich (CR0, 1e-5), seeded coverage at G = 12, ν = 0.8
    (tests/test_systems.py).
    """
    if ties not in TIES:
        raise InputError(f"ties={ties!r} is not supported.", fix="use ties='half' or ties='davidson'")
    _columns(battles, ("system_a", "system_b", "vignette_id", "score"))
    a = battles["system_a"].astype(str).to_numpy()
    b = battles["system_b"].astype(str).to_numpy()
    if np.any(a == b):
        raise InputError("a battle pits a system against itself.", fix="drop battles with system_a == system_b")
    players = sorted(set(a) | set(b))
    if reference not in players:
        raise InputError(f"the reference {reference!r} fought no battle.", fix=f"use one of {players}")
    _require_connected(players, a, b)
    names = [p for p in players if p != reference]
    column = {name: i for i, name in enumerate(names)}
    X = np.zeros((len(a), len(names)))
    rows = np.arange(len(a))
    for side, sign in ((a, 1.0), (b, -1.0)):
        mask = side != reference
        X[rows[mask], [column[s] for s in side[mask]]] = sign
    y = battles["score"].to_numpy(float)
    clusters = battles["vignette_id"].to_numpy()
    G = len(pd.unique(clusters))
    _require_clusters(G, min_clusters, "the Bradley–Terry fit")
    log_nu = None
    if ties == "davidson":
        working_X, working_y, working_clusters = _davidson_working_problem(y, X, clusters)
        free_nu = working_X.shape[1] > len(names)
        fit = cluster_robust_ols(
            working_X,
            working_y,
            working_clusters,
            vcov=vcov,
            level=level,
            df="satterthwaite",
            coef_names=[*names, "log_nu"] if free_nu else names,
        )
        if free_nu:
            log_nu = linear_contrast(fit, np.eye(len(names) + 1)[-1], label="log ν")
    else:
        fit = fit_logistic_glm(y, X, clusters, vcov=vcov, df="satterthwaite", level=level, coef_names=names)
        working_X, working_y = logistic_working_problem(y, X, fit.coef)
        working_clusters = clusters
    everyone = [reference, *names]
    strengths = np.concatenate([[0.0], fit.coef[: len(names)]])

    def vector(name: str) -> np.ndarray:
        v = np.zeros(len(fit.coef))  # log ν (Davidson) takes no part in a strength contrast
        if name != reference:
            v[column[name]] = 1.0
        return v

    contrasts = {(p, q): vector(p) - vector(q) for p, q in itertools.combinations(everyone, 2)}
    pairs, decisions, seed = _compare(
        fit,
        everyone,
        contrasts,
        simultaneous=simultaneous,
        bootstrap_problem=(working_X, working_y, working_clusters),
        B=B,
        rng=rng,
        level=level,
    )
    table = fit.to_frame()[["coef", "estimate", "se", "df", "ci_low", "ci_high"]].rename(columns={"coef": "system"})
    table = table[table["system"].isin(names)]
    reference_row = {"system": reference, "estimate": 0.0, "se": 0.0, "df": math.nan, "ci_low": 0.0, "ci_high": 0.0}
    table = pd.concat([pd.DataFrame([reference_row]), table], ignore_index=True)
    counts = pd.concat([battles["system_a"], battles["system_b"]]).astype(str).value_counts()
    table.insert(1, "n_battles", counts.reindex(everyone).to_numpy())
    point, low, high = rank_intervals(strengths, decisions)
    table["rank"], table["rank_low"], table["rank_high"] = point, low, high
    quantity = (
        f"Davidson strength (log π, {vcov})" if ties == "davidson" else f"Bradley–Terry strength (log-odds, {vcov})"
    )
    return KSystemResult(
        quantity,
        table,
        pairs,
        simultaneous,
        level,
        len(battles),
        G,
        f"reference {reference} at 0",
        B if simultaneous == "maxt" else None,
        seed,
        ties,
        log_nu,
    )


def _davidson_design(y: np.ndarray, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-contest 3 x m designs Z_i (rows: a wins, tie, b wins) and outcome indicators Y_i.

    η = Z_i θ = (s_a, log ν + (s_a + s_b)/2, s_b); ``X`` holds +1 for a and −1 for b, so
    s_a = x⁺'s and s_b = x⁻'s. Without any tie the log ν column is left out (ν̂ = 0, boundary).
    """
    if not np.all(np.isin(y, (0.0, 0.5, 1.0))):
        raise InputError(
            "Davidson's model needs each contest to be a win (1), a tie (1/2) or a loss (0); "
            "some scores are in between (e.g. a judge's probability or an invalid verdict split).",
            fix="use ties='half', which takes any score in [0, 1]",
        )
    plus, minus = np.clip(X, 0, None), np.clip(-X, 0, None)
    free_nu = bool(np.any(y == 0.5))
    m = X.shape[1] + free_nu
    Z = np.zeros((len(y), 3, m))
    Z[:, 0, : X.shape[1]], Z[:, 2, : X.shape[1]] = plus, minus
    Z[:, 1, : X.shape[1]] = (plus + minus) / 2
    if free_nu:
        Z[:, 1, -1] = 1.0
    Y = np.stack([y == 1.0, y == 0.5, y == 0.0], axis=1).astype(float)
    return Z, Y


def _davidson_probabilities(Z: np.ndarray, theta: np.ndarray, free_nu: bool) -> np.ndarray:
    eta = Z @ theta
    if not free_nu:
        eta[:, 1] = -np.inf  # ν = 0: no tie has positive probability
    return special.softmax(eta, axis=1)


def _davidson_mle(Z: np.ndarray, Y: np.ndarray, free_nu: bool) -> np.ndarray:
    """Newton–Raphson on the (concave) multinomial log-likelihood Σ_i Y_i' log p_i, step-halving."""
    theta = np.zeros(Z.shape[2])
    if free_nu:
        share = float(Y[:, 1].mean())
        # ν with P(tie) = share between equal systems: ν/(2 + ν) = share.
        theta[-1] = math.log(2 * share / (1 - share)) if share < 1 else 0.0

    def loglik(t: np.ndarray) -> float:
        p = _davidson_probabilities(Z, t, free_nu)
        return float(np.sum(special.xlogy(Y, p)))

    current = loglik(theta)
    for _ in range(_MAX_NEWTON):
        p = _davidson_probabilities(Z, theta, free_nu)
        score = np.einsum("ncm,nc->m", Z, Y - p)
        weight = p[:, :, None] * np.eye(3) - p[:, :, None] * p[:, None, :]
        information = np.einsum("ncm,ncd,ndl->ml", Z, weight, Z)
        try:
            step = np.linalg.solve(information, score)
        except np.linalg.LinAlgError:
            break
        for _ in range(30):
            candidate = theta + step
            value = loglik(candidate)
            if value >= current - 1e-12 * (1 + abs(current)):
                break
            step = step / 2
        theta, current = candidate, value
        if not np.all(np.isfinite(theta)) or np.max(np.abs(theta)) > 30:
            break
        if float(np.max(np.abs(step))) <= 1e-11 * max(1.0, float(np.max(np.abs(theta)))):
            return theta
    raise EstimationError(
        "The Davidson fit did not converge (its strengths run off: a system wins or loses every battle, "
        "or every contest is a tie); no honest interval exists."
    )


def _davidson_working_problem(
    y: np.ndarray, X: np.ndarray, clusters: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Davidson MLE and its working least-squares problem (W_i^½ Z_i, W_i^½ Z_i θ̂ + W_i^{+½}(Y_i − p_i)).

    W_i = diag(p_i) − p_i p_i' (symmetric square root, pseudo-inverse on its null space, which
    Y_i − p_i never enters): the Gram matrix is the information Σ Z_i'W_i Z_i and the residual
    scores are Z_i'(Y_i − p_i), so the OLS coefficients are θ̂ and any OLS sandwich on it is the
    likelihood's. Three rows per contest, each in the contest's cluster.
    """
    Z, Y = _davidson_design(y, X)
    free_nu = Z.shape[2] > X.shape[1]
    theta = _davidson_mle(Z, Y, free_nu)
    p = _davidson_probabilities(Z, theta, free_nu)
    values, vectors = np.linalg.eigh(p[:, :, None] * np.eye(3) - p[:, :, None] * p[:, None, :])
    positive = values > 1e-13
    root_values = np.sqrt(np.where(positive, values, 0.0))
    inverse_root = np.where(positive, 1 / np.where(positive, root_values, 1.0), 0.0)
    root = np.einsum("nij,nj,nkj->nik", vectors, root_values, vectors)
    pseudo = np.einsum("nij,nj,nkj->nik", vectors, inverse_root, vectors)
    working_X = np.einsum("nij,njm->nim", root, Z)
    working_y = working_X @ theta + np.einsum("nij,nj->ni", pseudo, Y - p)
    m = Z.shape[2]
    return working_X.reshape(-1, m), working_y.reshape(-1), np.repeat(clusters, 3)


def _difference(k: int, i: int, j: int) -> np.ndarray:
    c = np.zeros(k)
    c[i], c[j] = 1.0, -1.0
    return c


def _columns(frame: pd.DataFrame, needed: tuple[str, ...]) -> None:
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise InputError(f"the table lacks column(s) {missing}.", fix=f"give columns {list(needed)}")
    if len(frame) == 0:
        raise InputError("the table has no rows.", fix="give one row per contest")


def _require_connected(players: list[str], a: np.ndarray, b: np.ndarray) -> None:
    """Every system must be linked to every other through battles, or its strength is not identified."""
    parent = {p: p for p in players}

    def root(p: str) -> str:
        while parent[p] != p:
            parent[p] = parent[parent[p]]
            p = parent[p]
        return p

    for p, q in zip(a, b):
        parent[root(p)] = root(q)
    groups = {root(p) for p in players}
    if len(groups) > 1:
        raise InputError(
            f"the battles split the systems into {len(groups)} groups that never meet, so their strengths "
            "cannot be compared.",
            fix="add battles that connect every system (e.g. each against a common opponent)",
        )
