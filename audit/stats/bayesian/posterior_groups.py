"""A fit's draws and data in ArviZ's InferenceData layout, without importing ArviZ.

The collapsed sampler (:mod:`honestci.audit.stats.bayesian.collapsed`) serves fits of thousands of
vignettes in a few seconds, and ``import arviz`` alone costs 3-4 s and ~230 MB. Its result is this
container: named :class:`xarray.Dataset` groups (``posterior``, ``sample_stats``,
``posterior_predictive``, ``log_likelihood``, ``observed_data``, ``constant_data``) read as
attributes or items, as on an ``arviz.InferenceData``. :meth:`PosteriorGroups.to_netcdf` writes
one netCDF4 group per group, the InferenceData file layout, which ``arviz.from_netcdf`` reads
back as an InferenceData (tests/test_bayes_collapsed.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


class PosteriorGroups:
    """Named xarray Datasets in InferenceData's layout (module doc).

    A group may be given *deferred*, as a function of no arguments that returns its Dataset: it
    is built when first read (and kept) or when written (and not kept), so that a fit's large
    per-cell groups take no memory between the fit and the file.
    """

    def __init__(self, **groups: Any) -> None:
        self._groups: dict[str, Any] = dict(groups)

    def __getattr__(self, name: str) -> Any:
        if name in self.__dict__.get("_groups", {}):
            return self[name]
        raise AttributeError(name)

    def __getitem__(self, name: str) -> Any:
        group = self._groups[name]
        if callable(group):  # deferred: built once, on first reading
            group = self._groups[name] = group()
        return group

    def __delitem__(self, name: str) -> None:
        del self._groups[name]

    def __contains__(self, name: object) -> bool:
        return name in self._groups

    def __iter__(self) -> Iterator[str]:
        return iter(self._groups)

    def groups(self) -> list[str]:
        """The group names, in the order they were added."""
        return list(self._groups)

    def add_groups(self, **groups: Any) -> None:
        """Add (or replace) groups: Datasets, or functions that build them (deferred)."""
        self._groups.update(groups)

    def to_netcdf(self, path):
        """Write every group as a netCDF4 group of one file (the InferenceData layout); a deferred
        group not yet read is built for writing only (its memory is freed once written). ``path``
        may be a file-like object (``io.BytesIO``), as for ``xarray.Dataset.to_netcdf``."""
        for position, (name, group) in enumerate(self._groups.items()):
            dataset = group() if callable(group) else group
            dataset.to_netcdf(path, mode="w" if position == 0 else "a", group=name, engine="h5netcdf")
            del dataset  # before the next group is built
        return path

    def __repr__(self) -> str:
        return f"PosteriorGroups({', '.join(self._groups)})"
