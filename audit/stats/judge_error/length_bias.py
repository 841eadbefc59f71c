"""Length and style bias of a judge, and length- (style-) controlled win rates.

A judge's contest score y_i ∈ [0, 1] (policy vs opponent; 1 win, 0 loss, ½ tie, or a continuous
preference) is modelled by a quasi-binomial logistic GLM on the difference between the two
answers' lengths and markdown style:

    logit E[y_i] = θ + β·tanh(Δℓ_i / sd(Δℓ)) + Σ_k γ_k s_ik (+ δ'z_i)

- Δℓ_i = characters of the policy's answer − characters of the opponent's, scaled by its sample
  sd (ddof 1) and squashed by tanh, as AlpacaEval 2.0's length-controlled GLM does (Dubois et al.
  2024; there the difference is taken baseline − model, so its length coefficient has the
  opposite sign). β > 0: the judge prefers the longer answer.
- s_ik: style features of Chatbot Arena's style control (LMSYS 2024, "Does style matter?"):
  counts of markdown headers, bold spans and list items, each as the normalised difference
  (a − b)/(a + b) (0 when neither answer has any) scaled by its sd, not centred, so that 0 means
  "no difference" (Arena centres too; its battles are position-balanced, ours need not be).
- z_i: optional terms kept at their observed values (e.g. an instruction-difficulty covariate).

The controlled win rate is the model's predicted win rate had the answers not differed in the
controlled features (length; length and style), each vignette weighted equally as every win-rate
estimand of honestci is (:mod:`honestci.audit.stats.estimands`):

    LC = (1/G) Σ_g (1/n_g) Σ_{i∈g} expit(θ̂ + δ̂'z_i)

Without z it is expit(θ̂). The judge's length effect is the change in that predicted win rate when
the policy's answer is one sd longer than the opponent's (tanh term at tanh(1)) instead of equal.

Inference: the GLM is fitted by IRLS on the cells of equal (vignette, covariate row), whose
contests share μ and w, so each step needs only a cell's count and outcome sum (the same fit as on
the contests, in the time of the cells: :mod:`honestci.audit.stats.frequentist.cells`); its cluster-robust
covariance is the sandwich of the working
weighted least-squares problem at convergence (X̃ = W^½X, ẽ = (y − μ)/W^½, W = μ(1 − μ)), so CR1S
is statsmodels' ``GLM(..., cov_type="cluster")`` and CR2 is Bell–McCaffrey on the working model
(clubSandwich's ``vcovCR`` of a ``glm``), with Satterthwaite df. The quasi-binomial dispersion
cancels in a sandwich. The controlled win rate's interval is the delta method on the logit scale
(through :func:`honestci.audit.stats.frequentist.cluster_robust.linear_contrast`, so it has its own
Satterthwaite df), mapped back by expit; the length effect's is on the probability scale.

References
----------
Dubois, Galambosi, Liang & Hashimoto (2024), "Length-Controlled AlpacaEval: A Simple Way to Debias
Automatic Evaluators", arXiv:2404.04475; tatsu-lab/alpaca_eval ``src/alpaca_eval/metrics/glm_winrate.py``.
LMSYS (2024), "Does Style Matter? Disentangling style and substance in Chatbot Arena".
McCullagh & Nelder (1989), Generalized Linear Models, ch. 9 (quasi-likelihood).
Bell & McCaffrey (2002); Pustejovsky & Tipton (2018), JBES 36:672.

Validated against
-----------------
statsmodels ``GLM(y, X, family=Binomial()).fit(cov_type="cluster")`` (coefficients and CR1S SEs to
1e-6; ``tests/test_length_bias.py``); seeded coverage simulations of the length coefficient's and
the controlled win rate's intervals; the published AlpacaEval 2.0 figures (docs/methods.md).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
from scipy import special, stats

from honestci.audit.errors import EstimationError, InputError
from honestci.audit.policy import THRESHOLDS, Verdict
from honestci.audit.stats.estimands import unique_inverse
from honestci.audit.stats.frequentist.cells import Cells, cluster_robust_ols_of_cells, design_cells
from honestci.audit.stats.frequentist.cluster_robust import ClusterRobustFit, cluster_robust_ols, linear_contrast
from honestci.audit.stats.frequentist.clustered_estimate import ClusteredEstimate
from honestci.audit.stats.intervals import DIFFERENCE_SPACE, bound_to_space

#: Style features (Chatbot Arena's style control, without its token length: length has its own term).
STYLE_FEATURES = ("headers", "bold", "lists")
LENGTH_TERM = "tanh_length"
_HEADER = re.compile(r"^\s{0,3}#{1,6}\s+\S", re.MULTILINE)
_BOLD = re.compile(r"\*\*[^*\n]+\*\*|__[^_\n]+__")
_LIST = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+\S", re.MULTILINE)
_MAX_IRLS = 100


def style_counts(texts: Sequence[str]) -> pd.DataFrame:
    """Characters and markdown counts of each text: ``length`` (characters, as AlpacaEval counts),
    ``headers`` (ATX headers ``#`` to ``######``), ``bold`` (``**…**`` or ``__…__`` spans) and
    ``lists`` (lines that open an unordered ``- * +`` or ordered ``1.``/``1)`` item)."""
    columns = ["length", "headers", "bold", "lists"]
    values = np.asarray(texts, dtype=object).reshape(-1)
    if not values.size:
        return pd.DataFrame([], columns=columns)
    # each distinct text counted once; a missing one (None, NaN: code -1) is empty, the last row
    codes, distinct = pd.factorize(values)
    counted = [
        (
            len(plain),
            # a header needs a "#" and a bold span "**" or "__": their regexes only run where those occur
            len(_HEADER.findall(plain)) if "#" in plain else 0,
            len(_BOLD.findall(plain)) if "**" in plain or "__" in plain else 0,
            len(_LIST.findall(plain)),
        )
        for plain in map(str, distinct)
    ]
    table = np.array([*counted, (0, 0, 0, 0)], dtype=np.int64)
    return pd.DataFrame(table[codes], columns=columns)


def difference_features(policy: pd.DataFrame, opponent: pd.DataFrame, style: bool) -> pd.DataFrame:
    """The controlled columns of the GLM for each contest, from the :func:`style_counts` of the
    policy's and the opponent's answers (one row per contest each): ``tanh_length`` =
    tanh(Δℓ / sd(Δℓ)) and, with ``style``, each style feature's normalised difference (a − b)/(a + b)
    over its sd (both uncentred: 0 is "no difference"). A feature with no variation is dropped (it
    is not estimable).

    Raises
    ------
    EstimationError
        When the lengths do not vary (every answer pair equally long, e.g. texts missing), or the
        length term does not (every difference saturates tanh on one side): the length effect is
        not identifiable.
    """
    a, b = policy, opponent
    if len(a) != len(b):
        raise InputError("policy and opponent answers differ in number", fix="pass one answer of each per contest")
    delta = (a["length"] - b["length"]).to_numpy(float)
    sd = float(np.std(delta, ddof=1)) if len(delta) > 1 else 0.0
    if not sd > 0:
        raise EstimationError(
            "The answers' length differences do not vary (are the responses' texts missing?), so the "
            "judge's length effect is not identifiable; give the responses' texts."
        )
    columns = {LENGTH_TERM: np.tanh(delta / sd)}
    if np.ptp(columns[LENGTH_TERM]) == 0:
        # Differences all far beyond one sd on one side (a policy whose answers are all much shorter
        # or longer): tanh saturates to one value, the intercept's twin.
        raise EstimationError(
            "The length term tanh(Δℓ / sd) is the same in every contest (every length difference is far "
            "beyond one sd, on one side), so the judge's length effect is not identifiable."
        )
    if style:
        for name in STYLE_FEATURES:
            total = (a[name] + b[name]).to_numpy(float)
            diff = np.divide((a[name] - b[name]).to_numpy(float), total, out=np.zeros(len(total)), where=total > 0)
            spread = float(np.std(diff, ddof=1))
            if spread > 0:
                columns[name] = diff / spread
    return pd.DataFrame(columns)


def fit_logistic_glm(
    y: Any,
    X: Any,
    clusters: Any,
    *,
    vcov: str = "CR2",
    df: str = "satterthwaite",
    level: float = 0.95,
    coef_names: Sequence[str] | None = None,
    tol: float = 1e-12,
    separation: str = "raise",
) -> ClusterRobustFit:
    """Quasi-binomial logistic GLM of ``y`` ∈ [0, 1] on ``X`` (include the intercept) by IRLS, with a
    cluster-robust covariance.

    ``separation``: what to do when the maximum-likelihood estimate does not exist (the outcomes
    are separated by the covariates): ``"raise"`` (an :class:`EstimationError`), or ``"firth"``
    (Firth's penalised estimate, :func:`firth_logistic_cells`, with the same sandwich on its
    augmented working problem; data that are not separated get the ML fit either way).

    The covariance is that of :func:`honestci.audit.stats.frequentist.cluster_robust.cluster_robust_ols` applied
    to the working weighted least-squares problem at convergence, W = μ̂(1 − μ̂):
    V = (X'WX)⁻¹ [Σ_g X_g' A_g r_g r_g' A_g X_g] (X'WX)⁻¹ · c on the working scale, with score
    residuals X_g'(y_g − μ̂_g); ``vcov`` picks A_g and c as there (``"CR1S"`` is statsmodels'
    ``cov_type="cluster"``, ``"CR2"`` Bell–McCaffrey on the working model, as clubSandwich does for
    a ``glm``). Rows of one cluster with the same covariates share μ̂ and W, so the IRLS steps, the
    deviance and the sandwich are computed on those cells from their counts m_c and outcome sums
    S_c (weighted least squares with weights m_c w_c on the cell means; the sandwich's B_g and s_g
    are sums over cells: :mod:`honestci.audit.stats.frequentist.cells`), the same fit as on the rows.

    Raises
    ------
    InputError
        ``y`` outside [0, 1] or non-finite, mismatched shapes.
    EstimationError
        IRLS did not converge (e.g. complete separation: the coefficients run to infinity) and
        ``separation`` is ``"raise"``.

    Validated against
    -----------------
    statsmodels ``GLM(y, X, family=Binomial()).fit(cov_type="cluster", cov_kwds={"groups": g})``:
    coefficients and SEs agree to 1e-6 (``tests/test_length_bias.py``).
    """
    if separation not in ("raise", "firth"):
        raise InputError(f"separation must be 'raise' or 'firth', not {separation!r}", fix="pass one of them")
    y_arr, X_arr = _glm_inputs(y, X)
    cells = design_cells(X_arr, clusters)
    fit, _ = _fit_logistic_cells(
        y_arr, X_arr, clusters, cells, vcov, df, level, coef_names, tol, firth=separation == "firth"
    )
    return fit


def _glm_inputs(y: Any, X: Any) -> tuple[np.ndarray, np.ndarray]:
    """``y`` and ``X`` as float arrays (X n x k), refused unless finite, aligned and y in [0, 1]."""
    y_arr = np.asarray(y, dtype=float).reshape(-1)
    X_arr = np.asarray(X, dtype=float)
    if X_arr.ndim == 1:
        X_arr = X_arr[:, None]
    if X_arr.shape[0] != y_arr.size:
        raise InputError(f"X has {X_arr.shape[0]} rows but y has {y_arr.size} values.", fix="pass one row per y")
    if not np.all(np.isfinite(y_arr)) or np.any((y_arr < 0) | (y_arr > 1)):
        raise InputError("The GLM's outcomes must be finite numbers in [0, 1].", fix="score contests in [0, 1]")
    if not np.all(np.isfinite(X_arr)):
        raise InputError("The GLM's design matrix has non-finite values.", fix="drop or fill them")
    return y_arr, X_arr


def _fit_logistic_cells(
    y: np.ndarray,
    X: np.ndarray,
    clusters: Any,
    cells: Cells,
    vcov: str,
    df: str,
    level: float,
    coef_names: Sequence[str] | None,
    tol: float,
    firth: bool = False,
) -> tuple[ClusterRobustFit, bool]:
    """:func:`fit_logistic_glm` on the ``cells`` of (clusters, X): the rows of a cell share x and
    hence μ and w, so each IRLS step, the deviance and the working problem need only each cell's
    count m_c and outcome sum S_c (:mod:`honestci.audit.stats.frequentist.cells`): the same fit as the rows'.

    With ``firth``, separated data (no ML estimate) get Firth's penalised fit; the second value
    says whether it was used."""
    counts, wins = cells.counts.astype(float), cells.sums(y)
    beta = _irls_cells(cells.X, counts, wins, cells.sums(1 - y), cells.sums(special.logit((y + 0.5) / 2)), tol)
    extra = np.zeros_like(counts)  # the Firth pseudo-observations h_c of each cell (none for ML)
    if beta is None:
        if not firth:
            raise EstimationError(
                "The logistic GLM did not converge (its coefficients run off: the outcomes are separated by "
                "the features, e.g. the judge always prefers the longer answer); no honest interval exists."
            )
        beta, extra = firth_logistic_cells(cells.X, counts, wins)
    # The working problem (logistic_working_problem) summed over each cell's rows: rows √w x_c and
    # Σ_i (√w η + (y_i − μ)/√w) = m_c √w η + (S_c − m_c μ)/√w; for Firth's fit the cell's counts
    # and wins are augmented by h_c and h_c/2 (its fit is the ML fit of the augmented data).
    eta = cells.X @ beta
    mu = special.expit(eta)
    root = np.sqrt(np.clip(mu * (1 - mu), 1e-300, None))  # a fitted 0 or 1 (Firth's large β)
    augmented = counts + extra
    weights = augmented / counts  # each row's weight: 1 + h_c/m_c
    working = replace(cells, X=cells.X * (root * np.sqrt(weights))[:, None])
    options: dict[str, Any] = dict(vcov=vcov, level=level, df=df, coef_names=coef_names)
    row_weights = weights[cells.index]
    fit = cluster_robust_ols_of_cells(
        replace(working, counts=counts),
        (augmented * root * eta + (wins + extra / 2 - augmented * mu) / root) / np.sqrt(weights),
        lambda: cluster_robust_ols(
            *logistic_working_problem(y, X, beta, row_weights, (extra / (2 * counts))[cells.index]),
            clusters,
            **options,
        ),
        **options,
    )
    return fit, bool(np.any(extra))


def _irls_cells(
    X: np.ndarray, counts: np.ndarray, wins: np.ndarray, losses: np.ndarray, start: np.ndarray, tol: float
) -> np.ndarray | None:
    """The ML coefficients of the logistic GLM of cells (``counts`` rows, ``wins`` and ``losses``
    sums of y and 1 − y, ``start`` the sum of logit((y + ½)/2)) by IRLS; None when they run off
    (separation: no ML estimate exists)."""
    # Start from the least-squares fit on the logit of the shrunken outcomes (statsmodels' start);
    # weighted by m_c with each cell's mean logit, it is the least-squares fit on the rows.
    root_counts = np.sqrt(counts)
    beta = np.linalg.lstsq(X * root_counts[:, None], start / root_counts, rcond=None)[0]
    deviance = math.inf
    for _ in range(_MAX_IRLS):
        eta = X @ beta
        mu = special.expit(eta)
        w = np.clip(mu * (1 - mu), 1e-300, None)
        z = eta + (wins / counts - mu) / w  # the cell's mean working response
        root = np.sqrt(counts * w)
        new = np.linalg.lstsq(X * root[:, None], z * root, rcond=None)[0]
        mu_new = special.expit(X @ new)
        new_deviance = float(-2 * np.sum(special.xlogy(wins, mu_new) + special.xlogy(losses, 1 - mu_new)))
        step = float(np.max(np.abs(new - beta)))
        beta, previous, deviance = new, deviance, new_deviance
        if not np.all(np.isfinite(beta)) or np.max(np.abs(beta)) > 30:
            return None
        if step <= tol * max(1.0, float(np.max(np.abs(beta)))) or abs(previous - deviance) <= tol * (1 + deviance):
            # a fit that "converged" with a fitted probability at 0 or 1 has run off too (quasi-separation)
            mu = special.expit(X @ beta)
            return beta if np.all((mu > 1e-10) & (mu < 1 - 1e-10)) else None
    return None


def firth_logistic_cells(
    X: np.ndarray, counts: np.ndarray, wins: np.ndarray, *, tol: float = 1e-10, max_iter: int = 200
) -> tuple[np.ndarray, np.ndarray]:
    """Firth's penalised maximum-likelihood logistic regression of cells: the β that maximises

        ℓ*(β) = Σ_c [S_c log μ_c + (m_c − S_c) log(1 − μ_c)] + ½ log |I(β)|,   I(β) = X' diag(m_c μ_c(1 − μ_c)) X,

    (ℓ the quasi-binomial log-likelihood of the rows, which depends on them through the cells'
    counts m_c and outcome sums S_c alone; the penalty is the Jeffreys prior). It exists and is
    finite under complete and quasi-complete separation, where the ML estimate runs to infinity,
    and its O(1/n) bias is removed (Firth 1993). Its score is the ML score of augmented data,

        U*(β) = Σ_c x_c [S_c − m_c μ_c + h_c (½ − μ_c)] = 0,   h_c = m_c w_c x_c' I(β)⁻¹ x_c,

    h_c the cell's share of the hat matrix's trace: each cell gains h_c/2 pseudo-wins and h_c/2
    pseudo-losses. Solved by Newton steps β ← β + I⁻¹U* from β = 0, each at most 5 in any
    coordinate and halved until ℓ* does not decrease (Heinze & Schemper 2002, the algorithm of R
    ``logistf``).

    Returns
    -------
    (beta, h)
        The penalised estimate and each cell's h_c at it (the pseudo-observations).

    Raises
    ------
    EstimationError
        When the Newton steps do not converge in ``max_iter`` iterations.

    References
    ----------
    Firth (1993), "Bias reduction of maximum likelihood estimates", Biometrika 80:27-38.
    Heinze & Schemper (2002), "A solution to the problem of separation in logistic regression",
    Statistics in Medicine 21:2409-2419.

    Validated against
    -----------------
    A direct maximisation of ℓ*(β) on the rows by ``scipy.optimize.minimize`` written in the test
    (``tests/test_length_bias.py``), on separated and on non-separated data.
    """
    beta = np.zeros(X.shape[1])

    def penalised(b: np.ndarray) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        eta = X @ b
        mu = special.expit(eta)
        w = counts * mu * (1 - mu)
        information = (X * w[:, None]).T @ X
        sign, logdet = np.linalg.slogdet(information)
        loglik = float(np.sum(wins * special.log_expit(eta) + (counts - wins) * special.log_expit(-eta)))
        return (loglik + 0.5 * logdet if sign > 0 else -math.inf), mu, w, information

    value, mu, w, information = penalised(beta)
    for _ in range(max_iter):
        inverse = np.linalg.pinv(information)
        h = w * np.einsum("ij,jk,ik->i", X, inverse, X)
        score = X.T @ (wins - counts * mu + h * (0.5 - mu))
        step = inverse @ score
        step *= min(1.0, 5.0 / max(float(np.max(np.abs(step))), 1e-300))
        for _halving in range(30):
            new_value, new_mu, new_w, new_information = penalised(beta + step)
            if new_value >= value - 1e-12 * abs(value):
                break
            step /= 2
        beta = beta + step
        value, mu, w, information = new_value, new_mu, new_w, new_information
        if float(np.max(np.abs(step))) <= tol * max(1.0, float(np.max(np.abs(beta)))):
            inverse = np.linalg.pinv(information)
            return beta, w * np.einsum("ij,jk,ik->i", X, inverse, X)
    raise EstimationError(
        f"Firth's penalised logistic fit did not converge in {max_iter} Newton steps; no interval is given."
    )


def logistic_working_problem(
    y: np.ndarray,
    X: np.ndarray,
    beta: np.ndarray,
    weights: np.ndarray | None = None,
    extra: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The working least-squares problem of a logistic GLM at ``beta``: (W^½X, W^½η + (y − μ)/W^½),
    W = μ(1 − μ). At the IRLS solution its OLS coefficients are ``beta`` and its residual scores are
    the GLM's score contributions X_g'(y_g − μ_g), so any OLS sandwich or wild (score) bootstrap on
    it is the GLM's.

    Firth's fit is the ML fit of augmented data: row i weighs ``weights`` a_i = 1 + h_c/m_c and
    adds ``extra`` h_c/(2m_c) to its outcome; its problem is (√(a W) X, √(a W) η + (y + extra −
    a μ)/√(a W)), whose residual scores are the penalised score's contributions."""
    eta = X @ beta
    mu = special.expit(eta)
    a = np.ones_like(eta) if weights is None else weights
    root = np.sqrt(np.clip(mu * (1 - mu), 1e-300, None) * a)
    return X * root[:, None], root * eta + (y + (0.0 if extra is None else extra) - a * mu) / root


