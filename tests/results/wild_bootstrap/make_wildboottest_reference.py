"""Produce the wildboottest reference values that tests/test_wild_bootstrap.py pins to.

Run with a Python that has wildboottest (it is NOT a project dependency):

    python -m venv /tmp/wbt && /tmp/wbt/bin/pip install wildboottest numpy pandas statsmodels
    /tmp/wbt/bin/python tests/results/wild_bootstrap/make_wildboottest_reference.py

Versions used for the committed CSVs: wildboottest 0.3.2, numpy 2.4.6, numba 0.68.1.

Writes, next to this script:
- data_*.csv: the data sets (so the tests do not depend on a random stream);
- wildboottest_pvalues.csv: one row per test, from ``WildboottestCL`` with bootstrap_type="11",
  impose_null=True (WCR), adj=True, cluster_adj=True, and the seed in the row. wildboottest tests
  R'b = 0 only, so a null theta0 != 0 is tested on y - theta0 * X[:, coef] (same restricted
  residuals, same t). Columns:
    pvalue_wbt, pvalue_et_wbt: wildboottest's own p-values (get_pvalue "two-tailed" / "equal-tailed");
      it counts |t*| > |t| STRICTLY, so a draw that reproduces t exactly (v proportional to
      (1, ..., 1)) is in or out depending on a rounding error;
    n_ties: draws with ||t*| - |t|| <= 1e-9 |t| (computed here from wildboottest's t_boot);
    pvalue_ge, pvalue_et_ge: the same p-values from wildboottest's t_stat and t_boot with ties
      counted as exceedances (|t*| >= |t| (1 - 1e-9)), the convention honestci uses;
    tboot_q*: quantiles of wildboottest's t_boot.
- tboot_*.csv: every t_boot of the fully enumerated (Rademacher) tests, in wildboottest's order.
- wildboottest_ci.csv: a 95% confidence interval obtained by inverting wildboottest's own p-value
  (``pvalue_ge`` above, same seed hence the same draws at every theta0): 16-point grid from the
  estimate to 4 CR1 standard errors on each side, outermost accepted grid point, then 20
  bisection steps (endpoint known to 4 se / 16 / 2^20 ~ 2.4e-7 se). Independent of honestci's
  inversion code; slow (wildboottest recompiles its numba kernel on every call, ~2 s each).
"""

from __future__ import annotations

import csv
from pathlib import Path

from importlib.metadata import version

import numpy as np
from wildboottest.wildboottest import WildboottestCL

HERE = Path(__file__).resolve().parent
TIE = 1e-9
QUANTILES = (0.0, 0.025, 0.25, 0.5, 0.75, 0.975, 1.0)


