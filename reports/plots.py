"""Inline SVG plots for the HTML report and the training-health plot beside it (matplotlib, Agg;
text drawn as paths, so no user text ever reaches the SVG as markup). Each plot takes plain data."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence

import numpy as np


def _svg(figure) -> str:
    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog and DOCTYPE (an external DTD reference)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "path"
    matplotlib.rcParams["svg.hashsalt"] = "honestci"  # deterministic element ids
    # Labels are data (vignette ids, system names): a `$` in them is text, never mathtext.
    matplotlib.rcParams["text.parse_math"] = False
    import matplotlib.pyplot as plt

    return plt


#: Above this many vignettes the forest plot draws them unlabelled (:func:`_dense_forest_plot`).
FOREST_MAX_ROWS = 60


def forest_plot(per_vignette: list[dict], pooled: dict | None, bar: float) -> str:
    """Per-vignette win rates with within-vignette intervals, the pooled honest interval and the bar."""
    plt = _pyplot()
    if len(per_vignette) > FOREST_MAX_ROWS:
        return _dense_forest_plot(plt, per_vignette, pooled, bar)
    rows = list(per_vignette) + ([{"vignette_id": f"pooled ({pooled['method']})", **pooled}] if pooled else [])
    figure, axis = plt.subplots(figsize=(6, 0.45 * len(rows) + 1))
    for i, row in enumerate(reversed(rows)):
        if row.get("ci_low") is not None:
            axis.plot([row["ci_low"], row["ci_high"]], [i, i], color="black" if i == 0 and pooled else "tab:blue")
        axis.plot([row["estimate"]], [i], "s" if i == 0 and pooled else "o", color="black")
    axis.axvline(bar, color="tab:red", linestyle="--", label=f"bar {bar:.3f}")
    axis.set_yticks(range(len(rows)), [str(r["vignette_id"]) for r in reversed(rows)])
    axis.set_xlabel("win rate")
    axis.set_xlim(0, 1)
    axis.legend(loc="lower left")
    return _svg(figure)


def _dense_forest_plot(plt, per_vignette: list[dict], pooled: dict | None, bar: float) -> str:
    """Many vignettes (AlpacaEval's 805): one row each, drawn as two collections and unlabelled
    (hundreds of labels drawn as paths took ~15 s and could not be read), sorted by estimate."""
    rows = sorted(per_vignette, key=lambda r: r["estimate"])
    y = np.arange(len(rows), dtype=float) + (1 if pooled else 0)
    figure, axis = plt.subplots(figsize=(6, 0.45 * FOREST_MAX_ROWS + 1))
    bounded = [(i, r) for i, r in zip(y, rows) if r.get("ci_low") is not None]
    axis.hlines(
        [i for i, _ in bounded],
        [r["ci_low"] for _, r in bounded],
        [r["ci_high"] for _, r in bounded],
        color="tab:blue",
        linewidth=0.5,
    )
    axis.plot([r["estimate"] for r in rows], y, "o", color="black", markersize=1)
    ticks, labels = [float(len(rows) / 2 + (1 if pooled else 0))], [f"{len(rows)} vignettes, by estimate"]
    if pooled:
        if pooled.get("ci_low") is not None:
            axis.plot([pooled["ci_low"], pooled["ci_high"]], [0, 0], color="black")
        axis.plot([pooled["estimate"]], [0], "s", color="black")
        ticks, labels = [0.0, *ticks], [f"pooled ({pooled['method']})", *labels]
    axis.axvline(bar, color="tab:red", linestyle="--", label=f"bar {bar:.3f}")
    axis.set_yticks(ticks, labels)
    axis.set_xlabel("win rate")
    axis.set_xlim(0, 1)
    axis.legend(loc="lower left")
    return _svg(figure)


def intervals_plot(intervals: list[dict], bar: float) -> str:
    """Every interval side by side: naive (iid) against honest (clustered, Bayesian)."""
    plt = _pyplot()
    colours = {"iid": "tab:orange", "these_vignettes": "tab:green", "new_vignettes": "tab:blue"}
    figure, axis = plt.subplots(figsize=(7, 0.4 * len(intervals) + 1))
    for i, row in enumerate(reversed(intervals)):
        colour = colours.get(row["population"], "grey")
        if row.get("ci_low") is not None and row.get("verdict") != "INCONCLUSIVE":
            axis.plot([row["ci_low"], row["ci_high"]], [i, i], color=colour, linewidth=3)
        if row.get("estimate") is not None:
            axis.plot([row["estimate"]], [i], "o", color="black", markersize=3)
    axis.axvline(bar, color="tab:red", linestyle="--")
    axis.set_yticks(range(len(intervals)), [f"{r['label']} · {r['population']}" for r in reversed(intervals)])
    axis.set_xlabel("win rate (orange: iid, green: these vignettes, blue: new vignettes; red: bar)")
    return _svg(figure)


def posterior_plot(quantiles: list[float], bar: float, population: str) -> str:
    """The posterior of the claim's win rate (from its quantiles) against the bar."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(6, 2.5))
    axis.hist(quantiles, bins=30, density=True, color="tab:blue", alpha=0.7)
    axis.axvline(bar, color="tab:red", linestyle="--", label=f"bar {bar:.3f}")
    axis.set_xlabel(f"win rate, {population.replace('_', ' ')} (posterior)")
    axis.set_yticks([])
    axis.legend()
    return _svg(figure)


#: Panels of the training-health plot: (series, title); the reward panel shades ± ``reward_std``.
TRAINING_PANELS = (
    ("reward", "reward (± group sd)"),
    ("kl", "KL to reference"),
    ("entropy", "entropy (nats/token)"),
    ("reward_std", "within-group reward sd"),
)


def plot_training_health(
    steps: Sequence[float],
    series: Mapping[str, Sequence[float]],
    window: int,
    verdict: str,
    limits: Mapping[str, float] | None = None,
):
    """A matplotlib figure of a training run's health: reward (± within-group sd), KL, entropy and
    within-group reward sd per logged step.

    Parameters
    ----------
    steps
        The logged steps (x axis).
    series
        Values per step by name (``reward``, ``kl``, ``entropy``, ``reward_std``); a name that is
        absent is drawn as "not logged".
    window
        Logged steps in the first and in the last window the health criteria compare (dotted lines).
    verdict
        The training-health verdict, shown in the title.
    limits
        Threshold per series name, drawn as a dashed red line (e.g. the largest KL allowed).

    Returns
    -------
    matplotlib.figure.Figure
        Four panels, in the order of :data:`TRAINING_PANELS`.
    """
    plt = _pyplot()
    limits = limits or {}
    figure, axes = plt.subplots(2, 2, figsize=(9, 6), sharex=True)
    x = np.asarray(steps, dtype=float)
    for axis, (name, title) in zip(axes.flat, TRAINING_PANELS):
        axis.set_title(title)
        values = np.asarray(series.get(name, ()), dtype=float)
        if values.size == 0:
            axis.text(0.5, 0.5, "not logged", ha="center", va="center", transform=axis.transAxes)
            continue
        axis.plot(x, values, color="tab:blue")
        if name == "reward" and "reward_std" in series:
            spread = np.asarray(series["reward_std"], dtype=float)
            axis.fill_between(x, values - spread, values + spread, color="tab:blue", alpha=0.2)
        if name in limits:
            axis.axhline(limits[name], color="tab:red", linestyle="--")
        for edge in (x[min(window, len(x)) - 1], x[-window]):
            axis.axvline(edge, color="grey", linestyle=":")
    for axis in axes[1]:
        axis.set_xlabel("step")
    figure.suptitle(f"training health: {verdict}")
    figure.tight_layout()
    return figure


def training_health_svg(
    steps: Sequence[float],
    series: Mapping[str, Sequence[float]],
    window: int,
    verdict: str,
    limits: Mapping[str, float] | None = None,
) -> str:
    """The plot of :func:`plot_training_health` (same arguments) as inline SVG."""
    return _svg(plot_training_health(steps, series, window, verdict, limits))
