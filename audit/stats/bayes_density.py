"""Hand-derived log densities and gradients of audit's PyMC models, compiled by numba for nutpie.

The PyMC models are the definitions: :func:`honestci.audit.stats.bayes._build_hierarchical_model` (the
hierarchical win rate, documented below), :func:`honestci.audit.stats.bayes_compare._model` (the joint model of
two systems) and the pooled Beta-binomial of :func:`honestci.audit.stats.bayes.fit_pooled_beta_binomial` (each
documented beside its kernel). This module writes the same functions out by hand so that nutpie
can sample them without PyTensor: PyTensor graphs compiled by nutpie's numba backend are not cached
across processes (6-19 s of compiling in every new process, bench/README.md), whereas these
``cache=True`` kernels are compiled once and then loaded from numba's on-disk cache (~0.02 s).
nutpie calls them through its C callback ABI, so chains run in its Rust threads without the GIL.

Unconstrained parameter vector ``x`` (the order of ``model.initial_point()``)::

    [mu, beta, s = log(sigma), theta_1..theta_V, run_raw_1..run_raw_R, judge_raw_1..judge_raw_J]

with ``theta = vignette_logit`` (centred) or ``u_std`` (non-centred), run/judge blocks present only
with two or more levels. Log density (PyMC's ``model.logp()`` on the transformed space, with
normalising constants and the log-transform Jacobian ``+ s`` of sigma)::

    log N(mu | 0, 1.5) + log N(beta | 0, 1) + s + sigma_prior(sigma)
      + sum_v log N(theta_v | mu, sigma)   [centred]   or   sum_v log N(theta_v | 0, 1)
      + sum_r log N(run_raw_r | 0, 1) + sum_j log N(judge_raw_j | 0, 1)
      + sum_cells w eta - n log(1 + e^eta),
    eta = mu + u_v + beta o + (run_raw_r - mean run_raw) + (judge_raw_j - mean judge_raw),
    u_v = theta_v - mu (centred) or sigma theta_v (non-centred),
    sigma_prior = -(nu + 1)/2 log(1 + (sigma/scale)^2 / nu)  (nu > 0), -(sigma/scale)^2 / 2 (nu = 0).

Gradient, with r_c = w_c - n_c expit(eta_c) (d loglik / d eta_c) and R_v, R_r, R_j its sums over
the cells of vignette v, run r, judge j: d/dbeta = sum_c r_c o_c + prior; centred
d/dtheta_v = R_v - z_v/sigma, d/dmu = sum_v z_v/sigma + prior, d/ds = sum_v (z_v^2 - 1) + 1 +
d sigma_prior/ds with z_v = (theta_v - mu)/sigma; non-centred d/dtheta_v = sigma R_v - theta_v,
d/dmu = sum_c r_c + prior, d/ds = sigma sum_v theta_v R_v + 1 + d sigma_prior/ds; zero-sum
offsets d/draw_r = R_r - mean_r' R_r' - raw_r. d sigma_prior/ds = -(nu + 1) q / (nu + q) with
q = (sigma/scale)^2 (nu > 0), -q (nu = 0).

Validated against: PyMC's ``model.compile_logp()`` / ``model.compile_dlogp()`` (and the
deterministics) of the same models at random points, every variant (tests/test_bayes_density.py);
end to end, the pooled model's posterior against scipy.stats.beta (tests/test_bayes.py).

References: Hoffman & Gelman (2014), "The No-U-Turn Sampler", JMLR 15 (the sampler nutpie
implements); the models' references are in :mod:`honestci.audit.stats.bayes` and :mod:`honestci.audit.stats.bayes_compare`.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from honestci.audit.stats.numba_cache import cfunc_cached, njit_cached

_HALF_LOG_TWO_PI = 0.5 * math.log(2.0 * math.pi)
_LOG_MU_PRIOR_SD = math.log(1.5)  # mu ~ N(0, 1.5) in both PyMC models
_LOG_HALF_NORMAL_CONSTANT = 0.5 * math.log(2.0 / math.pi)


@njit_cached()
def _log1pexp(x: float) -> float:
    if x > 0.0:
        return x + math.log1p(math.exp(-x))
    return math.log1p(math.exp(x))


@njit_cached()
def _expit(x: float) -> float:
    if x >= 0.0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


#: Header of the packed data buffer (float64), followed by six blocks of n_cells values:
#: cell vignette index, order (+-1/2), run index, judge index, verdicts n, wins w.
HEADER = ("n_vignettes", "n_runs", "n_judges", "centred", "prior_nu", "prior_scale", "n_cells")
_HEADER_SIZE = len(HEADER)


def pack(
    vignette_index,
    order,
    run_index,
    judge_index,
    n,
    wins,
    n_vignettes: int,
    n_runs: int,
    n_judges: int,
    centred: bool,
    prior_nu: float,
    prior_scale: float,
) -> np.ndarray:
    """The model's data as one contiguous float64 buffer (header :data:`HEADER`, then the cells).

    One buffer (not a dict of arrays) because nutpie hands the compiled C callbacks a single
    data pointer.
    """
    header = [n_vignettes, n_runs, n_judges, float(centred), prior_nu, prior_scale, len(n)]
    blocks = [vignette_index, order, run_index, judge_index, n, wins]
    return np.ascontiguousarray(
        np.concatenate([np.asarray(header, float)] + [np.asarray(b, float).ravel() for b in blocks])
    )


def n_parameters(packed: np.ndarray) -> int:
    n_vignettes, n_runs, n_judges = (int(v) for v in packed[:3])
    return 3 + n_vignettes + (n_runs if n_runs > 1 else 0) + (n_judges if n_judges > 1 else 0)


@njit_cached()
def logp_and_gradient(x, grad, packed):
    """Write the gradient into ``grad`` and return the log density (see the module docstring)."""
    n_vignettes, n_runs, n_judges = int(packed[0]), int(packed[1]), int(packed[2])
    centred = packed[3] != 0.0
    nu, scale = packed[4], packed[5]
    n_cells = int(packed[6])
    start = _HEADER_SIZE
    cell_vignette = packed[start : start + n_cells]
    cell_order = packed[start + n_cells : start + 2 * n_cells]
    cell_run = packed[start + 2 * n_cells : start + 3 * n_cells]
    cell_judge = packed[start + 3 * n_cells : start + 4 * n_cells]
    cell_n = packed[start + 4 * n_cells : start + 5 * n_cells]
    cell_wins = packed[start + 5 * n_cells : start + 6 * n_cells]
    run_start = 3 + n_vignettes
    judge_start = run_start + (n_runs if n_runs > 1 else 0)
    for i in range(grad.shape[0]):
        grad[i] = 0.0
    mu, beta, log_sigma = x[0], x[1], x[2]
    sigma = math.exp(log_sigma)

    # priors of mu and beta, Jacobian of sigma's log transform, sigma's prior potential
    logp = (
        -0.5 * (mu / 1.5) ** 2 - _LOG_MU_PRIOR_SD - _HALF_LOG_TWO_PI - 0.5 * beta * beta - _HALF_LOG_TWO_PI + log_sigma
    )
    grad[0] = -mu / (1.5 * 1.5)
    grad[1] = -beta
    grad[2] = 1.0
    q = (sigma / scale) ** 2
    if nu > 0.0:
        logp += -(nu + 1.0) / 2.0 * math.log1p(q / nu)
        grad[2] += -(nu + 1.0) * q / (nu + q)
    else:
        logp += -q / 2.0
        grad[2] += -q

    # vignette effects' prior
    for v in range(n_vignettes):
        theta = x[3 + v]
        if centred:
            z = (theta - mu) / sigma
            logp += -0.5 * z * z - log_sigma - _HALF_LOG_TWO_PI
            grad[3 + v] = -z / sigma
            grad[0] += z / sigma
            grad[2] += z * z - 1.0
        else:
            logp += -0.5 * theta * theta - _HALF_LOG_TWO_PI
            grad[3 + v] = -theta

    # zero-sum run and judge offsets
    run_mean = 0.0
    if n_runs > 1:
        for r in range(n_runs):
            run_mean += x[run_start + r]
        run_mean /= n_runs
    judge_mean = 0.0
    if n_judges > 1:
        for j in range(n_judges):
            judge_mean += x[judge_start + j]
        judge_mean /= n_judges

    # quasi-binomial likelihood; residuals accumulated into the gradient
    residual_total = 0.0
    run_residual_total = 0.0
    judge_residual_total = 0.0
    for c in range(cell_n.shape[0]):
        v = int(cell_vignette[c])
        if centred:
            eta = mu + (x[3 + v] - mu)  # written as PyMC's graph does: mu + u with u = theta - mu
        else:
            eta = mu + sigma * x[3 + v]
        eta += beta * cell_order[c]
        if n_runs > 1:
            eta += x[run_start + int(cell_run[c])] - run_mean
        if n_judges > 1:
            eta += x[judge_start + int(cell_judge[c])] - judge_mean
        logp += cell_wins[c] * eta - cell_n[c] * _log1pexp(eta)
        residual = cell_wins[c] - cell_n[c] * _expit(eta)
        residual_total += residual
        grad[1] += residual * cell_order[c]
        if centred:
            grad[3 + v] += residual
        else:
            grad[3 + v] += sigma * residual
            grad[2] += sigma * x[3 + v] * residual
        if n_runs > 1:
            grad[run_start + int(cell_run[c])] += residual
            run_residual_total += residual
        if n_judges > 1:
            grad[judge_start + int(cell_judge[c])] += residual
            judge_residual_total += residual
    if not centred:
        grad[0] += residual_total
    if n_runs > 1:
        for r in range(n_runs):
            raw = x[run_start + r]
            logp += -0.5 * raw * raw - _HALF_LOG_TWO_PI
            grad[run_start + r] += -run_residual_total / n_runs - raw
    if n_judges > 1:
        for j in range(n_judges):
            raw = x[judge_start + j]
            logp += -0.5 * raw * raw - _HALF_LOG_TWO_PI
            grad[judge_start + j] += -judge_residual_total / n_judges - raw
    return logp


def parameter_blocks(n_vignettes: int, n_runs: int, n_judges: int, centred: bool) -> list[tuple[str, int]]:
    """(name, size) of each block of ``x``, named as PyMC's value variables (``initial_point()`` keys)."""
    blocks = [("mu", 1), ("beta", 1), ("sigma_log__", 1), ("vignette_logit" if centred else "u_std", n_vignettes)]
    if n_runs > 1:
        blocks.append(("run_raw", n_runs))
    if n_judges > 1:
        blocks.append(("judge_raw", n_judges))
    return blocks


