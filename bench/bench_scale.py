"""The whole interval table at scale: 1M contests on 5,000 vignettes (run by hand, not in tests).

    PYTHONPATH=. python bench/bench_scale.py [--contests 1000000] [--vignettes 5000] [--repeats 3]
    PYTHONPATH=. python bench/bench_scale.py --wild-only --vignettes 5000

Contest scores in {0, ½, 1} from vignette rates expit(N(1, 0.8)), both orders, sizes varying by
vignette; every interval method of the audit's table (``winrate_table(..., ALL_METHODS)``: iid,
stratified, CR0/1/2, CR2-logit, the wild cluster bootstraps, the cluster bootstraps, the Bayesian
grid posterior) timed one by one and as a whole, in CPU seconds and wall seconds, with the peak
resident memory of the process (each repeat in a fresh subprocess, so the peaks do not carry
over). Reports min / median over ``--repeats`` runs.
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


def one_run(contests: int, vignettes: int) -> dict:
    import numpy as np

    from honestci.audit.stats.winrate import ALL_METHODS, winrate_ci

    rng = np.random.default_rng(20261201)
    weights = rng.gamma(2.0, 1.0, vignettes)
    clusters = rng.choice(vignettes, size=contests, p=weights / weights.sum())
    rate = 1 / (1 + np.exp(-rng.normal(1.0, 0.8, vignettes)))[clusters]
    scores = ((rng.random(contests) < rate).astype(float) + (rng.random(contests) < rate)) / 2
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

    from honestci.audit.stats.wild_bootstrap import wild_cluster_pvalue

    rng = np.random.default_rng(0)
    n = 200 * vignettes
    clusters, y = rng.integers(0, vignettes, n), (rng.random(n) < 0.6).astype(float)
    cpu = time.process_time()
    wild_cluster_pvalue(np.ones((n, 1)), y, clusters, theta0=0.6, B=9999, rng=1)
    return {"cpu": time.process_time() - cpu, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--contests", type=int, default=1_000_000)
    parser.add_argument("--vignettes", type=int, default=5_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--wild-only", action="store_true", help="one wild bootstrap p-value, 200 contests per vignette"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
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
