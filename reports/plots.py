"""Inline SVG plots for the HTML report and the training-health plot beside it (matplotlib, Agg;
text drawn as paths, so no user text ever reaches the SVG as markup). Each plot takes plain data."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

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


#: Colours of the report's plots: one per population, the bar, the gate's interval.
POPULATION_COLOURS = {
    "iid": "tab:orange",
    "these_vignettes": "tab:green",
    "new_vignettes": "tab:blue",
    "new_seeds": "tab:purple",
}
BAR_COLOUR, GATE_COLOUR, RAW_COLOUR = "tab:red", "black", "0.55"
#: More vignettes than this and the per-vignette plot shows a sample of ranks at a fixed height.
MAX_LABELLED_VIGNETTES = 60
#: How many vignettes (at evenly spaced ranks, the lowest and highest included) a large study shows.
CATERPILLAR_SAMPLE = 200


def intervals_plot(intervals: list[dict], bar: float, gate: dict | None = None) -> str:
    """Every interval side by side, coloured by population, against the bar; the interval the
    gate reads is drawn black and thick and labelled "gate"."""
    plt = _pyplot()
    from matplotlib.lines import Line2D

    figure, axis = plt.subplots(figsize=(8, 0.32 * len(intervals) + 1.6))
    labels = []
    for i, row in enumerate(reversed(intervals)):
        is_gate = row is gate
        colour = GATE_COLOUR if is_gate else POPULATION_COLOURS.get(row["population"], "grey")
        if row.get("ci_low") is not None and row.get("verdict") != "INCONCLUSIVE":
            axis.plot([row["ci_low"], row["ci_high"]], [i, i], color=colour, linewidth=5 if is_gate else 2.5)
        if row.get("estimate") is not None:
            axis.plot([row["estimate"]], [i], "o", color="black" if not is_gate else "white", markersize=3.5, zorder=3)
        labels.append(("▶ gate: " if is_gate else "") + f"{row['label']} · {str(row['population']).replace('_', ' ')}")
    axis.axvline(bar, color=BAR_COLOUR, linestyle="--", linewidth=1.5)
    axis.set_yticks(range(len(intervals)), labels)
    for tick, row in zip(axis.get_yticklabels(), reversed(intervals)):
        if row is gate:
            tick.set_fontweight("bold")
    axis.set_ylim(-0.7, len(intervals) - 0.3)
    axis.set_xlabel("win rate of the policy (contest score: 1 win both orders, ½ split, 0 lose both)")
    axis.set_title("Every interval against the bar", loc="left")
    handles = [
        Line2D([], [], color=POPULATION_COLOURS["iid"], lw=2.5, label="iid (optimistic)"),
        Line2D([], [], color=POPULATION_COLOURS["these_vignettes"], lw=2.5, label="these vignettes"),
        Line2D([], [], color=POPULATION_COLOURS["new_vignettes"], lw=2.5, label="new vignettes"),
        *(
            [Line2D([], [], color=POPULATION_COLOURS["new_seeds"], lw=2.5, label="a new seed (recipe)")]
            if any(row["population"] == "new_seeds" for row in intervals)
            else []
        ),
        Line2D([], [], color=GATE_COLOUR, lw=5, label="the gate's interval"),
        Line2D([], [], color=BAR_COLOUR, ls="--", label=f"bar {bar:.3f}"),
    ]
    axis.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.12 - 0.6 / len(intervals)),
        ncol=5,
        fontsize=8,
        frameon=False,
    )
    return _svg(figure)


def vignette_plot(per_vignette: list[dict], gate: dict | None, bar: float) -> str:
    """Per-vignette win rates as a caterpillar plot sorted by rate: the raw rate with its
    within-vignette interval (grey) and, when the report has them, the partially pooled rate and
    interval (blue; the shrinkage is the grey-to-blue step); the gate's interval as a band and the
    bar as a line. Up to :data:`MAX_LABELLED_VIGNETTES` vignettes each get a labelled row; beyond
    that the plot keeps a fixed height and shows :data:`CATERPILLAR_SAMPLE` vignettes at evenly
    spaced ranks (x: rank), so 1,000 vignettes draw as fast and as small as 200."""
    plt = _pyplot()
    pooled = all(v.get("pooled") is not None for v in per_vignette) and bool(per_vignette)
    key = "pooled" if pooled else "estimate"
    rows = sorted(per_vignette, key=lambda v: (v[key], str(v["vignette_id"])))
    many = len(rows) > MAX_LABELLED_VIGNETTES
    if many:
        picks = np.unique(np.round(np.linspace(0, len(rows) - 1, CATERPILLAR_SAMPLE)).astype(int))
        return _ranked_caterpillar([rows[i] for i in picks], picks, len(rows), gate, bar, pooled)
    figure, axis = plt.subplots(figsize=(7, 0.32 * len(rows) + 1.8))
    y = np.arange(len(rows), dtype=float)
    offset = 0.17 if pooled else 0.0
    for i, row in enumerate(rows):
        axis.plot([row["ci_low"], row["ci_high"]], [i + offset] * 2, color=RAW_COLOUR, linewidth=1.5)
        if pooled:
            axis.plot([row["pooled_low"], row["pooled_high"]], [i - offset] * 2, color="tab:blue", linewidth=2)
            axis.annotate(
                "",
                xy=(row["pooled"], i - offset),
                xytext=(row["estimate"], i + offset),
                arrowprops={"arrowstyle": "->", "color": "tab:blue", "lw": 0.8, "shrinkA": 0, "shrinkB": 2},
            )
    axis.plot([r["estimate"] for r in rows], y + offset, "o", color=RAW_COLOUR, markersize=4, label="raw vignette mean")
    if pooled:
        axis.plot(
            [r["pooled"] for r in rows],
            y - offset,
            "o",
            color="tab:blue",
            markersize=4,
            label="partially pooled (model the gate reads)",
        )
    _gate_and_bar(axis, gate, bar, vertical=True)
    axis.set_yticks(y, [str(r["vignette_id"]) for r in rows])
    axis.set_ylim(-0.8, len(rows) - 0.2)
    axis.set_xlim(0, 1)
    axis.set_xlabel("win rate of the policy on the vignette")
    axis.set_ylabel("vignette (sorted by rate)")
    axis.set_title(f"Per-vignette win rates, {len(rows)} vignettes", loc="left")
    axis.legend(
        loc="upper center", bbox_to_anchor=(0.5, -0.5 / max(3, len(rows)) - 0.14), ncol=2, fontsize=8, frameon=False
    )
    return _svg(figure)


def _ranked_caterpillar(rows, ranks, total: int, gate: dict | None, bar: float, pooled: bool) -> str:
    plt = _pyplot()
    from matplotlib.collections import LineCollection

    figure, axis = plt.subplots(figsize=(8, 4.2))
    x = ranks / max(1, total - 1)
    key_low, key_high, key = ("pooled_low", "pooled_high", "pooled") if pooled else ("ci_low", "ci_high", "estimate")
    segments = [[(xi, r[key_low]), (xi, r[key_high])] for xi, r in zip(x, rows) if r.get(key_low) is not None]
    axis.add_collection(
        LineCollection(segments, colors="tab:blue" if pooled else RAW_COLOUR, linewidths=0.8, alpha=0.6)
    )
    axis.plot(
        x,
        [r[key] for r in rows],
        "o",
        color="tab:blue" if pooled else "black",
        markersize=2,
        label="partially pooled rate and interval" if pooled else "vignette mean and within-vignette interval",
    )
    if pooled:
        axis.plot(x, [r["estimate"] for r in rows], ".", color=RAW_COLOUR, markersize=2.5, label="raw vignette mean")
    _gate_and_bar(axis, gate, bar, vertical=False)
    axis.set_xlim(-0.01, 1.01)
    axis.set_ylim(0, 1)
    axis.set_xlabel(f"vignette rank, lowest to highest (share of {total}; {len(rows)} evenly spaced ranks shown)")
    axis.set_ylabel("win rate of the policy on the vignette")
    axis.set_title(f"Per-vignette win rates, {total} vignettes (caterpillar)", loc="left")
    axis.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, fontsize=8, frameon=False, markerscale=3)
    return _svg(figure)


def _gate_and_bar(axis, gate: dict | None, bar: float, vertical: bool) -> None:
    """The gate's interval as a shaded band and the bar as a dashed line, both in the legend."""
    span, line = (axis.axvspan, axis.axvline) if vertical else (axis.axhspan, axis.axhline)
    if gate is not None and gate.get("ci_low") is not None:
        span(
            gate["ci_low"],
            gate["ci_high"],
            color="0.85",
            zorder=0,
            label=f"gate interval {gate['ci_low']:.3f}–{gate['ci_high']:.3f} (all vignettes)",
        )
    line(bar, color=BAR_COLOUR, linestyle="--", linewidth=1.5, label=f"bar {bar:.3f}")