def expanded_blocks(n_vignettes: int, n_runs: int, n_judges: int, centred: bool) -> list[tuple[str, int]]:
    """(name, size) of each block written by :func:`expand`: the parameters, then sigma, u and the
    centred offsets (the names PyMC gives its value variables and deterministics)."""
    blocks = parameter_blocks(n_vignettes, n_runs, n_judges, centred) + [("sigma", 1), ("u", n_vignettes)]
    if n_runs > 1:
        blocks.append(("run_effect", n_runs))
    if n_judges > 1:
        blocks.append(("judge_effect", n_judges))
    return blocks


@njit_cached()
def expand(x, out, packed):
    """Write x, sigma = exp(s), u and the zero-sum run/judge offsets into ``out`` (see expanded_blocks)."""
    n_vignettes, n_runs, n_judges = int(packed[0]), int(packed[1]), int(packed[2])
    centred = packed[3] != 0.0
    n_dim = x.shape[0]
    for i in range(n_dim):
        out[i] = x[i]
    sigma = math.exp(x[2])
    out[n_dim] = sigma
    position = n_dim + 1
    for v in range(n_vignettes):
        out[position + v] = x[3 + v] - x[0] if centred else sigma * x[3 + v]
    position += n_vignettes
    block = 3 + n_vignettes
    for size in (n_runs, n_judges):
        if size > 1:
            mean = 0.0
            for k in range(size):
                mean += x[block + k]
            mean /= size
            for k in range(size):
                out[position + k] = x[block + k] - mean
            position += size
            block += size


