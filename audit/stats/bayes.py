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
cells (:func:`aggregate_contest_cells`: m trials and m sum(s) wins per contest, m = 2 for both
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
hand in :mod:`honestci.audit.stats.bayes_density` (numba, compiled once and then loaded from numba's on-disk
cache; pinned to PyMC's ``compile_logp``/``compile_dlogp`` of :func:`_build_hierarchical_model` for
every variant by tests/test_bayes_density.py), through nutpie's public Python-function interface
(``nutpie.compiled_pyfunc.from_pyfunc``). The PyMC model stays the definition: the density records
a fingerprint of the PyMC functions it was derived from and refuses itself when they have changed
(:class:`DensityMismatchError`), and ``auto`` then samples the PyMC model with PyMC's NUTS, warns
(:class:`DensityMismatchWarning`) and says so in the result's message. ``auto`` falls back to PyMC
otherwise only when nutpie or numba is not installed; a failure while nutpie samples propagates.
``sampler="pymc"`` always samples the PyMC model. Why: letting nutpie compile the PyTensor graph
costs 6-19 s of numba compiling in every new process (not cacheable), which made a one-fit process
take 15-21 s; with the cached kernel a cold process takes about 5-8 s on 2 shared cores (load 3), of
which ``import arviz`` (imported by nutpie itself) is 2-3.5 s (bench/README.md).
4 chains x (1000 + 1000) stay the default: in 20 seeded fixture-like fits all 20 passed the gate
(R-hat max 1.0096, min bulk/tail ESS 902/1447, 0 divergences after the automatic refit of one)
while 4 x (500 + 500) failed it once (R-hat 1.0118).

Heavy libraries (pymc, pytensor, arviz, nutpie, numba) are imported inside the functions that
use them; the default path never imports pymc or pytensor.
"""

from __future__ import annotations

import logging
import math
import os
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.special import expit

from honestci.audit.errors import HonestCIError, InputError, Problem, check_level
from honestci.audit.policy import THRESHOLDS, Thresholds, Verdict, clears_bar, worst
from honestci.audit.progress import Meter, Progress, ProgressLike, as_progress
from honestci.audit.stats.estimands import unique_inverse

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: Mean verdicts per vignette from which the centred form of u_v is used. With ~240 verdicts per
#: vignette the likelihood pins each u_v, the centred form had 0 divergences and the non-centred
#: one 2-4 (notes/cpu-stack.md); with few verdicts per vignette the funnel favours non-centred.
CENTRED_MIN_VERDICTS_PER_VIGNETTE = 100

#: Step and half-width of the uniform z-grid for E_{u ~ N(0, sigma)}: the trapezoidal rule is
#: exponentially accurate for analytic integrands (Trefethen & Weideman 2014, SIAM Review 56);
#: expit(mu + sigma z) is analytic in a strip of half-width pi/sigma, so h = 0.05 keeps the error
#: below 1e-9 up to sigma = 20, where Gauss-Hermite with 40-150 nodes erred by up to 1e-2
#: (measured against scipy.integrate.quad; the tests pin it).
NORMAL_GRID_STEP = 0.05
NORMAL_GRID_HALF_WIDTH = 8.5

#: NUTS target acceptance 0.95 rather than 0.8: in 20 seeded fixture-like fits (6 vignettes x
#: 240 verdicts, 4 x 1000 + 1000, hierarchically centred) 0.9 left 5 with divergences and 0.95
#: left 3, all but one of which the automatic non-centred refit fixed.
TARGET_ACCEPT = 0.95
#: Posterior quantiles of each win rate kept in the result (for the report's posterior plot).
POSTERIOR_QUANTILES = 101
#: Vignettes from which ``sampler="auto"`` uses the collapsed sampler
#: (:mod:`honestci.audit.stats.bayes_collapsed`) instead of NUTS: NUTS's cost grows with one
#: coordinate per vignette (about 6 minutes at 5,000), while the hyperparameters' marginal posterior
#: that the collapsed sampler draws from is close to normal by then (its proposals were accepted
#: 95% of the time at 5,000 vignettes; tests/test_bayes_collapsed.py compares the two at 300).
COLLAPSED_MIN_VIGNETTES = 1000
#: Draws and warm-up per chain when not given: NUTS's, and the collapsed sampler's. Its
#: proposals are accepted ~96% of the time at 5,000 vignettes, so ESS is near the draws, but R-hat's
#: own noise falls with the chains' length: over 5 seeds on the 1M-contest study (mu, sigma, beta,
#: the run offsets, the these-vignettes rate) 4 x 150 draws gave R-hat up to 1.018 (3 of 5 above
#: the gate's 1.01), 4 x 250 up to 1.009, 4 x 400 at most 1.003 with bulk/tail ESS >= 1365/1303.
NUTS_DRAWS, NUTS_TUNE = 1000, 1000
COLLAPSED_DRAWS, COLLAPSED_TUNE = 400, 25


# --------------------------------------------------------------------------------------------
# Priors
# --------------------------------------------------------------------------------------------
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
    also how :mod:`honestci.audit.stats.bayes_density` takes the prior: as data (nu, scale). Half-Student-t up to a constant:
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


def _resolve_prior(prior: str | SigmaPrior) -> SigmaPrior:
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


# --------------------------------------------------------------------------------------------
# Data: validation and aggregation to cells
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WinRateCells:
    """Verdicts aggregated to cells (vignette, order, run, judge).

    ``wins`` is the sum of outcomes (ties count 1/2), so it may be fractional.
    """

    vignette_index: np.ndarray  # int64, index into vignette_labels
    order: np.ndarray  # float64, +0.5 policy first, -0.5 policy second
    run_index: np.ndarray  # int64
    judge_index: np.ndarray  # int64
    n: np.ndarray  # int64 verdicts per cell
    wins: np.ndarray  # float64
    vignette_labels: tuple[str, ...]
    run_labels: tuple[str, ...]
    judge_labels: tuple[str, ...]
    has_ties: bool
    #: "verdict" (cells of judged orders, :func:`aggregate_cells`) or "contest" (cells of
    #: both-order contest scores, :func:`aggregate_contest_cells`, order 0 in every cell).
    unit: str = "verdict"
    #: Contests per cell ("contest" cells only; ``n`` and ``wins`` are then scaled trials).
    contests: np.ndarray | None = None
    #: Quasi-binomial dispersion phi the contest cells' ``n`` and ``wins`` were divided by (1 for
    #: verdict cells), and its Pearson estimate before the floor at 1 (None when not estimable).
    dispersion: float = 1.0
    dispersion_estimate: float | None = None
    #: Judged orders per contest ("contest" cells: 2, or 1 for single-order designs).
    trials_per_contest: int = 2

    @property
    def n_vignettes(self) -> int:
        return len(self.vignette_labels)

    @property
    def n_runs(self) -> int:
        return len(self.run_labels)

    @property
    def n_judges(self) -> int:
        return len(self.judge_labels)

    @property
    def n_verdicts(self) -> int:
        """Judged orders (``trials_per_contest`` per contest for contest cells)."""
        return int(self.n.sum()) if self.contests is None else self.trials_per_contest * self.n_contests

    @property
    def n_contests(self) -> int:
        return 0 if self.contests is None else int(self.contests.sum())

    @property
    def units_per_cell(self) -> np.ndarray:
        """Verdicts (verdict cells) or contests (contest cells) per cell."""
        return self.n if self.contests is None else self.contests


def _labels_and_index(values: Any, name: str, n: int) -> tuple[tuple[str, ...], np.ndarray]:
    if values is None:
        return ("all",), np.zeros(n, dtype=np.int64)
    array = np.asarray(values)
    if array.shape != (n,):
        raise InputError(
            f"'{name}' has {array.size} entries but 'outcome' has {n}.",
            fix=f"Pass one {name} per verdict.",
        )
    import pandas as pd

    if array.dtype == object and array.size and pd.api.types.infer_dtype(array, skipna=False) == "string":
        labels, index = unique_inverse(array)  # the same sorted labels, hashed rather than sorted
    else:
        labels, index = np.unique(array.astype(str), return_inverse=True)
    return tuple(str(x) for x in labels), index.astype(np.int64)


def unique_rows(*columns: tuple[np.ndarray, int]) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(np.stack(codes, axis=1), axis=0, return_inverse=True)`` for integer codes given
    with their number of levels, through one mixed-radix int64 key (the same lexicographic order;
    a 1-D sort instead of a sort of rows, ~30x faster at a million rows)."""
    key = np.zeros(columns[0][0].size, dtype=np.int64)
    for codes, levels in columns:
        key = key * levels + codes
    distinct, inverse = np.unique(key, return_inverse=True)
    rows = np.empty((distinct.size, len(columns)), dtype=np.int64)
    for position in range(len(columns) - 1, -1, -1):
        levels = columns[position][1]
        rows[:, position] = distinct % levels
        distinct = distinct // levels
    return rows, inverse.ravel()


def aggregate_cells(
    vignette: Sequence | np.ndarray,
    order: Sequence | np.ndarray,
    outcome: Sequence | np.ndarray,
    run: Sequence | np.ndarray | None = None,
    judge: Sequence | np.ndarray | None = None,
) -> WinRateCells:
    """Validate per-verdict arrays and sum them into cells (vignette, order, run, judge).

    Raises
    ------
    InputError
        Mismatched lengths, outcomes outside {0, 1/2, 1}, orders outside {+1/2, -1/2}, fewer than
        two vignettes, or only one presentation order (the order effect, and hence the
        order-averaged win rate, would rest on the prior alone).
    """
    outcome_array = np.asarray(outcome, dtype=float)
    n = outcome_array.size
    if outcome_array.ndim != 1 or n == 0:
        raise InputError("No verdicts to fit.", fix="Pass one outcome per judged order.")
    order_array = np.asarray(order, dtype=float)
    problems: list[Problem] = []
    if order_array.shape != (n,):
        raise InputError(
            f"'order' has {order_array.size} entries but 'outcome' has {n}.",
            fix="Pass one order per verdict.",
        )
    bad_outcome = ~np.isin(outcome_array, (0.0, 0.5, 1.0))
    for row in np.flatnonzero(bad_outcome)[:20]:
        problems.append(
            Problem(
                "outcome",
                int(row),
                "outcome",
                f"value {outcome_array[row]!r} is not 0, 0.5 or 1",
                "code a win as 1, a tie as 0.5 and a loss as 0",
            )
        )
    bad_order = ~np.isin(order_array, (0.5, -0.5))
    for row in np.flatnonzero(bad_order)[:20]:
        problems.append(
            Problem(
                "order",
                int(row),
                "order",
                f"value {order_array[row]!r} is not +0.5 or -0.5",
                "use +0.5 when the policy is shown first and -0.5 when second",
            )
        )
    if problems:
        raise InputError(
            f"{int(bad_outcome.sum())} outcome(s) and {int(bad_order.sum())} order(s) are invalid.",
            problems,
            fix="Recode the verdicts before fitting.",
        )
    vignette_labels, vignette_index = _labels_and_index(vignette, "vignette", n)
    if vignette is None or len(vignette_labels) < 2:
        raise InputError(
            "The hierarchical model needs at least two vignettes.",
            fix="With one vignette there is no between-vignette variation to estimate; "
            "report the per-vignette win rate instead.",
        )
    if np.unique(order_array).size < 2:
        raise InputError(
            "All verdicts have the same presentation order.",
            fix="Judge both orders: with one order the position bias is not identifiable and the "
            "order-averaged win rate would rest on the prior for beta.",
        )
    run_labels, run_index = _labels_and_index(run, "run", n)
    judge_labels, judge_index = _labels_and_index(judge, "judge", n)
    order_index = (order_array > 0).astype(np.int64)
    cell_keys, cell_of_row = unique_rows(
        (vignette_index, len(vignette_labels)),
        (order_index, 2),
        (run_index, len(run_labels)),
        (judge_index, len(judge_labels)),
    )
    counts = np.bincount(cell_of_row, minlength=len(cell_keys)).astype(np.int64)
    wins = np.bincount(cell_of_row, weights=outcome_array, minlength=len(cell_keys))
    return WinRateCells(
        vignette_index=cell_keys[:, 0].astype(np.int64),
        order=np.where(cell_keys[:, 1] == 1, 0.5, -0.5),
        run_index=cell_keys[:, 2].astype(np.int64),
        judge_index=cell_keys[:, 3].astype(np.int64),
        n=counts,
        wins=wins,
        vignette_labels=vignette_labels,
        run_labels=run_labels,
        judge_labels=judge_labels,
        has_ties=bool(np.any(outcome_array == 0.5)),
    )


def contest_dispersion(
    cell_of_contest: np.ndarray, score: np.ndarray, trials_per_contest: int = 2
) -> tuple[float | None, int]:
    """Pearson estimate of the quasi-binomial dispersion of contest scores, and its df.

    Each contest enters the likelihood as m trials with m·s wins (m = ``trials_per_contest``: 2
    when both orders are judged, 1 for a single-order verdict or preference), whose binomial
    variance is m·p(1 − p). With the cell's mean score as p (the saturated within-cell fit),

        phi = sum_c sum_{i in c} m (s_i - ybar_c)^2 / (ybar_c (1 - ybar_c)) / sum_c (m_c - 1)

    over cells with 0 < ybar_c < 1 and m_c >= 2 contests (McCullagh & Nelder 1989, sec. 9.2).
    phi > 1 when the two orders of a contest agree more than independent verdicts would (a judge
    consistent across orders: scores pile at 0 and 1); phi < 1 when ties pull scores to 1/2
    (with independent orders and 30% ties, phi = 0.5-0.9). None when no cell qualifies.
    Validated against: the closed form Var(2s) / (2p(1 - p)) on simulated scores (tests/test_bayes.py).
    """
    count = np.bincount(cell_of_contest).astype(float)
    mean = np.bincount(cell_of_contest, weights=score) / count
    squares = np.bincount(cell_of_contest, weights=trials_per_contest * (score - mean[cell_of_contest]) ** 2)
    usable = (count >= 2) & (mean > 0.0) & (mean < 1.0)
    df = int(np.sum(count[usable] - 1))
    if df == 0:
        return None, 0
    return float(np.sum(squares[usable] / (mean[usable] * (1.0 - mean[usable]))) / df), df


def aggregate_contest_cells(
    vignette: Sequence | np.ndarray,
    score: Sequence | np.ndarray,
    run: Sequence | np.ndarray | None = None,
    judge: Sequence | np.ndarray | None = None,
    trials_per_contest: int = 2,
) -> WinRateCells:
    """Contest scores (1 won both orders, 0 lost both, 1/2 otherwise) summed into cells
    (vignette, run, judge) for the same model, on the contest-score estimand.

    A contest is 2 trials with 2s wins (``trials_per_contest`` = 2, both orders judged; 1 for a
    single-order verdict or preference: one trial with s wins, never two agreeing ones), so E[s | v] = expit(mu + u_v + a_r + b_j) and the model's
    win rates are the contest-score rates of :mod:`honestci.audit.stats.estimands`. The order
    covariate is 0 in every cell (each score already averages both orders; beta then keeps its
    prior and enters no estimand). The quasi-binomial dispersion phi of
    :func:`contest_dispersion` is floored at 1 and divides ``n`` and ``wins`` (a tempered
    likelihood): over-dispersion (orders agreeing) widens the posterior as it should, while the
    under-dispersion ties create is left in, so the within-vignette noise errs on the wide side.

    Raises
    ------
    InputError
        Mismatched lengths, scores outside [0, 1], or fewer than two vignettes.
    """
    score_array = np.asarray(score, dtype=float)
    n = score_array.size
    if score_array.ndim != 1 or n == 0:
        raise InputError("No contests to fit.", fix="Pass one score per contest.")
    # Continuous preferences and single-order scores lie in [0, 1] too: the quasi-binomial cell
    # likelihood only needs the mean, and the Pearson dispersion absorbs their variance.
    bad = ~((score_array >= 0) & (score_array <= 1))
    if bad.any():
        problems = [
            Problem(
                "score",
                int(row),
                "score",
                f"value {score_array[row]!r} is not in [0, 1]",
                "score contests in [0, 1] (1/0.5/0, or a preference)",
            )
            for row in np.flatnonzero(bad)[:20]
        ]
        raise InputError(f"{int(bad.sum())} contest score(s) are invalid.", problems, fix="Rescore the contests.")
    vignette_labels, vignette_index = _labels_and_index(vignette, "vignette", n)
    if vignette is None or len(vignette_labels) < 2:
        raise InputError(
            "The hierarchical model needs at least two vignettes.",
            fix="With one vignette there is no between-vignette variation to estimate; "
            "report the per-vignette win rate instead.",
        )
    run_labels, run_index = _labels_and_index(run, "run", n)
    judge_labels, judge_index = _labels_and_index(judge, "judge", n)
    cell_keys, cell_of_contest = unique_rows(
        (vignette_index, len(vignette_labels)), (run_index, len(run_labels)), (judge_index, len(judge_labels))
    )
    contests = np.bincount(cell_of_contest, minlength=len(cell_keys)).astype(np.int64)
    wins = trials_per_contest * np.bincount(cell_of_contest, weights=score_array, minlength=len(cell_keys))
    estimate, _ = contest_dispersion(cell_of_contest, score_array, trials_per_contest)
    dispersion = max(1.0, estimate) if estimate is not None else 1.0
    return WinRateCells(
        vignette_index=cell_keys[:, 0].astype(np.int64),
        order=np.zeros(len(cell_keys)),
        run_index=cell_keys[:, 1].astype(np.int64),
        judge_index=cell_keys[:, 2].astype(np.int64),
        n=trials_per_contest * contests / dispersion,
        wins=wins / dispersion,
        vignette_labels=vignette_labels,
        run_labels=run_labels,
        judge_labels=judge_labels,
        has_ties=bool(np.any(score_array == 0.5)),
        unit="contest",
        contests=contests,
        dispersion=dispersion,
        dispersion_estimate=estimate,
        trials_per_contest=trials_per_contest,
    )


# --------------------------------------------------------------------------------------------
# Model and sampling
# --------------------------------------------------------------------------------------------
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


def _quiet_imports() -> None:
    """Import arviz once with its refactor FutureWarning silenced (it says nothing about our use)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import arviz  # noqa: F401


#: The samplers of :func:`sample_posterior` (NUTS), and the ``sampler`` choices of the fits
#: (:func:`fit_winrate_hierarchical`), which add the collapsed sampler.
NUTS_SAMPLERS = ("auto", "nutpie", "pymc")
SAMPLERS = (*NUTS_SAMPLERS, "collapsed")

#: Seconds between two reads of nutpie's trace in a log (the meter throttles the lines it writes).
_NUTPIE_POLL_S = 1.0


def _sample_nutpie(density, chains, draws, tune, seed, progress: Progress, label: str):
    import nutpie

    meter = None if progress.live else progress.meter(chains * (tune + draws), f"{label} with nutpie", "draws")
    settings: dict[str, Any] = {
        "draws": draws,
        "tune": tune,
        "chains": chains,
        "cores": min(chains, os.cpu_count() or 1),
        "seed": seed,
        "progress_bar": progress.live,
        "target_accept": TARGET_ACCEPT,
    }
    if meter is None or not meter.active:  # a terminal (nutpie's own bar) or --quiet
        return density.named(nutpie.sample(density.model, save_warmup=False, **settings))
    # The warm-up is kept so that the trace read while sampling counts tuning draws too; its
    # groups are dropped below, which leaves what save_warmup=False returns.
    running = nutpie.sample(density.model, save_warmup=True, blocking=False, **settings)
    idata = _wait_metering_nutpie(running, meter, chains)
    for group in ("warmup_posterior", "warmup_sample_stats"):
        if group in idata.groups():
            del idata[group]
    idata = density.named(idata)
    meter.update(chains * (tune + draws))
    meter.close(chains="/".join([str(tune + draws)] * chains), divergences=int(idata.sample_stats["diverging"].sum()))
    return idata


def _wait_metering_nutpie(running: Any, meter: Meter, chains: int) -> Any:
    """Wait for nutpie's non-blocking sampler, feeding ``meter`` each chain's draws so far.

    nutpie (0.16) hands its per-chain progress (draws, divergences) only to its terminal bar and,
    through the private ``_lib.ProgressType.template_callback``, to notebooks. Its public
    non-blocking sampler offers ``wait(timeout=...)`` (``TimeoutError`` while running) and
    ``inspect()``, an InferenceData copy of the trace so far: each chain's draws are counted there.
    Reading the trace does not touch the chains' random streams, so the draws are the blocking
    call's. Any exception (Ctrl-C included) cancels the sampler and is raised.
    """
    try:
        while True:
            try:
                return running.wait(timeout=_NUTPIE_POLL_S)
            except TimeoutError:
                pass
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)  # arviz: "more chains than draws"
                    trace = running.inspect()
            except Exception:  # a chain finishing under the read; wait() reports real errors
                continue
            counts = np.zeros(chains, dtype=np.int64)
            for group in ("warmup_sample_stats", "sample_stats"):
                if group in trace.groups():
                    # nutpie pads each chain's float stats with NaN past the draws it has made
                    counts += np.isfinite(trace[group]["step_size"].values).sum(axis=1)
            meter.update(
                int(counts.sum()),
                chains="/".join(str(count) for count in counts),
                divergences=int(trace.sample_stats["diverging"].values.sum())
                if "sample_stats" in trace.groups()
                else 0,
            )
    except BaseException:
        running.cancel()
        raise


def _sample_pymc(build_model, chains, draws, tune, seed, progress: Progress, label: str):
    import pymc as pm

    meter = None if progress.live else progress.meter(chains * (tune + draws), f"{label} with PyMC", "draws")
    per_chain: dict[int, int] = {}

    def count_draw(trace, draw) -> None:
        # PyMC calls this in the main process after every draw (warm-up included) of every chain
        per_chain[draw.chain] = per_chain.get(draw.chain, 0) + 1
        counts = "/".join(str(per_chain[c]) for c in sorted(per_chain))
        if meter is not None:
            meter.update(sum(per_chain.values()), chains=counts)

    pymc_logger = logging.getLogger("pymc")
    previous_level = pymc_logger.level
    pymc_logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            idata = pm.sample(
                draws=draws,
                tune=tune,
                chains=chains,
                cores=min(chains, os.cpu_count() or 1),
                random_seed=seed,
                target_accept=TARGET_ACCEPT,
                progressbar=progress.live,
                compute_convergence_checks=False,
                model=build_model(),
                callback=None if meter is None else count_draw,
            )
    finally:
        pymc_logger.setLevel(previous_level)
    if meter is not None:
        meter.close(divergences=int(idata.sample_stats["diverging"].sum()))
    return idata


class DensityMismatchError(HonestCIError):
    """The hand-derived density no longer matches the PyMC model it was derived from
    (:class:`honestci.audit.stats.bayes_density.Derivation`): sampling it would ignore the edit."""

    def __init__(self, message: str, fix: str):
        self.message, self.fix = message, fix
        super().__init__(f"{message}\nWhat to do: {fix}")


class DensityMismatchWarning(UserWarning):
    """``sampler="auto"`` refused the hand-derived density (:class:`DensityMismatchError`) and
    sampled the PyMC model with PyMC's NUTS instead."""


#: The fast path's own dependencies: only their absence sends ``sampler="auto"`` to PyMC.
_FAST_PATH_MODULES = ("nutpie", "numba")


def sample_posterior(
    build_model, density_model, sampler, chains, draws, tune, seed, progress: ProgressLike, label: str = "sampling"
):
    """Run the requested sampler; ``auto`` is nutpie on the hand-derived density, or PyMC's NUTS.

    nutpie samples ``density_model()``: the model's posterior with a hand-written compiled log
    density (:mod:`honestci.audit.stats.bayes_density`), which refuses itself
    (:class:`DensityMismatchError`) when ``build_model``'s PyMC definition has changed since the
    density was derived. PyMC's NUTS samples ``build_model()`` itself.

    ``auto`` falls back to PyMC in two cases, and says which in the returned note: nutpie or numba
    is not installed (an ImportError of those modules), or the density refused itself (also warned,
    :class:`DensityMismatchWarning`). No failure while nutpie samples falls back: nutpie reports a
    faulty kernel, a shape error and an unusable initial point alike as ``RuntimeError`` (or a Rust
    panic), and for each of them the fix is in the code or the data, not in another sampler.
    ``nutpie`` raises where ``auto`` would fall back.

    ``progress`` (:func:`honestci.audit.progress.as_progress`): on a terminal the sampler's own
    bar; in a log, lines headed ``label`` with draws done of ``chains * (tune + draws)``, rate and
    ETA and each chain's draws (PyMC: counted per draw; nutpie: read from its trace every
    ``_NUTPIE_POLL_S`` seconds while it samples in the background), and the divergences after
    warm-up (PyMC: in the final line; nutpie: in every line).

    Returns (idata, sampler_used, note).
    """
    _quiet_imports()
    progress = as_progress(progress)
    if sampler not in NUTS_SAMPLERS:
        raise InputError(f"Unknown sampler {sampler!r}.", fix=f"Use one of {NUTS_SAMPLERS}.")
    if sampler == "pymc":
        return _sample_pymc(build_model, chains, draws, tune, seed, progress, label), "pymc", ""
    if sampler == "nutpie":
        return _sample_nutpie(density_model(), chains, draws, tune, seed, progress, label), "nutpie", ""
    try:
        model = density_model()
    except ImportError as error:
        if (error.name or "").partition(".")[0] not in _FAST_PATH_MODULES:
            raise
        note = f"{error.name} could not be imported ({error}); PyMC's NUTS sampled the PyMC model"
    except DensityMismatchError as error:
        note = f"PyMC's NUTS sampled the PyMC model because the hand-derived density refused itself: {error.message}"
        warnings.warn(
            f"{error.message} sampler='auto' samples the PyMC model with PyMC's NUTS instead (slower). {error.fix}",
            DensityMismatchWarning,
            stacklevel=2,
        )
    else:
        return _sample_nutpie(model, chains, draws, tune, seed, progress, label), "nutpie", ""
    return _sample_pymc(build_model, chains, draws, tune, seed, progress, label), "pymc", note


# --------------------------------------------------------------------------------------------
# Diagnostics and summaries
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SamplerDiagnostics:
    """Convergence diagnostics of one fit (rank-normalised split R-hat, bulk/tail ESS; ArviZ)."""

    rhat_max: float
    ess_bulk_min: float
    ess_tail_min: float
    divergences: int
    worst_rhat_variable: str
    chains: int
    draws: int
    tune: int
    converged: bool
    problems: tuple[str, ...]

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "rhat_max": self.rhat_max,
                    "ess_bulk_min": self.ess_bulk_min,
                    "ess_tail_min": self.ess_tail_min,
                    "divergences": self.divergences,
                    "worst_rhat_variable": self.worst_rhat_variable,
                    "chains": self.chains,
                    "draws": self.draws,
                    "tune": self.tune,
                    "converged": self.converged,
                }
            ]
        )


