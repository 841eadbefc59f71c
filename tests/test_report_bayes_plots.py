"""The Bayesian fit's plots in the HTML report: the posterior predictive check (the gate's own
table, drawn per group) and ArviZ rank plots of mu and sigma; absent without a Bayesian fit, and
within the page's size bound with 1,000 vignettes."""

from __future__ import annotations

import copy
import re

import numpy as np
import pytest

from honestci.audit.report_model import Report
from honestci.reports.render import render, write_outputs

#: The size bound on a report page, 1,000 vignettes included (as tests/test_report_screenshots.py).
MAX_HTML_BYTES = 1_000_000


def _figure(page: str, figure_id: str) -> str | None:
    """The <figure id=...> element of ``page``, or None."""
    match = re.search(rf'<figure id="{figure_id}">(.*?)</figure>', page, flags=re.DOTALL)
    return match.group(1) if match else None


def _caption(figure: str) -> str:
    return re.sub(r"\s+", " ", figure.split("<figcaption>")[1].split("</figcaption>")[0])


@pytest.fixture(scope="module")
def written(bayes_audit, tmp_path_factory):
    out = tmp_path_factory.mktemp("bayes-report")
    return write_outputs(bayes_audit.report(), out, posterior=bayes_audit.posterior)


def test_converged_fit_draws_the_ppc_and_rank_plots_with_captions(bayes_audit, written):
    data = bayes_audit.report().data
    bayes = data["bayes"]
    assert bayes["converged"] and not bayes["withheld"]
    page = written["html"].read_text()
    assert written["html"].stat().st_size <= MAX_HTML_BYTES

    ppc = _figure(page, "ppc-plot")
    assert ppc is not None and "<svg" in ppc
    caption = _caption(ppc)
    groups = bayes["ppc"]["groups"]
    # The fixture: 6 vignettes x 3 runs, one judge; one group per (vignette, run).
    assert len(groups) == bayes["ppc_groups"] == 18
    assert "One observation is one group of contests: the contests of one vignette in one run," in caption
    assert "below 0.05/18 (Bonferroni)" in caption and "the 95% interval" in caption
    assert "Here 0 of 18 groups are flagged: the model reproduces every group" in caption

    ranks = _figure(page, "rank-plot")
    assert ranks is not None and "<svg" in ranks
    caption = _caption(ranks)
    assert "mu (the mean logit win rate) and sigma" in caption
    assert f"the largest R-hat is {bayes['rhat_max']:.3f}" in caption
    # ArviZ draws one row of bars per chain and panel; 4 chains x 2 panels, nothing per vignette.
    assert bayes["chains"] == 4 and ranks.count('id="axes_') == 2

    markdown = written["md"].read_text()
    assert "Plots in report.html: the posterior predictive check (0 of 18 groups flagged)" in markdown


def test_the_ppc_table_is_the_data_the_gate_read(bayes_audit):
    # Each vignette's contest-weighted mean of its groups' observed shares is its mean contest
    # score, which the per-vignette table computes on its own (a groupby of the scores).
    data = bayes_audit.report().data
    groups = data["bayes"]["ppc"]["groups"]
    for row in data["per_vignette"]:
        mine = [g for g in groups if g["vignette"] == row["vignette_id"]]
        n = np.array([g["n"] for g in mine], dtype=float)
        share = np.array([g["observed_share"] for g in mine])
        assert n.sum() == row["n"]
        assert float(n @ share / n.sum()) == pytest.approx(row["estimate"], rel=1e-9)
        assert all(g["predicted_lower"] <= g["predicted_mean"] <= g["predicted_upper"] for g in mine)
    assert sum(g["flagged"] for g in groups) == data["bayes"]["ppc_groups_flagged"]


def test_a_flagged_check_says_the_win_rate_is_withheld(bayes_audit):
    data = copy.deepcopy(bayes_audit.report().data)
    for group in data["bayes"]["ppc"]["groups"][:2]:
        group["flagged"] = True
    data["bayes"]["withheld"] = "the posterior predictive check flags 2 of 18 groups"
    caption = _caption(_figure(render(Report.from_dict(data), "html"), "ppc-plot") or "")
    assert "Here 2 of 18 groups are flagged: the Bayesian win rate is withheld" in caption