@dataclass(frozen=True)
class ControlledWinRate:
    """A win rate with the judge's length (and style) preference removed, and the fit behind it.

    ``controlled`` and ``length_effect`` are :class:`ClusteredEstimate` rows (CR2, Satterthwaite df;
    INCONCLUSIVE below ``min_clusters``). ``fit`` is the GLM (coefficients on the logit scale);
    ``penalised`` is True when the outcomes were separated and the fit is Firth's.
    """

    name: str
    terms: tuple[str, ...]
    fit: ClusterRobustFit
    raw: float
    controlled: ClusteredEstimate
    length_effect: ClusteredEstimate
    kept: tuple[str, ...] = ()
    penalised: bool = False

    def coefficients(self) -> pd.DataFrame:
        """One row per GLM coefficient (logit scale): estimate, se, df, CI."""
        f = self.fit
        return pd.DataFrame(
            {
                "model": self.name,
                "term": f.coef_names,
                "estimate": f.coef,
                "se": f.se,
                "df": f.df,
                "ci_low": f.ci_low,
                "ci_high": f.ci_high,
            }
        )

    def to_frame(self) -> pd.DataFrame:
        """The canonical table: raw rate, controlled rate and length effect, then the coefficients."""
        head = pd.DataFrame(
            [
                {"model": self.name, "term": "raw win rate", "estimate": self.raw},
                {"model": self.name, **_row(self.controlled, "controlled win rate")},
                {"model": self.name, **_row(self.length_effect, "length effect (+1 sd, probability)")},
            ]
        )
        return pd.concat([head, self.coefficients()], ignore_index=True)


