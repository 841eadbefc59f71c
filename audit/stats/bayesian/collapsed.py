r"""The hierarchical model's posterior for many vignettes: a collapsed sampler.

The model is :func:`honestci.audit.stats.bayesian.hierarchical.fit_winrate_hierarchical`'s (and the contest-score
fit's): per cell c of vignette v, ``eta_c = u_v + kappa_c(theta)`` with
``kappa_c = mu + beta o_c + a_{r_c} + b_{j_c}``, ``u_v ~ N(0, sigma)``, and the quasi-binomial
term ``w_c eta_c - n_c log(1 + e^{eta_c})``. With thousands of vignettes NUTS on the joint
posterior (one coordinate per vignette) costs minutes; here the vignette effects are integrated
out and the few hyperparameters

    theta = (mu, log sigma, beta, z_run, z_judge),  a = Q z_run, b = Q z_judge,

(Q an orthonormal basis of the sum-zero vectors, so that ``a`` has the prior of the model's
``a_raw - mean(a_raw)``, ``a_raw ~ N(0, I)``) are sampled on their marginal posterior

.. math::
    \log p(\theta \mid y) = \log p(\theta) + \sum_v \log \int \exp(h_v(u; \theta))\, du + c,
    \quad h_v(u) = \sum_{c \in v} [w_c \eta_c - n_c \log(1 + e^{\eta_c})] - \frac{u^2}{2\sigma^2}
    - \log(\sigma \sqrt{2\pi}),

each integral by adaptive Gauss–Hermite quadrature at the mode of the (concave) h_v
(:data:`QUADRATURE_NODES` nodes; Liu & Pierce 1994, Biometrika 81; Naylor & Smith 1982). The sampler
is an independence Metropolis–Hastings chain per chain (Tierney 1994, Annals of Statistics 22)
whose proposal is a multivariate Student-t (:data:`PROPOSAL_DF` degrees of freedom) at the
marginal posterior's mode with the inverse Hessian as its scale: with thousands of vignettes that
posterior is close to normal (Bernstein–von Mises), most proposals are accepted, and the chains'
R-hat and ESS are read by the same gate as NUTS's. Each proposal of theta comes with every
vignette effect drawn from its exact conditional ``p(u_v | theta, y) ∝ exp(h_v(u))``,
log-concave, by rejection from a piecewise-exponential envelope of three tangents (Gilks & Wild
1992, Applied Statistics 41: adaptive rejection sampling without the adaptation), and a chain
moves to the pair (theta, u) or stays: an independence sampler on the joint posterior whose
proposal draws u from its conditional has theta's marginal acceptance ratio, so the joint draws
(theta, u) are draws of the same posterior NUTS samples. The first attempt at each effect takes
its tangents at the integral's three middle nodes (:func:`_log_marginals`), the retries around a
Newton step (:func:`_draw_effects`).

Validated against: the quadrature against scipy.integrate.quad per vignette, and the whole
posterior against nutpie's NUTS on the same cells (tests/test_bayes_collapsed.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np

from honestci.audit.stats.bayesian.logistic_kernels import expit, log1pexp, log1pexp_and_expit
from honestci.audit.stats.core_share import kernel_threads
from honestci.audit.stats.numba_cache import njit_cached

#: Gauss–Hermite nodes per vignette integral (adaptive: centred at the mode, scaled by the
#: curvature). What matters is how the error varies over theta: within two posterior SDs of the
#: mode on the 1M-contest study its range was 1.8e-4 with 5 nodes against 9, 2.1e-6 with 7 and
#: 3.3e-7 with 9 against 31 (a posterior density ratio off by 0.02% at most).
QUADRATURE_NODES = 5
#: Degrees of freedom of the independence proposal: tails heavier than the normal approximation's
#: (the importance ratio stays bounded where the posterior's tails are heavier) with a body close
#: to it; on the 1M-contest study 7 / 15 / 30 / 1000 accepted 84 / 91 / 95 / 98% of proposals.
PROPOSAL_DF = 30.0
#: Spacing of the two outer tangents of the rejection envelope, in conditional SDs: sqrt(2)
#: maximises the acceptance (2 sqrt(2) / sqrt(2 pi) ~ 0.89) for a normal conditional.
ENVELOPE_SPACING = math.sqrt(2.0)
#: Newton iterations for a vignette's mode at most, the tolerance of the last step, and the largest
#: step (logit units; a capped Newton step on a concave function cannot overshoot far).
_NEWTON_MAX, _NEWTON_TOL, _NEWTON_STEP_MAX = 60, 1e-6, 2.0
#: Proposals whose log density (and vignette effects) one kernel launch evaluates
#: (:func:`sample_collapsed`): the thread count (:mod:`honestci.audit.stats.core_share`) can change,
#: and the meter moves, between launches; a block's uniforms take 128 x V x 3 doubles (15 MB at
#: 5,000 vignettes).
_PROPOSAL_BLOCK = 128
#: Pending vignette effects drawn per block (:func:`_draw_pending`): ~12 MB of uniforms at a time.
_EFFECT_BLOCK = 500_000
#: Step of the central differences of the marginal's gradient and Hessian; Newton's iterations for
#: its mode at most, their largest step and the tolerance of the last one (theta's units).
_HESSIAN_STEP = 1e-3
_MODE_ITERATIONS_MAX, _MODE_STEP_MAX, _MODE_TOL = 50, 1.0, 1e-7
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


@njit_cached(fastmath=False)
def _h(u, kappa, n, w, inv_var):
    """h_v(u) without its constant (the vignette's cells)."""
    value = -0.5 * u * u * inv_var
    for c in range(kappa.size):
        eta = u + kappa[c]
        value += w[c] * eta - n[c] * log1pexp(eta)
    return value


@njit_cached(fastmath=False)
def _h_derivatives(u, kappa, n, w, inv_var):
    """h_v'(u) and h_v''(u)."""
    grad, curv = -u * inv_var, -inv_var
    for c in range(kappa.size):
        p = expit(u + kappa[c])
        grad += w[c] - n[c] * p
        curv -= n[c] * p * (1.0 - p)
    return grad, curv


@njit_cached(fastmath=False)
def _h_and_slope(u, kappa, n, w, inv_var):
    """h_v(u) without its constant, and h_v'(u), from one exponential per cell."""
    value, grad = -0.5 * u * u * inv_var, -u * inv_var
    for c in range(kappa.size):
        eta = u + kappa[c]
        softplus, p = log1pexp_and_expit(eta)
        value += w[c] * eta - n[c] * softplus
        grad += w[c] - n[c] * p
    return value, grad


@njit_cached(fastmath=False)
def _mode(start, kappa, n, w, inv_var):
    """Newton's method for the mode of the concave h_v; returns (mode, h'(mode), h''(mode))."""
    u = start
    grad, curv = _h_derivatives(u, kappa, n, w, inv_var)
    for _ in range(_NEWTON_MAX):
        step = min(max(-grad / curv, -_NEWTON_STEP_MAX), _NEWTON_STEP_MAX)
        u += step
        grad, curv = _h_derivatives(u, kappa, n, w, inv_var)
        if abs(step) < _NEWTON_TOL:
            break
    return u, grad, curv


@njit_cached(fastmath=False)
def _cell_offsets(s, theta, data, lo, hi, out):
    """kappa_c = mu + beta o_c + a_r + b_j of cells lo..hi of draw s, into out[0 : hi - lo]."""
    mu, _, beta, run_effect, judge_effect = theta
    _, order, run_index, judge_index, _, _ = data
    for c in range(lo, hi):
        out[c - lo] = mu[s] + beta[s] * order[c] + run_effect[s, run_index[c]] + judge_effect[s, judge_index[c]]


@njit_cached(parallel=True, nogil=True, fastmath=False)
def _log_marginals(theta, data, nodes, log_weights, init, uniforms, effects, drawn):
    """sum_v log ∫ exp(h_v) du for every draw s of the hyperparameters (adaptive Gauss–Hermite),
    and every vignette's mode (Newton from ``init``). ``theta`` holds the draws' (mu, sigma, beta,
    run_effect, judge_effect), ``data`` the cells sorted by vignette (start, order, run_index,
    judge_index, n, w; vignette v's cells are start[v] .. start[v + 1]).

    With ``uniforms`` (S x V x 3; an empty array: none), also one rejection attempt at each
    vignette's effect u_v given draw s (:func:`_attempt_from_tangents`), its envelope's tangents
    at the three middle nodes, whose h the quadrature evaluates anyway: an accepted one is written
    to ``effects[s, v]`` with ``drawn[s, v] = True``."""
    mu, sigma = theta[0], theta[1]
    start, order, n, w = data[0], data[1], data[4], data[5]
    n_draws, n_vignettes = mu.size, start.size - 1
    out = np.empty(n_draws)
    modes = np.empty((n_draws, n_vignettes))
    middle = nodes.size // 2  # the node at 0; the tangents are at it and its two neighbours
    draw = uniforms.shape[0] > 0
    for s in numba.prange(n_draws):
        kappa = np.empty(order.size)
        _cell_offsets(s, theta, data, 0, order.size, kappa)
        inv_var = 1.0 / (sigma[s] * sigma[s])
        terms = np.empty(nodes.size)
        points = np.empty(3)
        values = np.empty(3)
        slopes = np.empty(3)
        total = 0.0
        for v in range(n_vignettes):
            lo, hi = start[v], start[v + 1]
            k_v, n_v, w_v = kappa[lo:hi], n[lo:hi], w[lo:hi]
            mode, _, curv = _mode(init[v], k_v, n_v, w_v, inv_var)
            modes[s, v] = mode
            scale = math.sqrt(2.0 / -curv)
            best = -np.inf
            for k in range(nodes.size):
                point = mode + scale * nodes[k]
                tangent = k - middle + 1
                if draw and 0 <= tangent <= 2:  # the same h(point), and its slope
                    value, slope = _h_and_slope(point, k_v, n_v, w_v, inv_var)
                    points[tangent], values[tangent], slopes[tangent] = point, value, slope
                else:
                    value = _h(point, k_v, n_v, w_v, inv_var)
                terms[k] = log_weights[k] + nodes[k] * nodes[k] + value
                best = max(best, terms[k])
            acc = 0.0
            for k in range(nodes.size):
                acc += math.exp(terms[k] - best)
            total += best + math.log(acc) + math.log(scale) - math.log(sigma[s]) - _LOG_SQRT_2PI
            if draw:
                x, accepted = _attempt_from_tangents(points, values, slopes, uniforms[s, v], k_v, n_v, w_v, inv_var)
                effects[s, v], drawn[s, v] = x, accepted
        out[s] = total
    return out, modes


@njit_cached(fastmath=False)
def _exp_segment_area(h0, g, width):
    """∫_0^width exp(h0 + g x) dx (width may be inf when g < 0)."""
    if math.isinf(width):
        return -math.exp(h0) / g
    if abs(g * width) < 1e-12:
        return math.exp(h0) * width
    return math.exp(h0) * math.expm1(g * width) / g


@njit_cached(parallel=True, nogil=True, fastmath=False)
def _draw_effects(theta, data, init, pending_draw, pending_vignette, uniforms, out, accepted):
    """One rejection attempt for each pending (draw, vignette), with the three uniforms
    ``uniforms[i]``; an accepted one writes ``out[draw, vignette]`` and ``accepted[i] = True``.
    The envelope's tangents are at the conditional's mode m and at m -+ d (d = ENVELOPE_SPACING
    conditional SDs), the mode from one Newton step off ``init`` (:func:`_attempt_from_tangents`)."""
    start = data[0]
    max_cells = int(np.max(start[1:] - start[:-1]))
    chunk = 4096
    for first in numba.prange((pending_draw.size + chunk - 1) // chunk):
        kappa = np.empty(max_cells)
        points, values, slopes = np.empty(3), np.empty(3), np.empty(3)
        for i in range(first * chunk, min((first + 1) * chunk, pending_draw.size)):
            _attempt_effect(
                i,
                theta,
                data,
                init,
                pending_draw,
                pending_vignette,
                uniforms,
                out,
                accepted,
                kappa,
                points,
                values,
                slopes,
            )


@njit_cached(fastmath=False)
def _tangents_around(centre, d, points, values, slopes, k_v, n_v, w_v, inv_var):
    """h and h' at centre - d, centre and centre + d, into ``points``, ``values``, ``slopes``."""
    for t in range(3):
        points[t] = centre + (t - 1) * d
        values[t], slopes[t] = _h_and_slope(points[t], k_v, n_v, w_v, inv_var)


@njit_cached(fastmath=False)
def _attempt_effect(
    i, theta, data, init, pending_draw, pending_vignette, uniforms, out, accepted, kappa, points, values, slopes
):
    """The rejection attempt of pending pair i (:func:`_draw_effects`); ``kappa``, ``points``,
    ``values`` and ``slopes`` are scratch arrays."""
    sigma = theta[1]
    start, n, w = data[0], data[4], data[5]
    s, v = pending_draw[i], pending_vignette[i]
    lo, hi = start[v], start[v + 1]
    _cell_offsets(s, theta, data, lo, hi, kappa)
    k_v, n_v, w_v = kappa[: hi - lo], n[lo:hi], w[lo:hi]
    inv_var = 1.0 / (sigma[s] * sigma[s])
    # One Newton step from the mode at the marginal's mode: the envelope needs tangents around
    # the mode, not at it (any tangents of a concave function bound it from above).
    grad, curv = _h_derivatives(init[v], k_v, n_v, w_v, inv_var)
    centre = init[v] - grad / curv
    _tangents_around(centre, ENVELOPE_SPACING / math.sqrt(-curv), points, values, slopes, k_v, n_v, w_v, inv_var)
    if not (slopes[0] > 0.0 > slopes[2]):  # the step missed the mode by more than d: converge first
        centre, _, curv = _mode(init[v], k_v, n_v, w_v, inv_var)
        _tangents_around(centre, ENVELOPE_SPACING / math.sqrt(-curv), points, values, slopes, k_v, n_v, w_v, inv_var)
    x, accepted[i] = _attempt_from_tangents(points, values, slopes, uniforms[i], k_v, n_v, w_v, inv_var)
    if accepted[i]:
        out[s, v] = x


@njit_cached(fastmath=False)
def _attempt_from_tangents(points, values, slopes, uniform, k_v, n_v, w_v, inv_var):
    """One rejection attempt at a draw of u from exp(h_v(u)), h_v concave, with the three uniforms
    ``uniform``: (x, True) when accepted, (nan, False) when not.

    The envelope is the minimum of h's tangents at ``points`` t0 < t1 < t2 (``values`` h(t), and
    ``slopes`` h'(t) with h'(t0) > 0 > h'(t2)): above the concave h everywhere, exponential on each
    of its three pieces (left of z0, z0..z1, right of z1). Slopes of the wrong signs (the points
    do not straddle the mode) give (nan, False)."""
    t0, centre, t2 = points[0], points[1], points[2]
    g0, g1, g2 = slopes[0], slopes[1], slopes[2]
    if not (g0 > 0.0 > g2):
        return math.nan, False
    top = values[1]
    h0, h1, h2 = values[0] - top, 0.0, values[2] - top
    # Where consecutive tangents cross, and the envelope's value there.
    z0 = (h1 - h0 - centre * g1 + t0 * g0) / (g0 - g1)
    z1 = (h2 - h1 - t2 * g2 + centre * g1) / (g1 - g2)
    e0 = h0 + g0 * (z0 - t0)
    e1 = h1 + g1 * (z1 - centre)
    start_mid = h1 + g1 * (z0 - centre)
    area_left = math.exp(e0) / g0
    area_mid = _exp_segment_area(start_mid, g1, z1 - z0)
    area_right = -math.exp(e1) / g2
    pick = uniform[0] * (area_left + area_mid + area_right)
    position = uniform[1]
    if pick < area_left:
        x = z0 + math.log(position) / g0
        envelope = e0 + g0 * (x - z0)
    elif pick < area_left + area_mid:
        width = z1 - z0
        if abs(g1 * width) < 1e-12:
            x = z0 + position * width
        else:
            x = z0 + math.log1p(position * math.expm1(g1 * width)) / g1
        envelope = start_mid + g1 * (x - z0)
    else:
        x = z1 + math.log(position) / g2
        envelope = e1 + g2 * (x - z1)
    log_test = math.log(uniform[2])
    # Squeeze: the chords between the tangent points lie below the concave h, so a point under
    # them is accepted without evaluating h there.
    if t0 <= x <= t2:
        if x <= centre:
            chord = h0 + (h1 - h0) * (x - t0) / (centre - t0)
        else:
            chord = h1 + (h2 - h1) * (x - centre) / (t2 - centre)
        if log_test <= chord - envelope:
            return x, True
    if log_test <= _h(x, k_v, n_v, w_v, inv_var) - top - envelope:
        return x, True
    return math.nan, False


def sum_zero_basis(levels: int) -> np.ndarray:
    """(levels, levels - 1) orthonormal basis of the vectors summing to 0 (Helmert contrasts)."""
    basis = np.zeros((levels, levels - 1))
    for k in range(1, levels):
        basis[:k, k - 1] = 1.0
        basis[k, k - 1] = -float(k)
        basis[:, k - 1] /= math.sqrt(k * (k + 1.0))
    return basis


@dataclass(frozen=True)
class CollapsedDraws:
    """Draws of the collapsed sampler, each of shape (chains, draws, ...), and its statistics."""

    mu: np.ndarray
    beta: np.ndarray
    sigma: np.ndarray
    u: np.ndarray
    run_effect: np.ndarray | None
    judge_effect: np.ndarray | None
    accepted: np.ndarray  # (chains, draws) whether the chain moved to that draw's proposal
    mode: np.ndarray  # the marginal posterior's mode in theta
    covariance: np.ndarray  # its inverse Hessian there (the proposal's scale)
    acceptance_rate: float
    effect_attempts: float  # rejection-sampling attempts per vignette effect


class CollapsedPosterior:
    """The marginal posterior of theta for one set of cells and prior (the module doc)."""

    def __init__(self, cells, prior_nu: float, prior_scale: float, mu_sd: float = 1.5):
        order = np.argsort(cells.vignette_index, kind="stable")
        self.vignette = cells.vignette_index[order].astype(np.int64)
        self.start = np.searchsorted(self.vignette, np.arange(cells.n_vignettes + 1)).astype(np.int64)
        self.order = np.ascontiguousarray(cells.order[order], dtype=float)
        self.run_index = np.ascontiguousarray(cells.run_index[order], dtype=np.int64)
        self.judge_index = np.ascontiguousarray(cells.judge_index[order], dtype=np.int64)
        self.n = np.ascontiguousarray(cells.n[order], dtype=float)
        self.w = np.ascontiguousarray(cells.wins[order], dtype=float)
        self.data = (self.start, self.order, self.run_index, self.judge_index, self.n, self.w)
        self.runs, self.judges = cells.n_runs, cells.n_judges
        self.run_basis, self.judge_basis = sum_zero_basis(self.runs), sum_zero_basis(self.judges)
        self.prior_nu, self.prior_scale, self.mu_sd = prior_nu, prior_scale, mu_sd
        # beta enters the likelihood only through cells with an order (verdict cells); otherwise
        # its posterior is its N(0, 1) prior, drawn directly (:func:`sample_collapsed`).
        self.with_beta = bool(np.any(self.order != 0.0))
        self._first_offset = 3 if self.with_beta else 2
        self.dim = self._first_offset + (self.runs - 1) + (self.judges - 1)
        nodes, weights = np.polynomial.hermite.hermgauss(QUADRATURE_NODES)
        self.nodes, self.log_weights = nodes, np.log(weights)
        self.init = np.zeros(cells.n_vignettes)
        # Newton's start for the mode: moments of the vignettes' empirical logits.
        wins, trials = np.bincount(self.vignette, self.w), np.bincount(self.vignette, self.n)
        logits = np.log((wins + 0.5) / (trials - wins + 0.5))
        noise = float(np.mean(1.0 / (wins + 0.5) + 1.0 / (trials - wins + 0.5)))
        self._start = (float(logits.mean()), 0.5 * math.log(max(float(logits.var()) - noise, 0.01)))

    def unpack(self, theta: np.ndarray):
        """(S, dim) theta -> mu, sigma, beta, run_effect (S, R), judge_effect (S, J)."""
        theta = np.atleast_2d(theta)
        first, r = self._first_offset, self.runs - 1
        run_effect = theta[:, first : first + r] @ self.run_basis.T
        judge_effect = theta[:, first + r :] @ self.judge_basis.T
        beta = theta[:, 2] if self.with_beta else np.zeros(theta.shape[0])
        return (
            np.ascontiguousarray(theta[:, 0]),
            np.exp(theta[:, 1]),
            np.ascontiguousarray(beta),
            np.ascontiguousarray(run_effect),
            np.ascontiguousarray(judge_effect),
        )

    def log_prior(self, theta: np.ndarray) -> np.ndarray:
        """log p(theta) up to a constant, log sigma's Jacobian included."""
        theta = np.atleast_2d(theta)
        sigma = np.exp(theta[:, 1]) / self.prior_scale
        if self.prior_nu > 0:
            log_sigma = -(self.prior_nu + 1.0) / 2.0 * np.log1p(sigma**2 / self.prior_nu)
        else:
            log_sigma = -(sigma**2) / 2.0
        return (
            -0.5 * (theta[:, 0] / self.mu_sd) ** 2
            + log_sigma
            + theta[:, 1]
            - 0.5 * np.sum(theta[:, 2:] ** 2, axis=1)  # beta (when sampled here) and the z's: N(0, 1)
        )

    def log_density(self, theta: np.ndarray, warm_start: bool = True) -> np.ndarray:
        """log p(theta | y) up to a constant, for each row of (S, dim) theta."""
        no_draws = np.empty((0, 0, 3)), np.empty((0, 0)), np.empty((0, 0), dtype=bool)
        kernel_threads()
        likelihood, modes = _log_marginals(
            self.unpack(theta), self.data, self.nodes, self.log_weights, self.init, *no_draws
        )
        if warm_start:
            # Newton then starts next to every vignette's next mode (the result does not depend on it).
            self.init = np.ascontiguousarray(modes[-1])
        return likelihood + self.log_prior(theta)

    def log_density_and_effects(self, theta: np.ndarray, rng: np.random.Generator):
        """:meth:`log_density` (without its warm start) of each row of (S, dim) theta, and (S, V)
        vignette effects, each drawn from its exact conditional given its row, with the number of
        rejection attempts made. A first attempt is made beside the integral
        (:func:`_log_marginals`); the effects it leaves undrawn are drawn by :func:`_draw_pending`."""
        unpacked = self.unpack(theta)
        n_draws, n_vignettes = unpacked[0].size, self.start.size - 1
        effects = np.empty((n_draws, n_vignettes))
        drawn = np.zeros((n_draws, n_vignettes), dtype=bool)
        uniforms = rng.uniform(size=(n_draws, n_vignettes, 3))
        kernel_threads()
        likelihood, _ = _log_marginals(
            unpacked, self.data, self.nodes, self.log_weights, self.init, uniforms, effects, drawn
        )
        del uniforms
        pending_draw, pending_vignette = np.nonzero(~drawn)
        retries = _draw_pending(self, unpacked, rng, effects, pending_draw, pending_vignette)
        return likelihood + self.log_prior(theta), effects, effects.size + retries

    def find_mode(self) -> tuple[np.ndarray, np.ndarray]:
        """The marginal posterior's mode and the inverse of the negative Hessian there.

        Newton's method with a backtracking line search, its gradient and Hessian by central
        differences (each iteration's stencil evaluated in one parallel batch)."""
        x = np.zeros(self.dim)
        x[0], x[1] = self._start
        value = float(self.log_density(x)[0])
        for _ in range(_MODE_ITERATIONS_MAX):
            gradient, hessian = self.derivatives(x)
            try:
                factor = np.linalg.cholesky(-hessian)
                step = np.linalg.solve(factor.T, np.linalg.solve(factor, gradient))
            except np.linalg.LinAlgError:  # not concave here: a gradient step
                step = gradient / max(1.0, float(np.abs(gradient).max()))
            step *= min(1.0, _MODE_STEP_MAX / max(float(np.abs(step).max()), 1e-300))
            length = 1.0
            while True:
                candidate = x + length * step
                candidate_value = float(self.log_density(candidate)[0])
                if candidate_value >= value or length < 1e-6:
                    break
                length /= 2.0
            moved = float(np.abs(candidate - x).max())
            x, value = candidate, candidate_value
            if moved < _MODE_TOL:
                break
        _, hessian = self.derivatives(x)
        try:
            covariance = np.linalg.inv(-hessian)
            np.linalg.cholesky(covariance)
        except np.linalg.LinAlgError:
            raise np.linalg.LinAlgError(
                "the marginal posterior's Hessian at its mode is not negative definite"
            ) from None
        return x, (covariance + covariance.T) / 2.0

    def derivatives(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Central-difference gradient and Hessian of log p(theta | y) at x (one batch of points)."""
        d, h = self.dim, _HESSIAN_STEP
        eye = np.eye(d) * h
        points = [x]
        for i in range(d):
            points += [x + eye[i], x - eye[i]]
            for j in range(i + 1, d):
                points += [x + eye[i] + eye[j], x + eye[i] - eye[j], x - eye[i] + eye[j], x - eye[i] - eye[j]]
        values = self.log_density(np.array(points), warm_start=False)
        centre, k = values[0], 1
        gradient, hessian = np.empty(d), np.empty((d, d))
        for i in range(d):
            gradient[i] = (values[k] - values[k + 1]) / (2.0 * h)
            hessian[i, i] = (values[k] - 2.0 * centre + values[k + 1]) / h**2
            k += 2
            for j in range(i + 1, d):
                hessian[i, j] = hessian[j, i] = (values[k] - values[k + 1] - values[k + 2] + values[k + 3]) / (
                    4.0 * h**2
                )
                k += 4
        return gradient, hessian


def _student_t(rng: np.random.Generator, mode, covariance, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Draws of the multivariate t proposal and their log density (up to a constant)."""
    d = mode.size
    chol = np.linalg.cholesky(covariance)
    z = rng.standard_normal((size, d))
    scale = np.sqrt(PROPOSAL_DF / rng.chisquare(PROPOSAL_DF, size))
    draws = mode + (z @ chol.T) * scale[:, None]
    solved = np.linalg.solve(chol, (draws - mode).T).T
    log_q = -(PROPOSAL_DF + d) / 2.0 * np.log1p(np.sum(solved**2, axis=1) / PROPOSAL_DF)
    return draws, log_q


def sample_collapsed(
    cells, prior_nu: float, prior_scale: float, chains: int, draws: int, tune: int, seed: int, meter=None
) -> CollapsedDraws:
    """Sample the hierarchical model's posterior by the collapsed sampler (module doc).

    ``tune`` draws of each chain are discarded (the chains start at a proposal draw; an
    independence sampler needs no adaptation). ``meter`` (optional) is called with the number of
    draws done so far. Every random number comes from ``numpy.random.default_rng(seed)``.
    """
    rng = np.random.default_rng(seed)
    posterior = CollapsedPosterior(cells, prior_nu, prior_scale)
    mode, covariance = posterior.find_mode()
    # Every proposal is independent of the chain, so all are drawn at once and evaluated in blocks,
    # each proposal with its vignette effects: a chain that accepts a proposal moves to it and its
    # effects, one that rejects it stays (an independence sampler on (theta, u) whose proposal
    # draws u from p(u | theta, y): its acceptance ratio is theta's marginal one, Tierney 1994).
    length = tune + draws
    proposals, log_q = _student_t(rng, mode, covariance, chains * length)
    log_uniform = np.log(rng.uniform(size=(chains, length)))
    n_vignettes = cells.n_vignettes
    u = np.empty((chains, draws, n_vignettes))
    current_u = np.empty((chains, n_vignettes))  # the effects of each chain's current proposal
    current = np.zeros(chains, dtype=np.int64)
    chosen = np.zeros((chains, length), dtype=np.int64)
    accepted = np.zeros((chains, length), dtype=bool)
    log_ratio = np.empty(chains * length)
    attempts = 0
    # In blocks: numba's thread count (core_share) can change between them, and the meter moves.
    # Newton keeps starting at the mode's vignette modes.
    for first in range(0, proposals.shape[0], _PROPOSAL_BLOCK):
        block = slice(first, first + _PROPOSAL_BLOCK)
        log_target, effects, block_attempts = posterior.log_density_and_effects(proposals[block], rng)
        log_ratio[block] = log_target - log_q[block]
        attempts += block_attempts
        for proposal in range(first, first + effects.shape[0]):
            c, i = divmod(proposal, length)
            if i == 0 or log_uniform[c, i] <= log_ratio[proposal] - log_ratio[c * length + current[c]]:
                current[c], accepted[c, i] = i, True
                current_u[c] = effects[proposal - first]
            chosen[c, i] = current[c]
            if i >= tune:
                u[c, i - tune] = current_u[c]
        if meter is not None:
            meter(min(first + _PROPOSAL_BLOCK, proposals.shape[0]))
    proposals = proposals.reshape(chains, length, -1)
    kept = np.take_along_axis(proposals, chosen[:, tune:, None], axis=1).reshape(chains * draws, -1)
    theta = posterior.unpack(kept)
    mu, sigma, beta, run_effect, judge_effect = theta
    if not posterior.with_beta:
        beta = rng.standard_normal(beta.size)
    shape = (chains, draws)
    return CollapsedDraws(
        mu=mu.reshape(shape),
        beta=beta.reshape(shape),
        sigma=sigma.reshape(shape),
        u=u,
        run_effect=run_effect.reshape(shape + (-1,)) if cells.n_runs > 1 else None,
        judge_effect=judge_effect.reshape(shape + (-1,)) if cells.n_judges > 1 else None,
        accepted=accepted[:, tune:],
        mode=mode,
        covariance=covariance,
        acceptance_rate=float(accepted[:, 1:].mean()),
        effect_attempts=attempts / (chains * length * n_vignettes),
    )


def _draw_pending(posterior: CollapsedPosterior, theta, rng, out: np.ndarray, pending_draw, pending_vignette) -> int:
    """Draw the vignette effects ``out[pending_draw[i], pending_vignette[i]]``, each from its exact
    conditional given its draw of ``theta`` (``CollapsedPosterior.unpack``'s tuple), by rejection
    attempts (:func:`_draw_effects`) until every one is accepted; returns the number of attempts.
    Pairs are taken in blocks of about :data:`_EFFECT_BLOCK`, which bounds the memory of the
    uniforms (a block's rejected pairs are retried until all are drawn)."""
    attempts = 0
    for first in range(0, pending_draw.size, _EFFECT_BLOCK):
        draw_block = np.ascontiguousarray(pending_draw[first : first + _EFFECT_BLOCK], dtype=np.int64)
        vignette_block = np.ascontiguousarray(pending_vignette[first : first + _EFFECT_BLOCK], dtype=np.int64)
        while draw_block.size:
            attempts += draw_block.size
            uniforms = rng.uniform(size=(draw_block.size, 3))
            accepted = np.zeros(draw_block.size, dtype=bool)
            kernel_threads()
            _draw_effects(theta, posterior.data, posterior.init, draw_block, vignette_block, uniforms, out, accepted)
            draw_block, vignette_block = draw_block[~accepted], vignette_block[~accepted]
    return attempts
