"""Time the wild cluster restricted bootstrap on the model-card design (run by hand, not in tests).

    PYTHONPATH=. python bench/bench_wild_bootstrap.py

Design: n = 1440 verdict rows, G = 6 vignettes, scores in {0, 1/2, 1}, intercept + order covariate;
test the intercept (the win rate at order 0). Reports best-of-repeats wall time and the peak of
memory allocated during one call (tracemalloc; numpy reports its buffers to it). If a venv with
wildboottest exists at /tmp/wbt (python -m venv /tmp/wbt && /tmp/wbt/bin/pip install wildboottest
numpy pandas statsmodels), one wildboottest p-value on the same data is timed in a subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import timeit
import tracemalloc
from pathlib import Path

import numpy as np

from honestci.audit.stats.frequentist.wild_bootstrap import wild_cluster_ci, wild_cluster_pvalue

WILDBOOTTEST_PYTHON = Path("/tmp/wbt/bin/python")

WILDBOOTTEST_SCRIPT = """
import json, sys, time
import numpy as np, statsmodels.api as sm
from wildboottest.wildboottest import wildboottest
data = np.load(sys.argv[1])
model = sm.OLS(data["y"], sm.add_constant(data["order"]))
times = []
for repeat in range(4):
    start = time.perf_counter()
    result = wildboottest(model, B=9999, cluster=data["cluster"], param="const", weights_type="webb",
                          seed=1, show=False)
    times.append(time.perf_counter() - start)
print(json.dumps({"first_call_s": times[0], "later_calls_s": times[1:], "pvalue": float(result["p-value"].iloc[0])}))
"""


def fixture_like(seed: int = 0):
    rng = np.random.default_rng(seed)
    G, n = 6, 1440
    cluster = np.repeat(np.arange(G), n // G)
    win_prob = rng.beta(6, 4, size=G)
    order = np.tile([0.0, 1.0], n // 2)
    y = 0.5 * (rng.random(n) < win_prob[cluster]) + 0.5 * (rng.random(n) < win_prob[cluster])
    return np.column_stack([np.ones(n), order]), y, cluster, order


def measure(label: str, call, number: int, repeat: int = 5) -> None:
    call()  # warm-up
    best = min(timeit.repeat(call, number=number, repeat=repeat)) / number
    tracemalloc.start()
    call()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"{label:<52} {best * 1e3:8.2f} ms   peak {peak / 2**20:6.2f} MiB")


def main() -> None:
    X, y, cluster, order = fixture_like()
    print(f"n={y.size}, G={np.unique(cluster).size}, k={X.shape[1]}; numpy {np.__version__}")
    measure(
        "p-value, Webb, B = 9,999 sampled", lambda: wild_cluster_pvalue(X, y, cluster, theta0=0.5, B=9999, rng=1), 20
    )
    measure(
        "p-value, Webb, all 46,656 draws enumerated", lambda: wild_cluster_pvalue(X, y, cluster, theta0=0.5, B=None), 10
    )
    measure("95% CI by test inversion, Webb, B = 9,999", lambda: wild_cluster_ci(X, y, cluster, B=9999, rng=1), 10)
    measure("95% CI by test inversion, Webb, enumerated", lambda: wild_cluster_ci(X, y, cluster, B=None), 5)
    for B in (9999, None):
        result = wild_cluster_ci(X, y, cluster, B=B, rng=1)
        print(f"  {result}  [{result.n_pvalue_evaluations} p-value evaluations]")

    if not WILDBOOTTEST_PYTHON.exists():
        print(f"wildboottest: skipped ({WILDBOOTTEST_PYTHON} not found)")
        return
    with tempfile.TemporaryDirectory() as folder:
        data = Path(folder) / "data.npz"
        np.savez(data, y=y, order=order, cluster=cluster)
        completed = subprocess.run(
            [str(WILDBOOTTEST_PYTHON), "-c", WILDBOOTTEST_SCRIPT, str(data)], capture_output=True, text=True, check=True
        )
    timing = json.loads(completed.stdout.strip().splitlines()[-1])
    later = ", ".join(f"{t * 1e3:.0f}" for t in timing["later_calls_s"])
    print(
        f"wildboottest p-value, Webb, B = 9,999: first call {timing['first_call_s'] * 1e3:.0f} ms, "
        f"later calls {later} ms (p = {timing['pvalue']:.4f}; "
        f"honestci same seed: {wild_cluster_pvalue(X, y, cluster, B=9999, rng=1):.4f})"
    )


if __name__ == "__main__":
    sys.exit(main())
