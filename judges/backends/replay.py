"""Replay recorded verdicts from a judgments table (no model is called).

Useful to re-run a pipeline on judgments made earlier or elsewhere, and to test the judging run
end to end. Each ordered pair is answered with its recorded verdict, raw reply and prompt hash; an
ordered pair with no record becomes ``invalid`` ("no recorded judgment"), counted like any other.
"""

from __future__ import annotations

from pathlib import Path

from honestci.audit.errors import InputError, Problem
from honestci.judges.backends.base import Completion, JudgeRequest
from honestci.judges.tables import VERDICTS, read_rows, require_columns


class ReplayBackend:
    """Answer from a judgments file (JSONL, CSV or Parquet), optionally filtered to one ``judge``."""

    concurrency = 1

    def __init__(self, judgments_path: str | Path, judge: str | None = None):
        rows = read_rows(judgments_path)
        require_columns(judgments_path, rows, ("judge", "response_first", "response_second", "verdict"))
        judges = sorted({row.values["judge"] for row in rows})
        if judge is None:
            if len(judges) != 1:
                raise InputError(
                    f"{judgments_path}: judgments from {len(judges)} judges {judges[:5]}.",
                    fix="choose one with --judge",
                )
            judge = judges[0]
        self.judge_name = judge
        self._records: dict[tuple[str, str], dict] = {}
        problems = []
        for row in rows:
            values = row.values
            if values["judge"] != judge:
                continue
            if values["verdict"] not in VERDICTS:
                problems.append(
                    Problem(
                        str(judgments_path),
                        row.line,
                        "verdict",
                        f"{values['verdict']!r} is not one of {VERDICTS}",
                        "fix the verdict",
                    )
                )
            pair = (values["response_first"], values["response_second"])
            if pair in self._records:
                problems.append(
                    Problem(
                        str(judgments_path),
                        row.line,
                        None,
                        f"ordered pair {pair} judged twice by {judge}",
                        "keep one judgment per order",
                    )
                )
            self._records[pair] = values
        if problems:
            raise InputError(f"{judgments_path}: cannot replay these judgments.", problems)

    async def complete(self, request: JudgeRequest) -> Completion:
        record = self._records.get((request.response_first, request.response_second))
        if record is None:
            return Completion(None, 0, "no recorded judgment for this ordered pair")
        return Completion(
            record.get("raw") or "",
            0,
            recorded_verdict=record["verdict"],
            recorded_prompt_sha256=record.get("prompt_sha256") or None,
        )

    async def aclose(self) -> None:
        return None
