"""Posterior of the new-vignette contest-score rate by quadrature: the bar gate's interval.

The model is :func:`honestci.audit.stats.bayesian.hierarchical.fit_contest_scores_hierarchical`'s with one run and
one judge: vignette v's rate is expit(η_v), η_v = μ + σ Z_v, Z_v ~ N(0, 1); a contest is m trials
with ms wins (m = 2 when both orders are judged, 1 for a single judged order), tempered by the Pearson dispersion φ ≥ 1 (:func:`~honestci.audit.stats.bayesian.cells.contest_dispersion`);
μ ~ N(0, 1.5), σ ~ HalfNormal(1) (the model's defaults). With two parameters the posterior needs
no sampler: the vignette effects are integrated out by Gauss–Hermite quadrature,

    p(μ, σ | data) ∝ p(μ) p(σ) Π_g Σ_k w_k exp(ℓ_g(μ + σ x_k)),
    ℓ_g(η) = [w_g log expit(η) + (n_g − w_g) log expit(−η)] / φ,

evaluated on a (μ, σ) grid, and the target θ_new(μ, σ) = Σ_k w_k expit(μ + σ x_k)
(:mod:`honestci.audit.stats.estimands`) is read off at every grid point; its posterior quantiles are
the interval. Deterministic.

Resolution rule (issue 31): the grid follows the posterior's width whatever G and the contest
counts. A coarse pass finds where the posterior lives; an exact pass of 41 × 41 points covers that
box and zooms onto the box its own mass lives in until its steps are at most 1/2 of the posterior SD
of μ and of σ (at 10⁶ contests the SD of μ is ~1/6 of an η step: μ then leaves the η lattice and
each μ gets its own kernel CDFs); the bicubic spline of its log density is read on a grid whose
steps are at most 1/10 of each SD. Each vignette's likelihood stays on the 600-point η grid (the
kernel's σ ≥ two η steps): with the (μ, σ) grid made dense the quantiles matched the independent
computation below to 3e-5 at every shape tried, so the η tabulation was not the artefact. About
0.01-0.02 s of one core at G = 6-30, 0.12 s at G = 300 and 0.17 s at 10⁶ contests on 5,000
vignettes (the fixed grid before it: 0.04 / 0.03 / 0.11 / 0.12 s in the same run; 2 shared cores,
load 6-7, 2026-12-05).

Why the gate reads it (docs/coverage.md): when vignette rates are heterogeneous and near 1 their
mean is skewed, and every interval built from the G vignette means and their spread — CR2, on the
logit scale too, the wild and pairs bootstraps, Hall's skewness-corrected t — puts its CI-low above
the truth in 4–8% of replications instead of 2.5% even at G = 30-100, because a sample that misses
the rare low vignettes also understates the spread. The posterior carries the uncertainty in σ
(how far below the observed vignettes the unseen ones may lie) into θ_new instead.

References: Gelman (2006), "Prior distributions for variance parameters in hierarchical models",
Bayesian Analysis 1; Rue, Martino & Chopin (2009), JRSS-B 71 (posterior of a few hyperparameters
on a grid, latent effects integrated out); Abramowitz & Stegun 25.4.46 (Gauss–Hermite).

Validated against: an independent computation of the same model (each vignette's marginal
likelihood by adaptive Gauss–Hermite, a dense zoomed (μ, σ) grid, no code shared): the 2.5%, 50% and
97.5% quantiles within 1.2e-4 at 10⁶ contests (5,000 vignettes), G = 6, 30, 300, one verdict per
vignette and skewed sizes (tests/test_bayes_grid.py, asserted to 5e-4; the coarse grid's CI-low was
1.4e-3 above at 10⁶ contests); the same model sampled by NUTS (posterior quantiles within Monte
Carlo error); scipy.integrate of the log posterior on a small data set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import interpolate, stats
from scipy.special import expit, log_expit, ndtr

from honestci.audit.stats.bayesian.cells import contest_dispersion
from honestci.audit.stats.estimands import standard_normal_nodes, unique_inverse, vignette_means

#: μ's prior sd and σ's half-normal scale: the hierarchical model's defaults (hierarchical.py).
MU_PRIOR_SD = 1.5
SIGMA_PRIOR_SCALE = 1.0
#: Gauss–Hermite nodes of θ_new(μ, σ) (a smooth integrand: no data in it).
_TARGET_NODES = 40
#: Points of the η grid on which each vignette's likelihood is tabulated, and the grid's margin
#: (logit units) beyond the most extreme vignette.
_ETA_POINTS, _ETA_MARGIN = 600, 5.0
#: The coarse pass: μ within this margin (logit units) of the vignettes' empirical logits (wide:
#: with one verdict per vignette σ is barely identified and large σ needs a far-out μ), and its
#: points in μ and σ (σ up to 6, where the HalfNormal(1) prior has no mass left).
_COARSE_MU_MARGIN, _COARSE_MU, _COARSE_SIGMA, _SIGMA_MAX = 8.0, 81, 31, 6.0
#: Points of the exact pass in μ and in σ; it zooms (at most :data:`_MAX_ZOOMS` passes) until its
#: steps are at most 1/:data:`_EXACT_RESOLUTION` of the posterior SD of μ and of σ, and the spline
#: of its log density is read on steps of at most 1/:data:`_RESOLUTION` of them.
_EXACT_POINTS, _EXACT_RESOLUTION, _MAX_ZOOMS, _RESOLUTION = 41, 2.0, 8, 10.0
#: Each exact pass covers the previous pass's cells within this many log units of the maximum.
_LOG_DENSITY_SPAN = 18.0


@dataclass(frozen=True)
class RatePosterior:
    """Posterior of θ_new: ``quantile(q)`` and the mean; ``dispersion`` is the φ used."""

    theta: np.ndarray
    mass: np.ndarray
    dispersion: float

    @property
    def mean(self) -> float:
        return float(np.dot(self.theta, self.mass))

    def quantile(self, q: float) -> float:
        """The q-quantile of θ_new (mass-weighted, linear between sorted grid values)."""
        cumulative = np.cumsum(self.mass) - self.mass / 2.0
        return float(np.interp(q, cumulative, self.theta))


#: The BLAS products of tabulated likelihoods and kernel masses first take every value below this
#: as 0, so that every product of two is 0 or a normal double (at least 4x the smallest), never a
#: subnormal, on which BLAS works ~5x slower (half of a million-contest grid's likelihoods lay
#: below 1e-150). A term so dropped is below 3e-154: beneath a double's precision in an evidence
#: above :data:`ACCURATE_EVIDENCE` (relative error < 2e-11). Where a (μ, σ) cell that can carry
#: mass has a smaller evidence the products are taken again with every value (:func:`_accurate_enough`).
NEGLIGIBLE = 2.0 * math.sqrt(np.finfo(float).tiny)
ACCURATE_EVIDENCE = 1e-140
#: Cells further than this below the largest log posterior have no mass a double can hold.
_REPRESENTABLE_SPAN = 745.0


def _negligible_as_zero(values: np.ndarray) -> np.ndarray:
    """A copy of ``values`` with every entry below :data:`NEGLIGIBLE` set to 0."""
    return np.where(values < NEGLIGIBLE, 0.0, values)


def _tabulate_likelihoods(wins: np.ndarray, losses: np.ndarray):
    """Each vignette's empirical logit, the η grid around them, and each vignette's binomial
    likelihood on that grid divided by its peak (G × E), with the log peaks."""
    empirical = np.log((wins + 0.5) / (losses + 0.5))
    eta = np.linspace(empirical.min() - _ETA_MARGIN, empirical.max() + _ETA_MARGIN, _ETA_POINTS)
    log_likelihood = wins[:, None] * log_expit(eta)[None, :] + losses[:, None] * log_expit(-eta)[None, :]
    peak = log_likelihood.max(axis=1)
    return empirical, eta, np.exp(log_likelihood - peak[:, None]), peak


def log_posterior_on_grid(wins: np.ndarray, losses: np.ndarray):
    """``log p(μ, σ | data)`` up to a constant, as a function of μ (an arithmetic progression whose
    step is a whole number of η steps, or one value) and a σ vector (the outer grid), with each
    vignette's likelihood tabulated once on a fine η grid; also the vignettes' empirical logits
    and the η step. ``wins``/``losses``: per vignette, already tempered.

    With μ on the η lattice, (edge_j − μ_i)/σ depends on j and i only through j − m·i, so the
    N(μ, σ) cell masses for every μ come from one row of normal CDFs per σ (a Toeplitz kernel)
    instead of one CDF per (edge, μ, σ)."""
    # Vignettes with the same (tempered) counts have the same likelihood row: tabulate each distinct
    # row once and weight its log-evidence by its multiplicity (with m contests there are at most
    # 2m + 1 distinct rows whatever G; the sum is the same, only its order differs).
    counts, inverse, multiplicity = np.unique(
        np.column_stack([wins, losses]), axis=0, return_inverse=True, return_counts=True
    )
    empirical, eta, likelihood, peak = _tabulate_likelihoods(counts[:, 0], counts[:, 1])
    empirical = empirical[inverse.ravel()]
    step = eta[1] - eta[0]
    # Cell edges halfway between grid points, the outer cells open: beyond the grid a vignette's
    # likelihood is flat (all won or all lost), so the kernel's tails belong to the end cells.
    first_edge, n_edges = eta[0] + step / 2.0, _ETA_POINTS - 1
    log_peaks = float(np.dot(multiplicity, peak))
    # Narrow likelihoods (many contests a vignette) reach below NEGLIGIBLE: their products first
    # without subnormals (:func:`_accurate_enough`); otherwise every value at once.
    fast_likelihood = _negligible_as_zero(likelihood) if _has_negligible(likelihood) else None

    def log_posterior(mu, sigma):
        mu, sigma = np.atleast_1d(np.asarray(mu, dtype=float)), np.atleast_1d(np.asarray(sigma, dtype=float))
        cells = int(round((mu[1] - mu[0]) / step)) if mu.size > 1 else 0
        on_lattice = mu.size == 1 or (cells >= 1 and np.allclose(np.diff(mu), cells * step, rtol=0, atol=1e-9 * step))
        # On the lattice F[u] = Φ((edge_0 − μ_0 + (u − m(n − 1)) h) / σ) for u = 0 … n_edges − 1 +
        # m(n − 1); the kernel of μ_i at edge j is F[j − m i + m(n − 1)]. Elsewhere (the exact pass's
        # μ steps below an η step) one CDF per (edge, μ).
        reach = cells * (mu.size - 1) if on_lattice else 0
        offsets = first_edge - mu[0] + (np.arange(n_edges + reach) - reach) * step
        starts = reach - cells * np.arange(mu.size)
        interior_rows = starts[None, :] + np.arange(n_edges - 1)[:, None]
        edge_offsets = (first_edge + step * np.arange(n_edges))[:, None] - mu[None, :]
        prior = stats.norm.logpdf(mu, 0.0, MU_PRIOR_SD)[:, None] - 0.5 * (sigma / SIGMA_PRIOR_SCALE)[None, :] ** 2
        kernel = np.empty((_ETA_POINTS, mu.size))  # one σ at a time, contiguous

        def evidence(rows: np.ndarray, fast: bool) -> np.ndarray:  # (distinct rows, mu, sigma)
            out = np.empty((rows.shape[0], mu.size, sigma.size))
            for k, scale in enumerate(sigma):
                if on_lattice:
                    cdf = ndtr(offsets / scale)
                    kernel[0] = cdf[starts]
                    kernel[1:n_edges] = np.diff(cdf)[interior_rows]  # cells 1 … n_edges − 1
                    kernel[n_edges] = 1.0 - cdf[starts + n_edges - 1]
                else:
                    cdf = ndtr(edge_offsets / scale)
                    kernel[0] = cdf[0]
                    kernel[1:n_edges] = np.diff(cdf, axis=0)
                    kernel[n_edges] = 1.0 - cdf[-1]
                if fast:
                    kernel[kernel < NEGLIGIBLE] = 0.0
                out[:, :, k] = rows @ kernel
            return out

        def log_density(evidence: np.ndarray) -> np.ndarray:
            with np.errstate(divide="ignore"):
                per_row = np.log(evidence)
            return np.tensordot(multiplicity.astype(float), per_row, axes=1) + log_peaks + prior

        if fast_likelihood is not None:
            fast_evidence = evidence(fast_likelihood, fast=True)
            density = log_density(fast_evidence)
            if _accurate_enough(fast_evidence, density, log_density, likelihood.shape[1]):
                return density
        return log_density(evidence(likelihood, fast=False))

    return log_posterior, empirical, step


def _accurate_enough(evidence: np.ndarray, density: np.ndarray, log_density, terms: int) -> bool:
    """Whether evidences computed with :data:`NEGLIGIBLE` values as 0 (``density`` their log
    density) serve: some are finite, and no cell where some row's evidence is below
    :data:`ACCURATE_EVIDENCE` could carry mass, i.e. reach within :data:`_REPRESENTABLE_SPAN` of
    the largest density with each evidence raised by the most the dropped ``terms`` can add."""
    largest = density.max()
    if not np.isfinite(largest):
        return False
    inaccurate = (evidence < ACCURATE_EVIDENCE).any(axis=0)
    if not inaccurate.any():
        return True
    raised = log_density(evidence + terms * NEGLIGIBLE)
    return not (raised[inaccurate] > largest - _REPRESENTABLE_SPAN).any()


def _has_negligible(likelihood: np.ndarray) -> bool:
    """Whether some tabulated likelihood lies below :data:`NEGLIGIBLE` (the products' fast pass pays)."""
    return bool((likelihood < NEGLIGIBLE).any())


def _lattice(low: float, high: float, points: int, step: float) -> np.ndarray:
    """About ``points`` values from ``low`` covering ``high``, spaced by a whole number of ``step``."""
    cells = max(1, round((high - low) / (points - 1) / step))
    return low + cells * step * np.arange(math.ceil((high - low) / (cells * step)) + 1)


@dataclass(frozen=True)
class _Grid:
    """The posterior on the exact (μ, σ) grid (``mass``, len(μ) × len(σ)) and read off its spline on
    the fine grid (``fine_*``), with each vignette's tempered wins and losses and the dispersion φ."""

    mu: np.ndarray
    sigma: np.ndarray
    mass: np.ndarray
    fine_mu: np.ndarray
    fine_sigma: np.ndarray
    fine_mass: np.ndarray
    wins: np.ndarray
    losses: np.ndarray
    dispersion: float


def _spread(values: np.ndarray, mass: np.ndarray) -> float:
    """The standard deviation of ``values`` under the (normalised) ``mass``."""
    mean = float(np.dot(mass, values))
    return math.sqrt(max(float(np.dot(mass, (values - mean) ** 2)), 0.0))


def _live_box(density: np.ndarray, mu: np.ndarray, sigma: np.ndarray, smallest_sigma: float):
    """The (μ, σ) box of the cells within :data:`_LOG_DENSITY_SPAN` of the largest log density,
    widened by one grid step each way (σ not below ``smallest_sigma``)."""
    live = density > density.max() - _LOG_DENSITY_SPAN
    rows, cols = np.flatnonzero(live.any(axis=1)), np.flatnonzero(live.any(axis=0))
    mu_step, sigma_step = mu[1] - mu[0], sigma[1] - sigma[0]
    return (
        mu[rows[0]] - mu_step,
        mu[rows[-1]] + mu_step,
        max(smallest_sigma, sigma[cols[0]] - sigma_step),
        sigma[cols[-1]] + sigma_step,
    )


def _grid_posterior(scores, clusters, trials_per_contest: int = 2, equal_weight: bool = False) -> _Grid:
    """The posterior of (μ, σ) on a grid as fine as its width asks, with each vignette's tempered
    wins and losses and the dispersion φ.

    A contest is ``trials_per_contest`` trials with that many times s wins: 2 when both orders
    are judged, 1 when each contest is one judged order (a verdict or a preference), so a single
    verdict never counts as two agreeing ones (which would fake between-vignette spread).

    ``equal_weight``: every vignette enters the likelihood once, at the harmonic mean size
    h = G / Σ_g 1/n_g (its mean score at h contests) instead of at its own size n_g
    (:func:`rate_posterior` says why).

    Each vignette's likelihood is tabulated on a fine η grid, so the integral over its effect is
    one matrix product with the N(μ, σ) kernel for every (μ, σ) at once (σ from two η steps up:
    below that the kernel is narrower than the grid and the vignettes are effectively pooled).
    The resolution follows the posterior's width, whatever G and the contest counts: a coarse pass
    finds where the posterior lives; an exact pass of :data:`_EXACT_POINTS` × :data:`_EXACT_POINTS`
    points covers that box and, while its steps exceed 1/:data:`_EXACT_RESOLUTION` of the posterior
    SD of μ or σ (many contests: the SD of μ falls below an η step), zooms to the box its own mass
    lives in (μ then off the η lattice). The log density's bicubic spline is then read on a grid
    whose steps are at most 1/:data:`_RESOLUTION` of each SD.
    """
    scores = np.asarray(scores, dtype=float)
    _, codes = unique_inverse(clusters)
    per_vignette = vignette_means(scores, codes)
    estimate, _ = contest_dispersion(codes, scores, trials_per_contest)
    dispersion = max(1.0, estimate) if estimate is not None else 1.0
    sizes = per_vignette.sizes
    if equal_weight and np.ptp(sizes) > 0:  # equal sizes: already equal weights, bit for bit
        sizes = np.full(sizes.size, sizes.size / np.sum(1.0 / sizes))
    trials = trials_per_contest * sizes / dispersion
    wins = trials * per_vignette.means
    losses = trials - wins
    log_posterior, empirical, eta_step = log_posterior_on_grid(wins, losses)
    smallest_sigma = 2.0 * eta_step
    mu = _lattice(empirical.min() - _COARSE_MU_MARGIN, empirical.max() + _COARSE_MU_MARGIN, _COARSE_MU, eta_step)
    sigma = np.linspace(smallest_sigma, _SIGMA_MAX, _COARSE_SIGMA)
    box = _live_box(log_posterior(mu, sigma), mu, sigma, smallest_sigma)
    for _ in range(_MAX_ZOOMS):
        mu_low, mu_high, sigma_low, sigma_high = box
        cells = math.floor((mu_high - mu_low) / (_EXACT_POINTS - 1) / eta_step)
        if cells >= 1:  # on the η lattice (one CDF row per σ), steps no wider than the box's 1/40
            mu = mu_low + cells * eta_step * np.arange(math.ceil((mu_high - mu_low) / (cells * eta_step)) + 1)
        else:
            mu = np.linspace(mu_low, mu_high, _EXACT_POINTS)
        sigma = np.linspace(sigma_low, sigma_high, _EXACT_POINTS)
        density = log_posterior(mu, sigma)
        mass = np.exp(density - density.max())
        mass /= mass.sum()
        mu_sd, sigma_sd = _spread(mu, mass.sum(axis=1)), _spread(sigma, mass.sum(axis=0))
        if mu[1] - mu[0] <= mu_sd / _EXACT_RESOLUTION and sigma[1] - sigma[0] <= sigma_sd / _EXACT_RESOLUTION:
            break
        zoomed = _live_box(density, mu, sigma, smallest_sigma)
        if np.allclose(zoomed, box, rtol=0, atol=1e-12):
            break
        box = zoomed
    # The spline of the log density (cells beyond e^-60 of the largest held there: no mass, no
    # ringing from the steep far corners) on steps of at most 1/_RESOLUTION of each SD.
    fine_mu = np.linspace(mu[0], mu[-1], _fine_points(mu, mu_sd))
    fine_sigma = np.linspace(sigma[0], sigma[-1], _fine_points(sigma, sigma_sd))
    spline = interpolate.RectBivariateSpline(mu, sigma, np.maximum(density - density.max(), -60.0), kx=3, ky=3)
    fine = spline(fine_mu, fine_sigma)
    fine_mass = np.exp(fine - fine.max())
    return _Grid(mu, sigma, mass, fine_mu, fine_sigma, fine_mass / fine_mass.sum(), wins, losses, dispersion)


def _fine_points(values: np.ndarray, sd: float) -> int:
    """Points of the fine grid over ``values``' range: steps at most 1/:data:`_RESOLUTION` of ``sd``,
    and no fewer points than ``values`` has."""
    width = values[-1] - values[0]
    return max(values.size, math.ceil(width * _RESOLUTION / sd) + 1 if sd > 0 else values.size)


def rate_posterior(scores, clusters, trials_per_contest: int = 2, equal_weight: bool = True) -> RatePosterior:
    """Posterior of the new-vignette rate from contest scores (in [0, 1]) and their vignettes
    (``trials_per_contest``: :func:`_grid_posterior`).

    The estimand weights vignettes equally (:mod:`honestci.audit.stats.estimands`). With each
    vignette's likelihood at its own size n_g, the posterior of μ weights vignette g by its
    precision, about 1/(σ² + 1/(n_g p(1 − p))): when the vignettes' rates are close (σ small)
    that is nearly its contest count, so where contest counts follow quality (more contests where
    the policy does well) the posterior centres on the contest-weighted rate and its CI-low lies
    above the equal-weight truth far more often than 2.5% (22% at G = 30, vignette logit sd 0.3:
    docs/coverage.md, informative sizes). With ``equal_weight`` (the gate's default) every vignette
    enters at the harmonic mean size h = G / Σ 1/n_g: the weights are then equal, and the
    sampling variance the model gives the vignette means, averaged over vignettes, is the one they
    have (mean_g s²/n_g = s²/h), so the width stays honest. With equal sizes the two are the same.
    ``equal_weight=False`` is the precision-weighted posterior (a candidate the coverage study
    measures); :func:`vignette_rate_posteriors` keeps each vignette at its own size (its own
    likelihood is what its partially pooled rate rests on)."""
    grid = _grid_posterior(scores, clusters, trials_per_contest, equal_weight)
    nodes, weights = standard_normal_nodes(_TARGET_NODES)
    exact = expit(grid.mu[:, None, None] + grid.sigma[None, :, None] * nodes[None, None, :]) @ weights
    # θ_new is smooth in (μ, σ): its bicubic spline from the exact grid is within 1e-5 of the
    # quadrature on the fine one (1.3e-6 seen; tests/test_bayes_grid.py) at a fraction of the cost.
    theta = interpolate.RectBivariateSpline(grid.mu, grid.sigma, exact, kx=3, ky=3)(
        grid.fine_mu, grid.fine_sigma
    ).ravel()
    order = np.argsort(theta)
    return RatePosterior(theta[order], grid.fine_mass.ravel()[order], grid.dispersion)


@dataclass(frozen=True)
class VignettePosteriors:
    """Partially pooled vignette rates: the posterior mean and central interval of each observed
    vignette's rate expit(η_g) under the model, in the order of ``np.unique(clusters)``."""

    vignettes: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray


#: (μ, σ) grid cells carrying less than this share of the largest cell's mass are left out of the
#: per-vignette posteriors (their total mass is negligible; it keeps G = 1,000 under a second).
_CELL_FLOOR = 1e-8


def vignette_rate_posteriors(scores, clusters, level: float = 0.95, trials_per_contest: int = 2) -> VignettePosteriors:
    """Each observed vignette's rate, partially pooled: the posterior of expit(η_g) given all data.

    With the hyperparameters on the exact grid of :func:`rate_posterior` (steps at most half the
    posterior SD of μ and σ; the spline's finer grid serves θ_new's quantiles),

        p(η_g | y) = Σ_(μ,σ) p(μ, σ | y) · L_g(η_g) N(η_g; μ, σ) / Z_g(μ, σ),
        Z_g(μ, σ) = ∫ L_g(η) N(η; μ, σ) dη,

    with L_g the vignette's tempered binomial likelihood tabulated on an η grid (the cells of
    :func:`log_posterior_on_grid`). A vignette with few contests or an extreme rate is pulled
    toward the population (shrinkage); the gate's interval reads the same model.

    Reference: Gelman et al. (2013), *Bayesian Data Analysis*, 3rd ed., §5.3 (the posterior of
    group effects given the hyperparameters, averaged over the hyperparameters' posterior).

    Validated against: a direct integration over a (μ, σ, z) grid with the normal density in z
    (no η cells, no tabulation) in tests/test_bayes_grid.py, to 2e-3.
    """
    vignettes, codes = unique_inverse(clusters)  # the labels once; the grid groups by their codes
    grid = _grid_posterior(scores, codes, trials_per_contest)
    mu, sigma, mass, wins, losses = grid.mu, grid.sigma, grid.mass, grid.wins, grid.losses
    # Vignettes with the same (tempered) counts have the same posterior: each distinct pair once
    # (with m contests a vignette there are at most 2m + 1 of them, whatever G), as in the grid's.
    counts, row_of_vignette = np.unique(np.column_stack([wins, losses]), axis=0, return_inverse=True)
    row_of_vignette = row_of_vignette.ravel()
    _, eta, likelihood, _ = _tabulate_likelihoods(counts[:, 0], counts[:, 1])  # likelihood: (rows, E)
    cells = mass > mass.max() * _CELL_FLOOR
    mu_cells = np.broadcast_to(mu[:, None], mass.shape)[cells]
    sigma_cells = np.broadcast_to(sigma[None, :], mass.shape)[cells]
    weight = mass[cells] / mass[cells].sum()
    edges = np.concatenate([[-np.inf], (eta[1:] + eta[:-1]) / 2.0, [np.inf]])
    kernel = np.diff(ndtr((edges[:, None] - mu_cells[None, :]) / sigma_cells[None, :]), axis=0)  # (E, M)
    # The products first without subnormals (:data:`NEGLIGIBLE`) where the likelihoods reach below
    # it; every cell here carries mass, so any evidence below ACCURATE_EVIDENCE takes them again
    # with every value.
    fast = _has_negligible(likelihood)
    product_kernel = _negligible_as_zero(kernel) if fast else kernel
    evidence = (_negligible_as_zero(likelihood) if fast else likelihood) @ product_kernel  # Z_g(μ, σ), (rows, M)
    if fast and (evidence < ACCURATE_EVIDENCE).any():
        product_kernel = kernel
        evidence = likelihood @ kernel
    # Each cell's weight over its evidence, scaled per row so that the largest is 1 (the row is
    # normalised below): weight / evidence itself overflows where an evidence is subnormal (an
    # outlying vignette), and inf x 0 made its figures NaN. A cell where a vignette's likelihood
    # underflows (evidence 0) contributes nothing to it.
    with np.errstate(divide="ignore"):
        log_share = np.where(evidence > 0, np.log(weight)[None, :] - np.log(evidence), -np.inf)
    share = np.exp(log_share - log_share.max(axis=1, keepdims=True))
    posterior = likelihood * (share @ product_kernel.T)  # (rows, E)
    posterior /= posterior.sum(axis=1, keepdims=True)
    rate = expit(eta)
    cumulative = np.cumsum(posterior, axis=1) - posterior / 2.0
    tail = (1.0 - level) / 2.0
    low = np.array([np.interp(tail, c, rate) for c in cumulative])
    high = np.array([np.interp(1.0 - tail, c, rate) for c in cumulative])
    return VignettePosteriors(
        vignettes, (posterior @ rate)[row_of_vignette], low[row_of_vignette], high[row_of_vignette]
    )