def _row(estimate: ClusteredEstimate, term: str) -> dict:
    return {
        "term": term,
        "estimate": estimate.estimate,
        "se": estimate.se,
        "df": estimate.df,
        "ci_low": estimate.ci_low,
        "ci_high": estimate.ci_high,
    }


def controlled_winrate(
    scores: Any,
    clusters: Any,
    features: pd.DataFrame,
    *,
    kept: pd.DataFrame | None = None,
    name: str = "length-controlled",
    level: float = 0.95,
    vcov: str = "CR2",
    min_clusters: int = THRESHOLDS.min_clusters,
) -> ControlledWinRate:
    """The win rate at zero difference in ``features`` (AlpacaEval 2.0's LC win rate when
    ``features`` is the tanh length term alone), with a delta-method CR interval.

    LC = (1/G) Σ_g (1/n_g) Σ_{i∈g} expit(θ̂ + δ̂'z_i) (z: the ``kept`` columns at their observed
    values), and the length effect (1/G) Σ_g (1/n_g) Σ_{i∈g} [expit(η_i⁺) − expit(η_i⁰)] with η⁺ the
    linear predictor with ``tanh_length`` = tanh(1) (one sd longer) and every other controlled
    feature 0.

    Parameters
    ----------
    scores, clusters
        Contest scores in [0, 1] (the policy's) and each contest's vignette.
    features
        Controlled columns (from :func:`difference_features`); must include ``tanh_length``.
    kept
        Covariates kept at their observed values (e.g. an instruction difficulty); optional.

    Returns
    -------
    ControlledWinRate

    Raises
    ------
    EstimationError
        When the fit does not converge, or the rate at zero difference is 0 or 1 to machine
        precision (a fit along a nearly constant length term: no interval on the logit scale).

    References
    ----------
    Dubois et al. (2024), arXiv:2404.04475, sec. 3 (the LC win rate as a counterfactual prediction).
    """
    if LENGTH_TERM not in features:
        raise InputError(f"features must include {LENGTH_TERM!r}", fix="build them with difference_features")
    kept = pd.DataFrame(index=features.index) if kept is None else kept
    names = ("intercept", *features.columns, *kept.columns)
    y, X = _glm_inputs(
        scores, np.column_stack([np.ones(len(features)), features.to_numpy(float), kept.to_numpy(float)])
    )
    # Every figure below is a sum over contests whose terms are equal within a cell (one vignette,
    # one covariate row): summed over the cells instead, at a million contests.
    cells = design_cells(X, clusters)
    # Separated outcomes (every verdict follows length) have no ML fit: Firth's penalised fit then.
    fit, penalised = _fit_logistic_cells(y, X, clusters, cells, vcov, "satterthwaite", level, names, 1e-12, firth=True)
    estimator = f"{vcov}, Firth-penalised (separation)" if penalised else vcov
    # Equal vignette weights: each contest weighs 1/(G n_g); ``weight`` is a cell's total.
    vignette_of_cell = pd.factorize(cells.clusters, use_na_sentinel=False)[0]
    n_clusters = int(vignette_of_cell.max()) + 1
    contest_weight = 1.0 / (n_clusters * np.bincount(vignette_of_cell, weights=cells.counts)[vignette_of_cell])
    weight = cells.counts * contest_weight
    raw = float(contest_weight @ cells.sums(y))
    k_controlled = 1 + features.shape[1]
    X0 = cells.X.copy()
    X0[:, 1:k_controlled] = 0.0
    X1 = X0.copy()
    X1[:, 1] = math.tanh(1.0)
    p0, p1 = special.expit(X0 @ fit.coef), special.expit(X1 @ fit.coef)
    rate = float(weight @ p0)
    grad_rate = (weight * p0 * (1 - p0)) @ X0
    effect = float(weight @ (p1 - p0))
    grad_effect = (weight * p1 * (1 - p1)) @ X1 - grad_rate
    n = len(y)
    if n_clusters < min_clusters:
        note = f"{n_clusters} vignettes < {min_clusters}"
        return ControlledWinRate(
            name,
            tuple(features.columns),
            fit,
            raw,
            ClusteredEstimate.inconclusive(name, rate, n, n_clusters, level, note),
            ClusteredEstimate.inconclusive("length effect", effect, n, n_clusters, level, note),
            tuple(kept.columns),
            penalised,
        )
    if not (0 < rate < 1 and np.any(grad_rate)):  # every fitted p0 exactly 0 or 1 in floats
        # A fit along a nearly constant length term (every contest on one side of equal length) can
        # extrapolate to a rate of exactly 0 or 1 at equal length, where the logit has no interval.
        raise EstimationError(
            f"The {name} rate at zero difference is {rate:.6g} to machine precision (the fit extrapolates "
            "far beyond the observed differences; coefficients "
            f"{', '.join(f'{c:.3g}' for c in fit.coef)}), so it has no interval."
        )
    # The rate's interval on the logit scale (keeps it inside (0, 1) near the edges).
    on_logit = linear_contrast(fit, grad_rate / (rate * (1 - rate)), label="logit controlled rate")
    half = stats.t.ppf(0.5 + level / 2, on_logit.df) * on_logit.se
    logit_rate = float(special.logit(rate))
    controlled = ClusteredEstimate(
        name,
        rate,
        on_logit.se * rate * (1 - rate),
        on_logit.df,
        float(special.expit(logit_rate - half)),
        float(special.expit(logit_rate + half)),
        None,
        None,
        n,
        n_clusters,
        level,
        method=f"delta method on the logit scale, {estimator}",
    )
    diff = linear_contrast(fit, grad_effect, label="length effect")
    half_effect = stats.t.ppf(0.5 + level / 2, diff.df) * diff.se
    low_effect, high_effect = bound_to_space(effect - half_effect, effect + half_effect, DIFFERENCE_SPACE)
    how = "delta method"
    if penalised:
        low_effect, high_effect = _separated_effect_bounds(fit, X0, X1, weight, level)
        how = "intercept x length-coefficient box"
    length_effect = ClusteredEstimate(
        "length effect",
        effect,
        diff.se,
        diff.df,
        low_effect,
        high_effect,
        None,
        None,
        n,
        n_clusters,
        level,
        method=f"{how}, {estimator}",
    )
    return ControlledWinRate(
        name, tuple(features.columns), fit, raw, controlled, length_effect, tuple(kept.columns), penalised
    )


