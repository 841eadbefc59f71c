"""The honest-CI report as one self-contained HTML file (inline SVG plots, no external request;
every piece of user or model text is escaped by Jinja2's autoescape)."""

from __future__ import annotations

import html

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from honestci.audit.report_model import POPULATION_LABELS, Report
from honestci.reports import plots
from honestci.reports.markdown import (
    claimed_section,
    fmt,
    gate_interval,
    interval_text,
    model_card_section,
    policy_lines,
)


def render_html(report: Report) -> str:
    data = report.data
    env = Environment(
        loader=PackageLoader("honestci.reports", "templates"), autoescape=select_autoescape(["html", "j2"])
    )
    claim = data["claim"]
    honest = gate_interval(data)
    pooled = None if honest is None or honest.get("ci_low") is None else {**honest, "method": honest["method"]}
    bayes = data.get("bayes") or {}
    quantiles = bayes.get(f"posterior_quantiles_{claim['population']}")
    return env.get_template("report.html.j2").render(
        claim=claim,
        # The Markdown lines without their markup; Jinja escapes them again.
        policy_lines=[
            html.unescape(line.lstrip(" -").replace("**", "").replace("`", "")).replace("\\|", "|")
            for line in policy_lines(data)
        ],
        verdict=data["verdict"],
        exit_code=data["exit_code"],
        gates=data["gates"],
        intervals=data["intervals"],
        contests=data["contests"],
        per_vignette=data.get("per_vignette", []),
        gate_method=data["gate_method"],
        population_label=POPULATION_LABELS[claim["population"]],
        gate_interval_text=interval_text(honest) if honest else "not computed",
        provenance=data["provenance"],
        fmt=fmt,
        interval_text=interval_text,
        claimed_markdown="\n".join(claimed_section(data)).strip() or "No figures are claimed.",
        model_card=model_card_section(data),
        sections=data.get("sections", []),
        intervals_svg=Markup(plots.intervals_plot(data["intervals"], claim["bar"])),
        forest_svg=Markup(plots.forest_plot(data.get("per_vignette", []), pooled, claim["bar"])),
        posterior_svg=Markup(plots.posterior_plot(quantiles, claim["bar"], claim["population"])) if quantiles else None,
    )
