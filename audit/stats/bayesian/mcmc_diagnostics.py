"""Convergence diagnostics of MCMC draws: rank-normalised split R-hat, bulk and tail ESS.

The algorithms of Vehtari, Gelman, Simpson, Carpenter & Bürkner (2021), "Rank-normalization,
folding, and localization: an improved R-hat for assessing convergence of MCMC", Bayesian
Analysis 16(2), as ArviZ 0.23 computes them (``az.rhat(method="rank")``, ``az.ess(method="bulk")``,
``az.ess(method="tail")``), vectorised over variables so that thousands of vignette effects cost
one pass, and without importing ArviZ (a 3-4 s import that the collapsed sampler's fits at a
million contests cannot afford). Pinned to ArviZ to 1e-10 by tests/test_mcmc_diagnostics.py.

* split: each chain's first and last ``draws // 2`` draws become two chains;
* z-scale: ranks of all draws (ties averaged), Blom's ``(r - 3/8) / (S + 1/4)``, then the normal
  quantile;
* R-hat = sqrt(((n - 1)/n W + B/n) / W) on the z-scaled split chains, the rank-normalised value is
  the larger of the bulk one and the one of the folded draws |x - median|;
* ESS = chains x draws / tau, tau = -1 + 2 sum_t rho_t over Geyer's initial monotone sequence of
  autocorrelations (FFT autocovariances, combined over chains as Stan does); bulk on the z-scaled
  split draws, tail the smaller of the ESS of the indicators I(x <= q_0.05) and I(x <= q_0.95).
"""

from __future__ import annotations

import numpy as np
from scipy.fft import next_fast_len
from scipy.special import ndtri
from scipy.stats import rankdata

#: Draws below which a chain gives no diagnostic (ArviZ's minimum shape).
MIN_DRAWS = 4


def _as_variables(draws: np.ndarray) -> np.ndarray:
    """(chains, draws, ...) -> (variables, chains, draws)."""
    values = np.asarray(draws, dtype=float)
    if values.ndim < 2:
        raise ValueError("draws need the shape (chains, draws, ...)")
    return np.moveaxis(values.reshape(values.shape[0], values.shape[1], -1), 2, 0)


def _split(values: np.ndarray) -> np.ndarray:
    """(V, chains, draws) -> (V, 2 chains, draws // 2)."""
    half = values.shape[2] // 2
    return np.concatenate([values[:, :, :half], values[:, :, values.shape[2] - half :]], axis=1)


def _z_scale(values: np.ndarray) -> np.ndarray:
    flat = values.reshape(values.shape[0], -1)
    ranks = rankdata(flat, method="average", axis=1)
    return ndtri((ranks - 3.0 / 8.0) / (flat.shape[1] + 0.25)).reshape(values.shape)


def _rhat(values: np.ndarray) -> np.ndarray:
    draws = values.shape[2]
    chain_mean = values.mean(axis=2)
    between = draws * chain_mean.var(axis=1, ddof=1)
    within = values.var(axis=2, ddof=1).mean(axis=1)
    return np.sqrt((between / within + draws - 1.0) / draws)


def _autocovariance(values: np.ndarray) -> np.ndarray:
    draws = values.shape[-1]
    centred = values - values.mean(axis=-1, keepdims=True)
    size = next_fast_len(2 * draws)
    spectrum = np.fft.rfft(centred, n=size, axis=-1)
    return np.fft.irfft(spectrum * np.conjugate(spectrum), n=size, axis=-1)[..., :draws] / draws


