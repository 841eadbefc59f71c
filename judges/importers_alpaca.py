"""Importers of preference-annotation sets: AlpacaEval's annotator outputs and the PandaLM test set
with its judges' results (formats ``alpaca_eval`` and ``pandalm``, :mod:`honestci.judges.importers`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from honestci.audit.errors import InputError
from honestci.judges.importers import Collector, ImportedTables, is_missing, json_records, prompt_id

_ALPACA_PREFERENCE = {1.0: "first", 2.0: "second", 0.0: "tie", 1.5: "tie"}


def _alpaca_files(paths: Sequence[str | Path]) -> list[Path]:
    files = []
    for path in map(Path, paths):
        if path.is_dir():
            files += sorted(p for p in path.iterdir() if p.name.endswith((".json", ".json.gz")))
        elif path.is_file():
            files.append(path)
        else:
            raise InputError(f"{path}: not found.", fix="pass annotation files or a folder of them")
    if not files:
        raise InputError("No AlpacaEval annotation files found.", fix="pass annotations.json(.gz) files")
    return files


def _alpaca_response(out: Collector, vid: str, system: str, text: str, where: tuple[Path, int]) -> str:
    """The response id of ``system``'s ``text`` on vignette ``vid``: ``vid:system`` for the first
    text seen, ``vid:system#sha1(text)[:12]`` for any other (a baseline regenerated between result
    files is a distinct response, not a conflict)."""
    plain = f"{vid}:{system}"
    known = out.responses.get(plain)
    response_id = plain if known is None or known["text"] == text else f"{plain}#{prompt_id(text)}"
    out.response(response_id, vid, system, text, where)
    return response_id


def import_alpaca_eval(paths: Sequence[str | Path]) -> ImportedTables:
    """AlpacaEval ``annotations.json`` files (one per model) → judgments, vignettes, responses.

    A discrete ``preference`` (1, 2; 0 or 1.5 a draw) is a verdict. A continuous one in [1, 2]
    (AlpacaEval 2.0's weighted annotator: 1 + P(output_2 better)) is kept as ``preference_first``
    = 2 − preference, output_1 being shown first, with the verdict naming the side it favours.
    A record's position in its file (1-based) is reported as its line.
    """
    out = Collector()
    for path in _alpaca_files(paths):
        for number, rec in json_records(path, out, "annotations"):
            where = (path, number)
            missing = [
                k
                for k in ("instruction", "output_1", "output_2", "generator_1", "generator_2", "annotator")
                if not isinstance(rec.get(k), str)
            ]
            if missing:
                for key in missing:
                    out.problem(path, number, key, "missing or not text", "pass unchanged AlpacaEval annotations")
                continue
            preference = rec.get("preference")
            continuous = None
            if is_missing(preference):
                verdict = "invalid"
            else:
                try:
                    known = _ALPACA_PREFERENCE.get(float(preference))
                except (TypeError, ValueError):
                    known = None
                continuous = None
                if known is None and isinstance(preference, (int, float)) and 1.0 <= float(preference) <= 2.0:
                    # AlpacaEval 2.0's weighted annotator: preference = 1 + P(output_2 better), and
                    # output_1 is shown first, so P(first better) = 2 - preference.
                    continuous = 2.0 - float(preference)
                    known = "first" if continuous > 0.5 else "second" if continuous < 0.5 else "tie"
                if known is None:
                    out.problem(
                        path,
                        number,
                        "preference",
                        f"{preference!r} is neither 1, 2, a draw (0, 1.5) nor a continuous preference in [1, 2]",
                        "pass unchanged AlpacaEval annotations",
                    )
                    continue
                verdict = known
            vid = prompt_id(rec["instruction"])
            out.vignette(vid, rec["instruction"], rec.get("dataset"), where)
            first = _alpaca_response(out, vid, rec["generator_1"], rec["output_1"], where)
            second = _alpaca_response(out, vid, rec["generator_2"], rec["output_2"], where)
            raw = rec.get("raw_completion")
            out.judgment(
                {
                    "judge": rec["annotator"],
                    "vignette_id": vid,
                    "response_first": first,
                    "response_second": second,
                    "verdict": verdict,
                    "raw": raw if isinstance(raw, str) or raw is None else json.dumps(raw),
                    "prompt_sha256": None,
                    **({} if continuous is None else {"preference_first": continuous}),
                },
                where,
            )
    continuous_preferences = any("preference_first" in row for row in out.judgments)
    return out.result(
        "alpaca_eval",
        "AlpacaEval annotations cannot be imported.",
        extra=("preference_first",) if continuous_preferences else (),
    )


_PANDALM_LABEL = {0: "tie", 1: "a", 2: "b"}
_PANDALM_RESULT = {"1": "first", "2": "second", "0": "tie", "tie": "tie", "garbage": "invalid"}


def pandalm_judge_name(path: Path) -> str:
    name = path.name
    for suffix in (".json.gz", ".json"):
        name = name.removesuffix(suffix)
    return name.removesuffix("-testset-v1")


def import_pandalm(
    testset: str | Path, judge_files: dict[str, str | Path] | Sequence[str | Path] = ()
) -> ImportedTables:
    """The PandaLM test set (``testset-v1.json``) plus judge result files → all four tables.

    ``judge_files`` maps judge names to result files, or is a list of files (the judge is then the
    file name without ``-testset-v1.json``: ``gpt-3.5-turbo``, ``pandalm-7b``).
    """
    testset = Path(testset)
    out = Collector()
    items = {}
    for number, rec in json_records(testset, out, "test-set items"):
        where = (testset, number)
        missing = [k for k in ("idx", "instruction", "cmp_key") if is_missing(rec.get(k))]
        for key in missing:
            out.problem(testset, number, key, "missing", "pass the unchanged PandaLM test set")
        if missing:
            continue
        if not isinstance(rec["idx"], int) or isinstance(rec["idx"], bool):
            out.problem(
                testset, number, "idx", f"{rec['idx']!r} is not an integer", "pass the unchanged PandaLM test set"
            )
            continue
        context = "" if is_missing(rec.get("input")) else str(rec["input"])
        text = str(rec["instruction"]) + ("\n\n" + context if context else "")
        vid = prompt_id(text)
        out.vignette(vid, text, rec.get("motivation_app"), where)
        systems = str(rec["cmp_key"]).split("_")
        if len(systems) != 2:
            systems = ["response1", "response2"]
        first, second = f"pandalm-{rec['idx']}-1", f"pandalm-{rec['idx']}-2"
        # An empty (or NaN) answer is a real output of the model: keep it as "".
        out.response(first, vid, systems[0], "" if is_missing(rec.get("response1")) else str(rec["response1"]), where)
        out.response(second, vid, systems[1], "" if is_missing(rec.get("response2")) else str(rec["response2"]), where)
        items[rec["idx"]] = (vid, first, second)
        for rater in ("annotator1", "annotator2", "annotator3"):
            label = rec.get(rater)
            if is_missing(label):
                continue  # an absent rating is not a rating
            if not isinstance(label, (int, float)) or label not in _PANDALM_LABEL:
                out.problem(testset, number, rater, f"label {label!r} is not 0, 1 or 2")
                continue
            out.human_pairs.append(
                {
                    "vignette_id": vid,
                    "response_a": first,
                    "response_b": second,
                    "label": _PANDALM_LABEL[int(label)],
                    "rater_id": rater,
                }
            )
    if not isinstance(judge_files, dict):
        judge_files = {pandalm_judge_name(Path(p)): p for p in judge_files}
    for judge, path in judge_files.items():
        path = Path(path)
        for number, rec in json_records(path, out, "judge results"):
            result_key = next((k for k in rec if k.endswith("_result")), None)
            reason_key = next((k for k in rec if k.endswith("_reason")), None)
            idx = rec.get("idx")
            if result_key is None or not isinstance(idx, int) or idx not in items:
                out.problem(
                    path,
                    number,
                    "idx" if result_key else "*_result",
                    "no such test-set item" if result_key else "no result field",
                    "pass a PandaLM judge result file for this test set",
                )
                continue
            verdict = _PANDALM_RESULT.get(str(rec[result_key]).strip().lower())
            if verdict is None:
                out.problem(path, number, result_key, f"{rec[result_key]!r} is not 1, 2, 0/Tie or garbage")
                continue
            vid, first, second = items[idx]
            out.judgment(
                {
                    "judge": judge,
                    "vignette_id": vid,
                    "response_first": first,
                    "response_second": second,
                    "verdict": verdict,
                    "raw": rec.get(reason_key) if reason_key else None,
                    "prompt_sha256": None,
                },
                (path, number),
            )
    return out.result("pandalm", "The PandaLM files cannot be imported.")
