"""Hand-derived log densities and gradients of audit's PyMC models, compiled by numba for nutpie.

The PyMC models are the definitions: :func:`honestci.audit.stats.bayesian.model._build_hierarchical_model` (the
hierarchical win rate, documented below), :func:`honestci.audit.stats.bayesian.compare._model` (the joint model of
two systems) and :func:`honestci.audit.stats.bayesian.pooled._build_pooled_model` (the pooled Beta-binomial; each
documented beside its kernel). This module writes the same functions out by hand so that nutpie
can sample them without PyTensor: PyTensor graphs compiled by nutpie's numba backend are not cached
across processes (6-19 s of compiling in every new process, bench/README.md), whereas these
``cache=True`` kernels are compiled once and then loaded from numba's on-disk cache (~0.02 s).

Sampling interface: nutpie's public Python-function model, ``nutpie.compiled_pyfunc.from_pyfunc``
(the route nutpie's own JAX backend takes), with each density a numba *gufunc*
``(packed data, x) -> (log density, gradient)`` bound to its data by ``functools.partial``. nutpie
calls it from its Rust chain threads under the GIL; a gufunc call runs no Python frame, which
matters: each call from a Rust thread gets a fresh Python thread state, and the first Python frame
on it maps (and its release unmaps) a new frame stack, which made a Python or ``numba.njit``
callback 2-3x as expensive per gradient (bench/README.md).

Provenance: each density records, as a :class:`Derivation`, the PyMC functions it was derived from
and their :func:`model_fingerprint` at the time. Before sampling, the fingerprint of the functions
in use is recomputed (~40 ms the first time in a process, ~4 ms after); when it differs (someone edited the PyMC model) the density refuses
itself with :class:`honestci.audit.errors.DensityMismatchError`, and ``sampler="auto"`` samples
the PyMC model instead, with a warning, rather than silently ignoring the edit.

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
deterministics) of the same models at random points, every variant, relative 1e-9; the same tests
check the recorded fingerprints (tests/test_bayes_density.py); end to end, the pooled model's
posterior against scipy.stats.beta and the hierarchical one against PyMC's NUTS (tests/test_bayes.py).

References: Hoffman & Gelman (2014), "The No-U-Turn Sampler", JMLR 15 (the sampler nutpie
implements); the models' references are in :mod:`honestci.audit.stats.bayesian.hierarchical` and :mod:`honestci.audit.stats.bayesian.compare`.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import inspect
import math
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from honestci.audit.errors import DensityMismatchError
from honestci.audit.stats.bayesian.logistic_kernels import expit as _expit
from honestci.audit.stats.bayesian.logistic_kernels import log1pexp as _log1pexp
from honestci.audit.stats.bayesian.logistic_kernels import log1pexp_and_expit as _log1pexp_and_expit
from honestci.audit.stats.numba_cache import guvectorize_cached, njit_cached


# --------------------------------------------------------------------------------------------
# Provenance: which PyMC definition each density was derived from
# --------------------------------------------------------------------------------------------
def model_fingerprint(functions: Sequence[Callable]) -> str:
    """SHA-256 of the functions' syntax trees, less docstrings, comments, layout and annotations.

    What a density was derived from is code, so the code is what is fingerprinted: any edit that
    can change the PyMC model changes the fingerprint, while rewording a comment or reformatting
    does not. The tree is written out by :func:`_canonical` (node types and fields, not
    ``ast.dump``, whose format changes between Python versions).

    Raises
    ------
    OSError, TypeError
        When a function's source is not available (e.g. an install without ``.py`` files).
    """
    digest = hashlib.sha256()
    for function in functions:
        digest.update(_canonical(ast.parse(textwrap.dedent(inspect.getsource(function)))).encode())
    return digest.hexdigest()


_UNFINGERPRINTED_FIELDS = frozenset({"annotation", "returns", "type_comment", "ctx"})


def _canonical(node) -> str:
    if isinstance(node, list):
        return "[" + ",".join(_canonical(item) for item in node) + "]"
    if not isinstance(node, ast.AST):
        return repr(node)
    fields = []
    for name, value in ast.iter_fields(node):
        if name == "body" and _has_docstring(node):
            value = value[1:]
        if name in _UNFINGERPRINTED_FIELDS or value is None or value == []:
            continue  # absent and empty fields differ between Python versions' trees
        fields.append(f"{name}={_canonical(value)}")
    return f"{type(node).__name__}({','.join(fields)})"


def _has_docstring(node: ast.AST) -> bool:
    if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) or not node.body:
        return False
    first = node.body[0]
    return isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)


@dataclass(frozen=True)
class Derivation:
    """The PyMC definition a density was derived from, and its :func:`model_fingerprint` then.

    ``functions`` are ``"module:attribute"`` paths, looked up when checked, so the check sees the
    definition in use (an edited file or a replaced attribute alike).
    """

    name: str  # of the module constant that records it
    model: str
    functions: tuple[str, ...]
    fingerprint: str

    def current_fingerprint(self) -> str:
        resolved = []
        for path in self.functions:
            module, attribute = path.split(":")
            resolved.append(getattr(importlib.import_module(module), attribute))
        return model_fingerprint(resolved)

    def check(self) -> None:
        """Raise :class:`~honestci.audit.errors.DensityMismatchError` unless the definition in
        use still has the recorded fingerprint."""
        try:
            current = self.current_fingerprint()
        except (OSError, TypeError) as error:  # no source to fingerprint: cannot vouch for the density
            current = f"unknown ({type(error).__name__}: {error})"
        if current != self.fingerprint:
            raise DensityMismatchError(
                f"The hand-derived density of the {self.model} no longer matches its PyMC definition "
                f"({', '.join(self.functions)}): fingerprint {current}, recorded {self.fingerprint}.",
                fix=f"Re-derive the kernel in audit/stats/bayesian/density.py from the edited model, check it "
                f"with tests/test_bayes_density.py, then set {self.name}'s fingerprint to the new one "
                "(the test prints it). Meanwhile sampler='pymc' samples the PyMC model itself.",
            )


HIERARCHICAL = Derivation(
    "HIERARCHICAL",
    "hierarchical win-rate model",
    (
        "honestci.audit.stats.bayesian.model:_build_hierarchical_model",
        "honestci.audit.stats.bayesian.model:_sigma_with_prior",
        "honestci.audit.stats.bayesian.model:quasi_binomial_loglik",
    ),
    "c9e4540ba0a1f774435de6b141a10eeef8b9c0112ad7c17e7591af592b060813",
)
PAIRED = Derivation(
    "PAIRED",
    "joint model of two systems",
    ("honestci.audit.stats.bayesian.compare:_model", "honestci.audit.stats.bayesian.model:quasi_binomial_loglik"),
    "048c82113c393a4b6f13e479e656d2c173723ca66e1f1d5e52c346375be7f8fa",
)
POOLED = Derivation(
    "POOLED",
    "pooled Beta-binomial model",
    (
        "honestci.audit.stats.bayesian.pooled:_build_pooled_model",
        "honestci.audit.stats.bayesian.model:quasi_binomial_loglik",
    ),
    "3daf63f522dee988a92ca39edaf8ac254f812612e5d72202b0af8f0c631f415d",
)

# --------------------------------------------------------------------------------------------
# The hierarchical win-rate model (honestci.audit.stats.bayesian.model._build_hierarchical_model)
# --------------------------------------------------------------------------------------------
_HALF_LOG_TWO_PI = 0.5 * math.log(2.0 * math.pi)
_LOG_MU_PRIOR_SD = math.log(1.5)  # mu ~ N(0, 1.5) in both PyMC models
_LOG_HALF_NORMAL_CONSTANT = 0.5 * math.log(2.0 / math.pi)


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

    One buffer (not a dict of arrays): every density is a gufunc of (packed, x), which one
    ``functools.partial`` binds to its data.
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
def _as_sampled(logp, grad):
    """``logp``, or -inf where ``logp`` or the gradient is not finite: nutpie then rejects the point
    as a divergence (its rule for a non-finite log density) instead of integrating a NaN gradient."""
    for i in range(grad.shape[0]):
        if not math.isfinite(grad[i]):
            return -math.inf
    return logp if math.isfinite(logp) else -math.inf


#: A point with a coordinate (unconstrained scale) beyond this is rejected, -inf, before any
#: arithmetic. There the priors leave nothing to sample (every location prior is below log density
#: -2e4 at 300; sigma = e^+-300 is ruled out by prior and data), and inside it no operation of these
#: kernels overflows (sigma <= e^300, z^2 <= 1e267). That matters because numpy checks the
#: floating-point flags after every gufunc call: an overflow in a divergent trajectory would
#: otherwise print a RuntimeWarning from nutpie's threads, or under ``-W error`` kill the chain.
MAX_ABS_COORDINATE = 300.0


@njit_cached()
def _rejected(x, logp_out, grad) -> bool:
    """Set (-inf, 0) and return True when ``x`` leaves the box of :data:`MAX_ABS_COORDINATE` (or is NaN)."""
    for i in range(x.shape[0]):
        if not abs(x[i]) <= MAX_ABS_COORDINATE:
            logp_out[0] = -math.inf
            grad[:] = 0.0
            return True
    return False


#: numba signature and layout of every density: a gufunc (packed data, x) -> (log density, gradient).
_GUFUNC_SIGNATURE = (["void(float64[:], float64[:], float64[:], float64[:])"], "(m),(n)->(),(n)")


@guvectorize_cached(*_GUFUNC_SIGNATURE)
def logp_and_gradient(packed, x, logp_out, grad):
    """``logp_and_gradient(packed, x)`` -> (log density, gradient) at ``x`` (module docstring; non-finite
    values as :func:`_as_sampled` says, points outside :data:`MAX_ABS_COORDINATE` as -inf)."""
    if _rejected(x, logp_out, grad):
        return
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
    grad[:] = 0.0
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
        softplus, p = _log1pexp_and_expit(eta)
        logp += cell_wins[c] * eta - cell_n[c] * softplus
        residual = cell_wins[c] - cell_n[c] * p
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
    logp_out[0] = _as_sampled(logp, grad)


#: Scalar value variables of the hierarchical model (the others are vectors, one entry per level).
SCALARS = frozenset({"mu", "beta", "sigma_log__"})


def parameter_blocks(n_vignettes: int, n_runs: int, n_judges: int, centred: bool) -> list[tuple[str, int]]:
    """(name, size) of each block of ``x``, named as PyMC's value variables (``initial_point()`` keys)."""
    blocks = [("mu", 1), ("beta", 1), ("sigma_log__", 1), ("vignette_logit" if centred else "u_std", n_vignettes)]
    if n_runs > 1:
        blocks.append(("run_raw", n_runs))
    if n_judges > 1:
        blocks.append(("judge_raw", n_judges))
    return blocks


