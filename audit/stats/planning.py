"""Planning an evaluation: how many vignettes × contests per vignette the bar gate needs.

Truth (the coverage study's model, :mod:`honestci.audit.stats.estimands`): vignette logits
η_v = μ + σZ_v, both orders judged, first-position bias b, tie half-width t, μ solved so that the
new-vignette rate θ_new equals the planned rate X. Per contest the score s ∈ {0, ½, 1} has, given
the vignette, mean p(η) and variance v(η) = E[s² | η] − p(η)² with
E[s² | η] = W₁W₂ + ¼(1 − W₁W₂ − L₁L₂). The two variance components, by Gauss–Hermite quadrature:

    V_b = Var_Z[p(μ + σZ)]        (between vignettes),     V_w = E_Z[v(μ + σZ)]   (within).

The ICC of contest scores is V_b / (V_b + V_w) (what :func:`~honestci.audit.stats.design_effect.icc_oneway`
estimates); a stated ICC is turned into σ by solving that equation (:func:`sd_for_icc`), a stated
tie share (of judged orders) into t by :func:`~honestci.audit.stats.estimands.tie_share`.

Fast approximation of the gate's power for G vignettes × m contests (θ̂ = (1/G) Σ ȳ_g has variance
(V_b + V_w/m)/G under the design, whatever the population):

* new vignettes: the gate's CI-low is taken as the one-sample t bound θ̂ − t_(G−1) · SE, so the
  power is the noncentral-t tail P(T_(G−1, δ) ≥ t_(G−1, 1−α/2)), δ = (X − bar) / √((V_b + V_w/m)/G)
  (the classical power of the one-sample t test; Cohen 1988, ch. 2);
* these vignettes: the stratified interval's SE is within-vignette only,
  SE_w = √(E_Z[max(v, p(1−p)/2)] / (Gm)) (its variance floor), so the power is
  Φ((X − bar − z_(1−α/2) SE_w) / √((V_b + V_w/m)/G)).

The gate for new vignettes reads a posterior (:mod:`honestci.audit.stats.bayes_grid`), which is
conservative where the data cannot pin σ down, so the approximation is only a starting point:
:func:`simulated_power` runs the real gate interval on data from the coverage study's simulator
(:func:`~honestci.audit.stats.coverage_study.simulate_scores`), and :func:`calibrate_vignettes`
searches G by simulation. Cost of a design = contests, plus an optional cost per vignette in
contest units.

Validated against: the binomial/normal closed form at σ = 0 (tests/test_planning.py), and the
recommended designs' simulated power against the target (docs/methods.md, "Planning").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
from scipy import optimize, stats
from scipy.special import expit

from honestci.audit.errors import InputError
from honestci.audit.policy import GATE_METHOD_FOR_POPULATION, THRESHOLDS, Thresholds, clears_bar
from honestci.audit.stats.coverage_study import simulate_scores
from honestci.audit.stats.estimands import location_for_rate, standard_normal_nodes, tie_share, vignette_means
from honestci.audit.stats.winrate import winrate_ci

#: Quadrature nodes of the variance components (smooth integrands, as for the truth).
_NODES = 96
#: Largest number of vignettes the analytic search considers.
MAX_VIGNETTES = 100_000
#: Judged orders per contest: the planner plans both-order designs (the simulator judges both).
TRIALS = 2


@dataclass(frozen=True)
class Truth:
    """What the plan assumes: new-vignette rate, vignette logit sd, tie half-width, order bias."""

    rate: float
    sd: float
    tie_halfwidth: float = 0.0
    order_bias: float = 0.0

    def __post_init__(self) -> None:
        problems = []
        if not 0.0 < self.rate < 1.0:
            problems.append(f"rate {self.rate!r} must lie in (0, 1)")
        if not (math.isfinite(self.sd) and self.sd >= 0):
            problems.append(f"sd {self.sd!r} must be a finite number >= 0")
        if not (math.isfinite(self.tie_halfwidth) and self.tie_halfwidth >= 0):
            problems.append(f"tie half-width {self.tie_halfwidth!r} must be >= 0")
        if problems:
            raise InputError("Cannot plan with this truth: " + "; ".join(problems) + ".")

    @property
    def location(self) -> float:
        """μ: the logit location at which θ_new equals :attr:`rate`."""
        return location_for_rate(self.rate, self.sd, self.order_bias, self.tie_halfwidth)

    @property
    def ties(self) -> float:
        """Share of judged orders that are ties."""
        return max(0.0, tie_share(self.location, self.sd, self.order_bias, self.tie_halfwidth))

    def components(self) -> tuple[float, float, float]:
        """(V_b, V_w, floored V_w): between- and within-vignette variance of a contest score, and
        the within variance the stratified interval uses (floored at p(1 − p)/2)."""
        nodes, weights = standard_normal_nodes(_NODES)
        eta = self.location + self.sd * nodes
        b, t = self.order_bias, self.tie_halfwidth
        w1, w2 = expit(eta + b - t), expit(eta - b - t)
        l1, l2 = expit(-eta - b - t), expit(-eta + b - t)
        both_won, both_lost = w1 * w2, l1 * l2
        half = 1.0 - both_won - both_lost
        p = both_won + 0.5 * half
        within = both_won + 0.25 * half - p**2
        mean = float(np.dot(weights, p))
        between = float(np.dot(weights, (p - mean) ** 2))
        floored = float(np.dot(weights, np.maximum(within, p * (1.0 - p) / TRIALS)))
        return between, float(np.dot(weights, within)), floored

    @property
    def icc(self) -> float:
        between, within, _ = self.components()
        return between / (between + within)


def sd_for_icc(icc: float, rate: float, tie_halfwidth: float = 0.0, order_bias: float = 0.0) -> float:
    """The vignette logit sd σ at which the ICC of contest scores, V_b / (V_b + V_w), equals ``icc``."""
    if not 0.0 <= icc < 1.0:
        raise InputError(f"ICC {icc!r} must lie in [0, 1).")
    if icc == 0.0:
        return 0.0

    def gap(sd: float) -> float:
        return Truth(rate, sd, tie_halfwidth, order_bias).icc - icc

    if gap(20.0) < 0:
        raise InputError(
            f"ICC {icc} is out of reach at rate {rate}: even a vignette logit sd of 20 gives {gap(20.0) + icc:.3f}.",
            fix="state the vignette logit sd (--sd) instead",
        )
    return float(optimize.brentq(gap, 0.0, 20.0, xtol=1e-8))


def halfwidth_for_ties(ties: float, rate: float, sd: float, order_bias: float = 0.0) -> float:
    """The tie half-width t at which the share of judged orders that are ties equals ``ties``."""
    if not 0.0 <= ties < 1.0:
        raise InputError(f"Tie share {ties!r} must lie in [0, 1).")
    if ties == 0.0:
        return 0.0

    def gap(t: float) -> float:
        return Truth(rate, sd, t, order_bias).ties - ties

    return float(optimize.brentq(gap, 0.0, 30.0, xtol=1e-8))


def approximate_power(
    truth: Truth,
    n_vignettes: int,
    contests: int,
    bar: float,
    population: str = "new_vignettes",
    level: float = THRESHOLDS.confidence_level,
) -> float:
    """The fast approximation of the bar gate's power (module docstring)."""
    between, within, floored = truth.components()
    sd_estimate = math.sqrt((between + within / contests) / n_vignettes)
    if population == "new_vignettes":
        df = n_vignettes - 1
        quantile = stats.t.ppf(0.5 + level / 2.0, df)
        return float(stats.nct.sf(quantile, df, (truth.rate - bar) / sd_estimate))
    gate_se = math.sqrt(floored / (n_vignettes * contests))
    quantile = stats.norm.ppf(0.5 + level / 2.0)
    return float(stats.norm.cdf((truth.rate - bar - quantile * gate_se) / sd_estimate))


