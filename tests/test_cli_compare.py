"""``honestci compare``: the K-system table, Bradley–Terry strengths and rank intervals from the command line."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from honestci.audit.cli import main

REPO_ROOT = Path(__file__).resolve().parents[1]
AE2_OPPONENT = "gpt4_1106_preview"


@pytest.mark.e2e
def test_compare_on_the_fixture_study():
    systems = ["reappraisal-4b-grpo", "r1-reference", "qwen3-4b-base"]
    args = ["compare", str(REPO_ROOT / "fixtures" / "study" / "claim.yaml"), "--simultaneous", "maxt", "--draws", "199"]
    result = CliRunner().invoke(main, args + [a for s in systems for a in ("--system", s)])
    assert result.exit_code == 0, result.output
    assert "win rate against gpt-4-0314: 3 systems" in result.output
    assert "Bradley–Terry strength" in result.output
    assert "max-|t| wild cluster bootstrap (Webb, B=199" in result.output
    for system in systems:
        assert system in result.output
    assert "rank_low" in result.output


@pytest.mark.e2e
def test_compare_with_davidson_ties():
    systems = ["reappraisal-4b-grpo", "r1-reference", "qwen3-4b-base"]
    args = ["compare", str(REPO_ROOT / "fixtures" / "study" / "claim.yaml"), "--ties", "davidson"]
    result = CliRunner().invoke(main, args + [a for s in systems for a in ("--system", s)])
    assert result.exit_code == 0, result.output
    assert "Davidson strength (log π, CR2): 4 systems" in result.output
    assert "Davidson tie parameter ν̂ = " in result.output
    assert "Bradley–Terry strength" not in result.output


@pytest.mark.e2e
@pytest.mark.shared_data
def test_compare_alpaca_eval2_raw_rates_equal_the_leaderboard(shared_data, tmp_path):
    from honestci.judges.importers_alpaca import import_alpaca_eval

    files = sorted((shared_data / "alpaca_eval2" / "raw_annotations").glob("*.annotations.json.gz"))
    paths = import_alpaca_eval(files).write(tmp_path / "judgments.jsonl")
    systems = [f.name.removesuffix(".annotations.json.gz") for f in files]
    policy = tmp_path / "policy.yaml"
    # Missing preferences scored as ties: the leaderboard's convention.
    policy.write_text("version: 1\nname: leaderboard\ninvalid_verdicts: tie\n")
    args = ["compare", "--judgments", str(paths["judgments"]), "--responses", str(paths["responses"])]
    args += ["--opponent", AE2_OPPONENT, "--policy", str(policy)] + [a for s in systems for a in ("--system", s)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    board = pd.read_csv(
        shared_data / "alpaca_eval2" / "leaderboards" / "weighted_alpaca_eval_gpt4_turbo_leaderboard.csv", index_col=0
    )
    lines = result.output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["system", "n_contests"])
    column = lines[start].split().index("estimate")
    rows = {}
    for line in lines[start + 1 : start + 1 + len(systems)]:
        fields = line.split()
        rows[fields[0]] = float(fields[column])
    assert sorted(rows) == sorted(systems)
    for system, estimate in rows.items():
        # Printed to 4 decimals: the check against the leaderboard to 1e-6 is on the result below.
        assert 100 * estimate == pytest.approx(board.loc[system, "win_rate"], abs=0.006)


@pytest.mark.shared_data
def test_k_system_raw_rates_equal_the_alpaca_eval2_leaderboard(shared_data, tmp_path):
    from honestci.audit.data.contests import build_contests
    from honestci.audit.data.io import load_study
    from honestci.audit.stats.selection.systems import k_system_winrates
    from honestci.judges.importers_alpaca import import_alpaca_eval

    files = sorted((shared_data / "alpaca_eval2" / "raw_annotations").glob("*.annotations.json.gz"))
    paths = import_alpaca_eval(files).write(tmp_path / "judgments.jsonl")
    study = load_study({k: v for k, v in paths.items() if k in ("judgments", "vignettes", "responses")})
    systems = [f.name.removesuffix(".annotations.json.gz") for f in files]
    frames = []
    for system in systems:
        scored = build_contests(study, system, AE2_OPPONENT, single_order="exclude").scores(
            "both_orders", invalid="tie"
        )
        frames.append(scored.to_frame()[["vignette_id", "score"]].assign(system=system))
    result = k_system_winrates(pd.concat(frames), opponent=AE2_OPPONENT)
    board = pd.read_csv(
        shared_data / "alpaca_eval2" / "leaderboards" / "weighted_alpaca_eval_gpt4_turbo_leaderboard.csv", index_col=0
    )
    table = result.to_frame().set_index("system")
    for system in systems:
        assert 100 * table.loc[system, "estimate"] == pytest.approx(board.loc[system, "win_rate"], abs=1e-6)
    ranks = table[["rank_low", "rank_high"]]
    assert ((ranks.rank_low <= table["rank"]) & (table["rank"] <= ranks.rank_high)).all()
