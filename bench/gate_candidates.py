"""The measurement behind the bar gate's interval choice (issue 15; docs/methods.md), run by hand.

For each candidate CI-low of the new-vignette rate, the share of replications whose CI-low lies
above the truth (nominal 2.5%) and the mean shortfall truth − CI-low (the width it costs), on the
cells of the coverage study's full grid where vignette rates are most skewed (sd 1, rates 0.8-0.95)
plus a mild one. Candidates built on the G vignette means m_g: the t interval; the same on the
logit scale (delta method: CR2-logit); Hall's (1992) skewness-corrected t; a leave-one-vignette-out
jackknife of logit(θ̂); the studentised cluster bootstrap on the logit scale; and the posterior
quantile of the logit-normal vignette model (audit/stats/bayesian/grid.py).

    python bench/gate_candidates.py --reps 1000 --seed 7
"""

from __future__ import annotations

import argparse
import itertools
import math
import time

import numpy as np
from scipy import stats
from scipy.special import expit, logit

from honestci.audit.stats.bayesian.grid import rate_posterior
from honestci.audit.stats.design.coverage_study import simulate_scores
from honestci.audit.stats.estimands import vignette_means

LEVEL = 0.95


def t_low(m):
    return m.mean() - stats.t.ppf(0.5 + LEVEL / 2, m.size - 1) * m.std(ddof=1) / math.sqrt(m.size)


def logit_low(m):
    mean, se = m.mean(), m.std(ddof=1) / math.sqrt(m.size)
    return expit(logit(mean) - stats.t.ppf(0.5 + LEVEL / 2, m.size - 1) * se / (mean * (1 - mean)))


def hall_low(m):
    """Hall (1992), JRSS-B 54: g(T) = T + aT^2 + a^2 T^3/3 + c, a = gamma/(3 sqrt n), c = gamma/(6 sqrt n)."""
    n, s = m.size, m.std(ddof=1)
    gamma = np.mean((m - m.mean()) ** 3) / s**3
    a, c = gamma / (3 * math.sqrt(n)), gamma / (6 * math.sqrt(n))
    z = stats.t.ppf(0.5 + LEVEL / 2, n - 1)
    inverse = z - c if abs(a) < 1e-12 else (np.cbrt(1 + 3 * a * (z - c)) - 1) / a
    return m.mean() - s / math.sqrt(n) * inverse


def jackknife_logit_low(m):
    n = m.size
    leave_out = logit((m.sum() - m) / (n - 1))
    se = math.sqrt((n - 1) / n * np.sum((leave_out - leave_out.mean()) ** 2))
    return expit(logit(m.mean()) - stats.t.ppf(0.5 + LEVEL / 2, n - 1) * se)


def bootstrap_t_logit_low(m, rng, draws=499):
    n, mean = m.size, m.mean()
    se = m.std(ddof=1) / math.sqrt(n) / (mean * (1 - mean))
    resampled = m[rng.integers(0, n, (draws, n))]
    means = resampled.mean(axis=1)
    with np.errstate(all="ignore"):
        ses = resampled.std(axis=1, ddof=1) / math.sqrt(n) / (means * (1 - means))
        t_values = (logit(means) - logit(mean)) / ses
    t_values = t_values[np.isfinite(t_values)]
    return expit(logit(mean) - np.quantile(t_values, 0.5 + LEVEL / 2) * se)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    cells = itertools.product((6, 12, 30, 100), ("balanced",), (1.0,), (0.8, 0.9, 0.95), (0.0,))
    print("G sizes sd rate ties | candidate: % CI-low above truth / mean shortfall")
    for n_clusters, sizes, sd, rate, tie in [*cells, (12, "unbalanced", 0.3, 0.6, 1.0)]:
        started, lows = time.perf_counter(), {}
        for _ in range(args.reps):
            scores, clusters, _ = simulate_scores(rng, n_clusters, sizes, sd, rate, tie)
            m = vignette_means(scores, clusters).means
            if not 0 < m.mean() < 1 or np.ptp(m) == 0:
                continue
            for name, low in (
                ("t", t_low(m)),
                ("logit", logit_low(m)),
                ("hall", hall_low(m)),
                ("jackknife_logit", jackknife_logit_low(m)),
                ("bootstrap_t_logit", bootstrap_t_logit_low(m, rng)),
                ("posterior", rate_posterior(scores, clusters).quantile((1 - LEVEL) / 2)),
            ):
                lows.setdefault(name, []).append(low)
        summary = " ".join(
            f"{k}={100 * np.mean(np.array(v) > rate):.1f}/{np.mean(rate - np.array(v)):.3f}" for k, v in lows.items()
        )
        print(n_clusters, sizes, sd, rate, tie, "|", summary, f"({time.perf_counter() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
