"""Planning an evaluation: how many vignettes × contests per vignette the bar gate needs.

Truth (the coverage study's model, :mod:`honestci.audit.stats.estimands`): vignette logits
η_v = μ + σZ_v, both orders judged, first-position bias b, tie half-width t, μ solved so that the
new-vignette rate θ_new equals the planned rate X. Per contest the score s ∈ {0, ½, 1} has, given
the vignette, mean p(η) and variance v(η) = E[s² | η] − p(η)² with
E[s² | η] = W₁W₂ + ¼(1 − W₁W₂ − L₁L₂). The two variance components, by Gauss–Hermite quadrature:

    V_b = Var_Z[p(μ + σZ)]        (between vignettes),     V_w = E_Z[v(μ + σZ)]   (within).

The ICC of contest scores is V_b / (V_b + V_w) (what :func:`~honestci.audit.stats.frequentist.design_effect.icc_oneway`
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

The gate for new vignettes reads a posterior (:mod:`honestci.audit.stats.bayesian.grid`), which is
conservative where the data cannot pin σ down, so the approximation is only a starting point:
:func:`simulated_power` runs the real gate interval on data from the coverage study's simulator
(:func:`~honestci.audit.stats.design.coverage_study.simulate_scores`), and :func:`calibrate_vignettes`
searches G by simulation: independent seeds per simulated (G, batch), one probit power curve
Φ(a + b√G) fitted to them (:class:`PowerCurve`), and the recommended design checked on fresh seeds
(:func:`plan_design`). Cost of a design = contests, plus an optional cost per vignette in
contest units.

Validated against: the binomial/normal closed form at σ = 0 (tests/test_planning.py), and the
recommended designs' simulated power against the target (docs/methods.md, "Planning").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import numpy as np
from scipy import optimize, stats
from scipy.special import expit

from honestci.audit.errors import InputError
from honestci.audit.policy import GATE_METHOD_FOR_POPULATION, THRESHOLDS, Thresholds, clears_bar
from honestci.audit.stats.core_share import single_threaded_blas
from honestci.audit.stats.design.coverage_study import simulate_scores
from honestci.audit.stats.estimands import location_for_rate, standard_normal_nodes, tie_share, vignette_means
from honestci.audit.stats.frequentist.winrate import winrate_ci

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
        """V_b / (V_b + V_w); NaN when contest scores do not vary at all (every order a tie)."""
        between, within, _ = self.components()
        total = between + within
        return between / total if total > 0 else math.nan


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
    """Share of seeded replications in which the gate's CI-low clears the bar, with its MC-SE.

    Replication i of the batch used child i of ``SeedSequence([seed, m, *stream])``."""

    power: float
    reps: int
    seed: int
    vignettes: int | None = None
    stream: tuple[int, ...] = ()

    @property
    def mc_se(self) -> float:
        return math.sqrt(max(self.power * (1.0 - self.power), 0.25 / self.reps) / self.reps)

    @property
    def passes(self) -> int:
        return round(self.power * self.reps)


def _init_worker() -> None:
    global _WORKER_LIMITS
    _WORKER_LIMITS = single_threaded_blas()


_WORKER_LIMITS = None


@contextmanager
def _worker_pool(processes: int):
    """A spawned worker pool for the plan's simulations, each worker single-threaded (None: serial)."""
    if processes <= 1:
        yield None
        return
    from multiprocessing import get_context

    with get_context("spawn").Pool(processes, initializer=_init_worker) as pool:
        yield pool


