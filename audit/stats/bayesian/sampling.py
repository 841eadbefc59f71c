"""Sampling a Bayesian model's posterior, its convergence diagnostics and its posterior summaries.

The machinery every Bayesian fit of the package shares (the hierarchical win rate of
:mod:`honestci.audit.stats.bayesian.hierarchical`, the comparison of two systems of
:mod:`honestci.audit.stats.bayesian.compare`, the conjugate check of
:mod:`honestci.audit.stats.bayesian.pooled`): :func:`sample_posterior` runs nutpie on a model's
hand-derived density (:mod:`honestci.audit.stats.bayesian.density`) or PyMC's NUTS on its PyMC
definition, reporting progress; :func:`diagnose_sampler` holds R-hat, ESS and divergences against
the thresholds; :func:`summarise_draws` summarises draws.

Heavy libraries (pymc, arviz, nutpie) are imported inside the functions that use them.
"""

from __future__ import annotations

import logging
import math
import os
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from honestci.audit.errors import DensityMismatchError, InputError, check_level
from honestci.audit.policy import Thresholds
from honestci.audit.progress import Meter, Progress, ProgressLike, as_progress

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


#: NUTS target acceptance 0.95 rather than 0.8: in 20 seeded fixture-like fits (6 vignettes x
#: 240 verdicts, 4 x 1000 + 1000, hierarchically centred) 0.9 left 5 with divergences and 0.95
#: left 3, all but one of which the automatic non-centred refit fixed.
TARGET_ACCEPT = 0.95