# nutpie's C ABI for a compiled model, as nutpie.compile_pymc builds it for PyTensor graphs:
# logp(dim, x*, grad*, logp*, data*) -> 0 ok, 3 / 4 non-finite gradient / log density, -1 wrong size;
# expand(dim, n_expanded, x*, out*, data*) -> 0 ok, -1 wrong size.
_LOGP_SIGNATURE = numba.types.int64(
    numba.types.uint64,
    numba.types.CPointer(numba.types.double),
    numba.types.CPointer(numba.types.double),
    numba.types.CPointer(numba.types.double),
    numba.types.voidptr,
)
_EXPAND_SIGNATURE = numba.types.int64(
    numba.types.uint64,
    numba.types.uint64,
    numba.types.CPointer(numba.types.double),
    numba.types.CPointer(numba.types.double),
    numba.types.voidptr,
)


@njit_cached()
def _finite_status(value, grad):
    """nutpie's status code: 0 ok, 3 a non-finite gradient, 4 a non-finite log density."""
    for i in range(grad.shape[0]):
        if not math.isfinite(grad[i]):
            return 3
    if not math.isfinite(value):
        return 4
    return 0


@cfunc_cached(_LOGP_SIGNATURE)
def logp_callback(dim, x_pointer, grad_pointer, logp_pointer, data_pointer):
    header = numba.carray(data_pointer, (_HEADER_SIZE,), np.float64)
    packed = numba.carray(data_pointer, (_HEADER_SIZE + 6 * int(header[6]),), np.float64)
    n_vignettes, n_runs, n_judges = int(header[0]), int(header[1]), int(header[2])
    n_dim = 3 + n_vignettes + (n_runs if n_runs > 1 else 0) + (n_judges if n_judges > 1 else 0)
    if dim != n_dim:
        return -1
    x = numba.carray(x_pointer, (n_dim,))
    grad = numba.carray(grad_pointer, (n_dim,))
    value = logp_and_gradient(x, grad, packed)
    logp_pointer[0] = value
    return _finite_status(value, grad)


