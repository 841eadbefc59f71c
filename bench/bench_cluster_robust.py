"""Time cluster-robust OLS fits on the model-card design (run by hand: python bench/bench_cluster_robust.py)."""

import timeit

import numpy as np

from honestci.audit.stats.frequentist.cluster_robust import cluster_robust_ols


def main() -> None:
    rng = np.random.default_rng(0)
    for n_clusters, per_cluster, k in ((6, 240, 2), (6, 240, 1), (10, 500, 2), (200, 100, 5)):
        clusters = np.repeat(np.arange(n_clusters), per_cluster)
        X = np.column_stack([np.ones(clusters.size)] + [rng.normal(size=clusters.size) for _ in range(k - 1)])
        y = rng.choice([0.0, 0.5, 1.0], size=clusters.size)
        for vcov in ("CR1", "CR2"):
            best = min(timeit.repeat(lambda: cluster_robust_ols(X, y, clusters, vcov=vcov), number=20, repeat=5)) / 20
            print(f"n={clusters.size:>6} G={n_clusters:>4} k={k} {vcov}: {best * 1e3:.2f} ms per fit")


if __name__ == "__main__":
    main()
