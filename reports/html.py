"""The honest-CI report as one self-contained HTML file (inline SVG plots, no external request;
every piece of user or model text is escaped by Jinja2's autoescape, and the Markdown snippets it
shares with report.md are rendered with raw HTML disabled)."""

from __future__ import annotations

import html
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from markdown_it import MarkdownIt
from markupsafe import Markup

from honestci.audit.report_model import POPULATION_LABELS, Report, gate_row
from honestci.reports import plots
from honestci.reports.markdown import (
    claimed_section,
    model_card_section,
    policy_lines,
    vignette_rows,
)
from honestci.reports.summary import summarize
from honestci.reports.tables import INTERVAL_COLUMNS, evidence_pairs, interval_row, number, section_table


def _markdown_html(text: str) -> Markup:
    """Markdown rendered to HTML with raw HTML escaped and no links or images (nothing to load)."""
    renderer = MarkdownIt("commonmark", {"html": False}).enable("table").disable(["link", "image", "autolink"])
    return Markup(renderer.render(text))


def _ppc_unit(groups: list[dict]) -> str:
    """What one group of the posterior predictive check is, in words."""
    runs, judges = len({g["run"] for g in groups}) > 1, len({g["judge"] for g in groups}) > 1
    return "the contests of one vignette" + (" in one run" if runs else "") + (" by one judge" if judges else "")


def render_html(report: Report, posterior: Any | None = None) -> str:
    """The report as one HTML page; ``posterior`` (the fit's arviz.InferenceData, when the audit
    has a converged Bayesian fit) adds the rank plots of mu and sigma; the posterior predictive
    check's plot reads the report's own table."""
    data = report.data
    env = Environment(
        loader=PackageLoader("honestci.reports", "templates"), autoescape=select_autoescape(["html", "j2"])
    )
    claim = data["claim"]
    gate = gate_row(data)
    bayes = data.get("bayes") or {}
    quantiles = bayes.get(f"posterior_quantiles_{claim['population']}")
    ppc = bayes.get("ppc")  # the check's table, in verdict.json: re-rendering keeps its plot
    per_vignette = data.get("per_vignette", [])
    vignette_headings, vignette_cells, vignette_note = vignette_rows(per_vignette)
    texts = {str(v["vignette_id"]): v.get("text", "") for v in per_vignette}
    claimed = "\n".join(claimed_section(data)[3:]).strip()  # without its heading
    return env.get_template("report.html.j2").render(
        claim=claim,
        summary=summarize(data),
        # The Markdown lines without their markup; Jinja escapes them again.
        policy_lines=[
            html.unescape(line.lstrip(" -").replace("**", "").replace("`", "")).replace("\\|", "|")
            for line in policy_lines(data)
        ],
        gates=[g | {"pairs": evidence_pairs(g.get("evidence") or {})} for g in data["gates"]],
        interval_columns=INTERVAL_COLUMNS,
        interval_rows=[(r, interval_row(r)) for r in data["intervals"]],
        contests=data["contests"],
        gate_method=data["gate_method"],
        population_label=POPULATION_LABELS[claim["population"]],
        n_vignettes=len(per_vignette),
        pooled=any(v.get("pooled") is not None for v in per_vignette),
        many_vignettes=len(per_vignette) > plots.MAX_LABELLED_VIGNETTES,
        caterpillar_sample=plots.CATERPILLAR_SAMPLE,
        vignette_headings=vignette_headings,
        vignette_rows=[(cells, texts.get(cells[0], "")) for cells in vignette_cells],
        vignette_note=vignette_note,
        provenance=data["provenance"],
        claimed_html=_markdown_html(claimed) if claimed else None,
        model_card_html=_markdown_html(model_card_section(data)),
        sections=[s | {"headings_cells": section_table(s)} for s in data.get("sections", [])],
        bayes_rows=[(k.replace("_", " "), number(v)) for k, v in bayes.items() if not isinstance(v, (list, dict))],
        bayes_withheld=bayes.get("withheld"),
        intervals_svg=Markup(plots.intervals_plot(data["intervals"], claim["bar"], gate)),
        vignette_svg=Markup(plots.vignette_plot(per_vignette, gate, claim["bar"])) if per_vignette else None,
        posterior_svg=Markup(plots.posterior_plot(quantiles, claim["bar"], claim["population"])) if quantiles else None,
        ppc=ppc,
        ppc_flagged=sum(bool(g["flagged"]) for g in ppc["groups"]) if ppc else 0,
        ppc_unit=_ppc_unit(ppc["groups"]) if ppc else "",
        ppc_many=len(ppc["groups"]) > plots.MAX_LABELLED_VIGNETTES if ppc else False,
        ppc_svg=Markup(plots.ppc_plot(ppc)) if ppc else None,
        rank_svg=Markup(plots.rank_plot(posterior)) if posterior is not None and bayes else None,
        rhat_max=bayes.get("rhat_max"),
    )