def diagnose_sampler(
    idata, var_names: list[str], chains: int, draws: int, tune: int, thresholds: Thresholds
) -> SamplerDiagnostics:
    """R-hat (rank-normalised, split), bulk and tail ESS of ``var_names`` and the divergences,
    against the thresholds (:mod:`honestci.audit.stats.mcmc_diagnostics`: ArviZ's algorithms)."""
    from honestci.audit.stats.mcmc_diagnostics import ess_bulk, ess_tail, rhat_rank

    values = {name: np.asarray(idata.posterior[name].values, dtype=float) for name in var_names}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # constant chains in tiny runs
        rhat = {name: rhat_rank(draws_) for name, draws_ in values.items()}
        ess_bulk_values = {name: ess_bulk(draws_) for name, draws_ in values.items()}
        ess_tail_values = {name: ess_tail(draws_) for name, draws_ in values.items()}

    def extreme(dataset, pick_max: bool) -> tuple[float, str]:
        best_value, best_name = (-math.inf if pick_max else math.inf), ""
        for name in var_names:
            found = np.asarray(dataset[name], dtype=float).ravel()
            if np.any(~np.isfinite(found)):  # undefined diagnostics count as failing
                return (math.inf if pick_max else 0.0), name
            value = found.max() if pick_max else found.min()
            if (value > best_value) if pick_max else (value < best_value):
                best_value, best_name = float(value), name
        return best_value, best_name

    rhat_max, worst_name = extreme(rhat, True)
    ess_bulk_min, _ = extreme(ess_bulk_values, False)
    ess_tail_min, _ = extreme(ess_tail_values, False)
    divergences = int(np.asarray(idata.sample_stats["diverging"].values).sum())
    problems = []
    if not rhat_max <= thresholds.rhat_max:
        problems.append(f"R-hat {rhat_max:.3f} > {thresholds.rhat_max} (worst: {worst_name})")
    if not ess_bulk_min >= thresholds.ess_bulk_min:
        problems.append(f"bulk ESS {ess_bulk_min:.0f} < {thresholds.ess_bulk_min:g}")
    if not ess_tail_min >= thresholds.ess_tail_min:
        problems.append(f"tail ESS {ess_tail_min:.0f} < {thresholds.ess_tail_min:g}")
    if divergences > thresholds.divergences_max:
        problems.append(f"{divergences} divergent transition(s) > {thresholds.divergences_max}")
    return SamplerDiagnostics(
        rhat_max=rhat_max,
        ess_bulk_min=ess_bulk_min,
        ess_tail_min=ess_tail_min,
        divergences=divergences,
        worst_rhat_variable=worst_name,
        chains=chains,
        draws=draws,
        tune=tune,
        converged=not problems,
        problems=tuple(problems),
    )