def _split(x: np.ndarray, blocks: list[tuple[str, int]], scalars: frozenset) -> dict[str, np.ndarray]:
    """The blocks of draws ``x`` (..., n_dim) by name: shape (...) for a scalar, (..., size) otherwise."""
    named, position = {}, 0
    for name, size in blocks:
        named[name] = x[..., position] if name in scalars else x[..., position : position + size]
        position += size
    return named


def expand(x: np.ndarray, packed: np.ndarray) -> dict[str, np.ndarray]:
    """PyMC's value variables and deterministics of draws ``x`` (..., n_dim): the blocks of
    :func:`parameter_blocks`, sigma = exp(s), u (theta - mu centred, sigma theta non-centred) and
    the zero-sum run and judge offsets (raw - mean raw)."""
    n_vignettes, n_runs, n_judges, centred = int(packed[0]), int(packed[1]), int(packed[2]), bool(packed[3])
    named = _split(x, parameter_blocks(n_vignettes, n_runs, n_judges, centred), SCALARS)
    named["sigma"] = np.exp(named["sigma_log__"])
    if centred:
        named["u"] = named["vignette_logit"] - named["mu"][..., None]
    else:
        named["u"] = named["sigma"][..., None] * named["u_std"]
    for raw, effect in (("run_raw", "run_effect"), ("judge_raw", "judge_effect")):
        if raw in named:
            named[effect] = named[raw] - named[raw].mean(axis=-1, keepdims=True)
    return named


