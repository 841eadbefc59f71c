"""Regenerate ppi_reference.csv: PPI++ mean estimates and CIs from ppi_py (ppi-python 0.2.3).

Run: python tests/reference/make_ppi_reference.py   (in an environment with ppi-python installed)
Inputs are written beside it (input_ppi.csv) so the test reads exactly the data ppi_py saw.
"""

from pathlib import Path

import numpy as np
import pandas as pd
from ppi_py import ppi_mean_ci, ppi_mean_pointestimate

HERE = Path(__file__).resolve().parent
rng = np.random.default_rng(20261129)
n, N = 150, 1200
quality = rng.normal(size=n + N)
# judge score in {0, 0.5, 1} correlated with the human label in {0, 0.5, 1}
human = np.digitize(quality + rng.normal(scale=0.8, size=n + N), [-0.4, 0.4]) / 2.0
judge = np.digitize(quality + rng.normal(scale=0.6, size=n + N) + 0.2, [-0.4, 0.4]) / 2.0
labelled = np.r_[np.ones(n, bool), np.zeros(N, bool)]
pd.DataFrame({"human": np.where(labelled, human, np.nan), "judge": judge, "labelled": labelled}).to_csv(
    HERE / "input_ppi.csv", index=False)
Y, Yhat, Yhat_unlabeled = human[:n], judge[:n], judge[n:]
rows = []
for lam in (None, 1.0, 0.0, 0.5):
    low, high = ppi_mean_ci(Y, Yhat, Yhat_unlabeled, alpha=0.05, lam=lam)
    point = ppi_mean_pointestimate(Y, Yhat, Yhat_unlabeled, lam=lam)
    rows.append({"lam": "tuned" if lam is None else lam, "estimate": float(np.ravel(point)[0]),
                 "ci_low": float(np.ravel(low)[0]), "ci_high": float(np.ravel(high)[0])})
pd.DataFrame(rows).to_csv(HERE / "ppi_reference.csv", index=False, float_format="%.15g")