class _Simulator:
    """Runs batches of replications of the real gate for one design's m, serially or on a worker
    pool shared by the whole plan (:func:`_worker_pool`). Every batch is seeded by its own
    ``SeedSequence([seed, m, *stream])``, so a figure does not depend on the pool."""

    def __init__(self, truth, contests, bar, method, thresholds, seed, pool=None):
        self.truth, self.contests, self.bar, self.method = truth, contests, bar, method
        self.thresholds, self.seed, self._pool = thresholds, seed, pool
        self.location = truth.location

    def run(self, batches: Sequence[tuple[int, tuple[int, ...], int]]) -> list[SimulatedPower]:
        """One :class:`SimulatedPower` per (G, stream, reps) batch."""
        jobs: list[tuple] = []
        for g, stream, reps in batches:
            children = np.random.SeedSequence([self.seed, self.contests, *stream]).spawn(reps)
            common = (self.truth, self.location, g, self.contests, self.bar, self.method, self.thresholds)
            jobs.extend((*common, child) for child in children)
        if self._pool is not None:
            passed = self._pool.map(_passes, jobs, chunksize=max(1, len(jobs) // 32))
        else:
            with single_threaded_blas():
                passed = [_passes(job) for job in jobs]
        out, at = [], 0
        for g, stream, reps in batches:
            out.append(SimulatedPower(float(np.mean(passed[at : at + reps])), reps, self.seed, g, stream))
            at += reps
        return out


def simulated_power(
    truth: Truth,
    n_vignettes: int,
    contests: int,
    bar: float,
    population: str = "new_vignettes",
    *,
    reps: int,
    seed: int,
    stream: tuple[int, ...] = (),
    thresholds: Thresholds = THRESHOLDS,
    method: str | None = None,
    processes: int = 1,
) -> SimulatedPower:
    """The bar gate's power for the design by seeded simulation: each replication draws data from
    the coverage study's simulator and runs the real gate interval (``method``: default the
    policy's for ``population``). Replication i uses the i-th child of
    ``SeedSequence([seed, m, *stream])``; with the default empty ``stream`` the same for every G
    (common random numbers), while the search gives every (G, batch) its own ``stream`` so that
    no two simulated designs share luck."""
    method = method or GATE_METHOD_FOR_POPULATION[population]
    with _worker_pool(processes) as pool:
        return _Simulator(truth, contests, bar, method, thresholds, seed, pool).run([(n_vignettes, stream, reps)])[0]


# --- the power curve -------------------------------------------------------------------------


@dataclass(frozen=True)
class PowerCurve:
    """The probit power curve power(G) = Φ(a + b√G), fitted by maximum likelihood (Fisher scoring)
    to pass counts simulated at several G.

    The form is the approximation's: the one-sample t test's power is about Φ(δ − z) with δ ∝ √G
    (Cohen 1988, ch. 2), so its z-score is linear in √G; fitted to points near the target it is a
    local dose-response (probit) model in √G (Finney 1971, *Probit Analysis*, ch. 3-4: the dose
    that gives a stated response, with Fieller's interval for it).
    """

    intercept: float
    slope: float
    #: Covariance of (a, b): the inverse expected information at the estimate.
    covariance: tuple[tuple[float, float], tuple[float, float]]
    points: tuple[SimulatedPower, ...]

    def _z_and_se(self, vignettes: float) -> tuple[float, float]:
        root = math.sqrt(vignettes)
        (vaa, vab), (_, vbb) = self.covariance
        return self.intercept + self.slope * root, math.sqrt(max(vaa + 2.0 * vab * root + vbb * root * root, 0.0))

    def power(self, vignettes: float) -> float:
        return float(stats.norm.cdf(self._z_and_se(vignettes)[0]))

    def power_se(self, vignettes: float) -> float:
        """Delta-method SE of the fitted power at G."""
        z, se = self._z_and_se(vignettes)
        return float(stats.norm.pdf(z) * se)

    def vignettes_at(self, power: float) -> float:
        """The (real) G at which the fitted power equals ``power``: ((Φ⁻¹(power) − a)/b)²."""
        root = (stats.norm.ppf(power) - self.intercept) / self.slope
        return max(root, 0.0) ** 2

    def vignettes_for(self, power: float, minimum: int) -> int:
        """Smallest whole G ≥ ``minimum`` whose fitted power reaches ``power``."""
        g = max(minimum, math.ceil(self.vignettes_at(power) - 1e-9))
        while self.power(g) < power:  # guards the rounding of the square
            g += 1
        return g

    def vignettes_interval(self, power: float, level: float = 0.95) -> tuple[float, float]:
        """Fieller-type interval of the G at which the power equals ``power``: the G whose fitted
        z-score's pointwise interval a + b√G ± q·se(G) contains Φ⁻¹(power) (Finney 1971, §4.5);
        an end is inf (or 0) when the fit cannot bound it within 100 × the estimate."""
        target, q = stats.norm.ppf(power), stats.norm.ppf(0.5 + level / 2.0)
        centre = math.sqrt(self.vignettes_at(power))

        def edge(side: float) -> float:
            def gap(root: float) -> float:
                z, se = self._z_and_se(root * root)
                return z + side * q * se - target

            if side > 0:  # lower end: the upper band reaches the target
                return 0.0 if gap(0.0) >= 0 else float(optimize.brentq(gap, 0.0, centre)) ** 2
            far = 10.0 * max(centre, 1.0)
            return math.inf if gap(far) < 0 else float(optimize.brentq(gap, centre, far)) ** 2

        return edge(1.0), edge(-1.0)


def fit_power_curve(points) -> PowerCurve | None:
    """Fit Φ(a + b√G) to simulated pass counts (``points``: :class:`SimulatedPower` with G set)
    by Fisher scoring (IRLS for the binomial probit GLM; McCullagh & Nelder 1989, §4.4). None when
    the points cannot fix a rising curve (fewer than two distinct G, every replication passing or
    failing, or a slope ≤ 0).

    Validated against: a known curve recovered from seeded binomial draws (tests/test_planning.py).
    """
    points = tuple(points)
    roots = np.sqrt(np.array([p.vignettes for p in points], dtype=float))
    trials = np.array([p.reps for p in points], dtype=float)
    passes = np.array([p.passes for p in points], dtype=float)
    if np.unique(roots).size < 2 or passes.sum() in (0.0, trials.sum()):
        return None
    design = np.column_stack([np.ones_like(roots), roots])
    # Start: least squares of the empirical probits (shares kept off 0 and 1).
    share = (passes + 0.5) / (trials + 1.0)
    params = np.linalg.lstsq(design, stats.norm.ppf(share), rcond=None)[0]
    converged = False
    with np.errstate(all="ignore"):
        for _ in range(100):
            z = design @ params
            p = np.clip(stats.norm.cdf(z), 1e-12, 1.0 - 1e-12)
            density = stats.norm.pdf(z)
            info = design.T @ ((trials * density**2 / (p * (1.0 - p)))[:, None] * design)
            score = design.T @ ((passes - trials * p) * density / (p * (1.0 - p)))
            try:
                step = np.linalg.solve(info, score)
            except np.linalg.LinAlgError:  # information lost: the curve runs off to 0 or 1
                return None
            params = params + step
            if not np.all(np.isfinite(params)):
                return None
            if np.max(np.abs(step)) < 1e-10:
                converged = True
                break
        if not converged or params[1] <= 0:
            return None
        z = design @ params
        p = np.clip(stats.norm.cdf(z), 1e-12, 1.0 - 1e-12)
        info = design.T @ ((trials * stats.norm.pdf(z) ** 2 / (p * (1.0 - p)))[:, None] * design)
    try:
        cov = np.linalg.inv(info)
    except np.linalg.LinAlgError:
        return None
    return PowerCurve(
        float(params[0]),
        float(params[1]),
        ((float(cov[0, 0]), float(cov[0, 1])), (float(cov[1, 0]), float(cov[1, 1]))),
        points,
    )


#: Factors of the approximation's G simulated first (it is optimistic for the posterior: the
#: search must see the target inside its span), and around the first fit's G.
_BRACKET = (0.8, 1.0, 1.3, 1.7)
_LOCAL = (0.85, 0.93, 1.0, 1.08, 1.17)
#: The final fit uses the points within this factor of the first fit's G (local: the probit in √G
#: is an approximation of the curve's shape).
_LOCAL_SPAN = 1.6
#: Stream tags: batch k at G is stream (G, k); the verification batches are (G, _VERIFY + k).
_VERIFY = 1_000_000


@dataclass(frozen=True)
class VignetteSearch:
    """G searched by simulation for one m: the fitted power curve, the G it gives, and its Fieller
    interval; every simulated batch (with its seed stream) is in ``curve.points``."""

    contests: int
    vignettes: int
    curve: PowerCurve
    interval: tuple[float, float]
    seed: int

    @property
    def fitted_power(self) -> float:
        return self.curve.power(self.vignettes)

    @property
    def fitted_se(self) -> float:
        return self.curve.power_se(self.vignettes)

    @property
    def reps(self) -> int:
        return sum(p.reps for p in self.curve.points)


def _spread(start: int, factors, minimum: int) -> list[int]:
    return sorted({max(minimum, min(MAX_VIGNETTES, round(start * f))) for f in factors})


def _search(simulator: _Simulator, power: float, start: int, reps: int, minimum: int) -> VignetteSearch | None:
    """Independent seeds per (G, batch): a bracket around ``start`` (``reps``/2 each), widened
    until the fitted curve's G lies inside it, then ``reps`` each at five G around the fitted G;
    one probit fit to the points near it; G is the smallest whole G whose fitted power reaches
    ``power``. None when no rising curve could be fitted."""
    points: dict[int, list[SimulatedPower]] = {}

    def add(gs: list[int], batch_reps: int) -> None:
        todo = [(g, (g, len(points.get(g, []))), batch_reps) for g in gs]
        for g, sim in zip(gs, simulator.run(todo)):
            points.setdefault(g, []).append(sim)

    def fit(around: float | None = None) -> PowerCurve | None:
        chosen = [
            p
            for g, ps in points.items()
            for p in ps
            if around is None or around / _LOCAL_SPAN <= g <= around * _LOCAL_SPAN
        ]
        return fit_power_curve(sorted(chosen, key=lambda p: (p.vignettes, p.stream)))

    half = max(1, reps // 2)
    add(_spread(start, _BRACKET, minimum), half)
    curve = fit()
    for _ in range(30):  # widen until the target lies inside the simulated span
        low, high = min(points), max(points)
        target = None if curve is None else curve.vignettes_at(power)
        if target is not None and target <= high and (target >= low or low == minimum):
            break
        if high >= MAX_VIGNETTES and (target is None or target > high):
            break
        # No rising fit yet (every replication passing or failing, or noise): the pass share says
        # which way the target lies.
        share = np.mean([p.power for ps in points.values() for p in ps])
        below = target < low if target is not None else share >= power
        if below and low == minimum:
            break
        if below:
            add(_spread(low, (0.55, 0.75), minimum), half)
        else:
            add(_spread(high, (1.4, 2.0), minimum), half)
        curve = fit()
    if curve is None:
        return None
    centre = max(float(minimum), curve.vignettes_at(power))
    add(_spread(max(minimum, round(centre)), _LOCAL, minimum), reps)
    curve = fit(centre) or fit()
    if curve is None:
        return None
    g = curve.vignettes_for(power, minimum)
    return VignetteSearch(simulator.contests, g, curve, curve.vignettes_interval(power), simulator.seed)


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
    method: str | None = None,
    processes: int = 1,
) -> VignetteSearch | None:
    """G whose *simulated* power reaches ``power``, searched from ``start`` (the approximation's G).

    Every simulated (G, batch) has its own seed stream, so no two points share luck and the fit's
    Monte Carlo error is that of all their replications: a bracket of G around ``start`` (widened
    until the target lies inside it), then five G around the first fit's G, and one probit curve
    Φ(a + b√G) fitted by maximum likelihood to the points near the target (:class:`PowerCurve`);
    G is the smallest whole number whose fitted power reaches ``power``, with a Fieller interval.
    """
    method = method or GATE_METHOD_FOR_POPULATION[population]
    with _worker_pool(processes) as pool:
        simulator = _Simulator(truth, contests, bar, method, thresholds, seed, pool)
        return _search(simulator, power, start, reps, thresholds.min_clusters)


#: The check moves G when the refitted power at the searched G is this far from the target.
_MOVE_TOLERANCE = 0.01


def _verify(simulator: _Simulator, search: VignetteSearch, power: float, reps: int, minimum: int):
    """Fresh-seed check of the searched G (``reps`` replications on a stream the search never
    used), then one step along the curve: the check joins the fit (it is the best-placed point),
    and when the refitted power at G is more than :data:`_MOVE_TOLERANCE` from ``power`` and the
    refit gives another G, G moves there and is checked again on fresh seeds. Returns the final
    search (its curve includes the first check) and the check at its G."""
    check = simulator.run([(search.vignettes, (search.vignettes, _VERIFY), reps)])[0]
    curve = fit_power_curve((*search.curve.points, check))
    if curve is None:
        return search, check
    g = curve.vignettes_for(power, minimum)
    refit = VignetteSearch(search.contests, g, curve, curve.vignettes_interval(power), search.seed)
    if g == search.vignettes or abs(curve.power(search.vignettes) - power) <= _MOVE_TOLERANCE:
        return replace(refit, vignettes=search.vignettes), check
    return refit, simulator.run([(g, (g, _VERIFY + 1), reps)])[0]


# --- the plan ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Design:
    """One row of the trade-off table: the approximation's G, and, when simulated, the G the
    search chose (``search``) and the recommended row's fresh-seed check (``verified``)."""

    contests_per_vignette: int
    vignettes: int | None
    approx_power: float | None
    search: VignetteSearch | None = None
    verified: SimulatedPower | None = None
    #: The approximation's G (the search's start).
    approx_vignettes: int | None = None

    @property
    def calibrated(self) -> bool:
        """True when G came from the simulation search rather than the approximation."""
        return self.search is not None

    def cost(self, vignette_cost: float) -> float:
        if self.vignettes is None:
            return math.inf
        return self.vignettes * (self.contests_per_vignette + vignette_cost)


@dataclass(frozen=True)
class Plan:
    """The trade-off table (one :class:`Design` per contests-per-vignette) and the recommendation:
    the cheapest design whose power (fitted to the simulation where simulated) reaches the target;
    ``seed`` seeds every simulated batch (streams in each search's points)."""

    truth: Truth
    bar: float
    power: float
    population: str
    level: float
    method: str
    vignette_cost: float
    designs: tuple[Design, ...] = field(default_factory=tuple)
    seed: int | None = None

    @property
    def recommended(self) -> Design | None:
        checked = [d for d in self.designs if d.verified is not None]
        if checked:  # the row chosen and checked on fresh seeds (its refit may sit a point below P)
            return checked[0]
        reaching = [d for d in self.designs if d.vignettes is not None and self._reaches(d)]
        return min(reaching, key=lambda d: d.cost(self.vignette_cost), default=None)

    def _reaches(self, design: Design) -> bool:
        if design.search is not None:
            return design.search.fitted_power >= self.power
        return design.approx_power is not None and design.approx_power >= self.power

    def to_frame(self):
        import pandas as pd

        best = self.recommended
        rows = []
        for d in self.designs:
            s, v = d.search, d.verified
            rows.append(
                {
                    "contests_per_vignette": d.contests_per_vignette,
                    "vignettes": d.vignettes,
                    "total_contests": None if d.vignettes is None else d.vignettes * d.contests_per_vignette,
                    "cost": d.cost(self.vignette_cost),
                    "approx_vignettes": d.approx_vignettes,
                    "approx_power": d.approx_power,
                    "fitted_power": None if s is None else s.fitted_power,
                    "fitted_se": None if s is None else s.fitted_se,
                    "vignettes_low": None if s is None else s.interval[0],
                    "vignettes_high": None if s is None else s.interval[1],
                    "search_reps": None if s is None else s.reps,
                    "verified_power": None if v is None else v.power,
                    "mc_se": None if v is None else v.mc_se,
                    "verify_reps": None if v is None else v.reps,
                    "recommended": d is best,
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
    reps: int = 100,
    verify_reps: int = 1600,
    seed: int,
    vignette_cost: float = 0.0,
    processes: int = 1,
) -> Plan:
    """The trade-off table: for each m in ``contests`` the smallest G whose approximate power
    reaches ``power``; then (unless ``reps`` is 0) G searched by simulation from there
    (:func:`calibrate_vignettes`, ``reps`` replications per simulated G), and the cheapest row
    checked on ``verify_reps`` fresh replications (MC-SE about 1 point at 1600), moved one step
    along the refitted curve when the check misses by more than 2 MC-SE (:func:`_verify`)."""
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
    minimum = thresholds.min_clusters
    designs = []
    with _worker_pool(processes if reps > 0 else 1) as pool:
        for m in contests:
            g = approximate_vignettes(truth, m, bar, power, population, level, minimum)
            approx = None if g is None else approximate_power(truth, g, m, bar, population, level)
            design = Design(m, g, approx, approx_vignettes=g)
            if g is not None and reps > 0:
                search = _search(_Simulator(truth, m, bar, method, thresholds, seed, pool), power, g, reps, minimum)
                if search is not None:
                    design = replace(design, vignettes=search.vignettes, search=search)
            designs.append(design)
        plan = Plan(truth, bar, power, population, level, method, vignette_cost, tuple(designs), seed)
        best = plan.recommended
        if best is None or best.search is None or verify_reps <= 0:
            return plan
        simulator = _Simulator(truth, best.contests_per_vignette, bar, method, thresholds, seed, pool)
        search, check = _verify(simulator, best.search, power, verify_reps, minimum)
    checked = replace(best, vignettes=search.vignettes, search=search, verified=check)
    return replace(plan, designs=tuple(checked if d is best else d for d in designs))


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
