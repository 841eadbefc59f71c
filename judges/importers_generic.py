"""The importer of any table of judgments, by an explicit column and verdict-value mapping (format
``generic``, :mod:`honestci.judges.importers`).
"""

from __future__ import annotations

from pathlib import Path

from honestci.audit.errors import InputError
from honestci.judges.importers import Collector, ImportedTables, is_missing
from honestci.judges.parse import parse_verdict
from honestci.judges.tables import VERDICTS, read_rows

GENERIC_TARGETS = ("judge", "vignette_id", "response_first", "response_second", "verdict", "raw", "prompt_sha256")


def import_generic(
    path: str | Path, mapping: dict[str, str], verdict_values: dict[str, str] | None = None, judge: str | None = None
) -> ImportedTables:
    """Any table of judgments, with ``mapping`` target column → source column.

    ``verdict_values`` maps source verdict values to ``first``/``second``/``tie``/``invalid``
    (default: those four words only; anything else is reported, never guessed). Without a
    ``verdict`` column, a mapped ``raw`` column is parsed. ``judge`` sets a constant judge name.
    """
    path = Path(path)
    unknown = sorted(set(mapping) - set(GENERIC_TARGETS))
    if unknown:
        raise InputError(f"Unknown target column(s) {unknown} in the mapping.", fix=f"map onto {GENERIC_TARGETS}")
    values = {v: v for v in VERDICTS} if verdict_values is None else dict(verdict_values)
    bad = sorted({v for v in values.values() if v not in VERDICTS})
    if bad:
        raise InputError(f"Verdict mapping targets {bad} are not verdicts.", fix=f"map values onto {VERDICTS}")
    needed = ["vignette_id", "response_first", "response_second"] + ([] if judge else ["judge"])
    if "verdict" not in mapping and "raw" not in mapping:
        needed.append("verdict")
    missing = [t for t in needed if t not in mapping]
    if missing:
        raise InputError(
            f"The mapping lacks required column(s) {missing}.", fix="add --map TARGET=SOURCE for each (or --judge NAME)"
        )
    rows = read_rows(path)
    out = Collector()
    out.inputs.append(path)
    for row in rows:
        src = row.values
        record, ok = {}, True
        for target, source in mapping.items():
            if source not in src:
                out.problem(path, row.line, source, f"column {source!r} (mapped to {target}) is absent")
                ok = False
            else:
                record[target] = src[source]
        if not ok:
            continue
        if judge:
            record["judge"] = judge
        for target in ("judge", "vignette_id", "response_first", "response_second"):
            if is_missing(record.get(target)):
                out.problem(path, row.line, mapping.get(target, target), "missing or empty")
                ok = False
        if "verdict" in mapping:
            verdict = values.get(record["verdict"])
            if verdict is None:
                out.problem(
                    path,
                    row.line,
                    mapping["verdict"],
                    f"value {record['verdict']!r} has no verdict mapping",
                    "add --verdict-map VALUE=first|second|tie|invalid",
                )
                ok = False
            record["verdict"] = verdict
        else:
            record["verdict"] = parse_verdict(record.get("raw")).verdict
        if ok:
            record.setdefault("raw", None)
            record.setdefault("prompt_sha256", None)
            out.judgment(record, (path, row.line))
    return out.result("generic", f"{path}: judgments cannot be imported.")
