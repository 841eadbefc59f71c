"""Intervals for a proportion that treat every contest as independent (the naive baseline).

These are the intervals an LLM-judge win rate is usually reported with. They are correct only
when contests are independent draws; contests that share a vignette (prompt) are not, and the
clustered intervals in :mod:`honestci.audit.stats.frequentist.cluster_robust` are the honest ones. honestci reports these
beside the clustered ones, labelled optimistic.
"""

from __future__ import annotations

import math

from scipy import stats

from honestci.audit.errors import InputError, level_problem
from honestci.audit.stats.intervals import RATE_SPACE, bound_to_space

PROPORTION_METHODS = ("wilson", "wald", "agresti_coull", "clopper_pearson")


def proportion_ci(successes: float, n: int, method: str = "wilson", level: float = 0.95) -> tuple[float, float]:
    """Two-sided confidence interval for a binomial proportion ``p = successes / n``.

    With ``z`` the ``1 - (1 - level)/2`` normal quantile and ``p̂ = x/n``:

    - ``"wald"``: ``p̂ ± z sqrt(p̂(1 - p̂)/n)``.
    - ``"wilson"`` (score interval): ``(p̂ + z²/2n ± z sqrt(p̂(1 - p̂)/n + z²/4n²)) / (1 + z²/n)``.
    - ``"agresti_coull"``: Wald around ``p̃ = (x + z²/2)/ñ`` with ``ñ = n + z²``.
    - ``"clopper_pearson"``: ``[Beta⁻¹(α/2; x, n - x + 1), Beta⁻¹(1 - α/2; x + 1, n - x)]``,
      with the lower end 0 when ``x = 0`` and the upper end 1 when ``x = n``.

    The three normal-based intervals are truncated to [0, 1] (:func:`honestci.audit.stats.intervals.
    bound_to_space`), as statsmodels clips them.

    ``successes`` may be fractional: a tie-scored contest counts ½ (win rate = mean of scores in
    {0, ½, 1}). The formulas above are then evaluated at the real-valued ``x``; for Clopper-Pearson
    this means the beta quantiles with real-valued shape parameters, which is the continuous
    extension of the exact interval, not an exact interval for a non-binomial count. With tie
    scores the per-contest variance is below ``p(1 - p)`` and contests sharing a vignette are
    correlated, so none of these intervals is calibrated for such data; they are the baseline.

    Parameters
    ----------
    successes
        Number of successes ``x`` (may be fractional), ``0 <= x <= n``.
    n
        Number of trials, ``n >= 1``.
    method
        One of ``"wilson"``, ``"wald"``, ``"agresti_coull"``, ``"clopper_pearson"``.
    level
        Confidence level, strictly between 0 and 1.

    Returns
    -------
    tuple of float
        ``(lower, upper)``.

    References
    ----------
    Wilson (1927), JASA 22:209. Clopper & Pearson (1934), Biometrika 26:404. Agresti & Coull
    (1998), Am. Stat. 52:119. Newcombe (1998), Stat. Med. 17:857 (Table I examples).

    Validated against
    -----------------
    ``statsmodels.stats.proportion.proportion_confint`` (methods ``"wilson"``, ``"normal"``,
    ``"agresti_coull"``, ``"beta"``) and Newcombe (1998) Table I; see ``tests/test_iid.py``.

    Examples
    --------
    >>> low, high = proportion_ci(8.5, 12)  # 8 wins, one split, 3 losses
    >>> round(low, 4), round(high, 4)
    (0.4284, 0.8873)
    """
    problems = []
    if method not in PROPORTION_METHODS:
        problems.append(f"method {method!r} is not one of {', '.join(PROPORTION_METHODS)}")
    if isinstance(n, bool) or not float(n).is_integer() or n < 1:
        problems.append(f"n = {n!r} must be a whole number of trials >= 1")
    if not (math.isfinite(successes) and 0 <= successes <= n):
        problems.append(f"successes = {successes!r} must lie in [0, n] with n = {n!r}")
    if (problem := level_problem(level)) is not None:
        problems.append(problem)
    if problems:
        raise InputError(
            "Cannot compute a proportion interval: " + "; ".join(problems) + ".",
            fix="pass the number of successes (ties count 1/2), the number of contests, a known "
            "method and a level such as 0.95",
        )

    x = float(successes)
    n = int(n)
    alpha = 1.0 - level
    z = stats.norm.isf(alpha / 2)
    p_hat = x / n

    if method == "wald":
        half = z * math.sqrt(p_hat * (1 - p_hat) / n)
        lower, upper = p_hat - half, p_hat + half
    elif method == "wilson":
        denom = 1 + z**2 / n
        center = (p_hat + z**2 / (2 * n)) / denom
        half = z * math.sqrt(p_hat * (1 - p_hat) / n + z**2 / (4 * n**2)) / denom
        lower, upper = center - half, center + half
    elif method == "agresti_coull":
        n_tilde = n + z**2
        p_tilde = (x + z**2 / 2) / n_tilde
        half = z * math.sqrt(p_tilde * (1 - p_tilde) / n_tilde)
        lower, upper = p_tilde - half, p_tilde + half
    else:  # clopper_pearson
        lower = 0.0 if x == 0 else float(stats.beta.ppf(alpha / 2, x, n - x + 1))
        upper = 1.0 if x == n else float(stats.beta.isf(alpha / 2, x + 1, n - x))
    lower, upper = bound_to_space(lower, upper, RATE_SPACE)
    return float(lower), float(upper)