@dataclass(frozen=True)
class PosteriorSummary:
    """Posterior mean, median, equal-tailed interval and, for win rates, P(estimand > bar)."""

    mean: float
    median: float
    lower: float
    upper: float
    level: float
    p_above_bar: float | None = None


def summarise_draws(draws: np.ndarray, level: float, bar: float | None = None) -> PosteriorSummary:
    """Summary of posterior draws: mean, median, equal-tailed ``level`` interval, P(draw > bar)."""
    values = np.asarray(draws, dtype=float).ravel()
    tail = (1.0 - level) / 2.0
    lower, median, upper = np.quantile(values, [tail, 0.5, 1.0 - tail])
    return PosteriorSummary(
        mean=float(values.mean()),
        median=float(median),
        lower=float(lower),
        upper=float(upper),
        level=level,
        p_above_bar=None if bar is None else float(np.mean(values > bar)),
    )


# --------------------------------------------------------------------------------------------
# Estimands (pure NumPy)
# --------------------------------------------------------------------------------------------
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


#: Largest (draws x cells) of the per-cell predictive arrays (linear predictor, replicates,
#: pointwise log-likelihood): beyond it each chain's draws are thinned evenly for them
#: (:func:`predictive_thinning`). The fixture's fits stay whole (4,000 x 60); a million contests on
#: 5,000 vignettes (1,600 draws x 10,000 cells) keep every 4th draw.
PREDICTIVE_MAX_VALUES = 4_000_000