@cfunc_cached(_EXPAND_SIGNATURE)
def expand_callback(dim, n_expanded, x_pointer, out_pointer, data_pointer):
    header = numba.carray(data_pointer, (_HEADER_SIZE,), np.float64)
    packed = numba.carray(data_pointer, (_HEADER_SIZE + 6 * int(header[6]),), np.float64)
    n_vignettes, n_runs, n_judges = int(header[0]), int(header[1]), int(header[2])
    runs, judges = (n_runs if n_runs > 1 else 0), (n_judges if n_judges > 1 else 0)
    n_dim = 3 + n_vignettes + runs + judges
    if dim != n_dim or n_expanded != n_dim + 1 + n_vignettes + runs + judges:
        return -1
    expand(numba.carray(x_pointer, (n_dim,)), numba.carray(out_pointer, (n_expanded,)), packed)
    return 0


def _compiled_model(logp, expand_function, packed: np.ndarray, n_dim: int, blocks, scalars, coords, dims):
    """nutpie's own ``CompiledPyMCModel`` (the object ``nutpie.compile_pymc_model`` returns) filled
    with hand-written C callbacks and their data buffer instead of a compiled PyTensor graph.

    ``nutpie.sample`` then runs it exactly as it runs a PyMC model: chains in parallel Rust threads
    without the GIL, the same trace layout and names. Initial points are PyMC's default for these
    models (support points, all 0 on the unconstrained space, plus U(-1, 1) jitter).
    """
    from nutpie.compile_pymc import CompiledPyMCModel

    packed.flags.writeable = False
    names = [name for name, _ in blocks]
    shapes = [() if name in scalars else (size,) for name, size in blocks]
    slices, position = [], 0
    for _, size in blocks:
        slices.append(slice(position, position + size))
        position += size

    def initial_point(seed):
        return np.random.default_rng(seed).uniform(-1.0, 1.0, n_dim)

    return CompiledPyMCModel(
        compiled_logp_func=logp,
        compiled_expand_func=expand_function,
        initial_point_func=initial_point,
        shared_data={},
        user_data=packed,  # the callbacks' data pointer; the model object keeps it alive
        n_expanded=position,
        shape_info=(names, slices, shapes),
        logp_func=None,
        expand_func=None,
        _n_dim=n_dim,
        _shapes=dict(zip(names, shapes)),
        _coords=coords,
        dims=dims,
    )


