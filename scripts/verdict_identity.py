"""Record every verdict.json the fixture claims and the case studies produce, to show that a change
leaves behaviour unchanged (issue 33: byte-identical verdicts before and after a refactor).

    python scripts/verdict_identity.py OUT            # audits into OUT, verdicts in OUT/verdicts/
    python scripts/verdict_identity.py OUT --slow     # also the case studies' slow (Bayesian) blocks
    python scripts/verdict_identity.py OUT --compare BEFORE   # then exit 1 if any verdict differs

Each fixture claim (``fixtures/study/claim*.yaml``) is audited with the default policy; each page of
docs/case-studies/ runs as its test runs it (tests/test_case_studies.py: bash from the repository
root, ``$SCRATCH`` a fresh folder, the data from ``../shared/data``). Every verdict.json written is
copied with the fields that differ between two runs of the same code blanked (the commit, the
Bayesian fit's wall time, the claim file's absolute path), so that two commits' files compare byte
for byte.
"""

from __future__ import annotations

import argparse
import filecmp
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
#: The case-study pages whose console blocks run as tests/test_case_studies.py runs them.
RUN_PAGES = ("pandalm", "alpaca-eval-1", "alpaca-eval-2")


def _case_study_steps():
    spec = importlib.util.spec_from_file_location("case_studies", REPO_ROOT / "tests" / "test_case_studies.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _audit_fixture_claims(out: Path) -> None:
    honestci = Path(sys.executable).parent / "honestci"
    for claim in sorted((REPO_ROOT / "fixtures" / "study").glob("claim*.yaml")):
        target = out / "fixture" / claim.stem
        result = subprocess.run(
            [str(honestci), "audit", str(claim), "--out", str(target)], capture_output=True, text=True
        )
        print(f"fixture {claim.name}: exit {result.returncode}", flush=True)


def _run_case_studies(out: Path, slow: bool) -> None:
    pages = _case_study_steps()
    for name in RUN_PAGES:
        page = pages.PAGES / f"{name}.md"
        steps = pages._steps(page, slow=False) + (pages._steps(page, slow=True) if slow else [])
        scratch = out / "case" / name
        scratch.mkdir(parents=True)
        pages._run(steps, scratch)  # asserts each step's exit code and shown lines, as the test does
        print(f"case study {name}: {len(steps)} commands", flush=True)
    # The inspect_ai page is generated (tests/test_case_study_inspect.py): its import (into files
    # docs/case-studies/inspect-ai/.gitignore ignores) and its audit.
    honestci = str(Path(sys.executable).parent / "honestci")
    page = pages.PAGES / "inspect-ai"
    for command in (
        [honestci, "import", "inspect", "tests/data/inspect/pairwise.eval", "--out", str(page / "judgments.jsonl")],
        [honestci, "audit", str(page / "claim.yaml"), "--out", str(out / "case" / "inspect-ai")],
    ):
        subprocess.run(command, cwd=REPO_ROOT, capture_output=True)
    print("case study inspect-ai: 2 commands", flush=True)


def _collect(out: Path) -> int:
    verdicts = out / "verdicts"
    count = 0
    for path in sorted(out.rglob("verdict.json")):
        if verdicts in path.parents:
            continue
        record = json.loads(path.read_text())
        # what differs between two runs of the same code: the commit, the fit's wall time, the claim's folder
        record.get("provenance", {})["git_commit"] = ""
        if record.get("bayes"):
            record["bayes"]["runtime_seconds"] = 0.0
        record["claim"]["path"] = ""
        target = verdicts / path.relative_to(out)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        count += 1
    return count


def _compare(before: Path, after: Path) -> list[str]:
    old = {p.relative_to(before) for p in before.rglob("verdict.json")}
    new = {p.relative_to(after) for p in after.rglob("verdict.json")}
    problems = [f"only before: {p}" for p in sorted(old - new)] + [f"only after: {p}" for p in sorted(new - old)]
    problems += [f"differs: {p}" for p in sorted(old & new) if not filecmp.cmp(before / p, after / p, shallow=False)]
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="a new folder for the audits' outputs")
    parser.add_argument("--slow", action="store_true", help="also run the case studies' slow blocks")
    parser.add_argument("--compare", type=Path, help="an earlier OUT: exit 1 unless every verdict is identical")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=False)
    _audit_fixture_claims(args.out)
    _run_case_studies(args.out, args.slow)
    print(f"{_collect(args.out)} verdicts in {args.out / 'verdicts'}")
    if args.compare is None:
        return 0
    problems = _compare(args.compare / "verdicts", args.out / "verdicts")
    print("\n".join(problems) if problems else "every verdict.json identical")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