def predictive_thinning(idata, cells: WinRateCells) -> int:
    """Every how many draws of each chain the per-cell predictive arrays keep (1: all)."""
    total = idata.posterior.sizes["chain"] * idata.posterior.sizes["draw"] * cells.n.size
    return max(1, math.ceil(total / PREDICTIVE_MAX_VALUES))


def stacked_draws(idata, name: str, thin: int = 1) -> np.ndarray:
    """Draws of ``name`` as (S, ...) with chains stacked (every ``thin``-th draw of each chain)."""
    values = np.asarray(idata.posterior[name].values[:, ::thin], dtype=float)
    return values.reshape((values.shape[0] * values.shape[1],) + values.shape[2:])


def _offset_draws(idata, cells: WinRateCells) -> np.ndarray:
    """(S, R*J) run + judge offsets of every (run, judge) combination."""
    n_draws = stacked_draws(idata, "mu").shape[0]
    run = stacked_draws(idata, "run_effect") if cells.n_runs > 1 else np.zeros((n_draws, 1))
    judge = stacked_draws(idata, "judge_effect") if cells.n_judges > 1 else np.zeros((n_draws, 1))
    return (run[:, :, None] + judge[:, None, :]).reshape(n_draws, -1)


# --------------------------------------------------------------------------------------------
# Posterior predictive check
# --------------------------------------------------------------------------------------------
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

    the model's quasi-binomial term (:func:`quasi_binomial_loglik`, the potential it samples) plus
    the binomial coefficient through log-gamma, so that with whole counts (verdict cells; contest
    cells when phi = 1) it is the binomial log pmf and the cells' sum is the model's log-likelihood
    up to that data-only constant. One observation is one cell.

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
    return _check_replicates(cells, replicate_cell_wins(cells, eta, rng), level, alpha, eta)