def test_no_posterior_no_rank_plot_and_no_fit_no_plots(bayes_audit):
    # Re-rendered from verdict.json alone: the check's table is in it, the chains are not.
    page = render(bayes_audit.report(), "html")
    assert _figure(page, "ppc-plot") is not None and _figure(page, "rank-plot") is None
    data = copy.deepcopy(bayes_audit.report().data)
    data["bayes"] = None  # as --no-bayes writes it (AuditResult.to_dict without a fit)
    plain = Report.from_dict(data)
    for fmt in ("html", "md"):
        text = render(plain, fmt, posterior=bayes_audit.posterior)  # a posterior without a fit's summary
        assert 'id="ppc-plot"' not in text and 'id="rank-plot"' not in text and "Plots in report.html" not in text


def test_a_thousand_vignettes_keep_the_page_under_1_mb(bayes_audit):
    from honestci.reports.plots import CATERPILLAR_SAMPLE, ppc_plot

    rng = np.random.default_rng(17)
    data = copy.deepcopy(bayes_audit.report().data)
    rates = rng.uniform(0.3, 1.0, 1000)
    data["per_vignette"] = [
        {"vignette_id": f"v{g}", "text": "", "n": 9, "estimate": float(r), "ci_low": max(0.0, r - 0.2)}
        | {"ci_high": min(1.0, r + 0.1), "pooled": float(0.75 + 0.5 * (r - 0.75)), "pooled_low": 0.5}
        | {"pooled_high": 0.95}
        for g, r in enumerate(rates)
    ]
    # 1,000 vignettes x 3 runs, a tenth of the groups flagged: the worst case for the plot's size.
    groups = [
        {"vignette": f"v{g}", "run": f"run-{r}", "judge": "all", "n": 3, "observed_share": float(rates[g])}
        | {"predicted_mean": 0.8, "predicted_lower": 0.5, "predicted_upper": 1.0, "p_value": 0.5}
        | {"flagged": bool(rng.random() < 0.1)}
        for g in range(1000)
        for r in (1, 2, 3)
    ]
    data["bayes"]["ppc"]["groups"] = groups
    page = render(Report.from_dict(data), "html", posterior=bayes_audit.posterior)
    assert _figure(page, "ppc-plot") is not None and _figure(page, "rank-plot") is not None
    assert len(page.encode()) <= MAX_HTML_BYTES, len(page.encode())
    assert f"{CATERPILLAR_SAMPLE} evenly spaced ranks are drawn" in _caption(_figure(page, "ppc-plot") or "")
    # A fixed-height figure of at most 200 ranks and 200 flagged groups: as large for 12,000
    # groups (1,200 flagged) as for 3,000 (about 300 flagged).
    ppc = data["bayes"]["ppc"]
    more = [g | {"vignette": f"{g['vignette']}-{copy_}"} for copy_ in range(4) for g in groups]
    many, most = ppc_plot(ppc), ppc_plot(ppc | {"groups": more})
    height = float(many.split('height="')[1].split("pt")[0])
    assert height < 400 and abs(len(most) - len(many)) < 0.1 * len(many)


def test_report_command_redraws_the_rank_plots_from_the_saved_posterior(written, tmp_path):
    from click.testing import CliRunner

    from honestci.audit.cli import main

    verdict = written["json"]
    again = tmp_path / "again.html"
    result = CliRunner().invoke(main, ["report", str(verdict), "--format", "html", "--out", str(again)])
    assert result.exit_code == 0, result.output
    page = again.read_text()
    assert _figure(page, "rank-plot") is not None and _figure(page, "ppc-plot") is not None
    # The same verdict.json in a folder without posterior.nc: no chains, no rank plots.
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "verdict.json").write_text(verdict.read_text())
    result = CliRunner().invoke(main, ["report", str(alone / "verdict.json"), "--format", "html"])
    assert result.exit_code == 0 and 'id="ppc-plot"' in result.output and 'id="rank-plot"' not in result.output