def approximate_vignettes(
    truth: Truth,
    contests: int,
    bar: float,
    power: float,
    population: str = "new_vignettes",
    level: float = THRESHOLDS.confidence_level,
    min_vignettes: int = THRESHOLDS.min_clusters,
) -> int | None:
    """Smallest G ≥ ``min_vignettes`` whose approximate power reaches ``power`` (None: not by
    :data:`MAX_VIGNETTES`, e.g. a rate at or below the bar)."""

    def enough(g: int) -> bool:
        return approximate_power(truth, g, contests, bar, population, level) >= power

    if truth.rate <= bar or not enough(MAX_VIGNETTES):
        return None
    low, high = min_vignettes - 1, min_vignettes
    while not enough(high):  # doubling, then bisection: the power increases with G
        low, high = high, min(2 * high, MAX_VIGNETTES)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle, high)
    return high


# --- simulation with the real gate interval --------------------------------------------------


def _passes(args: tuple) -> bool:
    truth, location, n_vignettes, contests, bar, method, thresholds, child = args
    rng = np.random.default_rng(child)
    scores, clusters, _ = simulate_scores(
        rng,
        n_vignettes,
        contests,
        truth.sd,
        truth.rate,
        truth.tie_halfwidth,
        order_bias=truth.order_bias,
        location=location,
    )
    row = winrate_ci(
        scores,
        clusters,
        method=method,
        level=thresholds.confidence_level,
        seed=int(rng.integers(2**31)),
        thresholds=thresholds,
        trials_per_contest=TRIALS,
    )
    return row.ci_low is not None and clears_bar(row.ci_low, bar)