@dataclass(frozen=True)
class NutpieDensity:
    """A hand-derived density as nutpie samples it, and how its draws get PyMC's names.

    nutpie keeps each draw as the raw vector ``x``: its per-draw expand function is
    ``dict.fromkeys``, which runs no Python frame (a Python one cost a third of the sampling time,
    bench/README.md). :meth:`named` then computes PyMC's value variables and deterministics for all
    draws at once with ``expand``.
    """

    model: Any  # nutpie.compiled_pyfunc.PyFuncModel
    expand: Callable[[np.ndarray], dict[str, np.ndarray]]
    dims: dict[str, tuple[str, ...]]
    coords: dict[str, list]

    def named(self, idata):
        """``idata`` with its posterior of ``x`` replaced by the named variables (dims, coords as PyMC's)."""
        import xarray as xr

        x = idata.posterior["x"]
        posterior = xr.Dataset(
            {
                name: (("chain", "draw", *self.dims.get(name, ())), values)
                for name, values in self.expand(x.values).items()
            },
            coords={"chain": x["chain"].values, "draw": x["draw"].values, **self.coords},
        )
        del idata["posterior"]
        idata.add_groups(posterior=posterior)
        return idata


def _nutpie_density(derivation, kernel, expand_draws, packed: np.ndarray, n_dim: int, dims, coords) -> NutpieDensity:
    """``kernel`` (a gufunc (packed, x) -> (log density, gradient)) as a nutpie model, built through
    nutpie's public Python-function interface ``nutpie.compiled_pyfunc.from_pyfunc``.

    Refuses (:class:`honestci.audit.errors.DensityMismatchError`) when ``derivation``, the PyMC
    model the kernel was written from, has changed since. nutpie calls the ufunc bound to
    ``packed`` once per gradient evaluation from its Rust chain threads, holding the GIL for the
    call. Initial points are PyMC's default for these models (support points, all 0 on the
    unconstrained space, plus U(-1, 1) jitter), drawn from the seed nutpie passes.
    """
    derivation.check()
    from nutpie.compiled_pyfunc import from_pyfunc

    def initial_point(seed):
        return np.random.default_rng(seed).uniform(-1.0, 1.0, n_dim)

    model = from_pyfunc(
        n_dim,
        lambda: partial(kernel.ufunc, packed),
        lambda seed1, seed2, chain: partial(dict.fromkeys, ("x",)),  # {"x": draw}; nothing random
        [np.dtype(np.float64)],
        [(n_dim,)],
        ["x"],
        make_initial_point_fn=initial_point,
    )
    return NutpieDensity(model, partial(expand_draws, packed=packed), dims, coords)