def nutpie_model(cells, prior_nu: float, prior_scale: float, centred: bool):
    """The hierarchical model of :class:`honestci.audit.stats.bayes.WinRateCells` as a nutpie model (see _compiled_model)."""
    n_vignettes, n_runs, n_judges = cells.n_vignettes, cells.n_runs, cells.n_judges
    packed = pack(
        cells.vignette_index,
        cells.order,
        cells.run_index,
        cells.judge_index,
        cells.n,
        cells.wins,
        n_vignettes,
        n_runs,
        n_judges,
        centred,
        prior_nu,
        prior_scale,
    )
    coords = {"vignette": list(cells.vignette_labels)}
    dims = {"vignette_logit" if centred else "u_std": ("vignette",), "u": ("vignette",)}
    if n_runs > 1:
        coords["run"] = list(cells.run_labels)
        dims.update(run_raw=("run",), run_effect=("run",))
    if n_judges > 1:
        coords["judge"] = list(cells.judge_labels)
        dims.update(judge_raw=("judge",), judge_effect=("judge",))
    return _compiled_model(
        logp_callback,
        expand_callback,
        packed,
        n_parameters(packed),
        expanded_blocks(n_vignettes, n_runs, n_judges, centred),
        {"mu", "beta", "sigma_log__", "sigma"},
        coords,
        dims,
    )


# --------------------------------------------------------------------------------------------
# The joint model of two systems (honestci.audit.stats.bayes_compare._model)
# --------------------------------------------------------------------------------------------
# x = [mu, delta, beta, s_u = log sigma_u, s_w = log sigma_w, u_std_1..V, w_std_1..V];
# eta = mu + sigma_u u_std_v + (delta + sigma_w w_std_v) a + beta o  (a = 1 for system A);
# log density = log N(mu | 0, 1.5) + log N(delta | 0, 1) + log N(beta | 0, 1)
#   + log HalfNormal(sigma_u | 1) + s_u + log HalfNormal(sigma_w | 0.5) + s_w
#   + sum_v [log N(u_std_v | 0, 1) + log N(w_std_v | 0, 1)] + sum_cells w eta - n log(1 + e^eta).
# Gradient with r_c = w_c - n_c expit(eta_c), R_v = sum_{c in v} r_c, A_v = sum_{c in v} a_c r_c:
# d/ds_u = sigma_u sum_v u_std_v R_v + 1 - sigma_u^2; d/ds_w = sigma_w sum_v w_std_v A_v + 1 - (sigma_w/0.5)^2.
PAIRED_SIGMA_U_SCALE = 1.0
PAIRED_SIGMA_W_SCALE = 0.5
_PAIRED_HEADER_SIZE = 2  # n_vignettes, n_cells; then cell vignette, order, system, n, wins


def paired_pack(vignette_index, order, system, n, wins, n_vignettes: int) -> np.ndarray:
    blocks = [vignette_index, order, system, n, wins]
    return np.ascontiguousarray(
        np.concatenate([np.array([n_vignettes, len(n)], float)] + [np.asarray(b, float).ravel() for b in blocks])
    )


def paired_parameter_blocks(n_vignettes: int) -> list[tuple[str, int]]:
    return [
        ("mu", 1),
        ("delta", 1),
        ("beta", 1),
        ("sigma_u_log__", 1),
        ("sigma_w_log__", 1),
        ("u_std", n_vignettes),
        ("w_std", n_vignettes),
    ]


def paired_expanded_blocks(n_vignettes: int) -> list[tuple[str, int]]:
    return paired_parameter_blocks(n_vignettes) + [
        ("sigma_u", 1),
        ("sigma_w", 1),
        ("u", n_vignettes),
        ("w", n_vignettes),
    ]