def _quiet_imports() -> None:
    """Import arviz once with its refactor FutureWarning silenced (it says nothing about our use)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import arviz  # noqa: F401


#: The samplers of :func:`sample_posterior` (NUTS), and the ``sampler`` choices of the fits
#: (:func:`~honestci.audit.stats.bayesian.hierarchical.fit_winrate_hierarchical`), which add the collapsed sampler.
NUTS_SAMPLERS = ("auto", "nutpie", "pymc")
SAMPLERS = (*NUTS_SAMPLERS, "collapsed")


#: Seconds between two reads of nutpie's trace in a log (the meter throttles the lines it writes).
_NUTPIE_POLL_S = 1.0


def _sample_nutpie(density, chains, draws, tune, seed, progress: Progress, label: str):
    import nutpie

    meter = None if progress.live else progress.meter(chains * (tune + draws), f"{label} with nutpie", "draws")
    settings: dict[str, Any] = {
        "draws": draws,
        "tune": tune,
        "chains": chains,
        "cores": min(chains, os.cpu_count() or 1),
        "seed": seed,
        "progress_bar": progress.live,
        "target_accept": TARGET_ACCEPT,
    }
    if meter is None or not meter.active:  # a terminal (nutpie's own bar) or --quiet
        return density.named(nutpie.sample(density.model, save_warmup=False, **settings))
    # The warm-up is kept so that the trace read while sampling counts tuning draws too; its
    # groups are dropped below, which leaves what save_warmup=False returns.
    running = nutpie.sample(density.model, save_warmup=True, blocking=False, **settings)
    idata = _wait_metering_nutpie(running, meter, chains)
    for group in ("warmup_posterior", "warmup_sample_stats"):
        if group in idata.groups():
            del idata[group]
    idata = density.named(idata)
    meter.update(chains * (tune + draws))
    meter.close(chains="/".join([str(tune + draws)] * chains), divergences=int(idata.sample_stats["diverging"].sum()))
    return idata


def _wait_metering_nutpie(running: Any, meter: Meter, chains: int) -> Any:
    """Wait for nutpie's non-blocking sampler, feeding ``meter`` each chain's draws so far.

    nutpie (0.16) hands its per-chain progress (draws, divergences) only to its terminal bar and,
    through the private ``_lib.ProgressType.template_callback``, to notebooks. Its public
    non-blocking sampler offers ``wait(timeout=...)`` (``TimeoutError`` while running) and
    ``inspect()``, an InferenceData copy of the trace so far: each chain's draws are counted there.
    Reading the trace does not touch the chains' random streams, so the draws are the blocking
    call's. Any exception (Ctrl-C included) cancels the sampler and is raised.
    """
    try:
        while True:
            try:
                return running.wait(timeout=_NUTPIE_POLL_S)
            except TimeoutError:
                pass
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)  # arviz: "more chains than draws"
                    trace = running.inspect()
            except Exception:  # a chain finishing under the read; wait() reports real errors
                continue
            counts = np.zeros(chains, dtype=np.int64)
            for group in ("warmup_sample_stats", "sample_stats"):
                if group in trace.groups():
                    # nutpie pads each chain's float stats with NaN past the draws it has made
                    counts += np.isfinite(trace[group]["step_size"].values).sum(axis=1)
            meter.update(
                int(counts.sum()),
                chains="/".join(str(count) for count in counts),
                divergences=int(trace.sample_stats["diverging"].values.sum())
                if "sample_stats" in trace.groups()
                else 0,
            )
    except BaseException:
        running.cancel()
        raise


def _sample_pymc(build_model, chains, draws, tune, seed, progress: Progress, label: str):
    import pymc as pm

    meter = None if progress.live else progress.meter(chains * (tune + draws), f"{label} with PyMC", "draws")
    per_chain: dict[int, int] = {}

    def count_draw(trace, draw) -> None:
        # PyMC calls this in the main process after every draw (warm-up included) of every chain
        per_chain[draw.chain] = per_chain.get(draw.chain, 0) + 1
        counts = "/".join(str(per_chain[c]) for c in sorted(per_chain))
        if meter is not None:
            meter.update(sum(per_chain.values()), chains=counts)

    pymc_logger = logging.getLogger("pymc")
    previous_level = pymc_logger.level
    pymc_logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            idata = pm.sample(
                draws=draws,
                tune=tune,
                chains=chains,
                cores=min(chains, os.cpu_count() or 1),
                random_seed=seed,
                target_accept=TARGET_ACCEPT,
                progressbar=progress.live,
                compute_convergence_checks=False,
                model=build_model(),
                callback=None if meter is None else count_draw,
            )
    finally:
        pymc_logger.setLevel(previous_level)
    if meter is not None:
        meter.close(divergences=int(idata.sample_stats["diverging"].sum()))
    return idata


class DensityMismatchWarning(UserWarning):
    """``sampler="auto"`` refused the hand-derived density
    (:class:`~honestci.audit.errors.DensityMismatchError`) and sampled the PyMC model with PyMC's
    NUTS instead."""


#: The fast path's own dependencies: only their absence sends ``sampler="auto"`` to PyMC.
_FAST_PATH_MODULES = ("nutpie", "numba")


def sample_posterior(
    build_model, density_model, sampler, chains, draws, tune, seed, progress: ProgressLike, label: str = "sampling"
):
    """Run the requested sampler; ``auto`` is nutpie on the hand-derived density, or PyMC's NUTS.

    nutpie samples ``density_model()``: the model's posterior with a hand-written compiled log
    density (:mod:`honestci.audit.stats.bayesian.density`), which refuses itself
    (:class:`~honestci.audit.errors.DensityMismatchError`) when ``build_model``'s PyMC definition has
    changed since the density was derived. PyMC's NUTS samples ``build_model()`` itself.

    ``auto`` falls back to PyMC in two cases, and says which in the returned note: nutpie or numba
    is not installed (an ImportError of those modules), or the density refused itself (also warned,
    :class:`DensityMismatchWarning`). No failure while nutpie samples falls back: nutpie reports a
    faulty kernel, a shape error and an unusable initial point alike as ``RuntimeError`` (or a Rust
    panic), and for each of them the fix is in the code or the data, not in another sampler.
    ``nutpie`` raises where ``auto`` would fall back.

    ``progress`` (:func:`honestci.audit.progress.as_progress`): on a terminal the sampler's own
    bar; in a log, lines headed ``label`` with draws done of ``chains * (tune + draws)``, rate and
    ETA and each chain's draws (PyMC: counted per draw; nutpie: read from its trace every
    ``_NUTPIE_POLL_S`` seconds while it samples in the background), and the divergences after
    warm-up (PyMC: in the final line; nutpie: in every line).

    Returns (idata, sampler_used, note).
    """
    _quiet_imports()
    progress = as_progress(progress)
    if sampler not in NUTS_SAMPLERS:
        raise InputError(f"Unknown sampler {sampler!r}.", fix=f"Use one of {NUTS_SAMPLERS}.")
    if sampler == "pymc":
        return _sample_pymc(build_model, chains, draws, tune, seed, progress, label), "pymc", ""
    if sampler == "nutpie":
        return _sample_nutpie(density_model(), chains, draws, tune, seed, progress, label), "nutpie", ""
    try:
        model = density_model()
    except ImportError as error:
        if (error.name or "").partition(".")[0] not in _FAST_PATH_MODULES:
            raise
        note = f"{error.name} could not be imported ({error}); PyMC's NUTS sampled the PyMC model"
    except DensityMismatchError as error:
        note = f"PyMC's NUTS sampled the PyMC model because the hand-derived density refused itself: {error.message}"
        warnings.warn(
            f"{error.message} sampler='auto' samples the PyMC model with PyMC's NUTS instead (slower). {error.fix}",
            DensityMismatchWarning,
            stacklevel=2,
        )
    else:
        return _sample_nutpie(model, chains, draws, tune, seed, progress, label), "nutpie", ""
    return _sample_pymc(build_model, chains, draws, tune, seed, progress, label), "pymc", note


def resolve_seed(seed: int | np.random.Generator) -> int:
    if isinstance(seed, np.random.Generator):
        return int(seed.integers(0, 2**31 - 1))
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and seed >= 0:
        return int(seed)
    raise InputError(
        f"seed {seed!r} is neither a non-negative int nor a numpy Generator.",
        fix="Pass an int seed or numpy.random.default_rng(seed).",
    )


def check_sampling_sizes(chains: int, draws: int, tune: int, level: float) -> None:
    if chains < 2:
        raise InputError("R-hat needs at least two chains.", fix="Use chains >= 2 (4 recommended).")
    if draws < 1 or tune < 0:
        raise InputError(f"draws={draws}, tune={tune} are not valid.", fix="Use draws >= 1 and tune >= 0.")
    check_level(level)


@dataclass(frozen=True)
class SamplerDiagnostics:
    """Convergence diagnostics of one fit (rank-normalised split R-hat, bulk/tail ESS; ArviZ)."""

    rhat_max: float
    ess_bulk_min: float
    ess_tail_min: float
    divergences: int
    worst_rhat_variable: str
    chains: int
    draws: int
    tune: int
    converged: bool
    problems: tuple[str, ...]

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "rhat_max": self.rhat_max,
                    "ess_bulk_min": self.ess_bulk_min,
                    "ess_tail_min": self.ess_tail_min,
                    "divergences": self.divergences,
                    "worst_rhat_variable": self.worst_rhat_variable,
                    "chains": self.chains,
                    "draws": self.draws,
                    "tune": self.tune,
                    "converged": self.converged,
                }
            ]
        )


def diagnose_sampler(
    idata, var_names: list[str], chains: int, draws: int, tune: int, thresholds: Thresholds
) -> SamplerDiagnostics:
    """R-hat (rank-normalised, split), bulk and tail ESS of ``var_names`` and the divergences,
    against the thresholds (:mod:`honestci.audit.stats.bayesian.mcmc_diagnostics`: ArviZ's algorithms)."""
    from honestci.audit.stats.bayesian.mcmc_diagnostics import ess_bulk, ess_tail, rhat_rank

    values = {name: np.asarray(idata.posterior[name].values, dtype=float) for name in var_names}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # constant chains in tiny runs
        rhat = {name: rhat_rank(draws_) for name, draws_ in values.items()}
        ess_bulk_values = {name: ess_bulk(draws_) for name, draws_ in values.items()}
        ess_tail_values = {name: ess_tail(draws_) for name, draws_ in values.items()}

    def extreme(dataset, pick_max: bool) -> tuple[float, str]:
        best_value, best_name = (-math.inf if pick_max else math.inf), ""
        for name in var_names:
            found = np.asarray(dataset[name], dtype=float).ravel()
            if np.any(~np.isfinite(found)):  # undefined diagnostics count as failing
                return (math.inf if pick_max else 0.0), name
            value = found.max() if pick_max else found.min()
            if (value > best_value) if pick_max else (value < best_value):
                best_value, best_name = float(value), name
        return best_value, best_name

    rhat_max, worst_name = extreme(rhat, True)
    ess_bulk_min, _ = extreme(ess_bulk_values, False)
    ess_tail_min, _ = extreme(ess_tail_values, False)
    divergences = int(np.asarray(idata.sample_stats["diverging"].values).sum())
    problems = []
    if not rhat_max <= thresholds.rhat_max:
        problems.append(f"R-hat {rhat_max:.3f} > {thresholds.rhat_max} (worst: {worst_name})")
    if not ess_bulk_min >= thresholds.ess_bulk_min:
        problems.append(f"bulk ESS {ess_bulk_min:.0f} < {thresholds.ess_bulk_min:g}")
    if not ess_tail_min >= thresholds.ess_tail_min:
        problems.append(f"tail ESS {ess_tail_min:.0f} < {thresholds.ess_tail_min:g}")
    if divergences > thresholds.divergences_max:
        problems.append(f"{divergences} divergent transition(s) > {thresholds.divergences_max}")
    return SamplerDiagnostics(
        rhat_max=rhat_max,
        ess_bulk_min=ess_bulk_min,
        ess_tail_min=ess_tail_min,
        divergences=divergences,
        worst_rhat_variable=worst_name,
        chains=chains,
        draws=draws,
        tune=tune,
        converged=not problems,
        problems=tuple(problems),
    )


@dataclass(frozen=True)
class PosteriorSummary:
    """Posterior mean, median, equal-tailed interval and, for win rates, P(estimand > bar)."""

    mean: float
    median: float
    lower: float
    upper: float
    level: float
    p_above_bar: float | None = None


def summarise_draws(draws: np.ndarray, level: float, bar: float | None = None) -> PosteriorSummary:
    """Summary of posterior draws: mean, median, equal-tailed ``level`` interval, P(draw > bar)."""
    values = np.asarray(draws, dtype=float).ravel()
    tail = (1.0 - level) / 2.0
    lower, median, upper = np.quantile(values, [tail, 0.5, 1.0 - tail])
    return PosteriorSummary(
        mean=float(values.mean()),
        median=float(median),
        lower=float(lower),
        upper=float(upper),
        level=level,
        p_above_bar=None if bar is None else float(np.mean(values > bar)),
    )


def stacked_draws(idata, name: str, thin: int = 1) -> np.ndarray:
    """Draws of ``name`` as (S, ...) with chains stacked (every ``thin``-th draw of each chain)."""
    values = np.asarray(idata.posterior[name].values[:, ::thin], dtype=float)
    return values.reshape((values.shape[0] * values.shape[1],) + values.shape[2:])


__all__ = [
    "NUTS_SAMPLERS",
    "SAMPLERS",
    "TARGET_ACCEPT",
    "DensityMismatchWarning",
    "PosteriorSummary",
    "SamplerDiagnostics",
    "check_sampling_sizes",
    "diagnose_sampler",
    "resolve_seed",
    "sample_posterior",
    "stacked_draws",
    "summarise_draws",
]
