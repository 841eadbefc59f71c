"""Win rate of a policy over an opponent, with every interval method side by side.

Estimands (:mod:`honestci.audit.stats.estimands`, written once there): per contest, score 1 if the
policy wins both judged orders, 0 if it loses both, 1/2 otherwise; a vignette's rate is its
expected score, and both populations weight vignettes equally:

* ``these_vignettes`` — conditional on the observed prompts: (1/G) Σ_g E[score | g];
* ``new_vignettes`` — E_v[E[score | v]] over the population of prompts the vignettes were drawn from.

Every population interval is built on the G vignette means ȳ_g around θ̂ = (1/G) Σ_g ȳ_g, which is
unbiased for both whatever the number of contests per vignette (informative sizes included).
Clustered intervals (CR0/CR1/CR2, CR2 on the logit scale, wild and pairs cluster bootstrap) target
the new-vignette rate; the stratified interval targets these vignettes; iid intervals (on the pooled
contests) fit neither and are shown as the optimistic baseline (Wilson is what most model cards report).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from scipy import special, stats

from honestci.audit.errors import EstimationError, InputError
from honestci.audit.policy import THRESHOLDS, Thresholds, Verdict
from honestci.audit.stats.estimands import VignetteMeans, unique_inverse, vignette_means
from honestci.audit.stats.frequentist import cluster_robust, iid
from honestci.audit.stats.frequentist.design_effect import ClusteringSummary, clustering_summary
from honestci.audit.stats.intervals import RATE_SPACE, IntervalResult, IntervalTable, bound_to_space

#: Up to this many distinct wild-bootstrap draws are enumerated exactly rather than sampled.
MAX_ENUMERATED_DRAWS = 100_000
STRATIFIED_LABEL = "stratified within-vignette, Welch df"
DEFAULT_METHODS = (
    "wilson",
    "stratified",
    "cr1",
    "cr2",
    "cr2_logit",
    "wild_webb",
    "cluster_bootstrap_bca",
    "bayes_logit_normal",
)


def _sorted_codes(clusters) -> np.ndarray:
    """Cluster labels as their codes in sorted-label order (:func:`unique_inverse`); labels that
    cannot be coded (mixed types, missing, not 1-D) stay as they are, for each method to refuse."""
    try:
        return unique_inverse(clusters)[1]
    except TypeError:
        return np.asarray(clusters)


def _clustering(scores: np.ndarray, clusters: np.ndarray) -> ClusteringSummary:
    try:
        if np.ptp(scores) > 0:
            return clustering_summary(scores, clusters)
    except EstimationError:  # one vignette: no between-vignette variation to estimate
        pass
    # No variation, or one vignette: ICC and design effect are undefined, not zero.
    n_clusters = np.unique(clusters).size
    return ClusteringSummary(scores.size, n_clusters, math.nan, math.nan, math.nan, scores.size / n_clusters)


def _check_inputs(scores, clusters) -> tuple[np.ndarray, np.ndarray]:
    scores = np.asarray(scores, dtype=float)
    clusters = np.asarray(clusters)
    if scores.ndim != 1 or scores.shape != clusters.shape:
        raise InputError(
            f"scores and clusters must be 1-D arrays of one length (got {scores.shape} and {clusters.shape})."
        )
    if scores.size == 0:
        raise InputError(
            "No scored contests: there is nothing to estimate.",
            fix="check that the policy and opponent names match the responses table",
        )
    if not np.all(np.isfinite(scores)) or np.any((scores < 0) | (scores > 1)):
        raise InputError("Contest scores must lie in [0, 1] and be finite.")
    return scores, clusters


def winrate_ci(
    scores,
    clusters,
    method: str = "cr2",
    level: float = 0.95,
    *,
    seed: int | None = None,
    thresholds: Thresholds = THRESHOLDS,
    bootstrap_draws: int | None = None,
    trials_per_contest: int = 2,
) -> IntervalResult:
    """Interval for the win rate from per-contest scores, by ``method``.

    Parameters
    ----------
    scores
        Per-contest scores in {0, 1/2, 1} (or any values in [0, 1]).
    clusters
        The vignette of each contest.
    method
        One of :data:`ALL_METHODS`.
    level
        Confidence level.
    seed
        Seed of the resampling methods (recorded in the result).
    bootstrap_draws
        Draws of the resampling methods; default: every wild-bootstrap draw when there are at most
        :data:`MAX_ENUMERATED_DRAWS` of them (else 9,999), and 4,999 cluster-bootstrap draws.
    trials_per_contest
        Judged orders behind each score: 2 when both orders are judged, 1 when each contest is one
        judged order (a verdict or a preference; :attr:`ContestTable.trials_per_contest`). Used
        by the methods that model the verdicts: the posterior (trials per contest) and the
        stratified interval's variance floor p̃(1 − p̃)/m.

    Returns
    -------
    IntervalResult
        INCONCLUSIVE (no interval) for a clustered method when there are fewer than
        ``thresholds.min_clusters`` vignettes, or when the data have no variation to estimate a
        variance from; never a zero-width interval. Every interval is truncated to [0, 1], the
        rate's parameter space (:func:`honestci.audit.stats.intervals.bound_to_space`; it never
        lowers coverage).

    Notes
    -----
    iid: the score total is treated as a binomial count out of n (Wilson 1927; Agresti & Coull 1998;
    Clopper & Pearson 1934). Stratified: θ̂ = Σ w_g ȳ_g, w_g = 1/G, Var = Σ w_g² v_g/n_g with
    v_g = max(s_g², p̃_g(1 − p̃_g)/m) (m = ``trials_per_contest``), p̃_g = (n_g ȳ_g + 1)/(n_g + 2), and Welch–Satterthwaite df. Clustered: ``lm(ȳ_g ~ 1)`` on the G vignette means (one row per
    vignette, so equal vignette weight) with cluster-robust variance (CR2: Bell & McCaffrey 2002;
    Pustejovsky & Tipton 2018: here s²/G with G − 1 df); ``cr2_logit`` is the same CR2 standard error
    carried to the logit scale by the delta method, expit(logit θ̂ ± t_df · SE/(θ̂(1 − θ̂))) (the
    logit interval of R survey's ``svyciprop``; Korn & Graubard 1998), restricted wild cluster bootstrap with CI by
    test inversion (Roodman et al. 2019), pairs cluster bootstrap (Efron & Tibshirani 1993).

    Validated against: see the validation of each core module (statsmodels, R clubSandwich,
    wildboottest); ``cr2_logit`` against R survey ``svyciprop(method = "logit")`` on balanced
    clusters, where CR2 equals survey's linearisation variance; on unbalanced clusters, the
    one-sample t interval of the vignette means (scipy.stats.ttest_1samp) (tests/test_winrate.py).

    Examples
    --------
    Twelve contests on six vignettes (1 = the policy won both orders, ½ split, 0 lost both):

    >>> scores = [1, 1, 0.5, 1, 0, 1, 1, 0.5, 1, 1, 0, 1]
    >>> vignettes = ["a", "a", "b", "b", "c", "c", "d", "d", "e", "e", "f", "f"]
    >>> row = winrate_ci(scores, vignettes, method="cr2")
    >>> round(row.estimate, 3), round(row.ci_low, 3), round(row.ci_high, 3), row.df
    (0.75, 0.515, 0.985, 5.0)
    >>> gate = winrate_ci(scores, vignettes, method="bayes_logit_normal")  # what the bar gate reads
    >>> round(gate.ci_low, 3), round(gate.ci_high, 3)
    (0.405, 0.908)
    """
    scores, clusters = _check_inputs(scores, clusters)
    _check_method(method, trials_per_contest)
    contests = _Contests.of(scores, clusters)
    return _refuse_degenerate(
        _winrate_ci(contests, method, level, seed, thresholds, bootstrap_draws, trials_per_contest)
    )


def _check_method(method: str, trials_per_contest: int) -> None:
    if method not in ALL_METHODS:
        raise InputError(f"Unknown interval method {method!r}.", fix=f"use one of {list(ALL_METHODS)}")
    if trials_per_contest not in (1, 2):
        raise InputError(f"trials_per_contest is {trials_per_contest!r}.", fix="use 2 (both orders) or 1 (one order)")


@dataclass(frozen=True)
class _Contests:
    """Validated contest scores, their vignettes as codes in sorted-label order
    (:func:`_sorted_codes`), and what every method reads from them, computed once."""

    scores: np.ndarray
    clusters: np.ndarray
    info: ClusteringSummary
    per_vignette: VignetteMeans

    @classmethod
    def of(cls, scores: np.ndarray, clusters: np.ndarray) -> _Contests:
        """From checked inputs (:func:`_check_inputs`)."""
        clusters = _sorted_codes(clusters)
        info = _clustering(scores, clusters)  # refuses labels that cannot be ordered, before any method runs
        return cls(scores, clusters, info, vignette_means(scores, clusters))


def _refuse_degenerate(result: IntervalResult) -> IntervalResult:
    """The interval truncated to [0, 1] (:func:`bound_to_space`: a CR interval near a perfect
    record reaches past 1, and truncation never lowers coverage), or INCONCLUSIVE instead of an
    interval of zero width (SE = 0: e.g. Wald at p = 0, or CR when every vignette has the same
    mean) or an unbounded one (a wild bootstrap whose few distinct draws can never reject):
    neither is a statement of uncertainty a gate may read."""
    if result.bounds is None:
        return result
    low, high = result.bounds
    if math.isfinite(low) and math.isfinite(high):
        bounded = bound_to_space(low, high, RATE_SPACE)
        if bounded != (low, high):
            result = replace(result, ci_low=bounded[0], ci_high=bounded[1])
            low, high = bounded
    if not (math.isfinite(low) and math.isfinite(high)):
        reason = "the interval is unbounded: with so few vignettes this method can never reject any value"
    elif high <= low:
        reason = "the interval has zero width (standard error 0): no variance can be estimated from these data"
    else:
        return result
    return replace(
        result,
        ci_low=None,
        ci_high=None,
        verdict=Verdict.INCONCLUSIVE,
        note=f"{reason}; {result.note}" if result.note else reason,
    )


@dataclass(frozen=True)
class _Request:
    """What a method reads beside the contests: the caller's settings and the clustering figures
    every row carries (``common``)."""

    level: float
    seed: int | None
    bootstrap_draws: int | None
    trials_per_contest: int
    common: dict


def _winrate_ci(
    contests: _Contests, method, level, seed, thresholds, bootstrap_draws, trials_per_contest
) -> IntervalResult:
    info, per_vignette = contests.info, contests.per_vignette
    common = dict(
        level=level,
        n=info.n,
        n_clusters=info.n_clusters,
        icc=info.icc,
        design_effect=info.design_effect,
        n_effective=info.n_effective,
    )
    request = _Request(level, seed, bootstrap_draws, trials_per_contest, common)
    spec = METHODS[method]
    if spec.population != "new_vignettes":
        return spec.compute(method, contests, request)
    no_interval = None
    if info.n_clusters < thresholds.min_clusters:
        no_interval = (
            f"only {info.n_clusters} vignette(s); at least {thresholds.min_clusters} are needed "
            "for any interval on new vignettes"
        )
    elif np.ptp(per_vignette.means) == 0 and spec.needs_spread:
        no_interval = "every vignette has the same mean score: no between-vignette variance can be estimated"
    try:
        if no_interval is None:
            return spec.compute(method, contests, request)
    except EstimationError as exc:
        no_interval = str(exc)
    return IntervalResult(
        method,
        spec.label,
        "new_vignettes",
        per_vignette.estimate,
        None,
        None,
        verdict=Verdict.INCONCLUSIVE,
        note=no_interval,
        **common,
    )


def _iid(method: str, contests: _Contests, request: _Request) -> IntervalResult:
    """The pooled contests' score total as a binomial count (:func:`iid.proportion_ci`)."""
    scores = contests.scores
    low, high = iid.proportion_ci(float(scores.sum()), scores.size, method=method, level=request.level)
    return IntervalResult(
        method,
        METHODS[method].label,
        "iid",
        float(scores.mean()),
        low,
        high,
        note="treats contests as independent: optimistic when they share vignettes",
        **request.common,
    )


def _stratified(method: str, contests: _Contests, request: _Request) -> IntervalResult:
    """Welch–Satterthwaite interval of these vignettes' equal-weight rate (:func:`winrate_ci`'s Notes)."""
    scores, codes, common = contests.scores, contests.clusters, request.common
    trials_per_contest = request.trials_per_contest
    sizes, means = contests.per_vignette.sizes, contests.per_vignette.means
    sq = np.bincount(codes, weights=(scores - means[codes]) ** 2)
    weights = np.full(sizes.size, 1.0 / sizes.size)  # equal vignette weight (estimands)
    estimate = float(np.sum(weights * means))
    if np.any(sizes < 2):
        return IntervalResult(
            "stratified",
            STRATIFIED_LABEL,
            "these_vignettes",
            estimate,
            None,
            None,
            verdict=Verdict.INCONCLUSIVE,
            note="a vignette has fewer than 2 contests",
            **common,
        )
    # Floor each vignette's variance at the m-Bernoulli-orders value p(1 - p)/m with the plus-two
    # p = (sum + 1)/(n + 2) (Agresti & Coull 1998): a vignette won in every one of its few contests
    # otherwise claims zero variance, and near 1 the CI-low then sits above the truth in 5-7% of
    # replications instead of 2.5% (docs/methods.md).
    shrunk = (means * sizes + 1.0) / (sizes + 2.0)
    variances = np.maximum(sq / (sizes - 1), shrunk * (1.0 - shrunk) / trials_per_contest)
    parts = weights**2 * variances / sizes
    var = float(parts.sum())  # > 0: every vignette's variance is floored
    df = var**2 / float(np.sum(parts**2 / (sizes - 1)))
    half = stats.t.ppf(0.5 + common["level"] / 2, df) * math.sqrt(var)
    return IntervalResult(
        "stratified",
        STRATIFIED_LABEL,
        "these_vignettes",
        estimate,
        estimate - half,  # truncated to [0, 1] with every row (_refuse_degenerate)
        estimate + half,
        se=math.sqrt(var),
        df=df,
        note="between-vignette spread treated as fixed",
        **common,
    )


def _on_vignette_means(method: str, contests: _Contests, request: _Request):
    """One row per vignette (its mean score), each its own cluster: every clustered method then
    weights vignettes equally (estimands). The design, rows, clusters, label and level."""
    means = contests.per_vignette.means
    return np.ones((means.size, 1)), means, np.arange(means.size), METHODS[method].label, request.level


def _cluster_robust(method: str, contests: _Contests, request: _Request) -> IntervalResult:
    """CR0/CR1 with G − 1 df, CR2 with Bell–McCaffrey Satterthwaite df, and CR2 on the logit scale."""
    design, scores, clusters, label, level = _on_vignette_means(method, contests, request)
    vcov = method.removesuffix("_logit").upper()
    fit = cluster_robust.cluster_robust_ols(
        design, scores, clusters, vcov=vcov, level=level, df="satterthwaite" if vcov == "CR2" else "G-1"
    )
    if method == "cr2_logit":
        return _logit_interval(method, label, fit, request.common)
    return IntervalResult(
        method,
        label,
        "new_vignettes",
        float(fit.coef[0]),
        float(fit.ci_low[0]),
        float(fit.ci_high[0]),
        se=float(fit.se[0]),
        df=float(fit.df[0]),
        **request.common,
    )


#: The weights of each wild-bootstrap method, and the interval of each cluster-bootstrap one.
_WILD_WEIGHTS: dict[str, Literal["webb", "rademacher"]] = {"wild_webb": "webb", "wild_rademacher": "rademacher"}
_BOOTSTRAP_KINDS: dict[str, Literal["percentile", "bca"]] = {
    "cluster_bootstrap_percentile": "percentile",
    "cluster_bootstrap_bca": "bca",
}


def _wild(method: str, contests: _Contests, request: _Request) -> IntervalResult:
    """Restricted wild cluster bootstrap, the interval by test inversion (Webb or Rademacher weights)."""
    from honestci.audit.stats.frequentist.wild_bootstrap import wild_cluster_ci

    design, scores, clusters, label, level = _on_vignette_means(method, contests, request)
    common = request.common
    weights = _WILD_WEIGHTS[method]
    distinct_draws = (6 if weights == "webb" else 2) ** common["n_clusters"]
    if 2 / distinct_draws > 1 - level:  # a draw and its mirror give the same |t|
        raise EstimationError(
            f"{weights} weights on {common['n_clusters']} vignettes give {distinct_draws} distinct "
            f"draws, so no p-value falls below {2 / distinct_draws:.3f} > {1 - level:.3f}: "
            "the interval would be unbounded"
        )
    # Enumerate every draw when there are few (6^6 = 46,656 Webb draws at G = 6): exact, no seed.
    draws = request.bootstrap_draws or (None if distinct_draws <= MAX_ENUMERATED_DRAWS else 9999)
    wild = wild_cluster_ci(design, scores, clusters, coef=0, level=level, weights=weights, B=draws, rng=request.seed)
    note = "all draws enumerated" if wild.enumerated else f"B = {wild.B} draws"
    return IntervalResult(
        method,
        label,
        "new_vignettes",
        float(wild.estimate),
        float(wild.ci_low),
        float(wild.ci_high),
        note=note,
        seed=request.seed,
        **common,
    )


def _cluster_bootstrap(method: str, contests: _Contests, request: _Request) -> IntervalResult:
    """Pairs cluster bootstrap, percentile or BCa."""
    from honestci.audit.stats.frequentist.cluster_bootstrap import cluster_bootstrap_ci

    _design, scores, clusters, label, level = _on_vignette_means(method, contests, request)
    kind = _BOOTSTRAP_KINDS[method]
    result = cluster_bootstrap_ci(
        scores, clusters, method=kind, level=level, rng=request.seed, B=request.bootstrap_draws or 4999
    )
    return IntervalResult(
        method,
        label,
        "new_vignettes",
        float(result.estimate),
        float(result.ci_low),
        float(result.ci_high),
        note=f"B = {result.B}",
        seed=request.seed,
        **request.common,
    )


def _posterior_interval(method: str, contests: _Contests, request: _Request) -> IntervalResult:
    """Equal-tailed posterior interval of the new-vignette rate (:mod:`honestci.audit.stats.bayesian.grid`).

    The posterior carries the uncertainty in the vignette spread σ into the rate, which keeps the
    CI-low's one-sided error at or below nominal where vignette rates are skewed near 1 and every
    interval built from the vignette means' spread does not (docs/coverage.md). Vignettes weigh
    equally, whatever their contest counts (``rate_posterior``'s ``equal_weight``), so contest
    counts that follow quality cannot lift the CI-low. A perfect record still gets an interval:
    the prior bounds how far unseen vignettes may lie below it.
    """
    from honestci.audit.stats.bayesian.grid import rate_posterior

    clusters, common = contests.clusters, request.common
    posterior = rate_posterior(contests.scores, clusters, request.trials_per_contest)
    tail = (1.0 - common["level"]) / 2.0
    note = "posterior quantiles by quadrature; mu ~ N(0, 1.5), sigma ~ HalfNormal(1)"
    if np.ptp(np.bincount(clusters)) > 0:
        note += "; vignettes weighted equally (each at the harmonic mean size)"
    if posterior.dispersion > 1.0:
        note += f"; likelihood tempered by dispersion {posterior.dispersion:.2f}"
    return IntervalResult(
        method,
        METHODS[method].label,
        "new_vignettes",
        contests.per_vignette.estimate,
        posterior.quantile(tail),
        posterior.quantile(1.0 - tail),
        note=note,
        **common,
    )


def _logit_interval(method, label, fit, common) -> IntervalResult:
    """A cluster-robust fit's SE carried to the logit scale (delta method), the t interval mapped back by expit.

    Near a bound the sampling distribution of the mean of vignette win rates is skewed (they pile
    up against 1); a symmetric interval then puts its CI-low above the truth too often, a logit
    one much less often (docs/coverage.md).
    """
    # Scores lie in [0, 1] and vary (a constant sample is INCONCLUSIVE before any fit), so 0 < estimate < 1.
    estimate, se, df = float(fit.coef[0]), float(fit.se[0]), float(fit.df[0])
    half = stats.t.ppf(0.5 + common["level"] / 2, df) * se / (estimate * (1.0 - estimate))
    centre = math.log(estimate / (1.0 - estimate))
    low, high = (float(special.expit(centre + side * half)) for side in (-1.0, 1.0))
    return IntervalResult(
        method,
        label,
        "new_vignettes",
        estimate,
        low,
        high,
        se=se,
        df=df,
        note="asymmetric: the CR2 interval on the logit scale, mapped back",
        **common,
    )


@dataclass(frozen=True)
class IntervalMethod:
    """One interval method of :func:`winrate_ci`: the label its rows carry, the population its
    interval is about (``iid`` fits neither), and the function that computes it from the checked
    contests. A ``new_vignettes`` method runs only with at least ``min_clusters`` vignettes and,
    when ``needs_spread``, only when the vignette means vary; an :class:`EstimationError` it raises
    becomes an INCONCLUSIVE row."""

    label: str
    population: str
    compute: Callable[[str, _Contests, _Request], IntervalResult]
    needs_spread: bool = True


#: Every interval method, in the order tables list them. Adding one is its entry and its function.
METHODS = {
    "wilson": IntervalMethod("iid Wilson (optimistic)", "iid", _iid),
    "wald": IntervalMethod("iid Wald (optimistic)", "iid", _iid),
    "agresti_coull": IntervalMethod("iid Agresti-Coull (optimistic)", "iid", _iid),
    "clopper_pearson": IntervalMethod("iid Clopper-Pearson (optimistic)", "iid", _iid),
    "stratified": IntervalMethod(STRATIFIED_LABEL, "these_vignettes", _stratified),
    "cr0": IntervalMethod("CR0, t(G-1)", "new_vignettes", _cluster_robust),
    "cr1": IntervalMethod("CR1, t(G-1)", "new_vignettes", _cluster_robust),
    "cr2": IntervalMethod("CR2, Bell-McCaffrey Satterthwaite df", "new_vignettes", _cluster_robust),
    "cr2_logit": IntervalMethod(
        "CR2 on the logit scale, Bell-McCaffrey Satterthwaite df", "new_vignettes", _cluster_robust
    ),
    "wild_webb": IntervalMethod("wild cluster bootstrap (WCR, Webb)", "new_vignettes", _wild),
    "wild_rademacher": IntervalMethod("wild cluster bootstrap (WCR, Rademacher)", "new_vignettes", _wild),
    "cluster_bootstrap_percentile": IntervalMethod(
        "cluster bootstrap, percentile (under-covers at small G)", "new_vignettes", _cluster_bootstrap
    ),
    "cluster_bootstrap_bca": IntervalMethod(
        "cluster bootstrap, BCa (under-covers at small G)", "new_vignettes", _cluster_bootstrap
    ),
    # the posterior needs no spread: its prior bounds how far unseen vignettes may lie
    "bayes_logit_normal": IntervalMethod(
        "Bayesian logit-normal vignettes, posterior quantiles", "new_vignettes", _posterior_interval, needs_spread=False
    ),
}
ALL_METHODS = tuple(METHODS)
IID_METHODS = {name: method.label for name, method in METHODS.items() if method.population == "iid"}


def method_label(method: str) -> str:
    """The label a method's intervals carry in tables and reports."""
    return METHODS[method].label


def winrate_table(
    scores,
    clusters,
    methods=DEFAULT_METHODS,
    level: float = 0.95,
    *,
    seed: int = 0,
    thresholds: Thresholds = THRESHOLDS,
    trials_per_contest: int = 2,
) -> IntervalTable:
    """Every requested interval of the win rate, side by side (see :func:`winrate_ci`).

    The inputs are checked, the clusters replaced by their codes in sorted-label order (every
    method groups by sorted label, whose order the codes keep, so every figure is the same), and
    the clustering summary and vignette means computed once for every method, not once per method."""
    scores, clusters = _check_inputs(scores, clusters)
    for method in methods:
        _check_method(method, trials_per_contest)
    contests = _Contests.of(scores, clusters)
    rows = tuple(
        _refuse_degenerate(_winrate_ci(contests, m, level, seed, thresholds, None, trials_per_contest)) for m in methods
    )
    return IntervalTable(estimand="win rate", rows=rows)