def _separated_effect_bounds(
    fit: ClusterRobustFit, X0: np.ndarray, X1: np.ndarray, weight: np.ndarray, level: float
) -> tuple[float, float]:
    """The length effect's interval when the outcomes are separated (Firth's fit): the smallest
    and largest effect over the box of the intercept's and the length coefficient's CR2 t
    intervals, each at level 1 − α/2 (Bonferroni: the box covers both at ≥ 1 − α), other terms at
    their estimates.

    Under separation the effect sits near ±½ where expit is flat, so its delta-method SE (a
    derivative there) says little; the box maps the coefficients' intervals (on the logit scale,
    where the penalised likelihood is better behaved) through the effect itself. For a fixed
    intercept the effect is monotone in the length coefficient, so the box's extremes lie on its
    two β edges; along each, the intercept is scanned on a grid of 401 points.
    """
    alpha = 1 - level
    t_crit = stats.t.ppf(1 - alpha / 4, fit.df[:2])
    theta = np.linspace(fit.coef[0] - t_crit[0] * fit.se[0], fit.coef[0] + t_crit[0] * fit.se[0], 401)
    effects = []
    for beta in (fit.coef[1] - t_crit[1] * fit.se[1], fit.coef[1] + t_crit[1] * fit.se[1]):
        coef = np.array(fit.coef, dtype=float)
        coef[1] = beta
        base0, base1 = X0 @ coef - coef[0], X1 @ coef - coef[0]  # the linear predictors less the intercept
        p0 = special.expit(base0[None, :] + theta[:, None])
        p1 = special.expit(base1[None, :] + theta[:, None])
        effects.append((p1 - p0) @ weight)
    every = np.concatenate(effects)
    return float(every.min()), float(every.max())