def nutpie_model(cells, prior_nu: float, prior_scale: float, centred: bool) -> NutpieDensity:
    """The hierarchical model of :class:`honestci.audit.stats.bayesian.cells.WinRateCells` for nutpie (see _nutpie_density)."""
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
    return _nutpie_density(HIERARCHICAL, logp_and_gradient, expand, packed, n_parameters(packed), dims, coords)


# --------------------------------------------------------------------------------------------
# The joint model of two systems (honestci.audit.stats.bayesian.compare._model)
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


PAIRED_SCALARS = frozenset({"mu", "delta", "beta", "sigma_u_log__", "sigma_w_log__"})


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


@njit_cached()
def _log_half_normal(value, log_value, scale):
    return _LOG_HALF_NORMAL_CONSTANT - math.log(scale) - 0.5 * (value / scale) ** 2 + log_value


@guvectorize_cached(*_GUFUNC_SIGNATURE)
def paired_logp_and_gradient(packed, x, logp_out, grad):
    """``paired_logp_and_gradient(packed, x)`` -> (log density, gradient), as :func:`logp_and_gradient`."""
    if _rejected(x, logp_out, grad):
        return
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
        softplus, p = _log1pexp_and_expit(eta)
        logp += cell_wins[c] * eta - cell_n[c] * softplus
        residual = cell_wins[c] - cell_n[c] * p
        grad[0] += residual
        grad[1] += residual * system
        grad[2] += residual * cell_order[c]
        grad[3] += sigma_u * u_std * residual
        grad[4] += sigma_w * w_std * residual * system
        grad[u_start + v] += sigma_u * residual
        grad[w_start + v] += sigma_w * residual * system
    logp_out[0] = _as_sampled(logp, grad)


