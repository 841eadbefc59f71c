"""The honest-CI report as Markdown (model-card ready), rendered from a :class:`honestci.audit.report_model.Report`."""

from __future__ import annotations

import html

import yaml

from honestci.audit.report_model import POPULATION_LABELS, Report, gate_row
from honestci.reports.summary import sig, summarize
from honestci.reports.tables import INTERVAL_COLUMNS, evidence_pairs, interval, interval_row, number, section_table

#: The bracket pairs that make Markdown text a link: ``[t](url)``, ``[t][ref]``, ``[ref]: url``.
_LINK_FORMS = {"](": "]\\(", "][": "]\\[", "]:": "\\]:"}


def md(text) -> str:
    """``text`` safe inside Markdown and its table cells: HTML is escaped (a vignette or a claim
    name may hold ``<script>``; ``&`` too, so no entity can spell a scheme), pipes cannot split a
    cell, newlines cannot end a row, and no text becomes a link (a claim name
    ``[x](javascript:...)`` is shown as written; ``[0.71, 0.80]`` is left alone). Names come from
    the people being audited, and a ``verdict.json`` given to ``honestci report`` was never
    checked by the claim loader, so the escape is here, where every name is rendered, not a list
    of schemes refused at load."""
    text = html.escape(str(text), quote=False).replace("|", "\\|").replace("\r", " ").replace("\n", " ")
    for form, escaped in _LINK_FORMS.items():
        text = text.replace(form, escaped)
    return text


def fmt(value, digits: int = 3) -> str:
    """A figure for a table cell; missing values show as an en dash, text is escaped."""
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return md(value)


def interval_text(row: dict) -> str:
    if row.get("ci_low") is None or row.get("ci_high") is None or row.get("verdict") == "INCONCLUSIVE":
        return "INCONCLUSIVE"
    return f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}]"


def model_card_section(data: dict) -> str:
    """A model-card table with correctly labelled columns, and Hugging Face ``model-index`` YAML
    (written by a YAML library, so no name can break it) — only when the verdict is PASS: a
    blocked or inconclusive claim publishes no figure."""
    if data["verdict"] != "PASS":
        return (
            f"No model-card figures: the verdict is {data['verdict']}, and figures are written only for "
            "a claim that passes every required gate."
        )
    claim = data["claim"]
    honest = gate_row(data)
    naive = next((r for r in data["intervals"] if r["method"] == "wilson"), None)
    level = int(round(100 * (honest or naive or {"level": 0.95})["level"]))
    method = honest["label"] if honest else data["gate_method"]
    population = claim["population"].replace("_", " ")
    lines = [
        f"| model | win rate vs {md(claim['opponent'])} | contests (n) | vignettes (G) | n_effective | "
        f"{level}% CI, {md(method)} ({population}) | {level}% CI, iid Wilson (optimistic) |",
        "|---|---|---|---|---|---|---|",
    ]
    if honest:
        lines.append(
            f"| {md(claim['policy'])} | {fmt(honest['estimate'])} | {honest['n']} | {honest['n_clusters']} | "
            f"{fmt(honest['n_effective'], 1)} | {interval_text(honest)} | "
            f"{interval_text(naive) if naive else '–'} |"
        )
    metric = {
        "type": "win_rate",
        "name": f"win rate vs {claim['opponent']} ({population}, {method} {level}% CI "
        f"{interval_text(honest) if honest else 'n/a'})",
        "value": None if honest is None else round(honest["estimate"], 4),
        "verified": False,
    }
    index = {
        "model-index": [
            {
                "name": claim["policy"],
                "results": [
                    {
                        "task": {"type": "text-generation", "name": "pairwise win rate (LLM judge, both orders)"},
                        "dataset": {"name": claim["name"], "type": "custom"},
                        "metrics": [metric],
                    }
                ],
            }
        ]
    }
    return "\n".join(
        [
            *lines,
            "",
            "```yaml",
            yaml.safe_dump(index, sort_keys=False, allow_unicode=True, width=10_000).rstrip(),
            "```",
        ]
    )


def policy_lines(data: dict) -> list[str]:
    """The rules the claim was judged by: the policy's name and hash, and every deviation from the
    built-in defaults with where it came from (a policy file, or the claim tightening it)."""
    rules = data.get("audit_policy") or {}
    if not rules:
        return []
    lines = [
        f"- Judged by policy **{md(rules['name'])}** (sha256 `{rules['sha256']}`): level "
        f"{rules['confidence_level']:g}, invalid verdicts scored {rules['invalid_verdicts'].replace('_', ' ')}; "
        + (
            f"{len(rules['deviations'])} deviation(s) from the built-in rules:"
            if rules["deviations"]
            else "the built-in rules"
        )
    ]
    lines += [
        f"  - `{md(d['key'])}`: {md(d['default'])} → {md(d['value'])} ({md(d['source'])})" for d in rules["deviations"]
    ]
    if data["claim"].get("method"):
        lines.append(
            f"- The claim names the interval `{md(data['claim']['method'])}`: shown beside the gate's, never gated on"
        )
    return lines