@dataclass(frozen=True)
class LengthBiasResult:
    """The judge's length and style preference on one contest set, and the controlled win rates.

    ``length`` is AlpacaEval's model (length term alone), whose length effect the ``length_bias``
    gate reads; ``style`` adds Chatbot Arena's markdown features (None when no style feature
    varies). ``verdict`` is INCONCLUSIVE when ``note`` says the effect could not be estimated, or
    when ``confounded``: the policy's answer is the longer one in every contest of differing
    lengths, or the shorter one in every one, so a length preference cannot be told from the
    policy's quality (the GLM would only extrapolate to equal length).
    """

    policy: str
    opponent: str
    judge: str
    n: int
    n_clusters: int
    level: float
    length: ControlledWinRate | None
    style: ControlledWinRate | None
    mean_length_policy: float | None = None
    mean_length_opponent: float | None = None
    note: str = ""
    #: Median characters of the policy's and the opponent's answers over the contests (what the
    #: policy's rule for requiring the gate reads: :func:`honestci.audit.policy.lengths_differ`).
    median_length_policy: float | None = None
    median_length_opponent: float | None = None
    #: Contests in which the policy's answer is longer / shorter than the opponent's.
    n_policy_longer: int = 0
    n_policy_shorter: int = 0

    @property
    def confounded(self) -> bool:
        """The policy's answer is longer in no contest, or shorter in none, though lengths differ."""
        return self.n_policy_longer + self.n_policy_shorter > 0 and not (self.n_policy_longer and self.n_policy_shorter)

    @property
    def verdict(self) -> Verdict:
        return Verdict.PASS if self.length is not None and not self.confounded else Verdict.INCONCLUSIVE

    @property
    def length_effect(self) -> ClusteredEstimate | None:
        return None if self.length is None else self.length.length_effect

    def to_frame(self) -> pd.DataFrame:
        """One row per figure and coefficient of each model (none when not estimable: the row says so)."""
        frames = [m.to_frame() for m in (self.length, self.style) if m is not None]
        if not frames:
            return pd.DataFrame([{"model": "length-controlled", "term": "length effect", "estimate": None,
                                  "note": self.note}])  # fmt: skip
        return pd.concat(frames, ignore_index=True)

    def summary_lines(self) -> list[str]:
        head = f"judge {self.judge}, {self.policy} vs {self.opponent}"
        if self.length is None:
            return [f"{head}: length bias not estimable ({self.note})"]
        lines = [
            f"{head}: {self.n} contests on {self.n_clusters} vignettes; mean answer length "
            f"{self.mean_length_policy:.0f} vs {self.mean_length_opponent:.0f} characters (median "
            f"{self.median_length_policy:.0f} vs {self.median_length_opponent:.0f}); the policy's answer is the "
            f"longer in {self.n_policy_longer} contests, the shorter in {self.n_policy_shorter}",
            *([f"length effect not identifiable: {self.note}"] if self.confounded else []),
            f"length effect (win-rate change when the policy's answer is one sd longer): "
            f"{self.length.length_effect.text()}",
            f"raw win rate {self.length.raw:.3f}; length-controlled (AlpacaEval 2.0 GLM): "
            f"{self.length.controlled.text()}",
        ]
        if self.style is not None:
            lines.append(
                f"length- and style-controlled ({', '.join(self.style.terms)}): {self.style.controlled.text()}"
            )
        if self.length.penalised:
            lines.append(
                "the verdicts are separated by length (no maximum-likelihood fit exists): Firth's penalised "
                "GLM, its cluster-robust sandwich"
            )
        return lines


