"""Issue 31: the gate's posterior with mu ~ N(0, MU_SD) on the full certification grid, paired with
the slow tier's run (same cells, seeds, replications and methods as
tests/test_coverage_study.py::test_gate_intervals_one_sided_error_on_every_cell_of_the_full_grid).
One shard of the cells per process (the prior is set in this process only).

Usage: python bench/gate_prior_cert.py MU_SD SHARD N_SHARDS REPS SEED OUT.csv
"""

import sys
import time

import numpy as np
import pandas as pd

from honestci.audit.stats.bayesian import grid as bayes_grid
from honestci.audit.stats.design.coverage_study import FULL_GRID, HONEST_METHODS, _run_cell

mu_sd, shard, n_shards, reps, seed, out = (
    float(sys.argv[1]),
    int(sys.argv[2]),
    int(sys.argv[3]),
    int(sys.argv[4]),
    int(sys.argv[5]),
    sys.argv[6],
)
bayes_grid.MU_PRIOR_SD = mu_sd
cells = FULL_GRID.cells()
children = np.random.SeedSequence(seed).spawn(len(cells))
rows = []
tic = time.time()
for index in range(shard, len(cells), n_shards):
    rows += [
        dict(row, mu_prior_sd=mu_sd) for row in _run_cell((cells[index], children[index], reps, 0.95, HONEST_METHODS))
    ]
    pd.DataFrame(rows).to_csv(out, index=False)
    print(f"cell {index} done, {time.time() - tic:.0f} s", flush=True)