@dataclass(frozen=True)
class SimulatedPower:
    """Share of seeded replications in which the gate's CI-low clears the bar, with its MC-SE."""

    power: float
    reps: int
    seed: int

    @property
    def mc_se(self) -> float:
        return math.sqrt(max(self.power * (1.0 - self.power), 0.25 / self.reps) / self.reps)


def simulated_power(
    truth: Truth,
    n_vignettes: int,
    contests: int,
    bar: float,
    population: str = "new_vignettes",
    *,
    reps: int,
    seed: int,
    thresholds: Thresholds = THRESHOLDS,
    method: str | None = None,
    processes: int = 1,
) -> SimulatedPower:
    """The bar gate's power for the design by seeded simulation: each replication draws data from
    the coverage study's simulator and runs the real gate interval (``method``: default the
    policy's for ``population``). Replication i uses the i-th child of ``SeedSequence([seed, m])``
    whatever G (common random numbers: the search over G compares like with like), so the figure
    does not depend on ``processes``."""
    method = method or GATE_METHOD_FOR_POPULATION[population]
    children = np.random.SeedSequence([seed, contests]).spawn(reps)
    location = truth.location
    jobs = [(truth, location, n_vignettes, contests, bar, method, thresholds, c) for c in children]
    if processes > 1:
        from multiprocessing import get_context

        with get_context("spawn").Pool(processes) as pool:
            passed = pool.map(_passes, jobs, chunksize=max(1, reps // (4 * processes)))
    else:
        passed = [_passes(job) for job in jobs]
    return SimulatedPower(float(np.mean(passed)), reps, seed)


def calibrate_vignettes(
    truth: Truth,
    contests: int,
    bar: float,
    power: float,
    population: str = "new_vignettes",
    *,
    start: int,
    reps: int,
    seed: int,
    thresholds: Thresholds = THRESHOLDS,
    processes: int = 1,
) -> tuple[int, SimulatedPower]:
    """G whose *simulated* power reaches ``power``, searched from ``start`` (the approximation's G).

    The search brackets the target by factors of 1.25 and bisects to within 10% of G; then a
    probit curve Φ(a + b√G) (the approximation's form: its z-score is linear in √G) is fitted by
    maximum likelihood to every simulated G of the search, and G is the smallest whole number at
    which the fitted power reaches the target. The fit smooths the curve across G, but with the
    common seeds of :func:`simulated_power` every G shares one draw's luck, so the level's Monte
    Carlo error is that of ``reps`` replications, not of their sum. Returns G and its simulated
    power."""
    minimum = thresholds.min_clusters
    cache: dict[int, SimulatedPower] = {}

    def simulate(g: int) -> SimulatedPower:
        if g not in cache:
            cache[g] = simulated_power(
                truth, g, contests, bar, population, reps=reps, seed=seed, thresholds=thresholds, processes=processes
            )
        return cache[g]

    high = max(start, minimum)
    if simulate(high).power >= power:
        low = high
        while low > minimum and simulate(low).power >= power:
            high, low = low, max(minimum, math.floor(low / 1.25))
        if simulate(low).power >= power:  # the minimum itself reaches it
            return low, simulate(low)
    else:
        low = high
        while simulate(high).power < power:
            if high >= MAX_VIGNETTES:
                return high, simulate(high)
            low, high = high, min(MAX_VIGNETTES, math.ceil(high * 1.25))
    while high - low > max(1, math.floor(0.1 * high)):
        middle = (low + high) // 2
        low, high = (low, middle) if simulate(middle).power >= power else (middle, high)
    chosen = _probit_vignettes(cache, power, minimum)
    return (high, simulate(high)) if chosen is None else (chosen, simulate(chosen))


def _probit_vignettes(sims: dict[int, SimulatedPower], power: float, minimum: int) -> int | None:
    """Smallest G ≥ ``minimum`` where Φ(a + b√G), fitted to the simulated passes, reaches ``power``
    (None when the fit has no rising slope)."""
    roots = np.sqrt(np.array(sorted(sims), dtype=float))
    passes = np.array([sims[g].power * sims[g].reps for g in sorted(sims)])
    trials = np.array([sims[g].reps for g in sorted(sims)], dtype=float)

    def negative_log_likelihood(params: np.ndarray) -> float:
        z = params[0] + params[1] * roots
        return -float(np.sum(passes * stats.norm.logcdf(z) + (trials - passes) * stats.norm.logsf(z)))

    fit = optimize.minimize(negative_log_likelihood, np.array([-2.0, 1.0 / roots.mean()]), method="Nelder-Mead")
    intercept, slope = fit.x
    if not fit.success or slope <= 0:
        return None
    return max(minimum, math.ceil(((stats.norm.ppf(power) - intercept) / slope) ** 2))


# --- the plan ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Design:
    """One row of the trade-off table."""

    contests_per_vignette: int
    vignettes: int | None
    approx_power: float | None
    simulated: SimulatedPower | None = None
    #: True when G came from the simulation search rather than the approximation.
    calibrated: bool = False

    def cost(self, vignette_cost: float) -> float:
        if self.vignettes is None:
            return math.inf
        return self.vignettes * (self.contests_per_vignette + vignette_cost)


@dataclass(frozen=True)
class Plan:
    """The trade-off table (one :class:`Design` per contests-per-vignette) and the recommendation:
    the cheapest design whose power (simulated where simulated) reaches the target."""

    truth: Truth
    bar: float
    power: float
    population: str
    level: float
    method: str
    vignette_cost: float
    designs: tuple[Design, ...] = field(default_factory=tuple)

    @property
    def recommended(self) -> Design | None:
        reaching = [d for d in self.designs if d.vignettes is not None and self._reaches(d)]
        return min(reaching, key=lambda d: d.cost(self.vignette_cost), default=None)

    def _reaches(self, design: Design) -> bool:
        if design.simulated is not None:
            return design.simulated.power >= self.power - design.simulated.mc_se
        return design.approx_power is not None and design.approx_power >= self.power

    def to_frame(self):
        import pandas as pd

        rows = []
        for d in self.designs:
            rows.append(
                {
                    "contests_per_vignette": d.contests_per_vignette,
                    "vignettes": d.vignettes,
                    "total_contests": None if d.vignettes is None else d.vignettes * d.contests_per_vignette,
                    "cost": d.cost(self.vignette_cost),
                    "approx_power": d.approx_power,
                    "simulated_power": None if d.simulated is None else d.simulated.power,
                    "mc_se": None if d.simulated is None else d.simulated.mc_se,
                    "reps": None if d.simulated is None else d.simulated.reps,
                    "searched_by_simulation": d.calibrated,
                    "recommended": d is self.recommended,
                }
            )
        return pd.DataFrame(rows)


def plan_design(
    truth: Truth,
    bar: float,
    power: float = 0.8,
    population: str = "new_vignettes",
    contests: tuple[int, ...] = (2, 5, 10, 20),
    *,
    thresholds: Thresholds = THRESHOLDS,
    method: str | None = None,
    reps: int = 200,
    seed: int,
    vignette_cost: float = 0.0,
    processes: int = 1,
) -> Plan:
    """The trade-off table: for each m in ``contests`` the smallest G whose approximate power
    reaches ``power``, its simulated power (``reps`` replications; none when ``reps`` is 0), and,
    where that simulation misses the target by more than one MC-SE either way, G searched by
    simulation (:func:`calibrate_vignettes`)."""
    if not 0.0 < power < 1.0:
        raise InputError(f"Power {power!r} must lie in (0, 1).")
    if truth.rate <= bar:
        raise InputError(
            f"The planned rate {truth.rate} is not above the bar {bar}: no number of vignettes clears the bar "
            "with more than the level's error rate.",
            fix="plan for a rate above the bar",
        )
    method = method or GATE_METHOD_FOR_POPULATION[population]
    level = thresholds.confidence_level
    designs = []
    for m in contests:
        g = approximate_vignettes(truth, m, bar, power, population, level, thresholds.min_clusters)
        approx = None if g is None else approximate_power(truth, g, m, bar, population, level)
        design = Design(m, g, approx)
        if g is not None and reps > 0:
            sim = simulated_power(
                truth, g, m, bar, population, reps=reps, seed=seed, thresholds=thresholds, processes=processes
            )
            design = replace(design, simulated=sim)
            if abs(sim.power - power) > sim.mc_se:
                g, sim = calibrate_vignettes(
                    truth,
                    m,
                    bar,
                    power,
                    population,
                    start=g,
                    reps=reps,
                    seed=seed,
                    thresholds=thresholds,
                    processes=processes,
                )
                design = Design(m, g, approximate_power(truth, g, m, bar, population, level), sim, calibrated=True)
        designs.append(design)
    return Plan(truth, bar, power, population, level, method, vignette_cost, tuple(designs))


# --- from a pilot ------------------------------------------------------------------------------


def truth_from_pilot(scores, clusters, order_bias: float = 0.0) -> Truth:
    """Estimate the truth from a pilot's contest scores (both orders judged).

    X̂ = (1/G) Σ ȳ_g; the share of half scores fixes the tie half-width t (with the order bias as
    given: for the power only the score distribution matters, and ties and disagreeing orders both
    score ½); V̂_b = Var(ȳ_g) − mean(s²_g / n_g) (method of moments, floored at 0) fixes σ by
    solving V_b(σ) = V̂_b. Two passes, since t and σ depend on each other.
    """
    scores = np.asarray(scores, dtype=float)
    per = vignette_means(scores, clusters)
    if per.sizes.size < 2 or np.any(per.sizes < 2):
        raise InputError(
            "A pilot needs at least 2 vignettes with at least 2 contests each to separate the spread "
            "between vignettes from the noise within them.",
            fix="run a larger pilot, or state --rate and --sd (or --icc) instead",
        )
    rate = float(np.clip(per.estimate, 0.01, 0.99))
    _, codes = np.unique(np.asarray(clusters), return_inverse=True)
    within = np.bincount(codes, weights=(scores - per.means[codes]) ** 2) / (per.sizes - 1)
    between = max(0.0, float(np.var(per.means, ddof=1) - np.mean(within / per.sizes)))
    half_share = float(np.mean(scores == 0.5))
    sd, halfwidth = 0.0, 0.0
    for _ in range(2):
        halfwidth = _halfwidth_for_half_scores(half_share, rate, sd, order_bias)
        sd = _sd_for_between(between, rate, halfwidth, order_bias)
    return Truth(rate, sd, halfwidth, order_bias)


def _half_score_share(truth: Truth) -> float:
    nodes, weights = standard_normal_nodes(_NODES)
    eta = truth.location + truth.sd * nodes
    b, t = truth.order_bias, truth.tie_halfwidth
    both = expit(eta + b - t) * expit(eta - b - t) + expit(-eta - b - t) * expit(-eta + b - t)
    return float(np.dot(weights, 1.0 - both))


def _halfwidth_for_half_scores(share: float, rate: float, sd: float, order_bias: float) -> float:
    def gap(t: float) -> float:
        return _half_score_share(Truth(rate, sd, t, order_bias)) - share

    return 0.0 if gap(0.0) >= 0 else float(optimize.brentq(gap, 0.0, 30.0, xtol=1e-6))


def _sd_for_between(between: float, rate: float, halfwidth: float, order_bias: float) -> float:
    def gap(sd: float) -> float:
        return Truth(rate, sd, halfwidth, order_bias).components()[0] - between

    if between <= 0 or gap(0.0) >= 0:
        return 0.0
    return float(optimize.brentq(gap, 0.0, 10.0, xtol=1e-6)) if gap(10.0) > 0 else 10.0


# --- human labels for the judge_calibrated gate ------------------------------------------------


def observed_agreement(agreement: float, rater_accuracy: float = 1.0) -> float:
    """Agreement of the judge with a noisy human label: a·r + (1 − a)(1 − r), when the judge
    picks the truly preferred response with probability a and the rater with probability r,
    independently (two-class preferences, no ties)."""
    return agreement * rater_accuracy + (1.0 - agreement) * (1.0 - rater_accuracy)


def human_labels_needed(
    agreement: float,
    power: float = 0.8,
    *,
    rater_accuracy: float = 1.0,
    orders_per_item: int = 2,
    items_per_vignette: int = 1,
    icc: float = 0.0,
    thresholds: Thresholds = THRESHOLDS,
) -> int | None:
    """Human-labelled items for the ``judge_calibrated`` gate (agreement CI-low ≥
    ``min_judge_agreement``) to pass with probability ``power``; analytic only.

    With a = :func:`observed_agreement`, rows n = items × orders, clustered in vignettes of
    k = items_per_vignette × orders rows with intra-vignette correlation ρ of agreement, the
    clustered SE is √(a(1 − a) D / n), D = 1 + (k − 1)ρ (Kish 1965), and the gate passes with the
    one-sided normal power when n = D a(1 − a) ((z_(1−α/2) + z_power) / (a − a_min))² (Chow, Shao &
    Wang 2008, §4.1, one-sample proportion). Both orders of one item share its human label, so
    they count as a cluster of their own when ``items_per_vignette`` is 1 and ρ > 0. None when the
    observed agreement is not above the minimum. Not verified by simulation with the real
    calibration function (docs/methods.md says so).
    """
    observed = observed_agreement(agreement, rater_accuracy)
    minimum = thresholds.min_judge_agreement
    if observed <= minimum:
        return None
    quantile = stats.norm.ppf(0.5 + thresholds.confidence_level / 2.0) + stats.norm.ppf(power)
    design_effect = 1.0 + (items_per_vignette * orders_per_item - 1) * icc
    rows = design_effect * observed * (1.0 - observed) * (quantile / (observed - minimum)) ** 2
    return math.ceil(rows / orders_per_item)