def paired_expand(x: np.ndarray, packed: np.ndarray) -> dict[str, np.ndarray]:
    """PyMC's value variables and deterministics of draws ``x`` (..., n_dim): the blocks of
    :func:`paired_parameter_blocks`, sigma_u, sigma_w = exp(s_u), exp(s_w), u = sigma_u u_std and
    w = sigma_w w_std."""
    named = _split(x, paired_parameter_blocks(int(packed[0])), PAIRED_SCALARS)
    named["sigma_u"], named["sigma_w"] = np.exp(named["sigma_u_log__"]), np.exp(named["sigma_w_log__"])
    named["u"] = named["sigma_u"][..., None] * named["u_std"]
    named["w"] = named["sigma_w"][..., None] * named["w_std"]
    return named


def paired_nutpie_model(labels, data: dict[str, np.ndarray]) -> NutpieDensity:
    """The joint model of :mod:`honestci.audit.stats.bayesian.compare` (its ``_cells`` output) for nutpie."""
    n_vignettes = len(labels)
    packed = paired_pack(
        data["cell_vignette"], data["cell_order"], data["cell_system"], data["cell_n"], data["cell_wins"], n_vignettes
    )
    dims = {name: ("vignette",) for name in ("u_std", "w_std", "u", "w")}
    return _nutpie_density(
        PAIRED, paired_logp_and_gradient, paired_expand, packed, 5 + 2 * n_vignettes, dims, {"vignette": list(labels)}
    )


# --------------------------------------------------------------------------------------------
# The pooled conjugate model (honestci.audit.stats.bayesian.pooled._build_pooled_model): the same sampling
# path, checked end to end against a closed-form posterior
# --------------------------------------------------------------------------------------------
# x = [z = logit p]; log density = log Beta(p | a, b) + log p + log(1 - p)  (the logit transform's
# Jacobian) + w z - n log(1 + e^z) = a log p + b log(1 - p) - log B(a, b) + w z - n log(1 + e^z),
# with log p = -log(1 + e^-z), log(1 - p) = -log(1 + e^z); d/dz = a (1 - p) - b p + w - n p.
@guvectorize_cached(*_GUFUNC_SIGNATURE)
def pooled_logp_and_gradient(packed, x, logp_out, grad):
    """``pooled_logp_and_gradient(packed, x)`` -> (log density, gradient), as :func:`logp_and_gradient`."""
    if _rejected(x, logp_out, grad):
        return
    a, b, n, wins = packed[0], packed[1], packed[2], packed[3]
    z = x[0]
    p = _expit(z)
    log_beta_function = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    grad[0] = a * (1.0 - p) - b * p + wins - n * p
    logp = -a * _log1pexp(-z) - b * _log1pexp(z) - log_beta_function + wins * z - n * _log1pexp(z)
    logp_out[0] = _as_sampled(logp, grad)


def pooled_expand(x: np.ndarray, packed: np.ndarray) -> dict[str, np.ndarray]:
    """p_logodds__ = z and p = expit(z) of draws ``x`` (..., 1)."""
    z = x[..., 0]
    return {"p_logodds__": z, "p": 1.0 / (1.0 + np.exp(-z))}


def pooled_nutpie_model(a: float, b: float, n: float, wins: float) -> NutpieDensity:
    """p ~ Beta(a, b) with the quasi-binomial likelihood of ``wins`` in ``n``, for nutpie."""
    return _nutpie_density(
        POOLED, pooled_logp_and_gradient, pooled_expand, np.array([a, b, n, wins], dtype=np.float64), 1, {}, {}
    )
