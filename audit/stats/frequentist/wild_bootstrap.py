"""Wild cluster restricted (WCR) bootstrap: p-values and test-inversion confidence intervals.

For one coefficient, or one linear contrast ``R'b``, of the OLS model ``y = X b + e`` with errors
clustered by ``clusters``. Few clusters (G = 5 ... 30) are the use case: this is the interval that
stays close to nominal where the CR1 t(G-1) interval and the cluster (pairs) bootstrap do not.

Algorithm (Roodman, MacKinnon, Nielsen & Webb 2019, "Fast and wild", section 3; the WCR "11"
bootstrap of Stata ``boottest`` and the Python ``wildboottest`` package):

1. Fit OLS, ``b_hat``; CR1 covariance ``V = c (X'X)^-1 [sum_g S_g S_g'] (X'X)^-1`` with cluster
   scores ``S_g = X_g' (y_g - X_g b_hat)`` and ``c = G/(G-1) * (n-1)/(n-k)`` (Stata's CR1, the
   small-sample factor of boottest and of wildboottest's defaults ``adj=True, cluster_adj=True``).
   ``t = (R'b_hat - theta0) / sqrt(R'VR)``.
2. Impose the null: restricted estimate ``b_r = b_hat - A R (R'AR)^-1 (R'b_hat - theta0)`` with
   ``A = (X'X)^-1``; restricted cluster scores ``s_g = X_g'(y_g - X_g b_r)``.
3. For each draw ``v`` (one weight per cluster) the bootstrap sample is
   ``y* = X b_r + v_g u_r,g``. Everything a bootstrap t needs is a function of G-vectors:
   numerator ``R'b* - theta0 = sum_h v_h C_h`` with ``C_h = R'A s_h``; the bootstrap residual
   score of cluster g projected on the contrast is ``Z_g = v_g C_g - sum_h v_h H_gh`` with
   ``H_gh = R'A X_g'X_g A s_h``; ``t* = (v'C) / sqrt(c sum_g Z_g^2)``. H has rank k
   (``H_gh = Q_g . P_h`` with ``Q_g = X_g'X_g A R``, ``P_h = A s_h``), so ``sum_h v_h H_gh = Q_g . (P v)``
   and B draws cost O(B G k), linear in G; no B x n matrix (nor G x G one) is ever formed.
4. ``b_r`` is linear in ``theta0``, hence ``C``, ``H``, the numerator and ``Z`` are too:
   ``numer(theta0) = N0 + theta0 N1`` and ``sum_g Z_g^2 = D0 + 2 theta0 D1 + theta0^2 D2``. Five
   B-vectors are computed once; after that each p-value at a new ``theta0`` costs O(B), which is
   what makes test inversion cheap (every ``theta0`` uses the SAME draws).

The CR1 factor ``c`` appears in both ``t`` and every ``t*``, so the p-value does not depend on it;
it only matters for the reported standard error.

Weights: Rademacher (+-1, each 1/2) and Webb's six-point distribution (+-sqrt(3/2), +-1,
+-sqrt(1/2), each 1/6; Webb 2014, MacKinnon & Webb 2018). When the number of distinct draws
(2^G or 6^G) is at most ``B`` (or ``B`` is None) every draw is enumerated once instead of
sampling, which makes the bootstrap p-value exact (no Monte Carlo error). Sampled draws use
``rng.choice(values, G*B).reshape(G, B)``, exactly as ``wildboottest`` does, so the same integer
seed gives the same draws in both.

References
----------
Cameron, Gelbach & Miller (2008), "Bootstrap-based improvements for inference with clustered
errors", REStat 90(3). MacKinnon & Webb (2017), "Wild bootstrap inference for wildly different
cluster sizes", JAE 32(2). MacKinnon & Webb (2018), "The wild bootstrap for few (treated)
clusters", Econometrics Journal 21(2). Webb (2014), "Reworking wild bootstrap based inference for
clustered errors", QED WP 1315. Roodman, MacKinnon, Nielsen & Webb (2019), "Fast and wild:
bootstrap inference in Stata using boottest", Stata Journal 19(1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, cast

import numpy as np

from honestci.audit.errors import EstimationError, InputError, check_level
from honestci.audit.stats.estimands import unique_inverse
from honestci.audit.stats.random_state import resolve_rng

__all__ = [
    "WEIGHT_VALUES",
    "WildBootstrapResult",
    "WildTStatistics",
    "wild_cluster_ci",
    "wild_cluster_pvalue",
    "wild_cluster_tstats",
]

#: Support points of the bootstrap weight distributions (each equally likely), in the order
#: ``wildboottest`` uses them, so that the same seed selects the same values.
WEIGHT_VALUES: dict[str, np.ndarray] = {
    "rademacher": np.array([-1.0, 1.0]),
    "webb": np.concatenate([-np.sqrt(np.array([3.0, 2.0, 1.0]) / 2), np.sqrt(np.array([1.0, 2.0, 3.0]) / 2)]),
}

#: Enumerating more draws than this is refused when ``B=None`` (memory: 40 + G bytes per draw).
MAX_ENUMERATED_DRAWS = 2**21

#: |t*| within this relative distance of |t| counts as a tie, and ties count as ">=". A draw
#: proportional to (1, ..., 1) reproduces the data up to scale, so its |t*| equals |t| up to
#: rounding error (2 such draws of 2^G for Rademacher, 6 of 6^G for Webb); counting them by the
#: sign of a rounding error would make the p-value a lottery.
TIE_RELATIVE_TOLERANCE = 1e-9

#: Sampled weight indices are drawn this many at a time (int64), then kept as int8.
_DRAWN_PER_BLOCK = 2**19
#: Floats in one G x chunk matrix of draws (2 MB: it stays in cache).
_CHUNK_ELEMENTS = 2**18

PValueType = Literal["symmetric", "equal-tailed"]
WeightsName = Literal["webb", "rademacher"]


@dataclass(frozen=True)
class _Setup:
    """The five B-vectors that give t*(theta0) for every theta0, plus the observed fit."""

    estimate: float
    se: float  # CR1 standard error of the contrast (unrestricted residuals)
    small_sample_factor: float
    numer0: np.ndarray
    numer1: np.ndarray
    denom0: np.ndarray
    denom1: np.ndarray
    denom2: np.ndarray
    n_draws: int
    enumerated: bool
    weights: str
    seed: int | None
    n: int
    n_clusters: int
    draws: np.ndarray | None  # kept only when asked for (tests, reference comparisons)

    def t_observed(self, theta0: float) -> float:
        return (self.estimate - theta0) / self.se

    def t_bootstrap(self, theta0: float) -> np.ndarray:
        numer = self.numer0 + theta0 * self.numer1
        denom = self.small_sample_factor * (self.denom0 + theta0 * (2.0 * self.denom1 + theta0 * self.denom2))
        with np.errstate(divide="ignore", invalid="ignore"):
            return numer / np.sqrt(np.maximum(denom, 0.0))

    def pvalue(self, theta0: float, pvalue_type: PValueType) -> float:
        t_obs = self.t_observed(theta0)
        if pvalue_type == "symmetric":
            # |t*| >= |t| (1 - tol)  <=>  numer^2 >= t^2 (1 - tol)^2 * c * (sum_g Z_g^2): no sqrt,
            # no division, few temporaries (this is the inner loop of the interval search).
            numer = self.numer1 * theta0
            numer += self.numer0
            np.square(numer, out=numer)
            denom = self.denom2 * theta0
            denom += 2.0 * self.denom1
            denom *= theta0
            denom += self.denom0
            denom *= (t_obs * (1.0 - TIE_RELATIVE_TOLERANCE)) ** 2 * self.small_sample_factor
            return float(np.count_nonzero(numer >= denom) / self.n_draws)
        t_star = self.t_bootstrap(theta0)
        slack = TIE_RELATIVE_TOLERANCE * abs(t_obs)
        upper = np.count_nonzero(t_star >= t_obs - slack) / self.n_draws
        lower = np.count_nonzero(t_star <= t_obs + slack) / self.n_draws
        return float(min(1.0, 2.0 * min(upper, lower)))


def _check_inputs(X, y, clusters, coef) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, np.ndarray]:
    X = np.asarray(X, dtype=float)
    if X.ndim == 1:
        X = X[:, None]
    y = np.asarray(y, dtype=float)
    clusters = np.asarray(clusters)
    if X.ndim != 2 or y.ndim != 1 or clusters.ndim != 1:
        raise InputError(
            f"X must be 2-D (n x k), y and clusters 1-D; got shapes {X.shape}, {y.shape}, {clusters.shape}.",
            fix="pass the design matrix, the outcome vector and one cluster label per row.",
        )
    n, k = X.shape
    if y.shape[0] != n or clusters.shape[0] != n:
        raise InputError(
            f"X has {n} rows but y has {y.shape[0]} and clusters has {clusters.shape[0]}.",
            fix="pass one outcome and one cluster label per row of X.",
        )
    if not (np.all(np.isfinite(X)) and np.all(np.isfinite(y))):
        raise InputError(
            "X or y contains NaN or infinite values.",
            fix="drop or impute missing rows before the audit, and report how many were dropped.",
        )
    labels, cluster_index = unique_inverse(clusters)
    if labels.size < 2:
        raise InputError(
            f"the wild cluster bootstrap needs at least 2 clusters; got {labels.size}.",
            fix="cluster by a variable with several values (e.g. vignette_id).",
        )
    if np.linalg.matrix_rank(X) < k:
        raise InputError(
            f"X (n={n}, k={k}) does not have full column rank, so the coefficient is not identified.",
            fix="drop collinear columns (e.g. a duplicated intercept).",
        )
    if isinstance(coef, (int, np.integer)) and not isinstance(coef, bool):
        if not 0 <= coef < k:
            raise InputError(
                f"coef={coef} is out of range for X with {k} columns.",
                fix=f"pass a column index in 0..{k - 1}, or a contrast vector of length {k}.",
            )
        contrast = np.zeros(k)
        contrast[coef] = 1.0
    else:
        contrast = np.asarray(coef, dtype=float).reshape(-1)
        if contrast.shape[0] != k or not np.any(contrast != 0) or not np.all(np.isfinite(contrast)):
            raise InputError(
                f"coef must be a column index or a finite, non-zero contrast of length {k}; got {coef!r}.",
                fix="pass e.g. coef=0 for the first column.",
            )
    return X, y, cluster_index.astype(np.intp), labels.size, contrast


def _draw_count(weights: str, n_clusters: int) -> int:
    return len(WEIGHT_VALUES[weights]) ** n_clusters


def _enumerated_index(base: int, n_clusters: int, n_draws: int) -> np.ndarray:
    """Every one of the base^G draws as a column of weight indices (G x draws, int8), in
    itertools.product order (cluster 0 varies slowest)."""
    index = np.arange(n_draws, dtype=np.int64)
    powers = base ** np.arange(n_clusters - 1, -1, -1, dtype=np.int64)
    return ((index[None, :] // powers[:, None]) % base).astype(np.int8)


def _setup(
    X,
    y,
    clusters,
    coef,
    weights: str,
    B: int | None,
    rng,
    keep_draws: bool = False,
) -> _Setup:
    X, y, cluster_index, n_clusters, contrast = _check_inputs(X, y, clusters, coef)
    if weights not in WEIGHT_VALUES:
        raise InputError(
            f"weights={weights!r} is not supported.",
            fix="use weights='webb' (default; six-point, for few clusters) or 'rademacher'.",
        )
    if B is not None and (isinstance(B, bool) or not isinstance(B, (int, np.integer)) or B < 1):
        raise InputError(f"B must be a positive integer or None, got {B!r}.", fix="use e.g. B=9999.")
    generator, seed = (None, None) if rng is None else resolve_rng(rng)
    n, k = X.shape
    G = n_clusters

    # Per-cluster sums X_g'X_g (G x k x k) and X_g'y_g (G x k), by bincount over rows.
    XtX_g = np.empty((G, k, k))
    for i in range(k):
        for j in range(i, k):
            XtX_g[:, i, j] = XtX_g[:, j, i] = np.bincount(cluster_index, weights=X[:, i] * X[:, j], minlength=G)
    Xty_g = np.stack([np.bincount(cluster_index, weights=X[:, i] * y, minlength=G) for i in range(k)], axis=1)
    A = np.linalg.inv(XtX_g.sum(axis=0))
    beta_hat = A @ Xty_g.sum(axis=0)

    small_sample_factor = G / (G - 1) * (n - 1) / (n - k)
    a = A @ contrast  # A R
    scores = Xty_g - XtX_g @ beta_hat  # S_g, G x k
    contrast_scores = scores @ a  # R'A S_g
    se = math.sqrt(small_sample_factor * float(contrast_scores @ contrast_scores))
    estimate = float(contrast @ beta_hat)
    if not se > 0:
        raise EstimationError(
            "the cluster-robust standard error is 0 (every cluster's residual score is zero), so no "
            "t-statistic or bootstrap interval exists; report the result as inconclusive."
        )

    # Restricted estimate b_r(theta0) = r0 + theta0 * w: linear in theta0.
    w = a / float(contrast @ a)
    restricted0 = beta_hat - w * estimate
    s0 = Xty_g - XtX_g @ restricted0  # restricted scores at theta0 = 0
    s1 = -(XtX_g @ w)  # their slope in theta0
    C0, C1 = s0 @ a, s1 @ a
    # H_gh = Q_g . (A s_h) has rank k: sum_h v_h H_gh = Q_g . (P v), so a draw costs O(G k), not O(G^2).
    Q = XtX_g @ a  # rows: X_g'X_g A R
    P0, P1 = (s0 @ A).T, (s1 @ A).T  # k x G

    values = WEIGHT_VALUES[weights]
    total = _draw_count(weights, G)
    n_draws = total if B is None else min(total, int(B))
    enumerated = n_draws == total
    if enumerated and total > MAX_ENUMERATED_DRAWS:
        raise InputError(
            f"full enumeration of {weights} weights with G={G} clusters needs {total:,} draws "
            f"(more than {MAX_ENUMERATED_DRAWS:,}).",
            fix="pass a number of draws, e.g. B=9999 (sampled draws, Monte Carlo error ~ sqrt(p(1-p)/B)).",
        )
    if enumerated:
        index = _enumerated_index(len(values), G, n_draws)
    else:
        if generator is None:
            raise InputError(
                f"{n_draws:,} {weights} draws must be sampled (6^G or 2^G = {total:,} > B) but no rng was given.",
                fix="pass rng=<int seed> (it is recorded in the result), or B=None to enumerate every draw.",
            )
        # Same stream and layout as wildboottest's rng.choice(values, G*B).reshape(G, B), drawn a
        # few clusters' rows at a time (the same numbers; 4 MB of int64 each) and kept as int8
        # (G*B bytes, not 8*G*B).
        index = np.empty((G, n_draws), dtype=np.int8)
        rows = max(1, _DRAWN_PER_BLOCK // n_draws)
        for g in range(0, G, rows):
            index[g : g + rows] = generator.integers(0, len(values), size=(min(rows, G - g), n_draws))

    # Draws are columns (G x chunk), each G x chunk matrix small enough to stay in cache; einsum
    # (no BLAS threads) sums over the clusters in order. The numerators and the sums P v come from
    # one pass over the weights: the rows of F are C0, C1, P0 and P1.
    F = np.vstack([C0, C1, P0, P1])
    out = {name: np.empty(n_draws) for name in ("numer0", "numer1", "denom0", "denom1", "denom2")}
    chunk = max(1, _CHUNK_ELEMENTS // G)
    for start in range(0, n_draws, chunk):
        stop = min(start + chunk, n_draws)
        W = values.take(index[:, start:stop])
        sums = np.einsum("fg,gb->fb", F, W)
        out["numer0"][start:stop], out["numer1"][start:stop] = sums[0], sums[1]
        Z0 = W * C0[:, None]
        Z0 -= np.einsum("gj,jb->gb", Q, sums[2 : 2 + k])
        Z1 = W * C1[:, None]
        Z1 -= np.einsum("gj,jb->gb", Q, sums[2 + k :])
        out["denom0"][start:stop] = np.einsum("gb,gb->b", Z0, Z0)
        out["denom1"][start:stop] = np.einsum("gb,gb->b", Z0, Z1)
        out["denom2"][start:stop] = np.einsum("gb,gb->b", Z1, Z1)
    kept = values[index].T if keep_draws else None

    return _Setup(
        estimate=estimate,
        se=se,
        small_sample_factor=small_sample_factor,
        n_draws=n_draws,
        enumerated=enumerated,
        weights=weights,
        seed=seed,
        n=n,
        n_clusters=G,
        draws=kept,
        **out,
    )


def _check_pvalue_type(pvalue_type: str) -> None:
    if pvalue_type not in ("symmetric", "equal-tailed"):
        raise InputError(
            f"pvalue_type={pvalue_type!r} is not supported.",
            fix="use 'symmetric' (default; share of |t*| >= |t|) or 'equal-tailed'.",
        )


@dataclass(frozen=True, eq=False)
class WildTStatistics:
    """The observed t and every bootstrap t* of one WCR test (for inspection and reference checks).

    Attributes
    ----------
    t_observed
        ``(R'b_hat - theta0) / se_CR1``.
    t_bootstrap
        One ``t*`` per draw, in draw order (enumeration: ``itertools.product`` order, cluster
        labels sorted; sampled: the order of ``rng.choice(values, G*B).reshape(G, B)`` columns).
    draws
        The weight matrix, draws x clusters.
    """

    t_observed: float
    t_bootstrap: np.ndarray
    draws: np.ndarray
    theta0: float
    weights: str
    B: int
    enumerated: bool
    seed: int | None

    def to_frame(self):
        import pandas as pd

        frame = pd.DataFrame(self.draws, columns=[f"v_{g}" for g in range(self.draws.shape[1])])
        frame.insert(0, "t_bootstrap", self.t_bootstrap)
        frame.insert(0, "draw", np.arange(self.B))
        frame.attrs.update(
            t_observed=self.t_observed,
            theta0=self.theta0,
            weights=self.weights,
            B=self.B,
            enumerated=self.enumerated,
            seed=self.seed,
        )
        return frame


def wild_cluster_tstats(
    X,
    y,
    clusters,
    coef: int | np.ndarray = 0,
    theta0: float = 0.0,
    weights: WeightsName = "webb",
    B: int | None = 9999,
    rng: int | np.random.Generator | None = None,
) -> WildTStatistics:
    """Observed and bootstrap t-statistics of the WCR test of ``R'b = theta0``.

    Same algorithm and arguments as :func:`wild_cluster_pvalue`; returns the draws and the t*
    themselves (memory O(B G)) for inspection and for comparison with other implementations.

    Validated against
    -----------------
    ``wildboottest`` 0.3.2 (``WildboottestCL`` ``t_stat`` and ``t_boot``, bootstrap type "11",
    WCR), draw by draw under full Rademacher enumeration: ``tests/test_wild_bootstrap.py``.
    """
    setup = _setup(X, y, clusters, coef, weights, B, rng, keep_draws=True)
    return WildTStatistics(
        t_observed=setup.t_observed(theta0),
        t_bootstrap=setup.t_bootstrap(theta0),
        draws=cast(np.ndarray, setup.draws),  # kept: keep_draws=True
        theta0=float(theta0),
        weights=weights,
        B=setup.n_draws,
        enumerated=setup.enumerated,
        seed=setup.seed,
    )


def wild_cluster_pvalue(
    X,
    y,
    clusters,
    coef: int | np.ndarray = 0,
    theta0: float = 0.0,
    weights: WeightsName = "webb",
    B: int | None = 9999,
    rng: int | np.random.Generator | None = None,
    pvalue_type: PValueType = "symmetric",
) -> float:
    """Wild cluster restricted bootstrap p-value of ``H0: R'b = theta0`` in ``y = X b + e``.

    symmetric:    ``p = #{ |t*_j| >= |t| } / B``
    equal-tailed: ``p = 2 min( #{t*_j >= t}, #{t*_j <= t} ) / B`` (capped at 1)

    with ``t = (R'b_hat - theta0)/se_CR1`` and ``t*_j`` the same statistic on the j-th bootstrap
    sample built from residuals restricted by the null (module docstring). Ties (relative
    difference below ``TIE_RELATIVE_TOLERANCE``) count as exceedances.

    Parameters
    ----------
    X : (n, k) array
        Design matrix (include the intercept column yourself).
    y : (n,) array
        Outcome.
    clusters : (n,) array
        Cluster label of each row (any sortable labels; clusters are ordered by sorted label).
    coef : int or (k,) array
        Column index of the tested coefficient, or a contrast vector R.
    theta0 : float
        Null value of ``R'b``.
    weights : {"webb", "rademacher"}
        Bootstrap weight distribution. Webb's six-point weights are the choice for few clusters
        (Rademacher has only 2^G distinct draws: 64 at G = 6).
    B : int or None
        Number of draws. When the number of distinct draws (2^G or 6^G) is <= B, or B is None,
        all of them are enumerated once (exact p-value) instead.
    rng : int, numpy.random.Generator or None
        Seed or generator for sampled draws; required unless every draw is enumerated.
    pvalue_type : {"symmetric", "equal-tailed"}

    Returns
    -------
    float
        The p-value.

    References
    ----------
    Cameron, Gelbach & Miller (2008); MacKinnon & Webb (2018); Roodman et al. (2019).

    Validated against
    -----------------
    ``wildboottest`` 0.3.2 (WCR "11", same seed hence same draws; Rademacher full enumeration
    draw by draw), identical p-values: ``tests/test_wild_bootstrap.py``; exactness of the
    enumerated Rademacher test for a mean (sign-flip randomization distribution).
    """
    _check_pvalue_type(pvalue_type)
    setup = _setup(X, y, clusters, coef, weights, B, rng)
    return setup.pvalue(float(theta0), pvalue_type)


@dataclass(frozen=True)
class WildBootstrapResult:
    """WCR bootstrap estimate, test-inversion confidence interval and p-value at ``null``.

    ``ci_low``/``ci_high`` are infinite when no tested value on that side is rejected (e.g.
    Rademacher weights with G <= 5, whose smallest attainable p-value 2/2^G exceeds alpha).
    """

    estimate: float
    se_cr1: float
    ci_low: float
    ci_high: float
    level: float
    null: float
    pvalue: float
    pvalue_type: str
    weights: str
    B: int
    enumerated: bool
    seed: int | None
    n: int
    n_clusters: int
    n_pvalue_evaluations: int

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "method": "wild cluster restricted bootstrap",
                    "estimate": self.estimate,
                    "se_cr1": self.se_cr1,
                    "ci_low": self.ci_low,
                    "ci_high": self.ci_high,
                    "level": self.level,
                    "null": self.null,
                    "pvalue": self.pvalue,
                    "pvalue_type": self.pvalue_type,
                    "weights": self.weights,
                    "B": self.B,
                    "enumerated": self.enumerated,
                    "seed": self.seed,
                    "n": self.n,
                    "n_clusters": self.n_clusters,
                    "n_pvalue_evaluations": self.n_pvalue_evaluations,
                }
            ]
        )

    def __str__(self) -> str:
        draws = f"all {self.B:,} draws enumerated" if self.enumerated else f"B={self.B:,}, seed={self.seed}"
        return (
            f"WCR bootstrap ({self.weights}, {draws}): estimate {self.estimate:.4f}, "
            f"{self.level:.0%} CI [{self.ci_low:.4f}, {self.ci_high:.4f}], "
            f"p(theta={self.null:g}) = {self.pvalue:.4f}; n={self.n}, G={self.n_clusters}"
        )


def _outer_crossing(
    setup: _Setup,
    alpha: float,
    direction: float,
    pvalue_type: PValueType,
    grid_points: int,
    xtol: float,
    max_doublings: int,
) -> tuple[float, int]:
    """Outermost theta0 on one side of the estimate whose p-value is >= alpha (bisected)."""
    evaluations = 0

    def accepted(theta: float) -> bool:
        nonlocal evaluations
        evaluations += 1
        return setup.pvalue(theta, pvalue_type) >= alpha

    # Bracket: double the distance from the estimate until a rejected value is found.
    distance = setup.se
    for _ in range(max_doublings):
        if not accepted(setup.estimate + direction * distance):
            break
        distance *= 2.0
    else:
        return direction * math.inf, evaluations

    # p(theta0) need not be monotone: scan a grid and keep the outermost accepted point, so the
    # reported interval is the convex hull of the confidence set within the bracket (conservative).
    offsets = np.linspace(0.0, distance, grid_points + 1)
    inner = 0.0  # the estimate itself has t = 0, hence p = 1
    for offset in offsets[1:-1]:
        if accepted(setup.estimate + direction * offset):
            inner = float(offset)
    outer = float(offsets[offsets > inner][0])
    while outer - inner > xtol:
        middle = 0.5 * (inner + outer)
        if middle in (inner, outer):  # adjacent floats far from the estimate: no finer bracket exists
            break
        if accepted(setup.estimate + direction * middle):
            inner = middle
        else:
            outer = middle
    return setup.estimate + direction * 0.5 * (inner + outer), evaluations


def wild_cluster_ci(
    X,
    y,
    clusters,
    coef: int | np.ndarray = 0,
    level: float = 0.95,
    weights: WeightsName = "webb",
    B: int | None = 9999,
    rng: int | np.random.Generator | None = None,
    null: float = 0.0,
    pvalue_type: PValueType = "symmetric",
    grid_points: int = 16,
    xtol_se: float = 1e-8,
) -> WildBootstrapResult:
    """Confidence interval for ``R'b`` by inverting the WCR bootstrap test.

    ``CI = { theta0 : p(theta0) >= 1 - level }``, with every ``theta0`` tested on the SAME draws.
    On each side of the estimate (where ``p = 1``) the search doubles the distance, starting at one
    CR1 standard error, until a rejected ``theta0`` is found; scans ``grid_points`` values in that
    bracket; and bisects between the outermost accepted and the next rejected value until the
    bracket is narrower than ``xtol_se`` standard errors. Because ``p(theta0)`` is a step function
    that need not be monotone, the interval reported is the convex hull of the confidence set
    found in the bracket (never narrower than the set itself). Roodman et al. (2019, section 3.5)
    describe the same inversion.

    Parameters
    ----------
    X, y, clusters, coef, weights, B, rng, pvalue_type
        As in :func:`wild_cluster_pvalue`.
    level : float
        Confidence level, in (0, 1).
    null : float
        Value of ``R'b`` whose p-value is reported beside the interval.
    grid_points : int
        Number of grid cells scanned in each bracket.
    xtol_se : float
        Bisection tolerance in units of the CR1 standard error.

    Returns
    -------
    WildBootstrapResult

    References
    ----------
    Roodman, MacKinnon, Nielsen & Webb (2019), "Fast and wild", Stata Journal 19(1), section 3.5;
    MacKinnon & Webb (2018).

    Validated against
    -----------------
    The interval found by bisecting ``wildboottest`` 0.3.2's own p-value (same seed, same draws;
    committed in ``tests/results/wild_bootstrap/wildboottest_ci.csv``) to within its 2.4e-7 SE
    bracket; each endpoint is a crossing of p(theta0) - alpha; seeded coverage simulations with
    G = 6 and 12 clusters of 0/0.5/1 scores (``tests/test_wild_bootstrap.py``, marker ``coverage``).
    """
    check_level(level)
    if not (isinstance(grid_points, (int, np.integer)) and grid_points >= 2):
        raise InputError(f"grid_points must be an integer >= 2, got {grid_points!r}.", fix="use the default 16.")
    _check_pvalue_type(pvalue_type)
    setup = _setup(X, y, clusters, coef, weights, B, rng)
    alpha = 1.0 - level
    xtol = xtol_se * setup.se
    low, n_low = _outer_crossing(setup, alpha, -1.0, pvalue_type, grid_points, xtol, max_doublings=60)
    high, n_high = _outer_crossing(setup, alpha, +1.0, pvalue_type, grid_points, xtol, max_doublings=60)
    return WildBootstrapResult(
        estimate=setup.estimate,
        se_cr1=setup.se,
        ci_low=low,
        ci_high=high,
        level=level,
        null=float(null),
        pvalue=setup.pvalue(float(null), pvalue_type),
        pvalue_type=pvalue_type,
        weights=weights,
        B=setup.n_draws,
        enumerated=setup.enumerated,
        seed=setup.seed,
        n=setup.n,
        n_clusters=setup.n_clusters,
        n_pvalue_evaluations=n_low + n_high + 1,
    )