@njit_cached()
def _log_half_normal(value, log_value, scale):
    return _LOG_HALF_NORMAL_CONSTANT - math.log(scale) - 0.5 * (value / scale) ** 2 + log_value


@njit_cached()
def paired_logp_and_gradient(x, grad, packed):
    n_vignettes, n_cells = int(packed[0]), int(packed[1])
    start = _PAIRED_HEADER_SIZE
    cell_vignette = packed[start : start + n_cells]
    cell_order = packed[start + n_cells : start + 2 * n_cells]
    cell_system = packed[start + 2 * n_cells : start + 3 * n_cells]
    cell_n = packed[start + 3 * n_cells : start + 4 * n_cells]
    cell_wins = packed[start + 4 * n_cells : start + 5 * n_cells]
    mu, delta, beta, log_sigma_u, log_sigma_w = x[0], x[1], x[2], x[3], x[4]
    sigma_u, sigma_w = math.exp(log_sigma_u), math.exp(log_sigma_w)
    logp = (
        -0.5 * (mu / 1.5) ** 2
        - _LOG_MU_PRIOR_SD
        - 0.5 * delta * delta
        - 0.5 * beta * beta
        - 3.0 * _HALF_LOG_TWO_PI
        + _log_half_normal(sigma_u, log_sigma_u, PAIRED_SIGMA_U_SCALE)
        + _log_half_normal(sigma_w, log_sigma_w, PAIRED_SIGMA_W_SCALE)
    )
    grad[0] = -mu / (1.5 * 1.5)
    grad[1] = -delta
    grad[2] = -beta
    grad[3] = 1.0 - (sigma_u / PAIRED_SIGMA_U_SCALE) ** 2
    grad[4] = 1.0 - (sigma_w / PAIRED_SIGMA_W_SCALE) ** 2
    u_start, w_start = 5, 5 + n_vignettes
    for v in range(n_vignettes):
        u_std, w_std = x[u_start + v], x[w_start + v]
        logp += -0.5 * (u_std * u_std + w_std * w_std) - 2.0 * _HALF_LOG_TWO_PI
        grad[u_start + v] = -u_std
        grad[w_start + v] = -w_std
    for c in range(n_cells):
        v = int(cell_vignette[c])
        system = cell_system[c]
        u_std, w_std = x[u_start + v], x[w_start + v]
        eta = mu + sigma_u * u_std + (delta + sigma_w * w_std) * system + beta * cell_order[c]
        logp += cell_wins[c] * eta - cell_n[c] * _log1pexp(eta)
        residual = cell_wins[c] - cell_n[c] * _expit(eta)
        grad[0] += residual
        grad[1] += residual * system
        grad[2] += residual * cell_order[c]
        grad[3] += sigma_u * u_std * residual
        grad[4] += sigma_w * w_std * residual * system
        grad[u_start + v] += sigma_u * residual
        grad[w_start + v] += sigma_w * residual * system
    return logp


@njit_cached()
def paired_expand(x, out, packed):
    n_vignettes = int(packed[0])
    n_dim = x.shape[0]
    for i in range(n_dim):
        out[i] = x[i]
    sigma_u, sigma_w = math.exp(x[3]), math.exp(x[4])
    out[n_dim], out[n_dim + 1] = sigma_u, sigma_w
    for v in range(n_vignettes):
        out[n_dim + 2 + v] = sigma_u * x[5 + v]
        out[n_dim + 2 + n_vignettes + v] = sigma_w * x[5 + n_vignettes + v]


@cfunc_cached(_LOGP_SIGNATURE)
def paired_logp_callback(dim, x_pointer, grad_pointer, logp_pointer, data_pointer):
    header = numba.carray(data_pointer, (_PAIRED_HEADER_SIZE,), np.float64)
    packed = numba.carray(data_pointer, (_PAIRED_HEADER_SIZE + 5 * int(header[1]),), np.float64)
    n_dim = 5 + 2 * int(header[0])
    if dim != n_dim:
        return -1
    grad = numba.carray(grad_pointer, (n_dim,))
    value = paired_logp_and_gradient(numba.carray(x_pointer, (n_dim,)), grad, packed)
    logp_pointer[0] = value
    return _finite_status(value, grad)


