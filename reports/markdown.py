"""The honest-CI report as Markdown, rendered from an :class:`audit.pipeline.AuditResult`."""

from __future__ import annotations

from audit.intervals import POPULATION_LABELS


def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _ci(row) -> str:
    return f"[{row.ci_low:.3f}, {row.ci_high:.3f}]" if row.reportable else "INCONCLUSIVE"


def render_markdown(result) -> str:
    """Render the report. Figures come only from ``result``; nothing is recomputed here."""
    gate_row = None
    try:
        gate_row = result.gate_interval()
    except KeyError:
        pass
    lines = [
        f"# honestci audit: {result.claim_name}",
        "",
        f"**Verdict: {result.verdict}** (exit code {result.exit_code()})",
        "",
        f"- Policy `{result.policy}` vs opponent `{result.opponent}`, judge `{result.judge}`",
        f"- Bar: {result.bar:.3f} on the win rate for **{POPULATION_LABELS[result.population]}**",
        f"- Gate interval: `{result.gate_method}`"
        + (f" → {_ci(gate_row)}" if gate_row is not None else ""),
        f"- Contests scored: {result.n_contests} (contests with an invalid verdict left out: {result.n_invalid};"
        f" other drops: {result.dropped or 'none'})",
        "",
        "## Gates",
        "",
        "| gate | verdict | why |",
        "|---|---|---|",
    ]
    lines += [f"| {g.name} | {g.verdict} | {g.message} |" for g in result.gates]
    lines += [
        "",
        "## Win rate, every interval side by side",
        "",
        "Per contest: 1 if the policy wins both judged orders, 0 if it loses both, ½ otherwise. "
        "Rows labelled *iid* treat contests as independent and are optimistic when contests share "
        "vignettes; the population column says which win rate each interval is for.",
        "",
        "| method | population | estimate | 95% CI | SE | df | n | G | ICC | DEFF | n_eff | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result.intervals.rows:
        lines.append(
            f"| {r.label} | {r.population} | {_fmt(r.estimate)} | {_ci(r)} | {_fmt(r.se, 4)} | {_fmt(r.df, 1)} | "
            f"{r.n} | {r.n_clusters} | {r.icc:.3f} | {r.design_effect:.1f} | {r.n_effective:.1f} | {r.note} |")
    if result.claimed:
        c = result.claimed
        lines += ["", "## As claimed", "",
                  f"point {_fmt(c.get('point'))}, n {_fmt(c.get('n'))}, CI-low {_fmt(c.get('ci_low'))} "
                  f"(stated method: {c.get('method') or 'not stated'})"]
    prov = result.provenance
    lines += ["", "## Provenance", "",
              f"honestci {prov['honestci']}, git commit {prov['git_commit'] or 'unknown'}, seed {prov['seed']}, "
              f"Python {prov['python']}", "", "| input | sha256 |", "|---|---|"]
    lines += [f"| {name} | `{digest}` |" for name, digest in sorted(prov["inputs_sha256"].items())]
    lines.append(f"| claim | `{prov['claim_sha256']}` |")
    return "\n".join(lines) + "\n"
