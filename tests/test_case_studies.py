"""The case studies of docs/case-studies/ run as written: every command of a page's ``console``
blocks runs (bash, from the repository root, ``$SCRATCH`` a fresh folder, the data read from
``../shared/data``), and every output line the page shows must appear in what the command printed,
with the exit code the page states (``[exit N]``). The figures live in the pages only; these tests
also hold the reproduced figures against their outside references (clubSandwich, the published
leaderboards). Blocks after ``<!-- slow -->`` (the Bayesian model on 805 vignettes) run in the
slow tier."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.shared_data]
REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
PAGES = REPO_ROOT / "docs" / "case-studies"


@dataclass
class Step:
    command: str
    expected: list[str] = field(default_factory=list)
    exit_code: int = 0


def _steps(page: Path, slow: bool) -> list[Step]:
    """The commands of the page's console blocks (slow ones or the others), with their expected lines."""
    steps: list[Step] = []
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() != "```console":
            i += 1
            continue
        block_slow = i > 0 and lines[i - 1].strip() == "<!-- slow -->"
        i += 1
        while lines[i].strip() != "```":
            line = lines[i]
            if line.startswith("$ "):
                command = line[2:]
                while command.endswith("\\"):
                    i += 1
                    command = command[:-1] + " " + lines[i].strip()
                if block_slow == slow:
                    steps.append(Step(command))
            elif block_slow == slow and steps and line.strip() not in ("", "..."):
                exit_code = re.fullmatch(r"\[exit (\d+)\]", line.strip())
                if exit_code:
                    steps[-1].exit_code = int(exit_code.group(1))
                else:
                    steps[-1].expected.append(line)
            i += 1
        i += 1
    return steps


def _normalised(line: str) -> str:
    return " ".join(line.split())


def _run(steps: list[Step], scratch: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "SCRATCH": str(scratch),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    outputs = {}
    for step in steps:
        result = subprocess.run(
            ["bash", "-c", step.command], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600
        )
        output = result.stdout + result.stderr
        assert result.returncode == step.exit_code, (step.command, output)
        printed = {_normalised(line) for line in output.splitlines()}
        missing = [line for line in step.expected if _normalised(line) not in printed]
        assert not missing, (step.command, missing, output)
        outputs[step.command] = output
    return outputs


def _table_row(output: str, label: str) -> list[str]:
    row = next(line for line in output.splitlines() if line.strip().startswith(label))
    return row.strip()[len(label) :].split()


@pytest.fixture
def scratch(shared_data, tmp_path) -> Path:
    return tmp_path


def test_page_layout_is_parsed():
    """Each page has commands and shown output (a page whose blocks the parser missed would pass empty)."""
    for name in ("pandalm", "alpaca-eval-1", "alpaca-eval-2"):
        steps = _steps(PAGES / f"{name}.md", slow=False)
        assert len(steps) >= 3 and sum(len(s.expected) for s in steps) >= 10, name
        assert any(s.exit_code for s in steps), name  # the audits' verdicts are stated


def test_pandalm(scratch):
    outputs = _run(_steps(PAGES / "pandalm.md", slow=False), scratch)
    calibration = next(out for cmd, out in outputs.items() if "calibrate-judge" in cmd and "gpt-3.5" in cmd)
    # Published accuracy (PandaLM's compute_metrics.py) and the clubSandwich CR2 interval of the
    # agreement (shared/data/reference, R clubSandwich 0.5.8), as the command prints them.
    estimate, ci_low, ci_high, *_rest = _table_row(calibration, "gpt-3.5-turbo agreement (as_class)")
    with open(SHARED_DATA / "reference" / "clubSandwich_pandalm_reference.csv") as handle:
        cr2 = next(row for row in csv.DictReader(handle) if row["vcov"] == "CR2")
    assert float(estimate) == 0.7107 == round(float(cr2["estimate"]), 4)
    assert (float(ci_low), float(ci_high)) == (round(float(cr2["ci_lower"]), 4), round(float(cr2["ci_upper"]), 4))
    assert float(_rest[2]) == round(float(cr2["df_Satt"]), 4)
    assert "accuracy 0.7107  macro-P 0.5879  macro-R 0.5736  macro-F1 0.5755" in calibration


def _published(board: Path) -> dict[str, dict]:
    with open(board) as handle:
        return {row[""]: row for row in csv.DictReader(handle)}


def _assert_board_reproduces(table: Path, board: Path, systems: int) -> None:
    published = _published(board)
    with open(table) as handle:
        rows = [row for row in csv.DictReader(handle) if row["method"] == "cr1"]
    assert len(rows) == systems
    for row in rows:
        expected = published[row["system"]]
        assert 100 * float(row["estimate"]) == pytest.approx(float(expected["win_rate"]), abs=1e-6), row["system"]
        assert 100 * float(row["se"]) == pytest.approx(float(expected["standard_error"]), abs=1e-6), row["system"]


def test_alpaca_eval_1(scratch):
    _run(_steps(PAGES / "alpaca-eval-1.md", slow=False), scratch)
    board = SHARED_DATA / "alpaca_eval" / "leaderboards" / "alpaca_eval_gpt4_leaderboard.csv"
    _assert_board_reproduces(scratch / "leaderboard.csv", board, systems=2)


def test_alpaca_eval_2(scratch):
    _run(_steps(PAGES / "alpaca-eval-2.md", slow=False), scratch)
    board = SHARED_DATA / "alpaca_eval2" / "leaderboards" / "weighted_alpaca_eval_gpt4_turbo_leaderboard.csv"
    _assert_board_reproduces(scratch / "leaderboard.csv", board, systems=8)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["alpaca-eval-1", "alpaca-eval-2"])
def test_with_the_bayesian_model(name, scratch):
    steps = _steps(PAGES / f"{name}.md", slow=False)
    imports = [s for s in steps if s.command.startswith(("honestci import", "cp "))]
    _run(imports + _steps(PAGES / f"{name}.md", slow=True), scratch)