#: Steps of equal posterior mass in the posterior plot's density (5% each).
POSTERIOR_PLOT_BINS = 20


def posterior_plot(quantiles: list[float], bar: float, population: str) -> str:
    """The posterior of the claim's win rate against the bar, from its quantiles q_0, q_0.01, ...,
    q_1: the density as :data:`POSTERIOR_PLOT_BINS` steps of equal mass between quantiles, the
    median and the equal-tailed 95% interval marked, and the posterior mass on each side of the bar."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(7, 2.8))
    values = np.asarray(quantiles, dtype=float)
    probabilities = np.linspace(0.0, 1.0, values.size)
    # Equal quantiles (a point mass, or rounding) merge: the step to the next value carries the
    # probability of all of them.
    step = max(1, (values.size - 1) // POSTERIOR_PLOT_BINS)
    grid_values, grid_probabilities = values[::step], probabilities[::step]
    distinct, first = np.unique(grid_values, return_index=True)
    through = grid_probabilities[np.r_[first[1:] - 1, grid_values.size - 1]]
    if distinct.size >= 2:
        axis.stairs(np.diff(through) / np.diff(distinct), distinct, fill=True, color="tab:blue", alpha=0.35)
    low, median, high = np.interp([0.025, 0.5, 0.975], probabilities, values)
    axis.axvline(median, color="tab:blue", linewidth=1.5, label=f"median {median:.3f}")
    axis.axvspan(low, high, color="tab:blue", alpha=0.08, label=f"95% interval [{low:.3f}, {high:.3f}]")
    below = float(np.interp(bar, values, probabilities)) if values[0] < bar else 0.0
    axis.axvline(
        bar,
        color=BAR_COLOUR,
        linestyle="--",
        linewidth=1.5,
        label=f"bar {bar:.3f}: {below:.1%} below, {1 - below:.1%} above",
    )
    axis.legend(fontsize=8, loc="upper left")
    axis.set_title(
        f"Posterior of the win rate, {population.replace('_', ' ')}, against the bar {bar:.3f}", loc="left", fontsize=10
    )
    axis.set_xlabel("win rate of the policy")
    axis.set_ylabel("posterior density")
    axis.set_yticks([])
    return _svg(figure)


def ppc_plot(ppc: Mapping) -> str:
    """The posterior predictive check as the gate read it: every group's observed win share against
    its posterior predictive interval, sorted by the predicted share, the groups the check flags in
    red. Up to :data:`MAX_LABELLED_VIGNETTES` groups each get a labelled row; beyond that the plot
    keeps a fixed height and shows :data:`CATERPILLAR_SAMPLE` evenly spaced ranks plus every
    flagged group (x: rank).

    ``ppc`` is the report's ``bayes.ppc``: ``alpha``, ``level`` and ``groups``, the rows of
    :meth:`honestci.audit.stats.bayesian.predictive.PosteriorPredictiveCheck.to_frame`.
    """
    plt = _pyplot()
    from matplotlib.collections import LineCollection

    rows = sorted(ppc["groups"], key=lambda g: (g["predicted_mean"], str(g["vignette"])))
    runs, judges = len({g["run"] for g in rows}) > 1, len({g["judge"] for g in rows}) > 1
    level = f"{100 * ppc['level']:g}%"
    flagged_label = f"observed, flagged (p < {ppc['alpha']:g}/{len(rows)})"
    many = len(rows) > MAX_LABELLED_VIGNETTES
    if many:
        picks = set(np.round(np.linspace(0, len(rows) - 1, CATERPILLAR_SAMPLE)).astype(int).tolist())
        flagged_at = [i for i, g in enumerate(rows) if g["flagged"]]
        # Every flagged group, up to as many again as the sample: the plot's size stays bounded.
        picks |= (
            {flagged_at[k] for k in np.unique(np.linspace(0, len(flagged_at) - 1, CATERPILLAR_SAMPLE).astype(int))}
            if flagged_at
            else set()
        )
        shown = sorted(picks)
        figure, axis = plt.subplots(figsize=(8, 4.2))
        position = np.asarray(shown, dtype=float) / max(1, len(rows) - 1)
    else:
        shown = list(range(len(rows)))
        figure, axis = plt.subplots(figsize=(7, 0.3 * len(rows) + 1.8))
        position = np.arange(len(rows), dtype=float)
    groups = [rows[i] for i in shown]
    segments = [
        [(p, g["predicted_lower"]), (p, g["predicted_upper"])]
        if many
        else [(g["predicted_lower"], p), (g["predicted_upper"], p)]
        for p, g in zip(position, groups)
    ]
    axis.add_collection(LineCollection(segments, colors="tab:blue", linewidths=1.0 if many else 2.0, alpha=0.7))
    axis.plot([], [], color="tab:blue", lw=2, label=f"{level} posterior predictive interval of the share")
    for flagged, colour, marker, label in (
        (False, "black", "o", "observed share"),
        (True, "tab:red", "X", flagged_label),
    ):
        at = [(p, g["observed_share"]) for p, g in zip(position, groups) if bool(g["flagged"]) == flagged]
        if at or not flagged:
            x, y = zip(*at) if at else ((), ())
            axis.plot(
                *((x, y) if many else (y, x)),
                marker,
                color=colour,
                markersize=(4 if flagged else 2.5) if many else 4.5,
                label=label,
            )
    if many:
        axis.set_xlim(-0.01, 1.01)
        axis.set_ylim(0, 1)
        axis.set_xlabel(f"group rank by predicted share, lowest to highest (share of {len(rows)}; {len(groups)} shown)")
        axis.set_ylabel("win share of the group")
    else:
        axis.set_yticks(
            position,
            ["/".join([str(g["vignette"])] + [str(g["run"])] * runs + [str(g["judge"])] * judges) for g in groups],
        )
        axis.set_ylim(-0.8, len(rows) - 0.2)
        axis.set_xlim(0, 1)
        axis.set_xlabel("win share of the group (its mean contest score)")
        axis.set_ylabel("group (sorted by predicted share)")
    n_flagged = sum(bool(g["flagged"]) for g in rows)
    axis.set_title(f"Posterior predictive check, {len(rows)} groups: {n_flagged} flagged", loc="left", fontsize=10)
    axis.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.16 if many else -0.65 / (0.3 * len(rows) + 0.3)),
        ncol=2,
        fontsize=8,
        frameon=False,
    )
    return _svg(figure)


#: Parameters of the rank plots: the hierarchical model's population-level ones, never per vignette.
RANK_PLOT_VARIABLES = (
    ("mu", "mu: mean logit win rate over vignettes"),
    ("sigma", "sigma: between-vignette sd (logit)"),
)


#: Bins of each chain's rank histogram.
RANK_PLOT_BINS = 20


def rank_plot(posterior: Any) -> str:
    """Rank plots of ``mu`` and ``sigma`` (Vehtari et al. 2021, "Rank-normalization, folding,
    and localization", Bayesian Analysis 16(2)): each chain's histogram of its draws' ranks among
    all chains (:data:`RANK_PLOT_BINS` bins), one row per chain; chains that mix draw flat, alike
    histograms around the dashed line of the count a uniform rank gives. ``posterior`` is the
    fit's InferenceData (or :class:`~honestci.audit.stats.bayesian.posterior_groups.PosteriorGroups`)."""
    from scipy.stats import rankdata

    plt = _pyplot()
    figure, axes = plt.subplots(1, len(RANK_PLOT_VARIABLES), figsize=(8, 2.9))
    chains = posterior.posterior.sizes["chain"]
    for axis, (name, title) in zip(axes, RANK_PLOT_VARIABLES):
        draws = np.asarray(posterior.posterior[name].values, dtype=float)
        ranks = rankdata(draws.ravel(), method="average").reshape(draws.shape)
        edges = np.linspace(0.5, draws.size + 0.5, RANK_PLOT_BINS + 1)
        expected = draws.shape[1] / RANK_PLOT_BINS
        for chain in range(chains):
            counts, _ = np.histogram(ranks[chain], bins=edges)
            base = chain * 2.0 * expected
            axis.bar(edges[:-1], counts, width=np.diff(edges), bottom=base, align="edge", color=f"C{chain}", alpha=0.8)
            axis.axhline(base + expected, color="0.3", linestyle="--", linewidth=0.8)
        axis.set_yticks([chain * 2.0 * expected + expected for chain in range(chains)], [str(c) for c in range(chains)])
        axis.set_title(title, fontsize=9)
        axis.set_xlabel("rank of the draw among all chains", fontsize=8)
        axis.set_ylabel("chain", fontsize=8)
        axis.tick_params(labelsize=7)
    figure.suptitle(f"Rank plots: chain mixing ({chains} chains)", x=0.02, ha="left", fontsize=10)
    figure.tight_layout()
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