def _ess(values: np.ndarray) -> np.ndarray:
    """ESS of each variable of (V, chains, draws) draws (ArviZ's ``_ess``)."""
    n_var, chains, draws = values.shape
    size = chains * draws
    constant = (values.max(axis=(1, 2)) - values.min(axis=(1, 2))) < np.finfo(float).resolution
    acov = _autocovariance(values)
    mean_acov = acov.mean(axis=1)  # (V, draws)
    mean_var = mean_acov[:, 0] * draws / (draws - 1.0)
    var_plus = mean_var * (draws - 1.0) / draws
    if chains > 1:
        var_plus = var_plus + values.mean(axis=2).var(axis=1, ddof=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        rho_all = 1.0 - (mean_var[:, None] - mean_acov) / var_plus[:, None]
    rho = np.zeros((n_var, draws))
    rho[:, 0] = 1.0
    rho[:, 1] = rho_all[:, 1]
    even, odd = np.ones(n_var), rho_all[:, 1].copy()
    last_t = np.ones(n_var, dtype=np.int64)
    active = (even + odd) > 0.0
    # Geyer's initial positive sequence: every active variable is at the same lag t.
    for t in range(1, draws - 3, 2):
        if not active.any():
            break
        index = np.flatnonzero(active)
        new_even, new_odd = rho_all[index, t + 1], rho_all[index, t + 2]
        pair = new_even + new_odd
        keep = index[pair >= 0.0]
        rho[keep, t + 1] = rho_all[keep, t + 1]
        rho[keep, t + 2] = rho_all[keep, t + 2]
        even[index], odd[index] = new_even, new_odd
        last_t[index] = t + 2
        active[index] = pair > 0.0
    max_t = last_t - 2
    rows = np.arange(n_var)
    positive = even > 0.0
    rho[rows[positive], max_t[positive] + 1] = even[positive]
    # Geyer's initial monotone sequence.
    for t in range(1, max(int(max_t.max()) - 1, 1), 2):
        apply = t <= max_t - 2
        rise = apply & (rho[:, t + 1] + rho[:, t + 2] > rho[:, t - 1] + rho[:, t])
        rho[rise, t + 1] = (rho[rise, t - 1] + rho[rise, t]) / 2.0
        rho[rise, t + 2] = rho[rise, t + 1]
    cumulative = np.concatenate([np.zeros((n_var, 1)), np.cumsum(rho, axis=1)], axis=1)
    tau = -1.0 + 2.0 * cumulative[rows, max_t + 1] + rho[rows, max_t + 1]
    tau = np.maximum(tau, 1.0 / np.log10(size))
    ess = size / tau
    ess[np.isnan(rho).any(axis=1)] = np.nan
    ess[constant] = size
    return ess


def _valid(values: np.ndarray, min_chains: int) -> np.ndarray:
    ok = ~np.isnan(values).any(axis=(1, 2))
    return ok & (values.shape[1] >= min_chains) & (values.shape[2] >= MIN_DRAWS)


def _per_variable(draws: np.ndarray, min_chains: int, compute) -> np.ndarray:
    """``compute`` on the (V, chains, draws) values of the valid variables; NaN for the others
    (NaN draws, fewer than ``min_chains`` chains or :data:`MIN_DRAWS` draws)."""
    values = _as_variables(draws)
    out = np.full(values.shape[0], np.nan)
    ok = _valid(values, min_chains)
    if ok.any():
        with np.errstate(invalid="ignore", divide="ignore"):
            out[ok] = compute(values[ok])
    return out


def _rhat_of_valid(values: np.ndarray) -> np.ndarray:
    split = _split(values)
    folded = np.abs(split - np.median(split.reshape(split.shape[0], -1), axis=1)[:, None, None])
    return np.maximum(_rhat(_z_scale(split)), _rhat(_z_scale(folded)))


def _ess_tail_of_valid(values: np.ndarray) -> np.ndarray:
    quantiles = np.quantile(values.reshape(values.shape[0], -1), [0.05, 0.95], axis=1)  # type 7, as ArviZ's
    return np.minimum(*(_ess(_split((values <= q[:, None, None]).astype(float))) for q in quantiles))


def rhat_rank(draws: np.ndarray) -> np.ndarray:
    """Rank-normalised split R-hat of every variable of (chains, draws, ...) draws, flattened
    (NaN where a variable has NaN draws, fewer than 2 chains or 4 draws)."""
    return _per_variable(draws, 2, _rhat_of_valid)


def ess_bulk(draws: np.ndarray) -> np.ndarray:
    """Bulk ESS (on rank-normalised split chains) of every variable, flattened."""
    return _per_variable(draws, 1, lambda values: _ess(_z_scale(_split(values))))


def ess_tail(draws: np.ndarray) -> np.ndarray:
    """Tail ESS, the smaller of the ESS of I(x <= q_0.05) and I(x <= q_0.95), of every variable."""
    return _per_variable(draws, 1, _ess_tail_of_valid)
