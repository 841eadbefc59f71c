"""The whole interval table at scale: 1M contests on 5,000 vignettes (run by hand, not in tests).

    PYTHONPATH=. python bench/bench_scale.py [--contests 1000000] [--vignettes 5000] [--repeats 3]
    PYTHONPATH=. python bench/bench_scale.py --wild-only --vignettes 5000
    PYTHONPATH=. python bench/bench_scale.py --peers [--repeats 3] [--peer-timeout 600]

Contest scores in {0, ½, 1} from vignette rates expit(N(1, 0.8)), both orders, sizes varying by
vignette; every interval method of the audit's table (``winrate_table(..., ALL_METHODS)``: iid,
stratified, CR0/1/2, CR2-logit, the wild cluster bootstraps, the cluster bootstraps, the Bayesian
grid posterior) timed one by one and as a whole, in CPU seconds and wall seconds, with the peak
resident memory of the process (each repeat in a fresh subprocess, so the peaks do not carry
over). Reports min / median over ``--repeats`` runs.

``--peers``: the same 1M contests side by side with the peers, each in its own process (CPU s, wall s,
peak RSS, the figure it returns): honestci CR1 against statsmodels ``OLS(...).fit(cov_type="cluster")``
(the same CR1S standard error), and one wild cluster restricted bootstrap p-value (Webb, B = 9,999, H0: rate =
0.7) from honestci against wildboottest's, when a venv with it exists at /tmp/wbt (``python -m venv
/tmp/wbt && /tmp/wbt/bin/pip install wildboottest``); a peer that runs past ``--peer-timeout`` is
reported as not finished. The Bayesian peer (bambi) at this size: bench/bench_bayes.py ``--vignettes``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

WILDBOOTTEST_PYTHON = "/tmp/wbt/bin/python"
PEER_DATA = "/tmp/honestci_bench_scale_peers.npz"


def simulate(contests: int, vignettes: int):
    """Contest scores and their vignettes (seeded; vignette sizes vary)."""
    import numpy as np

    rng = np.random.default_rng(20261201)
    weights = rng.gamma(2.0, 1.0, vignettes)
    clusters = rng.choice(vignettes, size=contests, p=weights / weights.sum())
    rate = 1 / (1 + np.exp(-rng.normal(1.0, 0.8, vignettes)))[clusters]
    scores = ((rng.random(contests) < rate).astype(float) + (rng.random(contests) < rate)) / 2
    return scores, clusters


def one_run(contests: int, vignettes: int) -> dict:
    from honestci.audit.stats.frequentist.winrate import ALL_METHODS, winrate_ci

    scores, clusters = simulate(contests, vignettes)
    out: dict = {"methods": {}}
    start_wall, start_cpu = time.perf_counter(), time.process_time()
    for method in ALL_METHODS:
        wall, cpu = time.perf_counter(), time.process_time()
        winrate_ci(scores, clusters, method=method, seed=1)
        out["methods"][method] = {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}
    out["wall"] = time.perf_counter() - start_wall
    out["cpu"] = time.process_time() - start_cpu
    out["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def wild_only(vignettes: int) -> dict:
    """One WCR p-value (Webb, B = 9,999, intercept only) on 200 contests per vignette."""
    import numpy as np

    from honestci.audit.stats.frequentist.wild_bootstrap import wild_cluster_pvalue

    rng = np.random.default_rng(0)
    n = 200 * vignettes
    clusters, y = rng.integers(0, vignettes, n), (rng.random(n) < 0.6).astype(float)
    cpu = time.process_time()
    wild_cluster_pvalue(np.ones((n, 1)), y, clusters, theta0=0.6, B=9999, rng=1)
    return {"cpu": time.process_time() - cpu, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


#: contender: (set-up, the call timed). Each CR1 row is OLS of the score on an intercept with the
#: Stata/statsmodels small-sample factor (CR1S) and normal quantiles, the contest-weighted mean.
PEERS = {
    "honestci CR1S (cluster_robust_ols)": (
        "from honestci.audit.stats.frequentist.cluster_robust import cluster_robust_ols",
        "r = cluster_robust_ols(np.ones((y.size, 1)), y, cluster, vcov='CR1S', df='z')\n"
        "figure = f'{r.coef[0]:.6f} se {r.se[0]:.6f}'",
    ),
    "statsmodels OLS cov_type=cluster": (
        "import statsmodels.api as sm",
        "fit = sm.OLS(y, np.ones((y.size, 1))).fit(cov_type='cluster', cov_kwds={'groups': cluster})\n"
        "figure = f'{fit.params[0]:.6f} se {fit.bse[0]:.6f}'",
    ),
    "honestci wild bootstrap p-value": (
        "from honestci.audit.stats.frequentist.wild_bootstrap import wild_cluster_pvalue",
        "figure = f'p = {wild_cluster_pvalue(np.ones((y.size, 1)), y, cluster, theta0=0.7, B=9999, rng=1):.4f}'",
    ),
    "wildboottest p-value": (
        "import statsmodels.api as sm\nfrom wildboottest.wildboottest import wildboottest",
        "model = sm.OLS(y - 0.7, np.ones((y.size, 1)))\n"
        "result = wildboottest(model, B=9999, cluster=cluster, param='const', weights_type='webb', seed=1, show=False)\n"
        "figure = f\"p = {float(result['p-value'].iloc[0]):.4f}\"",
    ),
}

PEER_CHILD = """
import json, resource, sys, time
import numpy as np
data = np.load(sys.argv[1])
y, cluster = data["y"], data["cluster"]
{setup}
started, cpu = time.perf_counter(), time.process_time()
{call}
print(json.dumps({{"wall": time.perf_counter() - started, "cpu": time.process_time() - cpu,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "figure": figure}}))
"""


def peers(contests: int, vignettes: int, repeats: int, timeout: float) -> None:
    """Each contender ``repeats`` times in a fresh process on the same data; min / median."""
    import numpy as np

    scores, clusters = simulate(contests, vignettes)
    np.savez(PEER_DATA, y=scores, cluster=clusters)
    print(f"{contests:,} contests on {vignettes:,} vignettes; load average {os.getloadavg()}")
    print("(imports and loading the data are outside the timed call; peak RSS is the whole process)")
    print("| contender | wall s min / median | CPU s min / median | peak RSS MB | figure |")
    print("|---|---|---|---|---|")
    for name, (setup, call) in PEERS.items():
        python = WILDBOOTTEST_PYTHON if name.startswith("wildboottest") else sys.executable
        if not os.path.exists(python):
            print(f"| {name} | skipped: no {python} | | | |")
            continue
        runs, failure = [], ""
        for _ in range(repeats):
            command = [python, "-c", PEER_CHILD.format(setup=setup, call=call), PEER_DATA]
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                failure = f"did not finish in {timeout:.0f} s"
                break
            if done.returncode != 0:
                failure = "error: " + (done.stderr.strip().splitlines() or ["?"])[-1]
                break
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        if failure:
            print(f"| {name} | {failure} | | | |", flush=True)
            continue
        wall, cpu = [r["wall"] for r in runs], [r["cpu"] for r in runs]
        print(
            f"| {name} | {min(wall):.2f} / {statistics.median(wall):.2f} | {min(cpu):.2f} / "
            f"{statistics.median(cpu):.2f} | {max(r['peak_mb'] for r in runs):.0f} | {runs[0]['figure']} |",
            flush=True,
        )
    print(f"load average after: {os.getloadavg()}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--contests", type=int, default=1_000_000)
    parser.add_argument("--vignettes", type=int, default=5_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--wild-only", action="store_true", help="one wild bootstrap p-value, 200 contests per vignette"
    )
    parser.add_argument("--peers", action="store_true", help="the peers side by side on the same contests")
    parser.add_argument("--peer-timeout", type=float, default=600.0, help="seconds one peer process may take")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peers:
        peers(args.contests, args.vignettes, args.repeats, args.peer_timeout)
        return
    if args.child:
        run = wild_only(args.vignettes) if args.wild_only else one_run(args.contests, args.vignettes)
        print(json.dumps(run))
        return
    if args.wild_only:
        child = [sys.executable, __file__, "--child", "--wild-only", "--vignettes", str(args.vignettes)]
        runs = [
            json.loads(subprocess.run(child, check=True, capture_output=True, text=True).stdout)
            for _ in range(args.repeats)
        ]
        print(
            f"wild bootstrap p-value, G = {args.vignettes:,}: CPU s min {min(r['cpu'] for r in runs):.2f}, "
            f"peak RSS {max(r['peak_mb'] for r in runs):.0f} MB"
        )
        return
    runs = []
    for _ in range(args.repeats):
        child = [
            sys.executable,
            __file__,
            "--child",
            "--contests",
            str(args.contests),
            "--vignettes",
            str(args.vignettes),
        ]
        runs.append(json.loads(subprocess.run(child, check=True, capture_output=True, text=True).stdout))
    print(f"{args.contests:,} contests on {args.vignettes:,} vignettes; load average {os.getloadavg()[0]:.1f}")
    print(f"{'method':<24} {'wall min':>9} {'wall med':>9} {'CPU min':>9}")
    for method in runs[0]["methods"]:
        wall = [r["methods"][method]["wall"] for r in runs]
        cpu = [r["methods"][method]["cpu"] for r in runs]
        print(f"{method:<24} {min(wall):9.2f} {statistics.median(wall):9.2f} {min(cpu):9.2f}")
    wall, cpu, peak = [r["wall"] for r in runs], [r["cpu"] for r in runs], [r["peak_mb"] for r in runs]
    print(f"{'all':<24} {min(wall):9.2f} {statistics.median(wall):9.2f} {min(cpu):9.2f}")
    print(f"peak resident memory: min {min(peak):.0f} MB, median {statistics.median(peak):.0f} MB")


if __name__ == "__main__":
    main()
