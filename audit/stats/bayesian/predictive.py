"""The posterior predictive side of a hierarchical fit: per-cell predictions, the check, the saved groups.

Per posterior draw and cell: the linear predictor (:func:`cell_linear_predictor`), the replicated
wins (:func:`replicate_cell_wins`) and the pointwise log-likelihood (:func:`cell_log_likelihood`).
The posterior predictive check (:func:`posterior_predictive_check`, :func:`check_replicates`)
holds each (vignette, run, judge) group's win share against its replicates (Gelman, Meng & Stern
1996); :func:`complete_idata` keeps the same arrays as the fit's InferenceData groups. Large fits
keep every n-th draw for these arrays (:func:`predictive_thinning`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy.special import expit

from honestci.audit.stats.bayesian.cells import WinRateCells, unique_rows
from honestci.audit.stats.bayesian.sampling import stacked_draws

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


#: Largest (draws x cells) of the per-cell predictive arrays (linear predictor, replicates,
#: pointwise log-likelihood): beyond it each chain's draws are thinned evenly for them
#: (:func:`predictive_thinning`). The fixture's fits stay whole (4,000 x 60); a million contests on
#: 5,000 vignettes (1,600 draws x 10,000 cells) keep every 4th draw.
PREDICTIVE_MAX_VALUES = 4_000_000


def predictive_thinning(idata, cells: WinRateCells) -> int:
    """Every how many draws of each chain the per-cell predictive arrays keep (1: all)."""
    total = idata.posterior.sizes["chain"] * idata.posterior.sizes["draw"] * cells.n.size
    return max(1, math.ceil(total / PREDICTIVE_MAX_VALUES))


@dataclass(frozen=True)
class PosteriorPredictiveCheck:
    """Observed win share of every (vignette, run, judge) group against its posterior predictive
    distribution (one group per vignette when there is one run and one judge).

    p_value is two-sided, 2 min(P(rep >= obs), P(rep <= obs)) capped at 1 (Gelman, Meng & Stern
    1996); a group is flagged when p_value < alpha / groups (Bonferroni). Replicates are binomial
    in each cell's trials (for contest cells, the trials after the dispersion floor at 1): with
    ties the observed shares vary less than binomial ones, so ties make the check conservative
    (they cannot trigger a flag by themselves). Grouping by run and judge as well as vignette lets
    it see what the model's additive run and judge offsets cannot reproduce (a run that wins one
    vignette and loses another); ``n`` counts the group's verdicts or contests.
    """

    vignette: tuple[str, ...]
    n: np.ndarray
    observed_share: np.ndarray
    predicted_mean: np.ndarray
    predicted_lower: np.ndarray
    predicted_upper: np.ndarray
    p_value: np.ndarray
    flagged: np.ndarray
    alpha: float
    run: tuple[str, ...] = ()
    judge: tuple[str, ...] = ()

    @property
    def any_flagged(self) -> bool:
        return bool(np.any(self.flagged))

    @property
    def flagged_groups(self) -> list[str]:
        """The flagged groups as "vignette" (or "vignette/run/judge" with several runs or judges)."""
        runs, judges = len(set(self.run)) > 1, len(set(self.judge)) > 1
        return [
            "/".join((v,) + ((r,) if runs else ()) + ((j,) if judges else ()))
            for v, r, j, f in zip(self.vignette, self.run, self.judge, self.flagged)
            if f
        ]

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(
            {
                "vignette": list(self.vignette),
                "run": list(self.run),
                "judge": list(self.judge),
                "n": self.n,
                "observed_share": self.observed_share,
                "predicted_mean": self.predicted_mean,
                "predicted_lower": self.predicted_lower,
                "predicted_upper": self.predicted_upper,
                "p_value": self.p_value,
                "flagged": self.flagged,
            }
        )


def cell_linear_predictor(
    cells: WinRateCells,
    mu: np.ndarray,
    beta: np.ndarray,
    u: np.ndarray,
    run_effect: np.ndarray | None,
    judge_effect: np.ndarray | None,
) -> np.ndarray:
    """(S, cells) logit p of every cell per draw: mu + u_v + beta o + a_r + b_j."""
    # In place, term by term in the expression's order (the same sums to the bit): two (S, cells)
    # arrays where the expression makes five, each new one touched page by page.
    eta = np.take(u, cells.vignette_index, axis=1)
    np.add(mu[:, None], eta, out=eta)
    term = np.multiply(beta[:, None], cells.order[None, :])
    eta += term
    for effect, index in ((run_effect, cells.run_index), (judge_effect, cells.judge_index)):
        if effect is not None:
            eta += np.take(effect, index, axis=1, out=term)
    return eta


def replicate_cell_wins(cells: WinRateCells, eta: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(S, cells) posterior predictive wins: Binomial(round(n), expit(eta)) per draw, rescaled to
    the cell's ``n`` (contest cells carry n / phi trials, which need not be whole)."""
    trials = np.maximum(1.0, np.rint(cells.n))
    whole, rescale = trials.astype(np.int64)[None, :], (cells.n / trials)[None, :]
    replicates = expit(eta)
    # A block of draws at a time, each rescaled into its probabilities' rows (the same float64
    # product): one (S, cells) array, where a single call makes three. The generator draws in the
    # same order either way, so the numbers are the same.
    step = max(1, _REPLICATE_BLOCK_VALUES // max(1, eta.shape[1]))
    for start in range(0, eta.shape[0], step):
        rows = replicates[start : start + step]
        np.multiply(rng.binomial(whole, rows), rescale, out=rows)
    return replicates


#: Replicated wins drawn per block in :func:`replicate_cell_wins` (8 bytes each).
_REPLICATE_BLOCK_VALUES = 500_000


def cell_log_likelihood(cells: WinRateCells, eta: np.ndarray) -> np.ndarray:
    r"""(S, cells) pointwise log-likelihood of every cell per draw.

    .. math::
        \ell_c = \log\binom{n_c}{w_c} + w_c \eta_c - n_c \log(1 + e^{\eta_c})

    the model's quasi-binomial term (:func:`~honestci.audit.stats.bayesian.model.quasi_binomial_loglik`,
    the potential it samples) plus the binomial coefficient through log-gamma, so that with whole
    counts (verdict cells; contest cells when phi = 1) it is the binomial log pmf and the cells' sum
    is the model's log-likelihood up to that data-only constant. One observation is one cell.

    Validated against: scipy.stats.binom.logpmf (tests/test_bayes.py).
    """
    from scipy.special import gammaln

    n, w = cells.n[None, :].astype(float), cells.wins[None, :]
    log_choose = gammaln(n + 1.0) - gammaln(w + 1.0) - gammaln(n - w + 1.0)
    # log_choose + w eta - n log(1 + e^eta) in place: two (S, cells) arrays where the expression
    # makes three (each step the expression's own operation, so the same values to the bit)
    loglik = np.multiply(w, eta)
    np.add(log_choose, loglik, out=loglik)
    softplus = np.logaddexp(0.0, eta)
    softplus *= n
    loglik -= softplus
    return loglik


def posterior_predictive_check(
    cells: WinRateCells,
    mu: np.ndarray,
    beta: np.ndarray,
    u: np.ndarray,
    run_effect: np.ndarray | None,
    judge_effect: np.ndarray | None,
    rng: np.random.Generator,
    level: float = 0.95,
    alpha: float = 0.05,
) -> PosteriorPredictiveCheck:
    """Replicate every cell from its posterior p and compare win shares per (vignette, run, judge)."""
    eta = cell_linear_predictor(cells, mu, beta, u, run_effect, judge_effect)
    return check_replicates(cells, replicate_cell_wins(cells, eta, rng), level, alpha, eta)


#: Replicates at or beyond the observed share (in the smaller tail) up to which a one-cell group's
#: tail is computed exactly (:func:`check_replicates`). Beyond it the estimate is at least 3/S and
#: so is the tail but for a chance of order (S x tail)^3 / 6: no Bonferroni level below 1/S (the
#: only case where the replicates could mislead) is then crossed by Monte Carlo error.
PPC_EXACT_TAIL_COUNT = 2


def _binomial_tail(eta: np.ndarray, trials: np.ndarray, observed: np.ndarray, upper: bool, tolerance: float):
    """Per column, the mean over the draws (rows of ``eta``) of P(X / T >= observed) (``upper``)
    or P(X / T <= observed), X ~ Bin(T, expit(eta)): X >= ceil(T (obs - tol)), X <= floor(T (obs + tol))."""
    from scipy.special import bdtr, bdtrc

    p = expit(eta)
    if upper:
        return bdtrc(np.ceil(trials * (observed - tolerance)).astype(np.int64) - 1, trials.astype(np.int64), p).mean(
            axis=0
        )
    return bdtr(np.floor(trials * (observed + tolerance)).astype(np.int64), trials.astype(np.int64), p).mean(axis=0)


def check_replicates(
    cells: WinRateCells, replicated_wins: np.ndarray, level: float, alpha: float, eta: np.ndarray | None = None
) -> PosteriorPredictiveCheck:
    """The check of :func:`posterior_predictive_check` on given (S, cells) replicated wins.

    A tail probability is the share of replicates at or beyond the observed share, which cannot
    resolve tails below ~1/S: none of S replicates beyond the observed share gives p = 0, a flag
    against any Bonferroni level, for a tail of 1e-3 as for one of 1e-9. With thousands of groups
    the level alpha / groups is far below 1/S, so for a group of one cell (every group of contest
    cells), given the draws' ``eta``, the smaller tail is computed exactly wherever at most
    :data:`PPC_EXACT_TAIL_COUNT` replicates lie beyond it: the mean over the draws of the binomial
    tail, e.g. P(rep >= obs) =
    mean_s P(Bin(T, p_s) >= T obs) with T the cell's whole trials (``scipy.special.bdtrc``).
    """
    from scipy import sparse

    groups, group_of_cell = unique_rows(
        (cells.vignette_index, cells.n_vignettes), (cells.run_index, cells.n_runs), (cells.judge_index, cells.n_judges)
    )
    n_groups = len(groups)
    membership = sparse.csr_matrix(
        (np.ones(cells.n.size), (np.arange(cells.n.size), group_of_cell)), shape=(cells.n.size, n_groups)
    )
    n_group = membership.T @ cells.n
    one_cell = np.bincount(group_of_cell, minlength=n_groups) == 1
    cell_of_group = np.zeros(n_groups, dtype=np.int64)
    cell_of_group[group_of_cell] = np.arange(cells.n.size)
    n_draws = replicated_wins.shape[0]
    if one_cell.all():
        # each group's replicates are its cell's (the product's 0 + 1 w): gathered a block of
        # groups at a time, in the product's (groups, S) layout, without an (S, groups) copy
        def replicated_share(block: slice) -> np.ndarray:
            return replicated_wins.T[cell_of_group[block]].T / n_group[block]

    else:
        shares = np.asarray((membership.T @ replicated_wins.T).T)
        shares /= n_group  # in place: an (S, groups) array less

        def replicated_share(block: slice) -> np.ndarray:
            return shares[:, block]

    observed_share = (membership.T @ cells.wins) / n_group
    tolerance = 1e-12
    tail = (1.0 - level) / 2.0
    upper_count, lower_count = np.empty(n_groups, dtype=np.int64), np.empty(n_groups, dtype=np.int64)
    predicted_mean, lower, upper = np.empty(n_groups), np.empty(n_groups), np.empty(n_groups)
    # Every figure is a group's own (a column's): the same numbers whatever the blocks.
    step = max(1, _REPLICATE_BLOCK_VALUES // max(1, n_draws))
    for start in range(0, n_groups, step):
        block = slice(start, start + step)
        share = replicated_share(block)
        upper_count[block] = np.sum(share >= observed_share[block] - tolerance, axis=0)
        lower_count[block] = np.sum(share <= observed_share[block] + tolerance, axis=0)
        predicted_mean[block] = share.mean(axis=0)
        # both quantiles from one partition of the shares themselves (their last use): no copy of them
        lower[block], upper[block] = np.quantile(share, [tail, 1.0 - tail], axis=0, overwrite_input=True)
    upper_tail, lower_tail = upper_count / n_draws, lower_count / n_draws
    if eta is not None:
        trials = np.maximum(1.0, np.rint(cells.n[cell_of_group]))
        for counts, tails, upper_side in ((upper_count, upper_tail, True), (lower_count, lower_tail, False)):
            exact = np.flatnonzero(one_cell & (counts <= PPC_EXACT_TAIL_COUNT))
            if exact.size:
                tails[exact] = _binomial_tail(
                    eta[:, cell_of_group[exact]], trials[exact], observed_share[exact], upper_side, tolerance
                )
    p_value = np.minimum(1.0, 2.0 * np.minimum(upper_tail, lower_tail))
    return PosteriorPredictiveCheck(
        vignette=tuple(cells.vignette_labels[g] for g in groups[:, 0]),
        n=np.rint(membership.T @ cells.units_per_cell).astype(np.int64),
        observed_share=observed_share,
        predicted_mean=predicted_mean,
        predicted_lower=lower,
        predicted_upper=upper,
        p_value=p_value,
        flagged=p_value < alpha / n_groups,
        alpha=alpha,
        run=tuple(cells.run_labels[g] for g in groups[:, 1]),
        judge=tuple(cells.judge_labels[g] for g in groups[:, 2]),
    )


#: What one observation of the saved InferenceData is, per kind of cell (its observed_data attrs).
OBSERVATION_UNIT = {
    "verdict": "one cell (vignette, order, run, judge): wins = sum of its verdicts' outcomes (a tie 1/2) "
    "out of n verdicts",
    "contest": "one cell (vignette, run, judge): wins = 2 x the sum of its contest scores out of n = 2 x its "
    "contests, both divided by the quasi-binomial dispersion phi",
}


def complete_idata(
    idata, cells: WinRateCells, thin: int, seed: int, predictive: tuple[np.ndarray, np.ndarray] | None = None
) -> None:
    """Make ``idata`` a complete InferenceData of the fit, in place.

    posterior without the sampler's transformed value variables (``sigma_log__``: names ending in
    ``__``, PyMC's convention, which its own ``pm.sample`` output also leaves out); observed_data,
    posterior_predictive and log_likelihood of the variable ``wins`` per cell (so ``az.loo`` and
    ``az.plot_ppc`` work; one observation is a cell, :data:`OBSERVATION_UNIT`); constant_data: the
    cells with their labels (replacing the unlabelled model data PyMC's sampler stores there).
    The per-cell groups hold every ``thin``-th draw of each chain (:func:`predictive_thinning`),
    their ``draw`` coordinate the posterior's draw numbers, and the replicates of
    :func:`predictive_draws` with ``seed`` (those the fit's check read). In a
    :class:`~honestci.audit.stats.bayesian.posterior_groups.PosteriorGroups` they are deferred, built when
    read or written, from ``predictive`` (that function's linear predictor and replicates, already
    computed: each is let go once its group is built) or else anew.
    """
    import xarray as xr

    from honestci.audit.stats.bayesian.posterior_groups import PosteriorGroups

    internal = [name for name in idata.posterior.data_vars if str(name).endswith("__")]
    posterior = idata.posterior.drop_vars(internal)
    kept_draws = posterior["draw"].values[::thin]
    shape = (idata.posterior.sizes["chain"], kept_draws.size, cells.n.size)
    coords = {"chain": posterior["chain"].values, "draw": kept_draws}
    dims = ("chain", "draw", "cell")
    for group in ("posterior", "constant_data", "observed_data", "posterior_predictive", "log_likelihood"):
        if group in idata.groups():
            del idata[group]
    attrs = {
        "observation": OBSERVATION_UNIT[cells.unit],
        "dispersion_phi": float(cells.dispersion),
        "thinned_to_every_nth_draw": thin,
    }
    idata.add_groups(posterior=posterior)

    def per_cell(values: np.ndarray):
        return xr.Dataset({"wins": (dims, values.reshape(shape))}, coords=coords, attrs=attrs)

    # Each deferred group takes its array out of here when built, so it is freed once written.
    computed = dict(zip(("eta", "replicates"), predictive or ()))

    def posterior_predictive():
        replicates = computed.pop("replicates", None)
        return per_cell(predictive_draws(idata, cells, thin, seed)[1] if replicates is None else replicates)

    def log_likelihood():
        eta = computed.pop("eta", None)
        return per_cell(cell_log_likelihood(cells, _kept_linear_predictor(idata, cells, thin) if eta is None else eta))

    deferred = isinstance(idata, PosteriorGroups)
    idata.add_groups(
        posterior_predictive=posterior_predictive if deferred else posterior_predictive(),
        log_likelihood=log_likelihood if deferred else log_likelihood(),
        observed_data=xr.Dataset({"wins": ("cell", cells.wins)}, attrs=attrs),
        constant_data=xr.Dataset(
            {
                "cell_vignette": ("cell", np.asarray(cells.vignette_labels)[cells.vignette_index]),
                "cell_order": ("cell", cells.order),
                "cell_run": ("cell", np.asarray(cells.run_labels)[cells.run_index]),
                "cell_judge": ("cell", np.asarray(cells.judge_labels)[cells.judge_index]),
                "cell_n": ("cell", cells.n),
                "cell_wins": ("cell", cells.wins),
            }
        ),
    )


def _kept_linear_predictor(idata, cells: WinRateCells, thin: int) -> np.ndarray:
    """(S, cells) :func:`cell_linear_predictor` of every ``thin``-th draw of each chain."""
    return cell_linear_predictor(
        cells,
        stacked_draws(idata, "mu", thin),
        stacked_draws(idata, "beta", thin),
        stacked_draws(idata, "u", thin),
        stacked_draws(idata, "run_effect", thin) if cells.n_runs > 1 else None,
        stacked_draws(idata, "judge_effect", thin) if cells.n_judges > 1 else None,
    )


def predictive_draws(idata, cells: WinRateCells, thin: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_kept_linear_predictor` and the wins replicated from it by a generator seeded with
    ``seed``: the same arrays at every call (the fit's check reads them, then the saved groups)."""
    eta = _kept_linear_predictor(idata, cells, thin)
    return eta, replicate_cell_wins(cells, eta, np.random.default_rng(seed))


__all__ = [
    "OBSERVATION_UNIT",
    "PPC_EXACT_TAIL_COUNT",
    "PREDICTIVE_MAX_VALUES",
    "PosteriorPredictiveCheck",
    "cell_linear_predictor",
    "cell_log_likelihood",
    "check_replicates",
    "complete_idata",
    "posterior_predictive_check",
    "predictive_draws",
    "predictive_thinning",
    "replicate_cell_wins",
]
