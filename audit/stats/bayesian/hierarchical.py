"""Bayesian hierarchical win rate: PyMC model, nutpie/PyMC NUTS, ArviZ diagnostics as a gate.

Data are judged orders of a policy against one opponent. Each verdict has a vignette ``v``, a
presentation order ``o`` (+1/2 when the policy is shown first, -1/2 when second), optionally an
evaluation run ``r`` and a judge ``j``, and an outcome ``y`` (1 win, 1/2 tie, 0 loss). Verdicts are
aggregated to cells (v, o, r, j) with ``n`` verdicts and ``w = sum(y)`` wins, and the model is

    logit p_cell = mu + u_v + beta * o + a_r + b_j,      u_v ~ N(0, sigma),
    mu ~ N(0, 1.5),  beta ~ N(0, 1),  sigma ~ HalfNormal(1) (default; see SIGMA_PRIORS),
    log L = sum_cells  w log p + (n - w) log(1 - p).

With no ties this is the exact binomial likelihood (up to a constant). Ties make ``w``
fractional; the same expression is then a quasi-binomial likelihood (a tie counts as half a win
and half a loss). Because a tie has less variance than a coin flip, the quasi-binomial model
slightly overstates within-cell noise, i.e. errs on the wide side.

Run and judge effects (only when the data have more than one level) are *fixed* offsets
``a = a_raw - mean(a_raw)``, ``a_raw ~ N(0, 1)``, not random effects with an estimated SD: with the
2-4 runs or judges these evaluations have, a group-level SD is not identified (Gelman 2006) and
both the centred and the non-centred random-effect forms gave tens of divergent transitions on
fixture-like data (measured, see bench/README.md). The estimands therefore average over the
observed runs and judges with equal weight.

Estimands, per posterior draw s (``expit`` = inverse logit, ``eta_vrj = mu + u_v + a_r + b_j``):

* these vignettes:  W_these = mean_{v, r, j} [ expit(eta_vrj + beta/2) + expit(eta_vrj - beta/2) ] / 2
* a new vignette:   W_new = mean_{r, j} E_{u ~ N(0, sigma)} [ expit(mu + u + a_r + b_j + beta/2)
  + expit(mu + u + a_r + b_j - beta/2) ] / 2, the expectation by quadrature on a z-grid
* the order effect on the probability scale: the same averages of expit(. + beta/2) - expit(. - beta/2),
  and beta itself (logit scale).

Contest scores (what the audit fits, :func:`fit_contest_scores_hierarchical`). The per-verdict
rate above is not the audit's estimand: with ties it lies above the both-orders contest score
(1 win both, 0 lose both, 1/2 otherwise) by up to several points. The same model, fed contest
cells (:func:`~honestci.audit.stats.bayesian.cells.aggregate_contest_cells`: m trials and m sum(s) wins per contest, m = 2 for both
orders or 1 for one judged order, order 0, scaled by
the quasi-binomial dispersion), has E[s | v] = expit(mu + u_v + a_r + b_j), and the same estimand
code (with beta = 0) gives the contest-score rates of :mod:`honestci.audit.stats.estimands`.

Posterior predictive check: run in every converged fit, per (vignette, run, judge); when it flags
a group the win rates are withheld (None, INCONCLUSIVE, the reason in ``withheld``).

References: Gelman & Hill (2007) ch. 14 (multilevel logistic regression); Gelman (2006), "Prior
distributions for variance parameters in hierarchical models", Bayesian Analysis 1(3);
Vehtari, Gelman, Simpson, Carpenter & Bürkner (2021), "Rank-normalization, folding, and
localization: an improved R-hat", Bayesian Analysis 16(2); Gelman, Meng & Stern (1996) for
posterior predictive p-values.

Sampling. ``sampler="auto"`` runs nutpie on the model's log density and gradient written out by
hand in :mod:`honestci.audit.stats.bayesian.density` (numba, compiled once and then loaded from numba's on-disk
cache; pinned to PyMC's ``compile_logp``/``compile_dlogp`` of
:func:`honestci.audit.stats.bayesian.model._build_hierarchical_model` for every variant by
tests/test_bayes_density.py), through nutpie's public Python-function interface
(``nutpie.compiled_pyfunc.from_pyfunc``). The PyMC model stays the definition: the density records
a fingerprint of the PyMC functions it was derived from and refuses itself when they have changed
(:class:`honestci.audit.errors.DensityMismatchError`), and ``auto`` then samples the PyMC model with
PyMC's NUTS, warns (:class:`honestci.audit.stats.bayesian.sampling.DensityMismatchWarning`) and says so
in the result's message. ``auto`` falls back to PyMC otherwise only when nutpie or numba is not
installed; a failure while nutpie samples propagates.
``sampler="pymc"`` always samples the PyMC model. Why: letting nutpie compile the PyTensor graph
costs 6-19 s of numba compiling in every new process (not cacheable), which made a one-fit process
take 15-21 s; with the cached kernel a cold process takes about 5-8 s on 2 shared cores (load 3), of
which ``import arviz`` (imported by nutpie itself) is 2-3.5 s (bench/README.md).
4 chains x (1000 + 1000) stay the default: in 20 seeded fixture-like fits all 20 passed the gate
(R-hat max 1.0096, min bulk/tail ESS 902/1447, 0 divergences after the automatic refit of one)
while 4 x (500 + 500) failed it once (R-hat 1.0118).

Heavy libraries (pymc, pytensor, arviz, nutpie, numba) are imported inside the functions that
use them; the default path never imports pymc or pytensor.

The fit's parts live beside this module: the cells (:mod:`honestci.audit.stats.bayesian.cells`); the
priors, the PyMC model and one sampled fit with its estimands (:mod:`honestci.audit.stats.bayesian.model`);
the sampling, diagnostics and summaries every Bayesian fit shares
(:mod:`honestci.audit.stats.bayesian.sampling`); the posterior predictive check and the saved
per-cell groups (:mod:`honestci.audit.stats.bayesian.predictive`). Here the two entry points validate
their settings, then summarise, check and gate the fit.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from honestci.audit.errors import InputError
from honestci.audit.policy import THRESHOLDS, Thresholds, Verdict, clears_bar, worst
from honestci.audit.progress import ProgressLike
from honestci.audit.stats.bayesian.cells import WinRateCells, aggregate_cells, aggregate_contest_cells
from honestci.audit.stats.bayesian.model import (
    DEFAULT_SENSITIVITY_PRIORS,
    Fit,
    SigmaPrior,
    fit_cells,
    resolve_prior,
    uses_collapsed_sampler,
)
from honestci.audit.stats.bayesian.predictive import (
    PosteriorPredictiveCheck,
    check_replicates,
    complete_idata,
    predictive_draws,
    predictive_thinning,
)
from honestci.audit.stats.bayesian.sampling import (
    SAMPLERS,
    PosteriorSummary,
    SamplerDiagnostics,
    check_sampling_sizes,
    resolve_seed,
    stacked_draws,
    summarise_draws,
)

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


#: Mean verdicts per vignette from which the centred form of u_v is used. With ~240 verdicts per
#: vignette the likelihood pins each u_v, the centred form had 0 divergences and the non-centred
#: one 2-4 (notes/cpu-stack.md); with few verdicts per vignette the funnel favours non-centred.
CENTRED_MIN_VERDICTS_PER_VIGNETTE = 100

#: Posterior quantiles of each win rate kept in the result (for the report's posterior plot).
POSTERIOR_QUANTILES = 101
#: Draws and warm-up per chain when not given: NUTS's, and the collapsed sampler's. Its
#: proposals are accepted ~96% of the time at 5,000 vignettes, so ESS is near the draws, but R-hat's
#: own noise falls with the chains' length: over 5 seeds on the 1M-contest study (mu, sigma, beta,
#: the run offsets, the these-vignettes rate) 4 x 150 draws gave R-hat up to 1.018 (3 of 5 above
#: the gate's 1.01), 4 x 250 up to 1.009, 4 x 400 at most 1.003 with bulk/tail ESS >= 1365/1303.
NUTS_DRAWS, NUTS_TUNE = 1000, 1000
COLLAPSED_DRAWS, COLLAPSED_TUNE = 400, 25


@dataclass(frozen=True)
class PriorSensitivityRow:
    prior: str
    converged: bool
    divergences: int
    winrate_these: PosteriorSummary | None
    winrate_new: PosteriorSummary | None
    sigma: PosteriorSummary | None


@dataclass(frozen=True)
class PriorSensitivity:
    """Key estimands refitted under each prior of sigma (the first row is the main fit)."""

    rows: tuple[PriorSensitivityRow, ...]
    bar: float | None

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd

        records = []
        for row in self.rows:
            record: dict[str, Any] = {"prior": row.prior, "converged": row.converged, "divergences": row.divergences}
            for name in ("winrate_these", "winrate_new", "sigma"):
                summary = getattr(row, name)
                for stat in ("mean", "lower", "upper"):
                    record[f"{name}_{stat}"] = math.nan if summary is None else getattr(summary, stat)
            record["p_new_above_bar"] = (
                math.nan
                if row.winrate_new is None or row.winrate_new.p_above_bar is None
                else row.winrate_new.p_above_bar
            )
            records.append(record)
        return pd.DataFrame(records)


POPULATIONS = ("these_vignettes", "new_vignettes")
#: The posterior summaries a result carries (None until the chains have converged).
_SUMMARIES = ("winrate_these", "winrate_new", "order_effect_these", "order_effect_new", "order_effect_logit", "sigma")


@dataclass(frozen=True)
class BayesWinRateResult:
    """Bayesian hierarchical win rate of a policy against an opponent (see module docstring).

    Every estimate field is None when the chains did not converge: no posterior from unconverged
    chains is ever reported; ``diagnostics`` and ``message`` say why.
    """

    winrate_these: PosteriorSummary | None
    winrate_new: PosteriorSummary | None
    order_effect_these: PosteriorSummary | None
    order_effect_new: PosteriorSummary | None
    order_effect_logit: PosteriorSummary | None
    sigma: PosteriorSummary | None
    bar: float | None
    level: float
    population: str
    diagnostics: SamplerDiagnostics
    converged: bool
    verdict: Verdict
    message: str
    ppc: PosteriorPredictiveCheck | None
    prior_sensitivity: PriorSensitivity | None
    prior: str
    sampler: str
    sampler_note: str
    parameterization: str
    seed: int
    n_verdicts: int
    n_vignettes: int
    n_runs: int
    n_judges: int
    n_cells: int
    has_ties: bool
    runtime_seconds: float
    idata_path: str | None
    #: 101 posterior quantiles (0, 1%, …, 100%) of the win rate per population, for plots; None
    #: when the chains did not converge.
    winrate_quantiles: dict | None = None
    #: The posterior (arviz.InferenceData, the cells in its ``constant_data``) for writing to disk;
    #: None when the chains did not converge.
    idata: Any = field(default=None, repr=False, compare=False)
    #: "contest" (the contest-score rates of :mod:`honestci.audit.stats.estimands`) or "verdict"
    #: (the order-averaged per-verdict rate).
    unit: str = "verdict"
    n_contests: int = 0
    #: Why the win rates are withheld although the chains converged (the posterior predictive
    #: check flagged groups the model does not reproduce); "" when they are reported.
    withheld: str = ""
    #: Quasi-binomial dispersion used (contest cells; 1 for verdict cells) and its estimate.
    dispersion: float = 1.0
    dispersion_estimate: float | None = None

    def to_frame(self) -> pd.DataFrame:
        """One row per (estimand, population): win rate, order effect, beta and sigma."""
        import pandas as pd

        rows = [
            ("win_rate", "these_vignettes", self.winrate_these),
            ("win_rate", "new_vignettes", self.winrate_new),
            ("order_effect", "these_vignettes", self.order_effect_these),
            ("order_effect", "new_vignettes", self.order_effect_new),
            ("order_effect_logit_beta", "model", self.order_effect_logit),
            ("between_vignette_sd_sigma", "model", self.sigma),
        ]
        records = []
        for estimand, population, summary in rows:
            record: dict[str, object] = {"estimand": estimand, "population": population, "method": "bayes_hierarchical"}
            for stat in ("mean", "median", "lower", "upper"):
                record[stat] = math.nan if summary is None else getattr(summary, stat)
            record["level"] = self.level
            record["bar"] = math.nan if self.bar is None or estimand != "win_rate" else self.bar
            record["p_above_bar"] = math.nan if summary is None or summary.p_above_bar is None else summary.p_above_bar
            record["gated"] = estimand == "win_rate" and population == self.population
            record["verdict"] = str(self.verdict)
            record["converged"] = self.converged
            records.append(record)
        return pd.DataFrame(records)

    def __str__(self) -> str:
        diagnostics = self.diagnostics
        header = (
            f"Bayesian hierarchical win rate: {self.n_verdicts} verdicts, {self.n_vignettes} vignettes, "
            f"prior sigma ~ {self.prior}, {self.parameterization}, sampler {self.sampler}, seed {self.seed}\n"
            f"R-hat max {diagnostics.rhat_max:.4f}, ESS bulk/tail min {diagnostics.ess_bulk_min:.0f}/"
            f"{diagnostics.ess_tail_min:.0f}, divergences {diagnostics.divergences}\n"
            f"verdict {self.verdict}: {self.message}\n"
        )
        return header + self.to_frame().to_string(index=False)


def _resolve_parameterization(parameterization: str, cells: WinRateCells) -> str:
    if parameterization == "auto":
        per_vignette = cells.n_verdicts / cells.n_vignettes
        return "centred" if per_vignette >= CENTRED_MIN_VERDICTS_PER_VIGNETTE else "non_centred"
    if parameterization not in ("centred", "non_centred"):
        raise InputError(
            f"Unknown parameterization {parameterization!r}.", fix="Use 'auto', 'centred' or 'non_centred'."
        )
    return parameterization


@dataclass(frozen=True)
class _FitSettings:
    """The settings both entry points take, as the caller gave them (:func:`_fit_hierarchical_cells`
    validates and resolves them)."""

    bar: float | None
    prior: str | SigmaPrior
    parameterization: str
    sampler: str
    chains: int
    draws: int | None
    tune: int | None
    seed: int | np.random.Generator
    level: float | None
    population: str | None
    prior_sensitivity: bool
    sensitivity_priors: Sequence[str | SigmaPrior]
    ppc_alpha: float
    progress: ProgressLike
    idata_path: str | os.PathLike | None
    thresholds: Thresholds

    @classmethod
    def of(cls, arguments: dict[str, Any]) -> _FitSettings:
        """The settings among an entry point's arguments (its ``locals()`` before anything else is
        bound): both entry points hand them on without naming each one twice."""
        return cls(**{setting.name: arguments[setting.name] for setting in fields(cls)})


def fit_winrate_hierarchical(
    vignette: Sequence | np.ndarray,
    order: Sequence | np.ndarray,
    outcome: Sequence | np.ndarray,
    run: Sequence | np.ndarray | None = None,
    judge: Sequence | np.ndarray | None = None,
    bar: float | None = None,
    prior: str | SigmaPrior = "halfnormal1",
    parameterization: str = "auto",
    sampler: str = "auto",
    chains: int = 4,
    draws: int | None = None,
    tune: int | None = None,
    seed: int | np.random.Generator = 0,
    level: float | None = None,
    population: str | None = None,
    prior_sensitivity: bool = False,
    sensitivity_priors: Sequence[str | SigmaPrior] = DEFAULT_SENSITIVITY_PRIORS,
    ppc_alpha: float = 0.05,
    progress: ProgressLike = False,
    idata_path: str | os.PathLike | None = None,
    thresholds: Thresholds = THRESHOLDS,
) -> BayesWinRateResult:
    """Fit the Bayesian hierarchical win-rate model and gate it on sampler diagnostics.

    The model of the module docstring, which gives its estimands and references too: per cell of
    verdicts sharing vignette v, order o, run r and judge j, ties counted as half a win
    (quasi-binomial; exact binomial without ties), with ``prior`` on sigma.


    Parameters
    ----------
    vignette, order, outcome
        One entry per judged order: vignette id, +0.5 (policy shown first) or -0.5, and outcome
        1 / 0.5 / 0 for the policy.
    run, judge
        Optional run and judge ids; an effect is modelled only when there are >= 2 levels.
    bar
        Win-rate bar of the claim; gives P(win rate > bar) and a PASS/FAIL verdict by the one bar
        rule, :func:`honestci.audit.policy.clears_bar`: PASS when the lower end of the ``level``
        interval for ``population`` is at or above the bar.
    prior
        Prior of sigma: a key of :data:`SIGMA_PRIORS` or a :class:`SigmaPrior`.
    parameterization
        ``"auto"`` (centred when mean verdicts per vignette >= CENTRED_MIN_VERDICTS_PER_VIGNETTE,
        else non-centred; refitted once in the other form if the first fit has divergences; the
        message records it), ``"centred"`` or ``"non_centred"``.
    sampler
        ``"auto"`` (nutpie on the hand-derived compiled density of :mod:`honestci.audit.stats.bayesian.density`;
        PyMC NUTS on the PyMC model when nutpie or numba is not installed, or, with a
        :class:`DensityMismatchWarning` and a note in ``message``, when the PyMC model no longer
        matches the density's recorded fingerprint; from :data:`COLLAPSED_MIN_VIGNETTES`
        vignettes the collapsed sampler), ``"nutpie"`` (the density, raising
        :class:`DensityMismatchError` where ``auto`` would fall back), ``"pymc"``, or
        ``"collapsed"`` (:mod:`honestci.audit.stats.bayesian.collapsed`: the vignette effects
        integrated out by quadrature for the hyperparameters' independence Metropolis-Hastings
        chains, then drawn from their exact conditionals; the result's ``idata`` is then a
        :class:`~honestci.audit.stats.bayesian.posterior_groups.PosteriorGroups`, and R-hat and ESS are read
        on the hyperparameters and estimands, which the vignette effects' chains inherit).
    chains, draws, tune, seed
        Sampler settings; ``draws`` and ``tune`` per chain default to :data:`NUTS_DRAWS` and
        :data:`NUTS_TUNE` for NUTS, :data:`COLLAPSED_DRAWS` and :data:`COLLAPSED_TUNE` for the
        collapsed sampler (whose ``tune`` draws are discarded, no adaptation); ``seed`` is an int or
        a Generator (an int is drawn from it and recorded).
    level, population
        Interval level and gated population; default ``thresholds.confidence_level`` and
        ``thresholds.default_population``.
    prior_sensitivity, sensitivity_priors
        Refit under each alternative prior and report the key estimands per prior.
    ppc_alpha
        Family-wise level of the posterior predictive flag (Bonferroni over vignettes).
    progress
        Sampling progress (:func:`honestci.audit.progress.as_progress`; default none): the
        sampler's own bar on a terminal, lines with draws done, rate and ETA per fit in a log
        (see :func:`sample_posterior`).
    idata_path
        If given, the InferenceData is written there as netCDF: posterior (incl. estimand draws,
        without transformed value variables), sample_stats, and per cell (one observation, see
        :data:`OBSERVATION_UNIT`) observed_data, posterior_predictive and log_likelihood of
        ``wins`` (:func:`cell_log_likelihood`), and the cells as constant_data.

    Returns
    -------
    BayesWinRateResult
        Verdict INCONCLUSIVE with all estimates None when R-hat, ESS or divergences miss the
        thresholds in :class:`honestci.audit.policy.Thresholds`; INCONCLUSIVE (estimates kept) below
        ``min_clusters`` vignettes; INCONCLUSIVE with the win rates withheld (None, the reason in
        ``withheld``) when the posterior predictive check flags a group; otherwise PASS/FAIL against ``bar`` (PASS without a bar),
        at least WARN below ``few_clusters`` vignettes or when another prior flips the
        decision.

    Validated against: PyMC's ``compile_logp``/``compile_dlogp`` of this model (the hand-derived density
    nutpie samples, every variant, tests/test_bayes_density.py) and PyMC's NUTS on it (within Monte
    Carlo error, slow tier), scipy.stats.beta (conjugate Beta-binomial special case through the same
    sampling, summary and diagnostic path, :func:`honestci.audit.stats.bayesian.pooled.fit_pooled_beta_binomial`),
    scipy.integrate.quad (the quadrature), and seeded recovery/coverage simulations from the model.
    """
    return _fit_hierarchical_cells(
        lambda: aggregate_cells(vignette, order, outcome, run, judge), _FitSettings.of(locals())
    )


def fit_winrate_hierarchical_frame(frame: pd.DataFrame, **kwargs: Any) -> BayesWinRateResult:
    """Thin wrapper over :func:`fit_winrate_hierarchical` for a long per-order frame.

    Columns: ``vignette_id``, ``policy_first`` (bool), ``value`` (1 / 0.5 / 0 for the policy), and
    optionally ``run`` and ``judge``.
    """
    missing = [c for c in ("vignette_id", "policy_first", "value") if c not in frame.columns]
    if missing:
        raise InputError(
            f"The per-order frame lacks column(s) {missing}.",
            fix="Provide vignette_id, policy_first and value (run and judge optional).",
        )
    policy_first = frame["policy_first"].to_numpy()
    if frame["policy_first"].isna().any() or not np.isin(policy_first, (True, False)).all():
        raise InputError(
            "Column 'policy_first' must be true or false on every row.",
            fix="Mark whether the policy's response was shown first.",
        )
    return fit_winrate_hierarchical(
        frame["vignette_id"].to_numpy(),
        np.where(policy_first.astype(bool), 0.5, -0.5),
        frame["value"].to_numpy(dtype=float),
        run=frame["run"].to_numpy() if "run" in frame.columns else None,
        judge=frame["judge"].to_numpy() if "judge" in frame.columns else None,
        **kwargs,
    )


def fit_contest_scores_hierarchical(
    vignette: Sequence | np.ndarray,
    score: Sequence | np.ndarray,
    run: Sequence | np.ndarray | None = None,
    judge: Sequence | np.ndarray | None = None,
    bar: float | None = None,
    prior: str | SigmaPrior = "halfnormal1",
    parameterization: str = "auto",
    sampler: str = "auto",
    chains: int = 4,
    draws: int | None = None,
    tune: int | None = None,
    seed: int | np.random.Generator = 0,
    level: float | None = None,
    population: str | None = None,
    prior_sensitivity: bool = False,
    sensitivity_priors: Sequence[str | SigmaPrior] = DEFAULT_SENSITIVITY_PRIORS,
    ppc_alpha: float = 0.05,
    progress: ProgressLike = False,
    idata_path: str | os.PathLike | None = None,
    thresholds: Thresholds = THRESHOLDS,
    trials_per_contest: int = 2,
) -> BayesWinRateResult:
    r"""The hierarchical model on both-order contest scores: the estimands the audit reports.

    Same PyMC model (and hand-derived density) as :func:`fit_winrate_hierarchical`, fed the
    contest cells of :func:`aggregate_contest_cells`: per (vignette, run, judge) cell, 2m trials
    with 2 sum(s) wins for m contests with scores s in {0, 1/2, 1}, order 0, divided by the
    quasi-binomial dispersion phi = max(1, Pearson estimate). The mean model is

    .. math::
        E[s \mid v, r, j] = \operatorname{expit}(\mu + u_v + a_r + b_j), \quad u_v \sim N(0, \sigma),

    so per draw the win rates are the equal-vignette-weight contest-score rates of
    :mod:`honestci.audit.stats.estimands`: these vignettes (1/G) sum_v mean_{r,j} expit(eta_vrj),
    new vignettes mean_{r,j} E_Z[expit(mu + sigma Z + a_r + b_j)] (the quadrature of
    :func:`winrate_estimand_draws`; with no run or judge offsets this is
    ``estimands.new_vignette_rate(mu, sigma)``, the population truth at order bias and tie width 0,
    where p(eta) = expit(eta)). No order effect is estimated (each score averages both orders).

    The posterior predictive check runs on the same cells whenever the chains converge; when it
    flags a (vignette, run, judge) group the win rates are withheld (None, verdict INCONCLUSIVE,
    the reason in ``withheld`` and ``message``). The bar rule is
    :func:`honestci.audit.policy.clears_bar` on the ``level`` interval's lower end, as for the gate.

    Parameters are those of :func:`fit_winrate_hierarchical`, with ``score`` (one per contest) in
    place of ``order`` and ``outcome``, and ``trials_per_contest`` (1 when each contest is one
    judged order: :func:`aggregate_contest_cells`).

    References
    ----------
    McCullagh & Nelder (1989), *Generalized Linear Models*, 2nd ed., ch. 9 (quasi-likelihood and
    the Pearson dispersion estimate); Gelman, Meng & Stern (1996); Zheng et al. (2023) (both-order
    scoring).

    Validated against: seeded simulations of the estimands' truth (``estimands.vignette_rate`` /
    ``location_for_rate``) with order bias and 30% ties per order, recovering the contest-score
    rate and not the per-verdict one (tests/test_bayes.py); the density and sampler checks of
    :func:`fit_winrate_hierarchical` apply unchanged (same model).
    """
    return _fit_hierarchical_cells(
        lambda: aggregate_contest_cells(vignette, score, run, judge, trials_per_contest), _FitSettings.of(locals())
    )


def _fit_hierarchical_cells(make_cells: Callable[[], WinRateCells], settings: _FitSettings) -> BayesWinRateResult:
    """Validate the settings, build the cells, then sample, summarise, check and gate one fit
    (the body of both entry points)."""
    started = time.perf_counter()
    bar, thresholds = settings.bar, settings.thresholds
    level, population, main_prior, alternative_priors = _validated_settings(settings)
    cells = make_cells()
    collapsed = uses_collapsed_sampler(settings.sampler, cells)
    draws, tune = _draws_and_tune(settings, collapsed)
    automatic = settings.parameterization == "auto" and not collapsed
    # The collapsed sampler integrates the vignette effects out: it has no centring to choose.
    parameterization = "integrated" if collapsed else _resolve_parameterization(settings.parameterization, cells)
    seed_int = resolve_seed(settings.seed)
    fit_with = _cells_fitter(cells, settings, draws, tune, seed_int)
    fit, parameterization, parameterization_note = _fit_choosing_form(
        fit_with, main_prior, parameterization, automatic, thresholds
    )
    idata = fit.idata
    summaries: dict[str, PosteriorSummary | None] = dict.fromkeys(_SUMMARIES)
    ppc = None
    quantiles = None
    withheld = ""
    # One set of replicates feeds both the check and the saved posterior_predictive group.
    thin = predictive_thinning(idata, cells)
    eta, replicated_wins = predictive_draws(idata, cells, thin, seed_int)
    if fit.diagnostics.converged:
        summaries, quantiles = _posterior_summaries(fit, cells, level, bar)
        ppc = check_replicates(cells, replicated_wins, level, settings.ppc_alpha, eta)
        withheld = _withheld_reason(ppc)
        if withheld:
            summaries["winrate_these"] = summaries["winrate_new"] = None
            quantiles = None
            findings = [(Verdict.INCONCLUSIVE, withheld)]
        else:
            gated = summaries["winrate_these" if population == "these_vignettes" else "winrate_new"]
            findings = [_bar_finding(gated, population, bar, level)]
        findings += _vignette_count_findings(cells.n_vignettes, thresholds)
    else:
        findings = [_unconverged_finding(fit.diagnostics)]

    # Kept for the saved groups (the file is written right after an audit's fit: building them
    # again took ~0.9 CPU-s at a million contests), but freed before any refit: the groups then
    # build their own (the same arrays) when read or written.
    predictive = None if settings.prior_sensitivity else (eta, replicated_wins)
    del eta, replicated_wins
    sensitivity = None
    if settings.prior_sensitivity:
        sensitivity = _prior_sensitivity(fit_with, main_prior, fit, alternative_priors, parameterization, level, bar)
        issue = _sensitivity_issue(sensitivity, population, bar) if fit.diagnostics.converged else ""
        if issue:
            findings.append((Verdict.WARN, issue))

    complete_idata(idata, cells, thin, seed_int, predictive)
    del predictive
    saved_path = None
    if settings.idata_path is not None:
        saved_path = str(Path(settings.idata_path))
        idata.to_netcdf(saved_path)

    notes = [note for note in (fit.sampler_note, parameterization_note) if note]
    return BayesWinRateResult(
        **summaries,
        bar=bar,
        level=level,
        population=population,
        diagnostics=fit.diagnostics,
        converged=fit.diagnostics.converged,
        verdict=worst([verdict for verdict, _ in findings]),
        winrate_quantiles=quantiles,
        message="; ".join(notes + [message for _, message in findings]),
        ppc=ppc,
        prior_sensitivity=sensitivity,
        prior=main_prior.label,
        sampler=fit.sampler,
        sampler_note=fit.sampler_note,
        parameterization=parameterization,
        seed=seed_int,
        n_verdicts=cells.n_verdicts,
        n_vignettes=cells.n_vignettes,
        n_runs=cells.n_runs,
        n_judges=cells.n_judges,
        n_cells=int(cells.n.size),
        has_ties=cells.has_ties,
        runtime_seconds=time.perf_counter() - started,
        idata_path=saved_path,
        idata=idata if fit.diagnostics.converged else None,
        unit=cells.unit,
        n_contests=cells.n_contests,
        withheld=withheld,
        dispersion=cells.dispersion,
        dispersion_estimate=cells.dispersion_estimate,
    )


def _validated_settings(settings: _FitSettings) -> tuple[float, str, SigmaPrior, list[SigmaPrior]]:
    """The interval level, the gated population, the prior of sigma and the alternative priors
    the settings ask for; an :class:`~honestci.audit.errors.InputError` before any cell is built."""
    thresholds = settings.thresholds
    level = thresholds.confidence_level if settings.level is None else settings.level
    population = thresholds.default_population if settings.population is None else settings.population
    if population not in POPULATIONS:
        raise InputError(f"Unknown population {population!r}.", fix=f"Use one of {POPULATIONS}.")
    bar = settings.bar
    if bar is not None and not 0.0 < bar < 1.0:
        raise InputError(f"bar {bar} is not a win rate in (0, 1).", fix="Give the bar as a proportion.")
    if settings.sampler not in SAMPLERS:
        raise InputError(f"Unknown sampler {settings.sampler!r}.", fix=f"Use one of {SAMPLERS}.")
    draws, tune = settings.draws, settings.tune
    check_sampling_sizes(settings.chains, 1 if draws is None else draws, 0 if tune is None else tune, level)
    main_prior = resolve_prior(settings.prior)
    alternative_priors = [resolve_prior(p) for p in settings.sensitivity_priors] if settings.prior_sensitivity else []
    if settings.prior_sensitivity and not alternative_priors:
        raise InputError(
            "prior_sensitivity=True but no alternative priors given.",
            fix="Pass sensitivity_priors, e.g. ('halfnormal0.5', 'halfcauchy1').",
        )
    return level, population, main_prior, alternative_priors


def _draws_and_tune(settings: _FitSettings, collapsed: bool) -> tuple[int, int]:
    """Draws and warm-up per chain: as given, else the defaults of the sampler that runs."""
    draws, tune = settings.draws, settings.tune
    if draws is None:
        draws = COLLAPSED_DRAWS if collapsed else NUTS_DRAWS
    if tune is None:
        tune = COLLAPSED_TUNE if collapsed else NUTS_TUNE
    return draws, tune


def _cells_fitter(
    cells: WinRateCells, settings: _FitSettings, draws: int, tune: int, seed: int
) -> Callable[[SigmaPrior, str], Fit]:
    """:func:`~honestci.audit.stats.bayesian.model.fit_cells` of these cells as a function of the prior
    and the form: every fit of them (the main one, a refit in the other form, one per alternative
    prior) differs only in those."""
    return partial(
        fit_cells,
        cells,
        sampler=settings.sampler,
        chains=settings.chains,
        draws=draws,
        tune=tune,
        seed=seed,
        progress=settings.progress,
        thresholds=settings.thresholds,
    )


def _fit_choosing_form(
    fit_with: Callable[[SigmaPrior, str], Fit], prior: SigmaPrior, parameterization: str, automatic: bool, thresholds
) -> tuple[Fit, str, str]:
    """The fit in ``parameterization`` or, when the form was chosen automatically and that fit
    diverged, the refit in the other form; with the form fitted and a note of the refit ("" if none)."""
    fit = fit_with(prior, parameterization)
    if automatic and fit.diagnostics.divergences > thresholds.divergences_max:
        # Divergences flag a funnel the chosen form cannot cross (e.g. centred with sigma near 0):
        # the other form is the standard remedy, so "auto" tries it once.
        other = "non_centred" if parameterization == "centred" else "centred"
        refit = fit_with(prior, other)
        return (
            refit,
            other,
            f"{parameterization} form had {fit.diagnostics.divergences} divergence(s); refitted {other}",
        )
    return fit, parameterization, ""


def _posterior_summaries(
    fit: Fit, cells: WinRateCells, level: float, bar: float | None
) -> tuple[dict[str, PosteriorSummary | None], dict]:
    """A converged fit's summaries (the win rates with P(rate > bar), the order effects of verdict
    cells, sigma) and each population's win-rate quantiles, for the report's posterior plot."""
    summaries: dict[str, PosteriorSummary | None] = dict.fromkeys(_SUMMARIES)
    for name in ("winrate_these", "winrate_new"):
        summaries[name] = summarise_draws(fit.estimand_draws[name], level, bar)
    grid = np.linspace(0.0, 1.0, POSTERIOR_QUANTILES)
    quantiles = {
        population_name: tuple(float(q) for q in np.quantile(fit.estimand_draws[name], grid))
        for population_name, name in (("these_vignettes", "winrate_these"), ("new_vignettes", "winrate_new"))
    }
    if cells.unit == "verdict":  # contest cells carry no order information
        for name in ("order_effect_these", "order_effect_new"):
            summaries[name] = summarise_draws(fit.estimand_draws[name], level)
        summaries["order_effect_logit"] = summarise_draws(stacked_draws(fit.idata, "beta"), level)
    summaries["sigma"] = summarise_draws(stacked_draws(fit.idata, "sigma"), level)
    return summaries, quantiles


def _withheld_reason(ppc: PosteriorPredictiveCheck) -> str:
    """Why the win rates are withheld: the groups the posterior predictive check flags ("" when
    none). A model that does not reproduce its own data gives no win rate to read."""
    if not ppc.any_flagged:
        return ""
    flagged = ppc.flagged_groups
    shown = ", ".join(flagged[:5]) + (f" and {len(flagged) - 5} more" if len(flagged) > 5 else "")
    return (
        f"the posterior predictive check flags {len(flagged)} of {ppc.flagged.size} groups ({shown}; "
        f"p < {ppc.alpha:g}/{ppc.flagged.size}, Bonferroni): the model does not reproduce their win "
        "share, so its win rates are withheld"
    )


def _bar_finding(
    gated: PosteriorSummary | None, population: str, bar: float | None, level: float
) -> tuple[Verdict, str]:
    """The verdict of the gated population's win rate against the bar (the one bar rule,
    :func:`~honestci.audit.policy.clears_bar`), and its message."""
    if gated is None:
        return Verdict.INCONCLUSIVE, f"no posterior summary of the {population} win rate"
    if bar is None:
        return Verdict.PASS, "converged; no bar to test"
    if clears_bar(gated.lower, bar):
        return Verdict.PASS, f"{population} win rate {level:.0%} interval lower end {gated.lower:.4f} >= bar {bar}"
    return Verdict.FAIL, f"{population} win rate {level:.0%} interval lower end {gated.lower:.4f} < bar {bar}"


def _unconverged_finding(diagnostics: SamplerDiagnostics) -> tuple[Verdict, str]:
    """The verdict of chains that did not converge (no estimate is reported), and its message."""
    return (
        Verdict.INCONCLUSIVE,
        "sampler did not converge, no estimate reported: "
        + "; ".join(diagnostics.problems)
        + " (run longer chains or check the data)",
    )


def _vignette_count_findings(n_vignettes: int, thresholds: Thresholds) -> list[tuple[Verdict, str]]:
    """What too few vignettes make of a converged fit: INCONCLUSIVE below ``min_clusters`` (sigma
    rests mostly on its prior), WARN below ``few_clusters``; nothing from there on."""
    if n_vignettes < thresholds.min_clusters:
        return [
            (
                Verdict.INCONCLUSIVE,
                f"only {n_vignettes} vignettes (< {thresholds.min_clusters}): "
                "sigma and the new-vignette win rate rest mostly on the prior",
            )
        ]
    if n_vignettes < thresholds.few_clusters:
        return [
            (
                Verdict.WARN,
                f"{n_vignettes} vignettes (< {thresholds.few_clusters}): "
                "the new-vignette interval depends on the prior of sigma",
            )
        ]
    return []


def _prior_sensitivity(
    fit_with: Callable[[SigmaPrior, str], Fit],
    main_prior: SigmaPrior,
    main_fit: Fit,
    alternatives: list[SigmaPrior],
    parameterization: str,
    level: float,
    bar: float | None,
) -> PriorSensitivity:
    """The key estimands of the main fit and of a refit under each alternative prior (in the
    form the main fit was settled in)."""
    rows = [_sensitivity_row(main_prior, main_fit, level, bar)]
    for alternative in alternatives:
        rows.append(_sensitivity_row(alternative, fit_with(alternative, parameterization), level, bar))
    return PriorSensitivity(tuple(rows), bar)


def _sensitivity_row(prior: SigmaPrior, fit: Fit, level: float, bar: float | None) -> PriorSensitivityRow:
    if not fit.diagnostics.converged:
        return PriorSensitivityRow(prior.label, False, fit.diagnostics.divergences, None, None, None)
    return PriorSensitivityRow(
        prior.label,
        True,
        fit.diagnostics.divergences,
        summarise_draws(fit.estimand_draws["winrate_these"], level, bar),
        summarise_draws(fit.estimand_draws["winrate_new"], level, bar),
        summarise_draws(stacked_draws(fit.idata, "sigma"), level),
    )


def _sensitivity_issue(sensitivity: PriorSensitivity, population: str, bar: float | None) -> str:
    unconverged = [row.prior for row in sensitivity.rows if not row.converged]
    if unconverged:
        return f"prior sensitivity incomplete: fits under {unconverged} did not converge"
    if bar is None:
        return ""
    attribute = "winrate_these" if population == "these_vignettes" else "winrate_new"
    decisions = {row.prior: clears_bar(getattr(row, attribute).lower, bar) for row in sensitivity.rows}
    if len(set(decisions.values())) > 1:
        return f"the decision against bar {bar} depends on the prior of sigma: {decisions}"
    return ""


__all__ = [
    "CENTRED_MIN_VERDICTS_PER_VIGNETTE",
    "POPULATIONS",
    "BayesWinRateResult",
    "PriorSensitivity",
    "PriorSensitivityRow",
    "fit_contest_scores_hierarchical",
    "fit_winrate_hierarchical",
    "fit_winrate_hierarchical_frame",
]