@cfunc_cached(_EXPAND_SIGNATURE)
def paired_expand_callback(dim, n_expanded, x_pointer, out_pointer, data_pointer):
    header = numba.carray(data_pointer, (_PAIRED_HEADER_SIZE,), np.float64)
    packed = numba.carray(data_pointer, (_PAIRED_HEADER_SIZE + 5 * int(header[1]),), np.float64)
    n_vignettes = int(header[0])
    n_dim = 5 + 2 * n_vignettes
    if dim != n_dim or n_expanded != n_dim + 2 + 2 * n_vignettes:
        return -1
    paired_expand(numba.carray(x_pointer, (n_dim,)), numba.carray(out_pointer, (n_expanded,)), packed)
    return 0


def paired_nutpie_model(labels, data: dict[str, np.ndarray]):
    """The joint model of :mod:`honestci.audit.stats.bayes_compare` (its ``_cells`` output) as a nutpie model."""
    n_vignettes = len(labels)
    packed = paired_pack(
        data["cell_vignette"], data["cell_order"], data["cell_system"], data["cell_n"], data["cell_wins"], n_vignettes
    )
    dims = {name: ("vignette",) for name in ("u_std", "w_std", "u", "w")}
    return _compiled_model(
        paired_logp_callback,
        paired_expand_callback,
        packed,
        5 + 2 * n_vignettes,
        paired_expanded_blocks(n_vignettes),
        {"mu", "delta", "beta", "sigma_u_log__", "sigma_w_log__", "sigma_u", "sigma_w"},
        {"vignette": list(labels)},
        dims,
    )


# --------------------------------------------------------------------------------------------
# The pooled conjugate model (honestci.audit.stats.bayes.fit_pooled_beta_binomial): the same C-callback path,
# checked end to end against a closed-form posterior
# --------------------------------------------------------------------------------------------
# x = [z = logit p]; log density = log Beta(p | a, b) + log p + log(1 - p)  (the logit transform's
# Jacobian) + w z - n log(1 + e^z) = a log p + b log(1 - p) - log B(a, b) + w z - n log(1 + e^z),
# with log p = -log(1 + e^-z), log(1 - p) = -log(1 + e^z); d/dz = a (1 - p) - b p + w - n p.
@njit_cached()
def pooled_logp_and_gradient(x, grad, packed):
    a, b, n, wins = packed[0], packed[1], packed[2], packed[3]
    z = x[0]
    p = _expit(z)
    log_beta_function = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    grad[0] = a * (1.0 - p) - b * p + wins - n * p
    return -a * _log1pexp(-z) - b * _log1pexp(z) - log_beta_function + wins * z - n * _log1pexp(z)


@cfunc_cached(_LOGP_SIGNATURE)
def pooled_logp_callback(dim, x_pointer, grad_pointer, logp_pointer, data_pointer):
    if dim != 1:
        return -1
    grad = numba.carray(grad_pointer, (1,))
    value = pooled_logp_and_gradient(numba.carray(x_pointer, (1,)), grad, numba.carray(data_pointer, (4,), np.float64))
    logp_pointer[0] = value
    return _finite_status(value, grad)


@cfunc_cached(_EXPAND_SIGNATURE)
def pooled_expand_callback(dim, n_expanded, x_pointer, out_pointer, data_pointer):
    if dim != 1 or n_expanded != 2:
        return -1
    out_pointer[0] = x_pointer[0]
    out_pointer[1] = _expit(x_pointer[0])
    return 0


def pooled_nutpie_model(a: float, b: float, n: float, wins: float):
    """p ~ Beta(a, b) with the quasi-binomial likelihood of ``wins`` in ``n``, as a nutpie model."""
    packed = np.array([a, b, n, wins], dtype=np.float64)
    return _compiled_model(
        pooled_logp_callback,
        pooled_expand_callback,
        packed,
        1,
        [("p_logodds__", 1), ("p", 1)],
        {"p_logodds__", "p"},
        {},
        {},
    )
