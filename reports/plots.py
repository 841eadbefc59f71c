"""Inline SVG plots for the HTML report (matplotlib, Agg; text drawn as paths, so no user text
ever reaches the SVG as markup)."""

from __future__ import annotations

import io


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


def forest_plot(per_vignette: list[dict], pooled: dict | None, bar: float) -> str:
    """Per-vignette win rates with within-vignette intervals, the pooled honest interval and the bar."""
    plt = _pyplot()
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
