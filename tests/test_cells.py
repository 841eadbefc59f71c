"""Fits on cells of equal (cluster, covariate row) are the fits on the rows (audit/stats/frequentist/cells.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import special

from honestci.audit.errors import EstimationError
from honestci.audit.stats.frequentist.cells import cluster_robust_ols_of_cells, design_cells
from honestci.audit.stats.frequentist.cluster_robust import cluster_robust_ols
from honestci.audit.stats.judge_error.length_bias import (
    _BOLD,
    _HEADER,
    _LIST,
    fit_logistic_glm,
    logistic_working_problem,
    style_counts,
)


def _few_valued(seed: int, n_clusters: int = 40, per: int = 60):
    """Rows whose covariates take a few values per cluster (an order indicator, a 3-level term)."""
    rng = np.random.default_rng(seed)
    groups = np.repeat([f"v{g:03d}" for g in range(n_clusters)], per)
    order = rng.integers(0, 2, groups.size).astype(float)
    level = rng.choice([-0.8, 0.1, 0.9], groups.size)
    X = np.column_stack([np.ones(groups.size), order, level])
    effect = rng.normal(0, 0.7, n_clusters)[np.repeat(np.arange(n_clusters), per)]
    y = (rng.random(groups.size) < special.expit(0.3 + effect + 0.4 * order - 0.5 * level)).astype(float)
    y[rng.random(groups.size) < 0.2] = 0.5  # ties
    return y, X, groups


def _assert_same_fit(ours, rows) -> None:
    assert ours.n == rows.n and ours.n_clusters == rows.n_clusters and ours.kind == rows.kind
    for name in ("coef", "vcov", "se", "df", "ci_low", "ci_high", "p"):
        np.testing.assert_allclose(getattr(ours, name), getattr(rows, name), rtol=1e-10, atol=1e-14)
    for name in ("_bread", "_adjusted_gram", "_adjusted_gram_sq"):
        # what a contrast's Satterthwaite df reads: the same per cluster, whatever the clusters' order
        np.testing.assert_allclose(
            np.sort(getattr(ours, name).ravel()), np.sort(getattr(rows, name).ravel()), rtol=1e-10, atol=1e-14
        )


@pytest.mark.parametrize("vcov", ["CR0", "CR1", "CR2"])
def test_ols_of_cells_is_the_ols_of_the_rows(vcov):
    y, X, groups = _few_valued(1)
    cells = design_cells(X, groups)
    assert cells.counts.sum() == y.size and cells.counts.size <= 40 * 6  # 2 orders x 3 levels per vignette
    rows = cluster_robust_ols(X, y, groups, vcov=vcov)
    ours = cluster_robust_ols_of_cells(cells, cells.sums(y), lambda: pytest.fail("the cells stand in"), vcov=vcov)
    _assert_same_fit(ours, rows)


def test_cr1s_counts_rows_so_the_rows_are_fitted():
    y, X, groups = _few_valued(2)
    cells = design_cells(X, groups)
    rows = cluster_robust_ols(X, y, groups, vcov="CR1S")
    assert cluster_robust_ols_of_cells(cells, cells.sums(y), lambda: rows, vcov="CR1S") is rows


def test_cells_fitted_exactly_leave_the_rows_to_decide():
    # every vignette has the same mean in each order: the cells' residuals are all zero, the rows' are not
    groups = np.repeat(np.arange(30), 4)
    X = np.column_stack([np.ones(120), np.tile([1.0, 1.0, 0.0, 0.0], 30)])
    y = np.tile([1.0, 0.0, 1.0, 1.0], 30)
    cells = design_cells(X, groups)
    with pytest.raises(EstimationError):
        cluster_robust_ols(
            cells.X * np.sqrt(cells.counts)[:, None], cells.sums(y) / np.sqrt(cells.counts), cells.clusters
        )
    rows = cluster_robust_ols(X, y, groups)
    assert cluster_robust_ols_of_cells(cells, cells.sums(y), lambda: rows) is rows


def test_cells_group_equal_rows_of_one_cluster_only():
    X = np.array([[1.0, 0.0], [1.0, -0.0], [1.0, 0.0], [1.0, 2.0]])
    cells = design_cells(X, np.array(["a", "a", "b", "a"]))
    assert cells.index.tolist() == [0, 0, 1, 2] and cells.counts.tolist() == [2, 1, 1]
    assert cells.clusters.tolist() == ["a", "b", "a"] and cells.sums([1, 2, 3, 4]).tolist() == [3.0, 3.0, 4.0]


@pytest.mark.parametrize("n_clusters, per", [(40, 60), (3, 2), (1, 9)])
def test_integer_labels_give_the_cells_hashed_labels_give(n_clusters, per):
    # integer codes of a small range are numbered from a table of first rows, not hashed: the same cells
    rng = np.random.default_rng(n_clusters)
    codes = rng.permutation(np.repeat(np.arange(n_clusters), per))
    X = np.column_stack([np.ones(codes.size), rng.integers(0, 2, codes.size), rng.choice([0.5, np.nan], codes.size)])
    dense, hashed = design_cells(X, codes), design_cells(X, codes.astype(str))
    assert dense.index.tolist() == hashed.index.tolist() and dense.counts.tolist() == hashed.counts.tolist()
    assert dense.clusters.astype(str).tolist() == hashed.clusters.tolist()
    np.testing.assert_array_equal(dense.X, hashed.X)


def test_first_appearance_codes_are_factorize_codes():
    from honestci.audit.stats.frequentist.cells import _first_appearance_codes

    rng = np.random.default_rng(7)
    for size in (1, 5, 1000):
        key = rng.integers(0, size, 4000)
        assert _first_appearance_codes(key, size).tolist() == pd.factorize(key)[0].tolist()


@pytest.mark.parametrize("vcov", ["CR2", "CR1S"])
def test_logistic_glm_on_cells_is_the_sandwich_of_the_rows_working_problem(vcov):
    y, X, groups = _few_valued(3)
    fit = fit_logistic_glm(y, X, groups, vcov=vcov)
    rows = cluster_robust_ols(*logistic_working_problem(y, X, fit.coef), groups, vcov=vcov)
    _assert_same_fit(fit, rows)
    # the IRLS on cells reaches the rows' maximum likelihood: the score on the rows is zero
    score = X.T @ (y - special.expit(X @ fit.coef))
    assert np.max(np.abs(score)) < 1e-8 * y.size


def test_style_counts_skip_the_regexes_only_where_they_cannot_match():
    rng = np.random.default_rng(4)
    pieces = ["# ", "## h", "#", "**b**", "__u__", "**", "- ", "-", "* x", "1. a", "2)", "3) b", " ", "\n", "\t",
              "\u00a0", "word", "(12).", "\x00", "_"]  # fmt: skip
    texts = ["".join(rng.choice(pieces, rng.integers(0, 12))) for _ in range(3000)] + ["", "#", None, float("nan")]
    counts = style_counts(texts)
    for text, row in zip(texts, counts.itertuples(index=False)):
        plain = text if isinstance(text, str) else ""
        expected = (len(plain), len(_HEADER.findall(plain)), len(_BOLD.findall(plain)), len(_LIST.findall(plain)))
        assert tuple(row) == expected, text