def length_bias(
    scores: Any,
    clusters: Any,
    policy_texts: Sequence[str],
    opponent_texts: Sequence[str],
    **options: Any,
) -> LengthBiasResult:
    """The judge's length (and style) preference and the controlled win rates of one contest set,
    from each contest's two answer texts: :func:`length_bias_from_counts` on their
    :func:`style_counts` (``options`` are its keywords)."""
    return length_bias_from_counts(
        scores, clusters, style_counts(policy_texts), style_counts(opponent_texts), **options
    )


def length_bias_from_counts(
    scores: Any,
    clusters: Any,
    policy_counts: pd.DataFrame,
    opponent_counts: pd.DataFrame,
    *,
    policy: str = "policy",
    opponent: str = "opponent",
    judge: str = "judge",
    kept: pd.DataFrame | None = None,
    level: float = 0.95,
    min_clusters: int = THRESHOLDS.min_clusters,
) -> LengthBiasResult:
    """The judge's length (and style) preference and the controlled win rates of one contest set,
    from the :func:`style_counts` of each contest's policy and opponent answer (one row per contest
    each; count each distinct answer once and gather the rows, as the audit does).

    Fits :func:`controlled_winrate` twice: on the length term alone (AlpacaEval 2.0) and on length
    plus the markdown style features (Chatbot Arena's style control). Outcomes separated by the
    features (every verdict follows length) get Firth's penalised fit. When the lengths do not vary
    (texts missing) or a fit fails, the result is INCONCLUSIVE with the reason in ``note``; so is
    it when the policy's answer is the longer (or the shorter) in every contest (``confounded``).
    """
    y = np.asarray(scores, dtype=float)
    # the vignettes coded once in sorted-label order (the order a fit on the labels keeps its
    # clusters in): G counts them, and both GLMs group by their codes
    vignettes, groups = unique_inverse(np.asarray(clusters).reshape(-1))
    n, n_clusters = len(y), len(vignettes)
    common: dict[str, Any] = dict(
        policy=policy, opponent=opponent, judge=judge, n=n, n_clusters=n_clusters, level=level
    )
    a, b = policy_counts["length"].to_numpy(float), opponent_counts["length"].to_numpy(float)
    if a.size:
        common |= dict(
            mean_length_policy=float(a.mean()),
            mean_length_opponent=float(b.mean()),
            median_length_policy=float(np.median(a)),
            median_length_opponent=float(np.median(b)),
            n_policy_longer=int(np.sum(a > b)),
            n_policy_shorter=int(np.sum(a < b)),
        )
    note = ""
    if common.get("n_policy_longer", 0) + common.get("n_policy_shorter", 0) > 0 and not (
        common["n_policy_longer"] and common["n_policy_shorter"]
    ):
        side = "longer" if common["n_policy_longer"] else "shorter"
        note = (
            f"the policy's answer is the {side} one in every contest whose answers differ in length "
            f"({common['n_policy_longer'] + common['n_policy_shorter']} of {n}), so the judge's length preference "
            "cannot be told apart from the policy's quality; judge pairs whose lengths overlap (e.g. a "
            "length-matched set) to measure it"
        )
    try:
        features = difference_features(policy_counts, opponent_counts, style=True)
        length_model = controlled_winrate(
            y,
            groups,
            features[[LENGTH_TERM]],
            kept=kept,
            name="length-controlled",
            level=level,
            min_clusters=min_clusters,
        )
    except EstimationError as error:
        # when confounded, that is the reason (a fit along a nearly constant length term may not converge)
        return LengthBiasResult(**common, length=None, style=None, note=note or str(error))
    style_model = None
    if features.shape[1] > 1:
        try:
            style_model = controlled_winrate(
                y,
                groups,
                features,
                kept=kept,
                name="length- and style-controlled",
                level=level,
                min_clusters=min_clusters,
            )
        except EstimationError as error:  # the style-controlled rate is shown, never gated on
            note = "; ".join(filter(None, [note, f"no style-controlled fit: {error}"]))
    return LengthBiasResult(**common, length=length_model, style=style_model, note=note)


def instruction_difficulty(other_scores: dict[str, pd.Series]) -> pd.Series:
    """A per-vignette term for the controlled GLM from other systems' scores on the same vignettes:
    d_g = the mean, over the other systems, of their mean score on vignette g (NaN where none scored it).

    AlpacaEval 2.0 uses a per-instruction difficulty fitted on its whole leaderboard, which it
    downloads at run time and does not publish beside its weights; this is the estimate that the
    systems at hand allow. Leave the evaluated system (and any variant of it) out of
    ``other_scores``, or its own noise enters its covariate.

    Parameters
    ----------
    other_scores
        System name → that system's contest scores, as a Series indexed by vignette id.
    """
    if not other_scores:
        raise InputError("No other system's scores were given.", fix="pass at least one other system's scores")
    means = pd.DataFrame({name: s.groupby(level=0).mean() for name, s in other_scores.items()})
    return means.mean(axis=1).rename("difficulty")
