"""Rows of a regression grouped into cells (one cluster, one distinct covariate row), and the
cluster-robust least-squares fit of the rows computed from their cells.

A model whose covariates take few distinct values within each cluster (an intercept and an order
indicator; a length term with a few values) has far fewer cells than rows. Every quantity
:func:`honestci.audit.stats.frequentist.cluster_robust.cluster_robust_ols` needs is a sum over rows: X'X, X'y
and, per cluster g, the Gram matrix B_g = X_g'X_g and the score s_g = X_g'e_g (its CR2 and
Satterthwaite df are computed from B_g and s_g alone). The m_c rows of cell c share x_c, so

    Σ_{i∈c} x_i x_i' = m_c x_c x_c',    Σ_{i∈c} x_i y_i = x_c Σ_{i∈c} y_i,

and one row √m_c x_c with outcome (Σ_{i∈c} y_i)/√m_c per cell gives every one of those sums:
the same coefficients, covariance, SEs and df as the rows, from arrays the size of the cells.

Validated against: :func:`cluster_robust_ols` on the rows (tests/test_cells.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from honestci.audit.errors import EstimationError, InputError
from honestci.audit.stats.frequentist.cluster_robust import ClusterRobustFit, cluster_robust_ols


@dataclass(frozen=True, eq=False)
class Cells:
    """The cells of a design: ``index`` (each row's cell), and per cell its covariate row ``X``,
    its cluster code ``clusters`` and its number of rows ``counts``."""

    index: np.ndarray
    X: np.ndarray
    clusters: np.ndarray
    counts: np.ndarray

    def sums(self, values: Any) -> np.ndarray:
        """The sum of ``values`` (one per row) over each cell's rows."""
        return np.bincount(self.index, weights=np.asarray(values, dtype=float), minlength=self.counts.size)


def design_cells(X: np.ndarray, clusters: Any) -> Cells:
    """Group the rows of ``X`` (n x k) by cluster label (``clusters``, one per row) and covariate row.

    Labels and each column's values are hashed (``pandas.factorize``), never sorted, and so are
    the combined keys, save integer ones of a small range (integer labels, such as codes, among
    them), numbered from a table of their first rows (:func:`_first_appearance_codes`: the same
    numbers in far less memory); rows share a
    cell when every value is equal (0.0 and -0.0 alike: the same products and sums). Each cell's
    ``clusters`` entry is its rows' label, so a fit on the cells checks the labels as one on the
    rows would.
    """
    X = np.asarray(X, dtype=float)
    labels = np.asarray(clusters).reshape(-1)
    if X.ndim != 2 or labels.shape != X.shape[:1]:
        raise InputError(
            f"X has shape {X.shape} but there are {labels.size} cluster labels.",
            fix="pass an n x k design and one cluster label per row",
        )
    if labels.dtype.kind in "iu" and labels.size and labels.min() >= 0 and labels.max() < _dense_size(labels.size):
        index = _first_appearance_codes(labels, int(labels.max()) + 1)
    else:
        index = pd.factorize(labels, use_na_sentinel=False)[0]
    n_cells = int(index.max(initial=-1)) + 1
    for column in X.T:
        if np.all(column == column[:1]):  # one value (an intercept): it splits no cell, nothing to hash
            continue
        column_codes, distinct = pd.factorize(column)
        if len(distinct) > 1:
            # renumbered after each column, so the combined key stays below n (no overflow); the
            # numbers stay in order of first appearance, as the cells' are. In place: one array
            # of the rows' length at a time.
            combined = index * len(distinct)
            combined += column_codes
            size = n_cells * len(distinct) + 1  # codes are -1 (NaN) to len - 1: shifted by one
            if size < _dense_size(combined.size):
                combined += 1
                index = _first_appearance_codes(combined, size)
            else:
                index = pd.factorize(combined)[0]
            del combined
            n_cells = int(index.max(initial=-1)) + 1
    first = _first_rows(index, n_cells)  # increasing: the cells are numbered as they first appear
    return Cells(index, X[first], labels[first], np.bincount(index))


def _dense_size(n: int) -> int:
    """The largest range of integer keys :func:`_first_appearance_codes` numbers, for ``n`` keys:
    beyond a quarter of them its table and sort cost more than a hash table."""
    return max(1, n // 4)


def _first_rows(key: np.ndarray, size: int) -> np.ndarray:
    """The first row of each integer key in [0, ``size``) (the number of rows for a key absent),
    by a table of ``size`` entries."""
    n = key.size
    row_type = np.int32 if n < 2**31 else np.int64
    first = np.full(size, n, dtype=row_type)
    np.minimum.at(first, key, np.arange(n, dtype=row_type))
    return first


def _first_appearance_codes(key: np.ndarray, size: int) -> np.ndarray:
    """``pandas.factorize(key)[0]`` for integer keys in [0, ``size``): each key numbered in the
    order of its first appearance, from each key's first row (:func:`_first_rows`) rather than a
    hash table sized by the rows (~50 MB at two million rows)."""
    first = _first_rows(key, size)
    present = np.flatnonzero(first < key.size)
    code = np.empty(size, dtype=np.intp)
    code[present[np.argsort(first[present])]] = np.arange(present.size)
    return code[key]


def cluster_robust_ols_of_cells(
    cells: Cells, y_sums: np.ndarray, rows_fit: Callable[[], ClusterRobustFit], **options: Any
) -> ClusterRobustFit:
    """:func:`honestci.audit.stats.frequentist.cluster_robust.cluster_robust_ols` of the rows from their cells
    (module doc): ``cells`` of the design, ``y_sums`` the outcome summed over each cell's rows,
    ``options`` those of ``cluster_robust_ols``; the fit's ``n`` counts rows.

    ``rows_fit()`` fits the rows themselves where the cells cannot stand in for them: for CR1S,
    whose small-sample factor (n − 1)/(n − k) counts rows; and where the cells' fit is refused (no
    more cells than columns, or cell means fitted exactly: the rows may still vary within cells).
    """
    if options.get("vcov") == "CR1S":
        return rows_fit()
    root = np.sqrt(cells.counts)
    try:
        fit = cluster_robust_ols(cells.X * root[:, None], y_sums / root, cells.clusters, **options)
    except (EstimationError, InputError):
        return rows_fit()  # which raises what the rows raise, if anything
    return replace(fit, n=int(cells.counts.sum()))