def paired_difference_ci(
    plus: float,
    minus: float,
    n: float,
    level: float = 0.95,
    *,
    design_effect: float = 1.0,
    df: float | None = None,
) -> tuple[float, float]:
    """Tango's score interval for a paired difference of proportions δ = p⁺ − p⁻, optionally
    Rao–Scott adjusted for clustering.

    With n pairs, ``plus`` = #{D = 1} and ``minus`` = #{D = −1} for D = W₁ − W₂ (the discordant
    cells of McNemar's 2×2 table), the score statistic of H₀: δ = δ₀ is

        Z(δ₀) = (k⁺ − k⁻ − nδ₀) / sqrt(n (2p̃⁻ + δ₀(1 − δ₀))),

    with p̃⁻ the maximum-likelihood estimate of p⁻ under H₀, the root of
    2n p² + (−k⁺ − k⁻ + (2n − k⁺ + k⁻)δ₀) p − k⁻δ₀(1 − δ₀) = 0; the interval is
    {δ₀ : |Z(δ₀)| ≤ c} with c the normal quantile, or the t(``df``) one when ``df`` is given. Z
    is decreasing in δ₀, so each end is one root (Brent). The null variance (Wilson-like) keeps
    the coverage where the Wald interval fails: few discordant pairs, or a δ near ±1.

    Clustered pairs (Rao & Scott 1992): the counts divided by ``design_effect`` (the clustered
    variance of D̄ over its iid variance), which divides Z by sqrt(design_effect).

    Parameters
    ----------
    plus, minus
        Counts of D = 1 and D = −1 (may be fractional), ``plus + minus <= n``.
    n
        Number of pairs.
    level
        Confidence level, strictly between 0 and 1.
    design_effect
        Variance inflation for clustering (>= 1 is what the callers pass; 1 for independent pairs).
    df
        Degrees of freedom of a t reference distribution; None for the normal.

    Returns
    -------
    tuple of float
        ``(lower, upper)`` in [−1, 1].

    References
    ----------
    Tango (1998), Stat. Med. 17:891-908 (and the correction, 1999, 18:3511); Fagerland, Lydersen
    & Laake (2013), Stat. Med. 32:1532-1548 (recommended among paired-difference intervals);
    Rao & Scott (1992), Biometrics 48:577-585 (design-effect adjustment).

    Validated against
    -----------------
    The closed form of the all-discordant-one-way case (k⁺ = n: δ₀ = (n − c²)/(n + c²)), the
    score statistic recomputed at the ends, and seeded coverage simulations
    (``tests/test_position_bias.py``).
    """
    from scipy.optimize import brentq

    if not (minus >= 0 and plus >= 0 and plus + minus <= n and n > 0 and 0 < level < 1 and design_effect > 0):
        raise InputError(
            f"Cannot compute a paired-difference interval from plus = {plus}, minus = {minus}, n = {n}, "
            f"level = {level}, design_effect = {design_effect}.",
            fix="pass the counts of D = 1 and D = -1 out of n pairs, a level in (0, 1) and a positive design effect",
        )
    b, c, m = plus / design_effect, minus / design_effect, n / design_effect
    crit = float(stats.norm.isf((1 - level) / 2) if df is None else stats.t.isf((1 - level) / 2, df))

    def score(delta0: float) -> float:
        a_, b_ = 2 * m, -b - c + (2 * m - b + c) * delta0
        c_ = -c * delta0 * (1 - delta0)
        p_minus = (-b_ + math.sqrt(max(b_ * b_ - 4 * a_ * c_, 0.0))) / (2 * a_)
        variance = m * (2 * p_minus + delta0 * (1 - delta0))
        numerator = b - c - m * delta0
        if variance <= 0:
            return math.copysign(math.inf, numerator) if numerator else 0.0
        return numerator / math.sqrt(variance)

    estimate = (plus - minus) / n
    edge = 1 - 1e-12
    low = -1.0 if score(-edge) <= crit else brentq(lambda d: score(d) - crit, -edge, estimate, xtol=1e-12)
    high = 1.0 if score(edge) >= -crit else brentq(lambda d: score(d) + crit, estimate, edge, xtol=1e-12)
    return float(low), float(high)