#: Replicates at or beyond the observed share (in the smaller tail) up to which a one-cell group's
#: tail is computed exactly (:func:`_check_replicates`). Beyond it the estimate is at least 3/S and
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


def _check_replicates(
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


# --------------------------------------------------------------------------------------------
# Prior sensitivity
# --------------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------------
# The fit
# --------------------------------------------------------------------------------------------
POPULATIONS = ("these_vignettes", "new_vignettes")


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


def resolve_seed(seed: int | np.random.Generator) -> int:
    if isinstance(seed, np.random.Generator):
        return int(seed.integers(0, 2**31 - 1))
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and seed >= 0:
        return int(seed)
    raise InputError(
        f"seed {seed!r} is neither a non-negative int nor a numpy Generator.",
        fix="Pass an int seed or numpy.random.default_rng(seed).",
    )


def _resolve_parameterization(parameterization: str, cells: WinRateCells) -> str:
    if parameterization == "auto":
        per_vignette = cells.n_verdicts / cells.n_vignettes
        return "centred" if per_vignette >= CENTRED_MIN_VERDICTS_PER_VIGNETTE else "non_centred"
    if parameterization not in ("centred", "non_centred"):
        raise InputError(
            f"Unknown parameterization {parameterization!r}.", fix="Use 'auto', 'centred' or 'non_centred'."
        )
    return parameterization


def _check_sampling_sizes(chains: int, draws: int, tune: int, level: float) -> None:
    if chains < 2:
        raise InputError("R-hat needs at least two chains.", fix="Use chains >= 2 (4 recommended).")
    if draws < 1 or tune < 0:
        raise InputError(f"draws={draws}, tune={tune} are not valid.", fix="Use draws >= 1 and tune >= 0.")
    check_level(level)


@dataclass(frozen=True)
class _Fit:
    idata: Any
    diagnostics: SamplerDiagnostics
    estimand_draws: dict[str, np.ndarray]
    sampler: str
    sampler_note: str


def _density_model(cells: WinRateCells, prior: SigmaPrior, centred: bool):
    from honestci.audit.stats.bayes_density import nutpie_model

    return nutpie_model(cells, prior.student_t_nu, prior.scale, centred)


def uses_collapsed_sampler(sampler: str, cells: WinRateCells) -> bool:
    """Whether ``sampler`` samples ``cells`` by the collapsed sampler (``auto`` from
    :data:`COLLAPSED_MIN_VIGNETTES` vignettes)."""
    return sampler == "collapsed" or (sampler == "auto" and cells.n_vignettes >= COLLAPSED_MIN_VIGNETTES)


def _sample_collapsed(cells: WinRateCells, prior: SigmaPrior, chains, draws, tune, seed, progress, label):
    """The collapsed sampler's draws as :class:`~honestci.audit.stats.posterior_groups.PosteriorGroups`
    (posterior, sample_stats), and its note for the result's message."""
    import xarray as xr

    from honestci.audit.stats.bayes_collapsed import sample_collapsed
    from honestci.audit.stats.posterior_groups import PosteriorGroups

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


def _fit_cells(cells, prior, parameterization, sampler, chains, draws, tune, seed, progress, thresholds) -> _Fit:
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
    return _Fit(idata, diagnostics, estimands, sampler_used, note)


#: What one observation of the saved InferenceData is, per kind of cell (its observed_data attrs).
OBSERVATION_UNIT = {
    "verdict": "one cell (vignette, order, run, judge): wins = sum of its verdicts' outcomes (a tie 1/2) "
    "out of n verdicts",
    "contest": "one cell (vignette, run, judge): wins = 2 x the sum of its contest scores out of n = 2 x its "
    "contests, both divided by the quasi-binomial dispersion phi",
}


def _complete_idata(
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
    :func:`_predictive_draws` with ``seed`` (those the fit's check read). In a
    :class:`~honestci.audit.stats.posterior_groups.PosteriorGroups` they are deferred, built when
    read or written, from ``predictive`` (that function's linear predictor and replicates, already
    computed: each is let go once its group is built) or else anew.
    """
    import xarray as xr

    from honestci.audit.stats.posterior_groups import PosteriorGroups

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
        return per_cell(_predictive_draws(idata, cells, thin, seed)[1] if replicates is None else replicates)

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


def _predictive_draws(idata, cells: WinRateCells, thin: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_kept_linear_predictor` and the wins replicated from it by a generator seeded with
    ``seed``: the same arrays at every call (the fit's check reads them, then the saved groups)."""
    eta = _kept_linear_predictor(idata, cells, thin)
    return eta, replicate_cell_wins(cells, eta, np.random.default_rng(seed))


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
    r"""Fit the Bayesian hierarchical win-rate model and gate it on sampler diagnostics.

    Model (per cell of verdicts sharing vignette v, order o, run r, judge j):

    .. math::
        \operatorname{logit} p = \mu + u_v + \beta o + a_r + b_j,\quad u_v \sim N(0, \sigma),
        \quad \log L = \sum w \log p + (n - w)\log(1 - p)

    with ties counted as half a win (quasi-binomial; exact binomial without ties), priors
    mu ~ N(0, 1.5), beta ~ N(0, 1), sigma ~ ``prior`` (HalfNormal(1) by default), run/judge
    offsets as fixed zero-sum effects with N(0, 1) raw priors. See the module docstring for the
    estimands (these vignettes; a new vignette, integrated over u ~ N(0, sigma) by
    quadrature; the order effect).

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
        ``"auto"`` (nutpie on the hand-derived compiled density of :mod:`honestci.audit.stats.bayes_density`;
        PyMC NUTS on the PyMC model when nutpie or numba is not installed, or, with a
        :class:`DensityMismatchWarning` and a note in ``message``, when the PyMC model no longer
        matches the density's recorded fingerprint; from :data:`COLLAPSED_MIN_VIGNETTES`
        vignettes the collapsed sampler), ``"nutpie"`` (the density, raising
        :class:`DensityMismatchError` where ``auto`` would fall back), ``"pymc"``, or
        ``"collapsed"`` (:mod:`honestci.audit.stats.bayes_collapsed`: the vignette effects
        integrated out by quadrature for the hyperparameters' independence Metropolis-Hastings
        chains, then drawn from their exact conditionals; the result's ``idata`` is then a
        :class:`~honestci.audit.stats.posterior_groups.PosteriorGroups`, and R-hat and ESS are read
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

    References
    ----------
    Gelman (2006); Vehtari et al. (2021); Gelman, Meng & Stern (1996).

    Validated against: PyMC's ``compile_logp``/``compile_dlogp`` of this model (the hand-derived
    density nutpie samples, every variant, tests/test_bayes_density.py) and PyMC's NUTS on it
    (within Monte Carlo error, slow tier), scipy.stats.beta (conjugate Beta-binomial special case
    through the same sampling, summary and diagnostic path, :func:`fit_pooled_beta_binomial`),
    scipy.integrate.quad (the quadrature), and seeded recovery/coverage simulations from the model.
    """
    return _fit_hierarchical_cells(
        lambda: aggregate_cells(vignette, order, outcome, run, judge),
        bar=bar,
        prior=prior,
        parameterization=parameterization,
        sampler=sampler,
        chains=chains,
        draws=draws,
        tune=tune,
        seed=seed,
        level=level,
        population=population,
        prior_sensitivity=prior_sensitivity,
        sensitivity_priors=sensitivity_priors,
        ppc_alpha=ppc_alpha,
        progress=progress,
        idata_path=idata_path,
        thresholds=thresholds,
    )


def _fit_hierarchical_cells(
    make_cells: Callable[[], WinRateCells],
    *,
    bar: float | None,
    prior: str | SigmaPrior,
    parameterization: str,
    sampler: str,
    chains: int,
    draws: int | None,
    tune: int | None,
    seed: int | np.random.Generator,
    level: float | None,
    population: str | None,
    prior_sensitivity: bool,
    sensitivity_priors: Sequence[str | SigmaPrior],
    ppc_alpha: float,
    progress: ProgressLike,
    idata_path: str | os.PathLike | None,
    thresholds: Thresholds,
) -> BayesWinRateResult:
    """Validate the settings, build the cells, then sample, summarise, check and gate one fit
    (the body of both entry points)."""
    started = time.perf_counter()
    level = thresholds.confidence_level if level is None else level
    population = thresholds.default_population if population is None else population
    if population not in POPULATIONS:
        raise InputError(f"Unknown population {population!r}.", fix=f"Use one of {POPULATIONS}.")
    if bar is not None and not 0.0 < bar < 1.0:
        raise InputError(f"bar {bar} is not a win rate in (0, 1).", fix="Give the bar as a proportion.")
    if sampler not in SAMPLERS:
        raise InputError(f"Unknown sampler {sampler!r}.", fix=f"Use one of {SAMPLERS}.")
    _check_sampling_sizes(chains, 1 if draws is None else draws, 0 if tune is None else tune, level)
    main_prior = _resolve_prior(prior)
    alternative_priors = [_resolve_prior(p) for p in sensitivity_priors] if prior_sensitivity else []
    if prior_sensitivity and not alternative_priors:
        raise InputError(
            "prior_sensitivity=True but no alternative priors given.",
            fix="Pass sensitivity_priors, e.g. ('halfnormal0.5', 'halfcauchy1').",
        )
    cells = make_cells()
    collapsed = uses_collapsed_sampler(sampler, cells)
    if draws is None:
        draws = COLLAPSED_DRAWS if collapsed else NUTS_DRAWS
    if tune is None:
        tune = COLLAPSED_TUNE if collapsed else NUTS_TUNE
    automatic = parameterization == "auto" and not collapsed
    # The collapsed sampler integrates the vignette effects out: it has no centring to choose.
    parameterization = "integrated" if collapsed else _resolve_parameterization(parameterization, cells)
    seed_int = resolve_seed(seed)

    fit = _fit_cells(cells, main_prior, parameterization, sampler, chains, draws, tune, seed_int, progress, thresholds)
    parameterization_note = ""
    if automatic and fit.diagnostics.divergences > thresholds.divergences_max:
        # Divergences flag a funnel the chosen form cannot cross (e.g. centred with sigma near 0):
        # the other form is the standard remedy, so "auto" tries it once.
        other = "non_centred" if parameterization == "centred" else "centred"
        refit = _fit_cells(cells, main_prior, other, sampler, chains, draws, tune, seed_int, progress, thresholds)
        parameterization_note = (
            f"{parameterization} form had {fit.diagnostics.divergences} divergence(s); refitted {other}"
        )
        fit, parameterization = refit, other
    idata = fit.idata
    summaries: dict[str, PosteriorSummary | None] = dict.fromkeys(
        ("winrate_these", "winrate_new", "order_effect_these", "order_effect_new", "order_effect_logit", "sigma")
    )
    ppc = None
    quantiles = None
    withheld = ""
    messages = [note for note in (fit.sampler_note, parameterization_note) if note]
    verdicts: list[Verdict] = []
    # One set of replicates feeds both the check and the saved posterior_predictive group.
    thin = predictive_thinning(idata, cells)
    eta, replicated_wins = _predictive_draws(idata, cells, thin, seed_int)
    if fit.diagnostics.converged:
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
            summaries["order_effect_logit"] = summarise_draws(stacked_draws(idata, "beta"), level)
        summaries["sigma"] = summarise_draws(stacked_draws(idata, "sigma"), level)
        ppc = _check_replicates(cells, replicated_wins, level, ppc_alpha, eta)
        if ppc.any_flagged:
            # A model that does not reproduce its own data gives no win rate to read: withheld.
            flagged = ppc.flagged_groups
            shown = ", ".join(flagged[:5]) + (f" and {len(flagged) - 5} more" if len(flagged) > 5 else "")
            withheld = (
                f"the posterior predictive check flags {len(flagged)} of {ppc.flagged.size} groups ({shown}; "
                f"p < {ppc.alpha:g}/{ppc.flagged.size}, Bonferroni): the model does not reproduce their win "
                "share, so its win rates are withheld"
            )
            summaries["winrate_these"] = summaries["winrate_new"] = None
            quantiles = None
            verdicts.append(Verdict.INCONCLUSIVE)
            messages.append(withheld)
        gated = summaries["winrate_these" if population == "these_vignettes" else "winrate_new"]
        if withheld:
            pass
        elif gated is None:
            verdicts.append(Verdict.INCONCLUSIVE)
            messages.append(f"no posterior summary of the {population} win rate")
        elif bar is None:
            verdicts.append(Verdict.PASS)
            messages.append("converged; no bar to test")
        elif clears_bar(gated.lower, bar):
            verdicts.append(Verdict.PASS)
            messages.append(f"{population} win rate {level:.0%} interval lower end {gated.lower:.4f} >= bar {bar}")
        else:
            verdicts.append(Verdict.FAIL)
            messages.append(f"{population} win rate {level:.0%} interval lower end {gated.lower:.4f} < bar {bar}")
        if cells.n_vignettes < thresholds.min_clusters:
            verdicts.append(Verdict.INCONCLUSIVE)
            messages.append(
                f"only {cells.n_vignettes} vignettes (< {thresholds.min_clusters}): "
                "sigma and the new-vignette win rate rest mostly on the prior"
            )
        elif cells.n_vignettes < thresholds.few_clusters:
            verdicts.append(Verdict.WARN)
            messages.append(
                f"{cells.n_vignettes} vignettes (< {thresholds.few_clusters}): "
                "the new-vignette interval depends on the prior of sigma"
            )
    else:
        verdicts.append(Verdict.INCONCLUSIVE)
        messages.append(
            "sampler did not converge, no estimate reported: "
            + "; ".join(fit.diagnostics.problems)
            + " (run longer chains or check the data)"
        )

    # Kept for the saved groups (the file is written right after an audit's fit: building them
    # again took ~0.9 CPU-s at a million contests), but freed before any refit: the groups then
    # build their own (the same arrays) when read or written.
    predictive = None if prior_sensitivity else (eta, replicated_wins)
    del eta, replicated_wins
    sensitivity = None
    if prior_sensitivity:
        rows = [_sensitivity_row(main_prior, fit, level, bar)]
        for alternative in alternative_priors:
            alternative_fit = _fit_cells(
                cells, alternative, parameterization, sampler, chains, draws, tune, seed_int, progress, thresholds
            )
            rows.append(_sensitivity_row(alternative, alternative_fit, level, bar))
        sensitivity = PriorSensitivity(tuple(rows), bar)
        if fit.diagnostics.converged:
            issue = _sensitivity_issue(sensitivity, population, bar)
            if issue:
                verdicts.append(Verdict.WARN)
                messages.append(issue)

    _complete_idata(idata, cells, thin, seed_int, predictive)
    del predictive
    saved_path = None
    if idata_path is not None:
        saved_path = str(Path(idata_path))
        idata.to_netcdf(saved_path)

    return BayesWinRateResult(
        **summaries,
        bar=bar,
        level=level,
        population=population,
        diagnostics=fit.diagnostics,
        converged=fit.diagnostics.converged,
        verdict=worst(verdicts),
        winrate_quantiles=quantiles,
        message="; ".join(messages),
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


def _sensitivity_row(prior: SigmaPrior, fit: _Fit, level: float, bar: float | None) -> PriorSensitivityRow:
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
        lambda: aggregate_contest_cells(vignette, score, run, judge, trials_per_contest),
        bar=bar,
        prior=prior,
        parameterization=parameterization,
        sampler=sampler,
        chains=chains,
        draws=draws,
        tune=tune,
        seed=seed,
        level=level,
        population=population,
        prior_sensitivity=prior_sensitivity,
        sensitivity_priors=sensitivity_priors,
        ppc_alpha=ppc_alpha,
        progress=progress,
        idata_path=idata_path,
        thresholds=thresholds,
    )


# --------------------------------------------------------------------------------------------
# Conjugate special case (validation of the sampling / summary / diagnostic path)
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PooledBetaBinomialResult:
    """Pooled win rate with a Beta(a, b) prior, sampled by the same machinery as the main model.

    ``exact_*`` are the closed-form Beta(a + w, b + n - w) values, reported beside the sampled
    ones so the sampling path can be checked against them.
    """

    summary: PosteriorSummary | None
    diagnostics: SamplerDiagnostics
    posterior_sd: float | None
    exact_mean: float
    exact_lower: float
    exact_upper: float
    a: float
    b: float
    wins: float
    n: int
    sampler: str
    sampler_note: str
    seed: int

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd

        summary = self.summary
        return pd.DataFrame(
            [
                {
                    "source": "sampled",
                    "mean": math.nan if summary is None else summary.mean,
                    "lower": math.nan if summary is None else summary.lower,
                    "upper": math.nan if summary is None else summary.upper,
                },
                {
                    "source": "closed_form",
                    "mean": self.exact_mean,
                    "lower": self.exact_lower,
                    "upper": self.exact_upper,
                },
            ]
        )


def _build_pooled_model(a: float, b: float, n: float, wins: float):
    """p ~ Beta(a, b) with the quasi-binomial likelihood of ``wins`` in ``n`` (PyMC)."""
    import pymc as pm

    with pm.Model() as model:
        total = pm.Data("total", np.array(float(n)))
        successes = pm.Data("successes", np.array(float(wins)))
        p = pm.Beta("p", alpha=a, beta=b)
        pm.Potential("quasi_binomial_loglik", quasi_binomial_loglik(pm.math.logit(p), total, successes))
    return model


def fit_pooled_beta_binomial(
    wins: float,
    n: int,
    a: float = 1.0,
    b: float = 1.0,
    sampler: str = "auto",
    chains: int = 4,
    draws: int = 1000,
    tune: int = 1000,
    seed: int | np.random.Generator = 0,
    level: float = 0.95,
    thresholds: Thresholds = THRESHOLDS,
) -> PooledBetaBinomialResult:
    r"""Pooled model p ~ Beta(a, b), w | p ~ Binomial(n, p): no vignette and no order effect.

    The posterior is Beta(a + w, b + n - w) in closed form; sampling it with the same
    likelihood, sampler, summary and diagnostics code as :func:`fit_winrate_hierarchical` (by
    default nutpie on a hand-written compiled density through the same interface,
    :func:`honestci.audit.stats.bayes_density.pooled_nutpie_model`) checks that path. Validated against
    scipy.stats.beta.
    """
    if n < 1 or not 0 <= wins <= n:
        raise InputError(f"wins={wins}, n={n} is not a valid count.", fix="Use 0 <= wins <= n, n >= 1.")
    if a <= 0 or b <= 0:
        raise InputError(f"Beta({a}, {b}) is not a proper prior.", fix="Use a > 0 and b > 0.")
    _check_sampling_sizes(chains, draws, tune, level)
    seed_int = resolve_seed(seed)

    def density_model():
        from honestci.audit.stats.bayes_density import pooled_nutpie_model

        return pooled_nutpie_model(a, b, float(n), float(wins))

    idata, sampler_used, note = sample_posterior(
        lambda: _build_pooled_model(a, b, n, wins), density_model, sampler, chains, draws, tune, seed_int, False
    )
    diagnostics = diagnose_sampler(idata, ["p"], chains, draws, tune, thresholds)
    from scipy import stats

    exact = stats.beta(a + wins, b + n - wins)
    tail = (1.0 - level) / 2.0
    p_draws = stacked_draws(idata, "p")
    return PooledBetaBinomialResult(
        summary=summarise_draws(p_draws, level) if diagnostics.converged else None,
        diagnostics=diagnostics,
        posterior_sd=float(p_draws.std(ddof=1)) if diagnostics.converged else None,
        exact_mean=float(exact.mean()),
        exact_lower=float(exact.ppf(tail)),
        exact_upper=float(exact.ppf(1.0 - tail)),
        a=a,
        b=b,
        wins=float(wins),
        n=int(n),
        sampler=sampler_used,
        sampler_note=note,
        seed=seed_int,
    )


__all__ = [
    "DEFAULT_SENSITIVITY_PRIORS",
    "OBSERVATION_UNIT",
    "SIGMA_PRIORS",
    "BayesWinRateResult",
    "DensityMismatchError",
    "DensityMismatchWarning",
    "PooledBetaBinomialResult",
    "PosteriorPredictiveCheck",
    "PosteriorSummary",
    "PriorSensitivity",
    "SamplerDiagnostics",
    "SigmaPrior",
    "WinRateCells",
    "aggregate_cells",
    "aggregate_contest_cells",
    "cell_linear_predictor",
    "cell_log_likelihood",
    "contest_dispersion",
    "fit_contest_scores_hierarchical",
    "fit_pooled_beta_binomial",
    "fit_winrate_hierarchical",
    "fit_winrate_hierarchical_frame",
    "normal_quadrature",
    "posterior_predictive_check",
    "replicate_cell_wins",
    "summarise_draws",
    "winrate_estimand_draws",
]
