"""What-if (issue 31, docs/coverage.md "Power against the best honest candidate"): the gate's posterior with
other priors on mu (sd) and sigma (half-normal scale), on the same data (paired). Not the gate: the
prior constants of bayes_grid are set per variant in this process only.

Usage: python bench/gate_prior_whatif.py REPS SEED OUT.csv
"""

import sys
import time

import numpy as np
import pandas as pd

from honestci.audit.stats.bayesian import grid as bayes_grid
from honestci.audit.stats.core_share import single_threaded_blas
from honestci.audit.stats.design.coverage_study import _power, simulate_scores
from honestci.audit.stats.frequentist.winrate import winrate_ci

VARIANTS = {
    "gate (mu N(0,1.5), sigma HN(1))": (1.5, 1.0),
    "mu N(0,3)": (3.0, 1.0),
    "sigma HN(0.5)": (1.5, 0.5),
    "mu N(0,3), sigma HN(0.5)": (3.0, 0.5),
}
reps = int(sys.argv[1])
seed = int(sys.argv[2])
out = sys.argv[3]
cells = [(G, "balanced", sd, r, 0.0) for G in (6, 12) for sd in (0.3, 1.0) for r in (0.6, 0.9, 0.95)]
children = np.random.SeedSequence(seed).spawn(len(cells))
rows = []
with single_threaded_blas():
    for cell, child in zip(cells, children):
        tic = time.time()
        rng = np.random.default_rng(child)
        res = {v: [] for v in [*VARIANTS, "cr2_logit"]}
        for _ in range(reps):
            scores, clusters, _ = simulate_scores(rng, *cell)
            truth = cell[3]
            for name, (mu_sd, sig) in VARIANTS.items():
                bayes_grid.MU_PRIOR_SD, bayes_grid.SIGMA_PRIOR_SCALE = mu_sd, sig
                p = bayes_grid.rate_posterior(scores, clusters)
                res[name].append((p.quantile(0.025) - truth, p.quantile(0.975) - truth))
            b = winrate_ci(scores, clusters, method="cr2_logit", level=0.95, seed=0).bounds
            res["cr2_logit"].append((b[0] - truth, b[1] - truth) if b else (-np.inf, np.inf))
        bayes_grid.MU_PRIOR_SD, bayes_grid.SIGMA_PRIOR_SCALE = 1.5, 1.0
        for name, v in res.items():
            a = np.array(v)
            raw, adj = _power(a[:, 0], 0.95)
            rows.append(
                dict(
                    G=cell[0],
                    sd=cell[2],
                    rate=cell[3],
                    variant=name,
                    false_pass=np.mean(a[:, 0] > 0),
                    upper_miss=np.mean(a[:, 1] < 0),
                    coverage=np.mean((a[:, 0] <= 0) & (a[:, 1] >= 0)),
                    power=raw,
                    power_size_adjusted=adj,
                )
            )
        pd.DataFrame(rows).to_csv(out, index=False)
        print(cell, f"{time.time() - tic:.0f}s", flush=True)