def summary_markdown(data: dict) -> list[str]:
    """The head of the report (:func:`honestci.reports.summary.summarize`) as Markdown."""
    summary = summarize(data)
    outcome = "release allowed" if summary.exit_code == 0 else "release blocked"
    lines = [f"**Verdict: {summary.verdict}** — {outcome} (exit code {summary.exit_code})", ""]
    if summary.blocking:
        lines += ["**Blocking gates:**", ""]
        lines += [f"- **{g.name}** ({g.verdict}): {md(g.reason)}" for g in summary.blocking]
    else:
        lines.append("**Blocking gates:** none; every required gate passes.")
    lines += [
        "",
        f"**Gate interval** ({md(summary.interval_label)}): {md(summary.interval_figures)}",
        "",
        "**What would change the verdict:**",
        "",
    ]
    lines += [f"- {md(sentence)}" for sentence in summary.change]
    return lines


def table_markdown(headings: list[str], rows: list[list[str]]) -> list[str]:
    """A GFM table; every cell escaped."""
    return [
        "| " + " | ".join(md(h) for h in headings) + " |",
        "|" + "---|" * len(headings),
        *("| " + " | ".join(md(c) for c in row) + " |" for row in rows),
    ]


#: More vignettes than this and the report lists only the lowest and highest (all are in verdict.json).
MAX_VIGNETTE_ROWS = 60
#: How many of the lowest and of the highest vignettes a long list keeps.
VIGNETTE_TAIL = 10


def vignette_rows(per_vignette: list[dict]) -> tuple[list[str], list[list[str]], str]:
    """The per-vignette table: raw rate with its within-vignette interval and, when the report
    has them, the partially pooled rate and interval. Past :data:`MAX_VIGNETTE_ROWS` only the
    lowest and highest :data:`VIGNETTE_TAIL` by raw rate, with a note saying so."""
    pooled = any(v.get("pooled") is not None for v in per_vignette)
    headings = ["vignette", "n", "win rate", "within-vignette CI"] + (
        ["partially pooled", "pooled interval"] if pooled else []
    )
    rows, note = list(per_vignette), ""
    if len(rows) > MAX_VIGNETTE_ROWS:
        ordered = sorted(rows, key=lambda v: (v["estimate"], str(v["vignette_id"])))
        rows = ordered[:VIGNETTE_TAIL] + ordered[-VIGNETTE_TAIL:]
        note = (
            f"The {VIGNETTE_TAIL} lowest and {VIGNETTE_TAIL} highest of {len(per_vignette)} vignettes by raw "
            "win rate; every vignette is in verdict.json."
        )
    out = []
    for v in rows:
        cells = [str(v["vignette_id"]), sig(v["n"]), number(v["estimate"], 3), interval_text(v)]
        if pooled:
            cells += [number(v.get("pooled"), 3), interval(v.get("pooled_low"), v.get("pooled_high"), 3)]
        out.append(cells)
    return headings, out, note


