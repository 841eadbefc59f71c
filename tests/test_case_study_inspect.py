"""docs/case-studies/inspect-ai.md, run: its documented commands, on the committed inspect_ai log,
print exactly the console block the page shows, and every figure of its "Key figures" table is on
the output line it names.

The console block is written by this file (``python tests/test_case_study_inspect.py --write``),
never by hand; the test fails whenever the commands print something else.
"""

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "case-studies" / "inspect-ai.md"
#: What the documented commands read, relative to the repository root.
INPUTS = ("tests/data/inspect/pairwise.eval", "docs/case-studies/inspect-ai/claim.yaml")
CONSOLE = re.compile(r"(<!-- console:[^\n]*-->\n```console\n)(.*?)(```)", re.S)
#: The documented commands (the claim folder's tables are written by the first).
COMMANDS = (
    "honestci import inspect tests/data/inspect/pairwise.eval --out docs/case-studies/inspect-ai/judgments.jsonl",
    "honestci audit docs/case-studies/inspect-ai/claim.yaml --out inspect-ai-audit",
)


def run_commands(workdir: Path) -> list[tuple[str, subprocess.CompletedProcess]]:
    """Copy the inputs into ``workdir`` (same relative paths) and run the commands there."""
    for relative in INPUTS:
        (workdir / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / relative, workdir / relative)
    runs = []
    for command in COMMANDS:
        argv = shlex.split(command)
        assert argv[0] == "honestci"
        result = subprocess.run(
            [sys.executable, "-m", "honestci", *argv[1:]], cwd=workdir, capture_output=True, text=True, timeout=600
        )
        runs.append((command, result))
    return runs


def console_text(runs) -> str:
    return "".join(f"$ {command}\n{result.stdout}" for command, result in runs)


def key_figures(doc: str) -> list[tuple[str, str, str]]:
    """(figure, value, line start) rows of the page's "Key figures" table."""
    section = doc.split("## Key figures", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| figure")]
    out = []
    for row in rows:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row.strip("|"))]
        out.append((cells[0], cells[1], cells[2].strip("`")))
    return out


@pytest.mark.e2e
def test_the_documented_commands_print_what_the_case_study_shows(tmp_path):
    runs = run_commands(tmp_path)
    (_, imported), (_, audited) = runs
    assert imported.returncode == 0, imported.stderr
    assert audited.returncode == 1, audited.stderr  # "the audit exits 1: a gate FAILs"
    doc = DOC.read_text()
    shown = CONSOLE.search(doc)
    assert shown, "the page has no generated console block"
    assert shown.group(2) == console_text(runs), "rerun: python tests/test_case_study_inspect.py --write"
    printed = [line.strip() for _, result in runs for line in result.stdout.splitlines()]
    figures = key_figures(doc)
    assert len(figures) == 5
    for figure, value, start in figures:
        lines = [line for line in printed if line.startswith(start)]
        assert lines and value in lines[0], (figure, value, lines)  # the first such line
    # The point estimate against the scripted rules (make_logs.py): 15/24, as the page derives it.
    verdict = json.loads((tmp_path / "inspect-ai-audit" / "verdict.json").read_text())
    assert verdict["verdict"] == "FAIL" and verdict["contests"]["design"] == "both orders"
    (gate_interval,) = [i for i in verdict["intervals"] if i["method"] == "bayes_logit_normal"]
    assert gate_interval["estimate"] == pytest.approx(15 / 24, abs=1e-12)


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        text = console_text(run_commands(Path(folder)))
    page = DOC.read_text()
    DOC.write_text(CONSOLE.sub(lambda m: m.group(1) + text + m.group(3), page, count=1))
    print(f"wrote the console block of {DOC}")
