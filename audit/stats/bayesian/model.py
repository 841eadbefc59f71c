"""The hierarchical win-rate model: the priors of sigma, its PyMC definition, and one fit of it.

:func:`fit_cells` samples the model (described in :mod:`honestci.audit.stats.bayesian.hierarchical`, whose entry
points validate, check and gate the fit) on the cells of :mod:`honestci.audit.stats.bayesian.cells`:
by NUTS (:func:`honestci.audit.stats.bayesian.sampling.sample_posterior`: nutpie on the hand-derived
density of :mod:`honestci.audit.stats.bayesian.density`, or PyMC on
:func:`_build_hierarchical_model`) or by the collapsed sampler
(:mod:`honestci.audit.stats.bayesian.collapsed`); then it adds the per-draw estimands
(:func:`winrate_estimand_draws`, pure NumPy) and reads the diagnostics.

The PyMC functions here are the definitions the hand-derived density was derived from
(:data:`honestci.audit.stats.bayesian.density.HIERARCHICAL` records their fingerprint): an edit to
any of them makes the density refuse itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import expit

from honestci.audit.errors import InputError
from honestci.audit.progress import as_progress
from honestci.audit.stats.bayesian.cells import WinRateCells
from honestci.audit.stats.bayesian.sampling import SamplerDiagnostics, diagnose_sampler, sample_posterior, stacked_draws

#: Step and half-width of the uniform z-grid for E_{u ~ N(0, sigma)}: the trapezoidal rule is
#: exponentially accurate for analytic integrands (Trefethen & Weideman 2014, SIAM Review 56);
#: expit(mu + sigma z) is analytic in a strip of half-width pi/sigma, so h = 0.05 keeps the error
#: below 1e-9 up to sigma = 20, where Gauss-Hermite with 40-150 nodes erred by up to 1e-2
#: (measured against scipy.integrate.quad; the tests pin it).
NORMAL_GRID_STEP = 0.05
NORMAL_GRID_HALF_WIDTH = 8.5


#: Vignettes from which ``sampler="auto"`` uses the collapsed sampler
#: (:mod:`honestci.audit.stats.bayesian.collapsed`) instead of NUTS: NUTS's cost grows with one
#: coordinate per vignette (about 6 minutes at 5,000), while the hyperparameters' marginal posterior
#: that the collapsed sampler draws from is close to normal by then (its proposals were accepted
#: 95% of the time at 5,000 vignettes; tests/test_bayes_collapsed.py compares the two at 300).
COLLAPSED_MIN_VIGNETTES = 1000


@dataclass(frozen=True)
class SigmaPrior:
    """Prior of the between-vignette SD ``sigma`` (logit scale)."""

    key: str
    family: str  # "halfnormal" | "halfstudentt" | "halfcauchy"
    scale: float
    nu: float | None = None

    @property
    def label(self) -> str:
        if self.family == "halfnormal":
            return f"HalfNormal({self.scale:g})"
        if self.family == "halfstudentt":
            return f"HalfStudentT({self.nu:g}, {self.scale:g})"
        return f"HalfCauchy({self.scale:g})"

    @property
    def student_t_nu(self) -> float:
        """Degrees of freedom as model data: 0 codes the half-normal (the nu -> infinity limit)."""
        if self.family == "halfnormal":
            return 0.0
        if self.family == "halfcauchy":
            return 1.0
        if self.nu is None:
            raise InputError(f"the {self.family} prior needs its degrees of freedom nu", fix="give nu > 0")
        return float(self.nu)


def _sigma_with_prior(prior: SigmaPrior):
    """sigma with its prior density as a Potential whose parameters are model data.

    The model's structure is then the same for every prior of :data:`SIGMA_PRIORS`, which is
    also how :mod:`honestci.audit.stats.bayesian.density` takes the prior: as data (nu, scale). Half-Student-t up to a constant:
    log p = -(nu + 1)/2 log(1 + (s/scale)^2 / nu); nu = 1 is the half-Cauchy and nu = 0 codes
    the half-normal, log p = -(s/scale)^2 / 2. Validated against scipy.stats halfnorm/halft/halfcauchy.
    """
    import pymc as pm
    import pytensor.tensor as pt

    nu = pm.Data("sigma_prior_nu", np.array(prior.student_t_nu))
    scale = pm.Data("sigma_prior_scale", np.array(prior.scale))
    sigma = pm.HalfFlat("sigma")  # log-transformed; its density is the Potential below
    squared = (sigma / scale) ** 2
    safe_nu = pm.math.switch(nu > 0, nu, 1.0)  # keeps the unused branch's gradient finite
    log_density = pm.math.switch(nu > 0, -(safe_nu + 1.0) / 2.0 * pt.log1p(squared / safe_nu), -squared / 2.0)
    pm.Potential("sigma_prior", log_density)
    return sigma


SIGMA_PRIORS: dict[str, SigmaPrior] = {
    "halfnormal1": SigmaPrior("halfnormal1", "halfnormal", 1.0),
    "halfnormal0.5": SigmaPrior("halfnormal0.5", "halfnormal", 0.5),
    "halfstudentt3": SigmaPrior("halfstudentt3", "halfstudentt", 1.0, nu=3.0),
    "halfcauchy1": SigmaPrior("halfcauchy1", "halfcauchy", 1.0),
}
"""Named priors for sigma. HalfNormal(1) is the default: on the logit scale it puts 95% of its
mass below 1.96, i.e. vignettes whose win rates differ by up to about +-0.4 around 1/2. The
alternatives bracket it: tighter (HalfNormal(0.5)) and heavier-tailed (HalfStudentT(3, 1) and
HalfCauchy(1), Gelman 2006)."""

DEFAULT_SENSITIVITY_PRIORS: tuple[str, ...] = ("halfnormal0.5", "halfstudentt3", "halfcauchy1")


def resolve_prior(prior: str | SigmaPrior) -> SigmaPrior:
    if isinstance(prior, SigmaPrior):
        if (
            prior.family not in ("halfnormal", "halfstudentt", "halfcauchy")
            or not prior.scale > 0
            or (prior.family == "halfstudentt" and not (prior.nu or 0) > 0)
        ):
            raise InputError(
                f"Invalid prior {prior!r}.", fix="Use family halfnormal/halfstudentt/halfcauchy, scale > 0, nu > 0."
            )
        return prior
    if prior not in SIGMA_PRIORS:
        raise InputError(
            f"Unknown prior {prior!r} for the between-vignette SD.",
            fix=f"Use one of {sorted(SIGMA_PRIORS)} or pass a SigmaPrior.",
        )
    return SIGMA_PRIORS[prior]


def quasi_binomial_loglik(eta, n, wins):
    """sum w log p + (n - w) log(1 - p) with p = expit(eta), written stably as w*eta - n*log1p(e^eta)."""
    import pymc as pm

    return pm.math.sum(wins * eta - n * pm.math.log1pexp(eta))


def _build_hierarchical_model(cells: WinRateCells, prior: SigmaPrior, centred: bool):
    import pymc as pm

    coords = {"vignette": list(cells.vignette_labels)}
    if cells.n_runs > 1:
        coords["run"] = list(cells.run_labels)
    if cells.n_judges > 1:
        coords["judge"] = list(cells.judge_labels)
    with pm.Model(coords=coords) as model:
        cell_vignette = pm.Data("cell_vignette", cells.vignette_index)
        cell_order = pm.Data("cell_order", cells.order)
        cell_n = pm.Data("cell_n", cells.n.astype(float))
        cell_wins = pm.Data("cell_wins", cells.wins)
        mu = pm.Normal("mu", 0.0, 1.5)
        beta = pm.Normal("beta", 0.0, 1.0)
        sigma = _sigma_with_prior(prior)
        if centred:
            # Hierarchical centring (Gelfand, Sahu & Carlin 1995): the vignette logit is the
            # parameter and mu enters only its prior, which removes the mu / mean(u) ridge that
            # kept mu's ESS near 400 with u ~ N(0, sigma).
            vignette_logit = pm.Normal("vignette_logit", mu, sigma, dims="vignette")
            u = pm.Deterministic("u", vignette_logit - mu, dims="vignette")
        else:
            u_std = pm.Normal("u_std", 0.0, 1.0, dims="vignette")
            u = pm.Deterministic("u", sigma * u_std, dims="vignette")
        eta = mu + u[cell_vignette] + beta * cell_order
        if cells.n_runs > 1:
            cell_run = pm.Data("cell_run", cells.run_index)
            run_raw = pm.Normal("run_raw", 0.0, 1.0, dims="run")
            run_effect = pm.Deterministic("run_effect", run_raw - run_raw.mean(), dims="run")
            eta = eta + run_effect[cell_run]
        if cells.n_judges > 1:
            cell_judge = pm.Data("cell_judge", cells.judge_index)
            judge_raw = pm.Normal("judge_raw", 0.0, 1.0, dims="judge")
            judge_effect = pm.Deterministic("judge_effect", judge_raw - judge_raw.mean(), dims="judge")
            eta = eta + judge_effect[cell_judge]
        pm.Potential("quasi_binomial_loglik", quasi_binomial_loglik(eta, cell_n, cell_wins))
    return model


def _density_model(cells: WinRateCells, prior: SigmaPrior, centred: bool):
    from honestci.audit.stats.bayesian.density import nutpie_model

    return nutpie_model(cells, prior.student_t_nu, prior.scale, centred)


def normal_quadrature(
    step: float = NORMAL_GRID_STEP, half_width: float = NORMAL_GRID_HALF_WIDTH
) -> tuple[np.ndarray, np.ndarray]:
    """Nodes x and weights w with sum_k w_k f(x_k) ~= E[f(Z)], Z ~ N(0, 1) (trapezoidal rule)."""
    nodes = np.arange(-half_width, half_width + step / 2.0, step)
    weights = np.exp(-(nodes**2) / 2.0)
    return nodes, weights / weights.sum()


def winrate_estimand_draws(
    mu: np.ndarray,
    beta: np.ndarray,
    sigma: np.ndarray,
    u: np.ndarray,
    offsets: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Per-draw win rates and order effects for these and for new vignettes.

    Parameters
    ----------
    mu, beta, sigma
        Shape (S,) posterior draws.
    u
        Shape (S, V) vignette effects.
    offsets
        Shape (S, K) run + judge offsets, one column per observed (run, judge) combination,
        averaged with equal weight; None means no offsets.

    Returns
    -------
    dict with keys ``winrate_these``, ``winrate_new``, ``order_effect_these``,
    ``order_effect_new`` (probability scale), each shape (S,).

    Notes
    -----
    W_these = mean_{v,k} [expit(eta_vk + beta/2) + expit(eta_vk - beta/2)] / 2 with
    eta_vk = mu + u_v + offset_k. W_new replaces u_v by an integral over N(0, sigma) computed by
    the trapezoidal rule on a z-grid (vectorised over draws). Validated against scipy.integrate.quad.
    """
    mu = np.asarray(mu, float)
    beta, sigma, u = np.asarray(beta, float), np.asarray(sigma, float), np.asarray(u, float)
    if offsets is None:
        offsets = np.zeros((mu.size, 1))
    nodes, weights = normal_quadrature()
    out = {name: np.empty(mu.size) for name in ESTIMANDS}
    # In blocks of draws: (draws, vignettes, offsets) arrays of a million contests stay small.
    step = max(1, _ESTIMAND_BLOCK_VALUES // max(1, u.shape[1] * offsets.shape[1]))
    for start in range(0, mu.size, step):
        block = slice(start, start + step)
        half_beta = beta[block, None, None] / 2.0
        eta_these = mu[block, None, None] + u[block, :, None] + offsets[block, None, :]
        eta_new = mu[block, None, None] + sigma[block, None, None] * nodes[None, :, None] + offsets[block, None, :]
        rate, order_effect = _order_averaged(eta_these, half_beta)
        out["winrate_these"][block] = rate.mean(axis=(1, 2))
        out["order_effect_these"][block] = 0.0 if order_effect is None else order_effect.mean(axis=(1, 2))
        rate, order_effect = _order_averaged(eta_new, half_beta)
        out["winrate_new"][block] = np.einsum("skc,k->s", rate, weights) / offsets.shape[1]
        out["order_effect_new"][block] = (
            0.0 if order_effect is None else np.einsum("skc,k->s", order_effect, weights) / offsets.shape[1]
        )
    return out


def _order_averaged(eta: np.ndarray, half_beta: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """[expit(eta + beta/2) + expit(eta - beta/2)] / 2 and their difference (the order effect).

    With beta 0 (contest cells) both orders' rates are the same numbers: the average is expit(eta)
    itself ((e + e) / 2 is e exactly) and the order effect is 0 (None: nothing is computed)."""
    if np.all(half_beta == 0.0):
        return expit(eta), None
    first, second = expit(eta + half_beta), expit(eta - half_beta)
    return (first + second) / 2.0, first - second


#: The estimands :func:`winrate_estimand_draws` returns.
ESTIMANDS = ("winrate_these", "winrate_new", "order_effect_these", "order_effect_new")
#: Values per block of draws in :func:`winrate_estimand_draws`.
_ESTIMAND_BLOCK_VALUES = 2_000_000


def _offset_draws(idata, cells: WinRateCells) -> np.ndarray:
    """(S, R*J) run + judge offsets of every (run, judge) combination."""
    n_draws = stacked_draws(idata, "mu").shape[0]
    run = stacked_draws(idata, "run_effect") if cells.n_runs > 1 else np.zeros((n_draws, 1))
    judge = stacked_draws(idata, "judge_effect") if cells.n_judges > 1 else np.zeros((n_draws, 1))
    return (run[:, :, None] + judge[:, None, :]).reshape(n_draws, -1)


@dataclass(frozen=True)
class Fit:
    """One sampled fit of the cells: the posterior (with the estimands' draws added), its
    diagnostics, the estimands' draws, the sampler that ran and its note ("" when none)."""

    idata: Any
    diagnostics: SamplerDiagnostics
    estimand_draws: dict[str, np.ndarray]
    sampler: str
    sampler_note: str


def uses_collapsed_sampler(sampler: str, cells: WinRateCells) -> bool:
    """Whether ``sampler`` samples ``cells`` by the collapsed sampler (``auto`` from
    :data:`COLLAPSED_MIN_VIGNETTES` vignettes)."""
    return sampler == "collapsed" or (sampler == "auto" and cells.n_vignettes >= COLLAPSED_MIN_VIGNETTES)


def _sample_collapsed(cells: WinRateCells, prior: SigmaPrior, chains, draws, tune, seed, progress, label):
    """The collapsed sampler's draws as :class:`~honestci.audit.stats.bayesian.posterior_groups.PosteriorGroups`
    (posterior, sample_stats), and its note for the result's message."""
    import xarray as xr

    from honestci.audit.stats.bayesian.collapsed import sample_collapsed
    from honestci.audit.stats.bayesian.posterior_groups import PosteriorGroups

    progress = as_progress(progress)
    meter = progress.meter(chains * (tune + draws), f"{label} with the collapsed sampler", "draws")
    result = sample_collapsed(cells, prior.student_t_nu, prior.scale, chains, draws, tune, seed, meter.update)
    meter.close(acceptance=f"{result.acceptance_rate:.3f}")
    coords = {"chain": np.arange(chains), "draw": np.arange(draws), "vignette": list(cells.vignette_labels)}
    variables: dict[str, Any] = {
        "mu": (("chain", "draw"), result.mu),
        "beta": (("chain", "draw"), result.beta),
        "sigma": (("chain", "draw"), result.sigma),
        "u": (("chain", "draw", "vignette"), result.u),
    }
    if result.run_effect is not None:
        coords["run"] = list(cells.run_labels)
        variables["run_effect"] = (("chain", "draw", "run"), result.run_effect)
    if result.judge_effect is not None:
        coords["judge"] = list(cells.judge_labels)
        variables["judge_effect"] = (("chain", "draw", "judge"), result.judge_effect)
    sample_stats = {
        "accepted": (("chain", "draw"), result.accepted),
        "diverging": (("chain", "draw"), np.zeros_like(result.accepted)),
    }
    attrs = {"sampler": "collapsed (independence Metropolis-Hastings on the marginal posterior)"}
    groups = PosteriorGroups(
        posterior=xr.Dataset(variables, coords=coords, attrs=attrs),
        sample_stats=xr.Dataset(sample_stats, coords={"chain": coords["chain"], "draw": coords["draw"]}),
    )
    note = (
        f"collapsed sampler: vignette effects integrated out by adaptive quadrature, hyperparameters by "
        f"independence Metropolis-Hastings ({result.acceptance_rate:.0%} of proposals accepted), vignette "
        f"effects from their exact conditionals ({result.effect_attempts:.2f} rejection attempts each)"
    )
    return groups, note


def fit_cells(cells, prior, parameterization, sampler, chains, draws, tune, seed, progress, thresholds) -> Fit:
    """Sample the model on ``cells`` under ``prior`` in ``parameterization`` (``"integrated"`` for
    the collapsed sampler), add the per-draw estimands and read the diagnostics of the
    parameters and estimands against ``thresholds``."""
    centred = parameterization == "centred"
    label = f"bayes fit ({prior.label}, {parameterization})"
    collapsed = uses_collapsed_sampler(sampler, cells)
    if collapsed:
        idata, note = _sample_collapsed(cells, prior, chains, draws, tune, seed, progress, f"bayes fit ({prior.label})")
        sampler_used = "collapsed"
    else:
        idata, sampler_used, note = sample_posterior(
            lambda: _build_hierarchical_model(cells, prior, centred),
            lambda: _density_model(cells, prior, centred),
            sampler,
            chains,
            draws,
            tune,
            seed,
            progress,
            label,
        )
    beta = stacked_draws(idata, "beta")
    contest = cells.unit == "contest"
    # Contest cells have order 0: beta is its prior there and no estimand contains it.
    estimands = winrate_estimand_draws(
        stacked_draws(idata, "mu"),
        np.zeros_like(beta) if contest else beta,
        stacked_draws(idata, "sigma"),
        stacked_draws(idata, "u"),
        _offset_draws(idata, cells),
    )
    if contest:
        estimands = {name: estimands[name] for name in ("winrate_these", "winrate_new")}
    n_chains = idata.posterior.sizes["chain"]
    n_draws = idata.posterior.sizes["draw"]
    for name, values in estimands.items():
        idata.posterior[name] = (("chain", "draw"), values.reshape(n_chains, n_draws))
    # The collapsed sampler draws each u_v exactly from p(u_v | theta, y) with every theta it
    # proposes, and a chain moves to both or neither: the u chains mix exactly as theta's do, so
    # their diagnostics are theta's (read below) plus noise.
    var_names = ["mu", "beta", "sigma"] + ([] if collapsed else ["u"])
    var_names += ["run_effect"] if cells.n_runs > 1 else []
    var_names += ["judge_effect"] if cells.n_judges > 1 else []
    var_names += list(estimands)
    diagnostics = diagnose_sampler(idata, var_names, chains, draws, tune, thresholds)
    return Fit(idata, diagnostics, estimands, sampler_used, note)


__all__ = [
    "COLLAPSED_MIN_VIGNETTES",
    "DEFAULT_SENSITIVITY_PRIORS",
    "ESTIMANDS",
    "NORMAL_GRID_HALF_WIDTH",
    "NORMAL_GRID_STEP",
    "SIGMA_PRIORS",
    "Fit",
    "SigmaPrior",
    "fit_cells",
    "normal_quadrature",
    "quasi_binomial_loglik",
    "resolve_prior",
    "uses_collapsed_sampler",
    "winrate_estimand_draws",
]