def fixture_like_g6():
    """n = 1440 verdict-level scores in {0, 1/2, 1}, 6 vignettes, intercept + order covariate."""
    rng = np.random.default_rng(20240601)
    G, n = 6, 1440
    cluster = np.repeat(np.arange(G), n // G)
    win_prob = rng.beta(6, 4, size=G)
    order = np.tile([0.0, 1.0], n // 2)
    y = 0.5 * (rng.random(n) < win_prob[cluster]) + 0.5 * (rng.random(n) < win_prob[cluster] + 0.05 * order)
    return {"cluster": cluster, "y": y, "order": order}


def continuous(G, seed):
    """Continuous outcome, two covariates, unequal cluster sizes, cluster random effects."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(10, 80, size=G)
    cluster = np.repeat(np.arange(G), sizes)
    n = cluster.size
    x1 = rng.normal(size=n) + rng.normal(size=G)[cluster]
    x2 = rng.binomial(1, 0.4, size=n).astype(float)
    y = 1.0 + 0.2 * x1 - 0.3 * x2 + rng.normal(size=G)[cluster] + rng.normal(size=n) * (1 + x2)
    return {"cluster": cluster, "y": y, "x1": x1, "x2": x2}


DATASETS = {
    "fixture_g6": (fixture_like_g6(), ["order"]),
    "continuous_g8": (continuous(8, 11), ["x1", "x2"]),
    "continuous_g12": (continuous(12, 12), ["x1", "x2"]),
}

# (data set, weights, B, seed, coef, theta0); coef indexes [intercept, covariates...].
TESTS = [
    ("fixture_g6", "rademacher", 9999, 1, 0, 0.5),
    ("fixture_g6", "rademacher", 9999, 1, 1, 0.0),
    ("fixture_g6", "webb", 9999, 42, 0, 0.5),
    ("fixture_g6", "webb", 9999, 42, 0, 0.62),
    ("fixture_g6", "webb", 9999, 42, 1, 0.0),
    ("fixture_g6", "webb", 9999, 7, 1, 0.1),
    ("continuous_g8", "rademacher", 999, 3, 1, 0.0),
    ("continuous_g8", "rademacher", 999, 3, 2, -0.3),
    ("continuous_g8", "webb", 1999, 5, 1, 0.2),
    ("continuous_g12", "rademacher", 999, 8, 1, 0.0),
    ("continuous_g12", "webb", 4999, 2024, 1, 0.0),
    ("continuous_g12", "webb", 4999, 2024, 2, -0.3),
]


def write_data(name, data):
    columns = list(data)
    with open(HERE / f"data_{name}.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        for row in zip(*(data[c] for c in columns)):
            writer.writerow([repr(int(v)) if c == "cluster" else repr(float(v)) for c, v in zip(columns, row)])


def run_wildboottest(X, y, cluster, coef, B, seed, weights):
    R = np.zeros(X.shape[1])
    R[coef] = 1.0
    boot = WildboottestCL(X=X, Y=y, cluster=cluster, R=R, B=B, seed=seed, parallel=False)
    boot.get_scores(bootstrap_type="11", impose_null=True, adj=True, cluster_adj=True)
    boot.get_weights(weights_type=weights)
    boot.get_numer()
    boot.get_denom()
    boot.get_tboot()
    boot.get_vcov()
    boot.get_tstat()
    boot.get_pvalue(pval_type="two-tailed")
    symmetric = float(boot.pvalue)
    boot.get_pvalue(pval_type="equal-tailed")
    return boot, symmetric, float(boot.pvalue)


def design(name):
    data, covariates = DATASETS[name]
    X = np.column_stack([np.ones(data["y"].size)] + [data[c] for c in covariates])
    return data, X


# (data set, weights, B, seed, coef, level)
CI_CASES = [("fixture_g6", "webb", 9999, 42, 0, 0.95)]


def inverted_ci(name, weights, B, seed, coef, level, grid=16, reach_se=4.0, bisections=20):
    data, X = design(name)
    alpha = 1 - level

    def pvalue_ge(theta0):
        boot, _, _ = run_wildboottest(X, data["y"] - theta0 * X[:, coef], data["cluster"], coef, B, seed, weights)
        t = float(np.asarray(boot.t_stat).reshape(-1)[0])
        return np.count_nonzero(np.abs(boot.t_boot) >= abs(t) * (1 - TIE)) / boot.B

    boot, _, _ = run_wildboottest(X, data["y"], data["cluster"], coef, B, seed, weights)
    estimate = float(np.linalg.lstsq(X, data["y"], rcond=None)[0][coef])
    se = estimate / float(np.asarray(boot.t_stat).reshape(-1)[0])
    calls = 1
    ends = []
    for direction in (-1.0, 1.0):
        offsets = np.linspace(0, reach_se * se, grid + 1)
        accepted = [pvalue_ge(estimate + direction * d) >= alpha for d in offsets[1:]]
        calls += grid
        if accepted[-1]:
            raise RuntimeError("bracket too small: widen reach_se")
        last = max([0] + [i + 1 for i, a in enumerate(accepted) if a])
        inner, outer = offsets[last], offsets[last + 1]
        for _ in range(bisections):
            middle = 0.5 * (inner + outer)
            calls += 1
            if pvalue_ge(estimate + direction * middle) >= alpha:
                inner = middle
            else:
                outer = middle
        ends.append(estimate + direction * 0.5 * (inner + outer))
    return {"data": name, "weights": weights, "B": B, "seed": seed, "coef": coef, "level": level,
            "estimate": repr(estimate), "se_cr1": repr(se), "ci_low": repr(float(ends[0])), "ci_high": repr(float(ends[1])),
            "endpoint_tolerance": repr(float(reach_se * se / grid / 2**bisections)), "wildboottest_calls": calls}


def main():
    for name, (data, _) in DATASETS.items():
        write_data(name, data)
    rows = []
    for name, weights, B, seed, coef, theta0 in TESTS:
        data, X = design(name)
        y_shifted = data["y"] - theta0 * X[:, coef]
        boot, p_wbt, p_et_wbt = run_wildboottest(X, y_shifted, data["cluster"], coef, B, seed, weights)
        t = float(np.asarray(boot.t_stat).reshape(-1)[0])
        t_boot = np.asarray(boot.t_boot, dtype=float)
        slack = TIE * abs(t)
        n_ties = int(np.count_nonzero(np.abs(np.abs(t_boot) - abs(t)) <= slack))
        p_ge = np.count_nonzero(np.abs(t_boot) >= abs(t) - slack) / boot.B
        p_et_ge = min(1.0, 2 * min(np.count_nonzero(t_boot >= t - slack), np.count_nonzero(t_boot <= t + slack)) / boot.B)
        row = {
            "data": name, "weights": weights, "B": B, "seed": seed, "coef": coef, "theta0": theta0,
            "n_draws": boot.B, "enumerated": bool(boot.full_enumeration), "t_stat": repr(t),
            "pvalue_wbt": repr(p_wbt), "pvalue_et_wbt": repr(p_et_wbt), "n_ties": n_ties,
            "pvalue_ge": repr(float(p_ge)), "pvalue_et_ge": repr(float(p_et_ge)),
        }
        for q in QUANTILES:
            row[f"tboot_q{q:g}"] = repr(float(np.quantile(t_boot, q)))
        rows.append(row)
        if boot.full_enumeration:
            np.savetxt(HERE / f"tboot_{name}_{weights}_coef{coef}_theta{theta0:g}.csv", t_boot, fmt="%.17g",
                       header="t_boot", comments="")
        print(row)
    with open(HERE / "wildboottest_pvalues.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    ci_rows = [inverted_ci(*case) for case in CI_CASES]
    with open(HERE / "wildboottest_ci.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(ci_rows[0]))
        writer.writeheader()
        writer.writerows(ci_rows)
    print(ci_rows)
    print("wildboottest", version("wildboottest"), "numpy", np.__version__)


if __name__ == "__main__":
    main()