def render_markdown(report: Report) -> str:
    """Render the report. Figures come only from the report; nothing is recomputed here."""
    data = report.data
    claim, contests = data["claim"], data["contests"]
    lines = [f"# honestci audit: {md(claim['name'])}", "", *summary_markdown(data)]
    lines += [
        "",
        "## Claim and policy",
        "",
        f"- Policy `{md(claim['policy'])}` vs opponent `{md(claim['opponent'])}`, judge `{md(claim['judge'])}`",
        f"- Bar: {claim['bar']:.3f} on the win rate for **{POPULATION_LABELS[claim['population']]}**, "
        f"read by the gate interval `{data['gate_method']}`",
        f"- Contests scored: {contests['n']} (with an invalid verdict: {contests['n_invalid']}; "
        f"other drops: {contests['dropped'] or 'none'})",
        *policy_lines(data),
        "",
        "## Gates",
        "",
        "| gate | required | verdict | why | evidence |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {g['gate']} | {'yes' if g['required'] else 'no'} | {g['verdict']} | {md(g['message'])} | "
        + md("; ".join(f"{k} {v}" for k, v in evidence_pairs(g.get("evidence") or {})) or "–")
        + " |"
        for g in data["gates"]
    ]
    lines += [
        "",
        "## Win rate, every interval side by side",
        "",
        "Per contest: 1 if the policy wins both judged orders, 0 if it loses both, ½ otherwise. Rows "
        "with population *iid* treat contests as independent and are optimistic when contests share "
        "vignettes; the population column says which win rate each interval is for. Figures are "
        "rounded to the decimals their SE supports (3 where there is no SE).",
        "",
        *table_markdown(list(INTERVAL_COLUMNS), [interval_row(r) for r in data["intervals"]]),
    ]
    bayes = data.get("bayes")
    if bayes:
        lines += ["", "## Bayesian hierarchical model", ""]
        if bayes.get("withheld"):
            lines += [f"**The Bayesian win rate is withheld**: {md(bayes['withheld'])}.", ""]
        if bayes.get("ppc"):
            groups = bayes["ppc"]["groups"]
            flagged = sum(bool(g["flagged"]) for g in groups)
            lines += [
                f"Plots in report.html: the posterior predictive check ({flagged} of {len(groups)} groups "
                "flagged) and the rank plots of mu and sigma (chain mixing).",
                "",
            ]
        scalars = [[k.replace("_", " "), number(v)] for k, v in bayes.items() if not isinstance(v, (list, dict))]
        lines += table_markdown(["figure", "value"], scalars)
    lines += claimed_section(data)
    for section in data.get("sections", []):
        lines += section_markdown(section)
    headings, rows, note = vignette_rows(data.get("per_vignette", []))
    lines += ["", "## Per vignette", ""] + ([note, ""] if note else []) + table_markdown(headings, rows)
    lines += ["", "## Model-card section", "", model_card_section(data)]
    prov = data["provenance"]
    lines += [
        "",
        "## Provenance",
        "",
        md(
            f"honestci {prov['honestci']}, git commit {prov['git_commit'] or 'unknown'}, seed {prov['seed']}, "
            f"Python {prov['python']}, " + ", ".join(f"{k} {v}" for k, v in sorted(prov["packages"].items()))
        ),
        "",
        "| input | sha256 |",
        "|---|---|",
    ]
    lines += [f"| {md(name)} | `{digest}` |" for name, digest in sorted(prov["inputs_sha256"].items())]
    lines.append(f"| claim | `{prov['claim_sha256']}` |")
    return "\n".join(lines) + "\n"


def section_markdown(section: dict) -> list[str]:
    """A plug-in check's section: its lines, then its table."""
    lines = ["", f"## {md(section['title'])}", ""] + [f"- {md(line)}" for line in section["lines"]]
    headings, rows, note = section_table(section)
    if rows:
        lines += ["", *([note, ""] if note else []), *table_markdown(headings, rows)]
    return lines


def claimed_section(data: dict) -> list[str]:
    claimed, audit = data["claim"].get("claimed"), data.get("claimed_audit")
    if not claimed:
        return []
    lines = [
        "",
        "## As claimed",
        "",
        f"Stated: point {fmt(claimed.get('point'))}, n {fmt(claimed.get('n'))}, CI-low {fmt(claimed.get('ci_low'))}"
        f", CI-high {fmt(claimed.get('ci_high'))} (method: {md(claimed.get('method') or 'not stated')}).",
    ]
    if audit:
        methods = md(", ".join(audit["reproducing_methods"]) or "none")
        lines += ["", f"Methods that reproduce the stated interval: {methods}."]
        lines += [f"- {md(flag)}" for flag in audit["flags"]]
    for comparison in data.get("comparisons", []):
        pd_ = comparison.get("paired_difference")
        lines += [
            "",
            f"Comparison with `{md(comparison['against'])}` ({comparison['kind']}): {md(comparison.get('statement') or '')}",
        ]
        if pd_:
            lines.append(
                f"- honest test: difference {pd_['estimate']:+.3f} [{pd_['ci_low']:+.3f}, "
                f"{pd_['ci_high']:+.3f}] ({pd_['method']}, G = {pd_['n_clusters']})"
            )
        for row in comparison.get("bayes") or []:
            if row.get("mean") is not None:
                lines.append(
                    f"- Bayesian joint model, {row['population'].replace('_', ' ')}: difference "
                    f"{row['mean']:+.3f} [{row['lower']:+.3f}, {row['upper']:+.3f}], "
                    f"P({md(comparison['against'])} is beaten) = {row['p_a_beats_b']:.3f}"
                )
        if comparison.get("error"):
            lines.append(f"- not computed: {md(comparison['error'])}")
    return lines
