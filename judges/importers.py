"""Importers: judgments made by other tools, into the tables of ``docs/data-formats.md``.

Formats
-------
``alpaca_eval``
    AlpacaEval annotations (``results/<model>/<annotator>/annotations.json``, optionally gzipped):
    ``output_1`` (the baseline) is shown first, ``output_2`` second; ``preference`` 1 → first, 2 →
    second, 0 or 1.5 → tie (AlpacaEval's two draw codes), null → invalid. Vignette id =
    ``sha1(instruction)[:12]``. Writes judgments, vignettes and responses.
``pandalm``
    The PandaLM test set (Wang et al. 2023) with its judges' result files: one order per item
    (``response1`` first); result 1 → first, 2 → second, 0/"Tie" → tie, "garbage" → invalid. The
    vignette is the (instruction, input) pair. Writes judgments, vignettes, responses and the three
    annotators' labels as human_pairs.
``mtbench``
    FastChat MT-Bench pairwise judgments (``data/mt_bench/model_judgment/*_pair.jsonl``). Each row
    holds two games: game 1 shows model_1's answer first, game 2 model_2's; ``g1_winner`` and
    ``g2_winner`` are already mapped to model names (``model_1``, ``model_2``, ``tie``, ``error`` →
    invalid). Vignette = question id; responses are per (question, model, turn).
``generic``
    Any CSV/JSONL/Parquet with a column mapping and an explicit verdict-value mapping (nothing is
    guessed; with no verdict column, a mapped raw-reply column is parsed with
    :func:`honestci.judges.parse.parse_verdict`).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from honestci.audit.errors import InputError, Problem
from honestci.judges.parse import parse_verdict
from honestci.judges.tables import (
    HUMAN_PAIR_COLUMNS,
    JUDGMENT_COLUMNS,
    RESPONSE_COLUMNS,
    VERDICTS,
    VIGNETTE_COLUMNS,
    read_rows,
    sibling_path,
    write_table,
)

FORMATS = ("alpaca_eval", "pandalm", "mtbench", "generic")


def prompt_id(text: str) -> str:
    """``sha1(text)[:12]``: AlpacaEval's derived prompt id (``alpaca_eval_gpt4_preferences_long.csv``)."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


@dataclass(frozen=True)
class ImportedTables:
    """The tables an importer produced (lists of row dicts; empty when the source lacks them)."""

    judgments: tuple[dict, ...]
    vignettes: tuple[dict, ...] = ()
    responses: tuple[dict, ...] = ()
    human_pairs: tuple[dict, ...] = ()
    source: str = ""
    extra_judgment_columns: tuple[str, ...] = field(default=())

    def to_frame(self) -> pd.DataFrame:
        """The judgments table."""
        return pd.DataFrame(list(self.judgments), columns=list(JUDGMENT_COLUMNS + self.extra_judgment_columns))

    def write(self, out: str | Path) -> dict[str, Path]:
        """Judgments to ``out``; the other non-empty tables beside it (``judgments.vignettes.jsonl``...)."""
        paths = {"judgments": write_table(self.judgments, out, JUDGMENT_COLUMNS + self.extra_judgment_columns)}
        for name, rows, columns in (
            ("vignettes", self.vignettes, VIGNETTE_COLUMNS),
            ("responses", self.responses, RESPONSE_COLUMNS),
            ("human_pairs", self.human_pairs, HUMAN_PAIR_COLUMNS),
        ):
            if rows:
                paths[name] = write_table(rows, sibling_path(out, name), columns)
        return paths


class _Collector:
    """Accumulates rows and problems; checks duplicate ids and duplicate ordered judgments."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.judgments: list[dict] = []
        self.vignettes: dict[str, dict] = {}
        self.responses: dict[str, dict] = {}
        self.human_pairs: list[dict] = []
        self._ordered: dict[tuple, str] = {}
        #: Files read, named when none of them holds a judgment.
        self.inputs: list[Path] = []

    def problem(self, file, line, column, message, fix="") -> None:
        self.problems.append(Problem(str(file), line, column, message, fix))

    def vignette(self, vignette_id: str, text: str, family: str | None, where: tuple[Path, int]) -> None:
        known = self.vignettes.get(vignette_id)
        if known is not None and known["text"] != text:
            self.problem(*where, None, f"vignette {vignette_id!r} appears with two different texts")
        self.vignettes.setdefault(vignette_id, {"vignette_id": vignette_id, "text": text, "family": family})

    def response(self, response_id: str, vignette_id: str, system: str, text: str, where: tuple[Path, int]) -> None:
        known = self.responses.get(response_id)
        if known is not None and known["text"] != text:
            self.problem(
                *where,
                None,
                f"response {response_id!r} appears with two different texts",
                "import each model's annotations once",
            )
        self.responses.setdefault(
            response_id, {"response_id": response_id, "vignette_id": vignette_id, "system": system, "text": text}
        )

    def judgment(self, row: dict, where: tuple[Path, int]) -> None:
        key = (row["judge"], row["response_first"], row["response_second"])
        if key in self._ordered:
            self.problem(
                *where,
                None,
                f"ordered pair {key[1:]} judged twice by {key[0]!r} (first at {self._ordered[key]})",
                "import each file once; a duplicate judgment would count twice",
            )
            return
        self._ordered[key] = f"{where[0]}:{where[1]}"
        self.judgments.append(row)

    def result(self, source: str, message: str, extra=()) -> ImportedTables:
        if self.problems:
            raise InputError(message, self.problems, fix="fix the listed rows (nothing was written)")
        if not self.judgments:
            raise InputError(
                f"No judgments found in {', '.join(map(str, self.inputs))}.",
                fix="pass a file that holds judgments (nothing was written)",
            )
        return ImportedTables(
            tuple(self.judgments),
            tuple(self.vignettes.values()),
            tuple(self.responses.values()),
            tuple(self.human_pairs),
            source,
            tuple(extra),
        )


def _load_json(path: Path):
    """JSON (or .json.gz); bare NaN is accepted (the PandaLM files contain it)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            return json.load(handle)
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{path}: not readable JSON (not UTF-8 text: {exc.reason} at byte {exc.start}).",
            fix="re-save the file as UTF-8",
        ) from None
    except (OSError, EOFError, json.JSONDecodeError) as exc:  # EOFError: a truncated .gz
        raise InputError(f"{path}: not readable JSON ({exc or 'cut off'}).", fix="pass the unchanged file") from None


def _json_records(path: Path, out: _Collector, what: str):
    """(1-based position, record) of the JSON list of objects in ``path``; other items are problems."""
    records = _load_json(path)
    out.inputs.append(path)
    if not isinstance(records, list):
        raise InputError(
            f"{path}: expected a JSON list of {what}, got a JSON {type(records).__name__}.",
            fix="pass the unchanged file",
        )
    for number, record in enumerate(records, start=1):
        if isinstance(record, dict):
            yield number, record
        else:
            out.problem(
                path, number, None, f"is a JSON {type(record).__name__}, not an object", "pass the unchanged file"
            )


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value == ""


# ----------------------------------------------------------------------------------------- AlpacaEval
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


def import_alpaca_eval(paths: Sequence[str | Path]) -> ImportedTables:
    """AlpacaEval ``annotations.json`` files (one per model) → judgments, vignettes, responses.

    A record's position in its file (1-based) is reported as its line.
    """
    out = _Collector()
    for path in _alpaca_files(paths):
        for number, rec in _json_records(path, out, "annotations"):
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
            if _missing(preference):
                verdict = "invalid"
            else:
                try:
                    known = _ALPACA_PREFERENCE.get(float(preference))
                except (TypeError, ValueError):
                    known = None
                if known is None:
                    out.problem(
                        path,
                        number,
                        "preference",
                        f"{preference!r} is not 1, 2 or a draw (0, 1.5)",
                        "continuous (logprob-weighted) preferences are scores, not verdicts: "
                        "import a discrete annotator's annotations",
                    )
                    continue
                verdict = known
            vid = prompt_id(rec["instruction"])
            out.vignette(vid, rec["instruction"], rec.get("dataset"), where)
            first, second = f"{vid}:{rec['generator_1']}", f"{vid}:{rec['generator_2']}"
            out.response(first, vid, rec["generator_1"], rec["output_1"], where)
            out.response(second, vid, rec["generator_2"], rec["output_2"], where)
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
                },
                where,
            )
    return out.result("alpaca_eval", "AlpacaEval annotations cannot be imported.")


# --------------------------------------------------------------------------------------------- PandaLM
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
    out = _Collector()
    items = {}
    for number, rec in _json_records(testset, out, "test-set items"):
        where = (testset, number)
        missing = [k for k in ("idx", "instruction", "cmp_key") if _missing(rec.get(k))]
        for key in missing:
            out.problem(testset, number, key, "missing", "pass the unchanged PandaLM test set")
        if missing:
            continue
        if not isinstance(rec["idx"], int) or isinstance(rec["idx"], bool):
            out.problem(
                testset, number, "idx", f"{rec['idx']!r} is not an integer", "pass the unchanged PandaLM test set"
            )
            continue
        context = "" if _missing(rec.get("input")) else str(rec["input"])
        text = str(rec["instruction"]) + ("\n\n" + context if context else "")
        vid = prompt_id(text)
        out.vignette(vid, text, rec.get("motivation_app"), where)
        systems = str(rec["cmp_key"]).split("_")
        if len(systems) != 2:
            systems = ["response1", "response2"]
        first, second = f"pandalm-{rec['idx']}-1", f"pandalm-{rec['idx']}-2"
        # An empty (or NaN) answer is a real output of the model: keep it as "".
        out.response(first, vid, systems[0], "" if _missing(rec.get("response1")) else str(rec["response1"]), where)
        out.response(second, vid, systems[1], "" if _missing(rec.get("response2")) else str(rec["response2"]), where)
        items[rec["idx"]] = (vid, first, second)
        for rater in ("annotator1", "annotator2", "annotator3"):
            label = rec.get(rater)
            if _missing(label):
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
        for number, rec in _json_records(path, out, "judge results"):
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


# -------------------------------------------------------------------------------------------- MT-Bench
_G1 = {"model_1": "first", "model_2": "second", "tie": "tie", "error": "invalid"}
_G2 = {"model_2": "first", "model_1": "second", "tie": "tie", "error": "invalid"}


def import_mtbench(
    path: str | Path, questions: str | Path | None = None, answers_dir: str | Path | None = None
) -> ImportedTables:
    """FastChat pairwise judgments → judgments (both games), plus vignettes and responses when the
    question file (``question.jsonl``) and answer folder (``model_answer/``) are given."""
    path = Path(path)
    out = _Collector()
    for number, rec in _jsonl_records(path, out):
        where = (path, number)
        missing = [
            k for k in ("question_id", "model_1", "model_2", "g1_winner", "g2_winner", "judge") if _missing(rec.get(k))
        ]
        for key in missing:
            out.problem(path, number, key, "missing", "pass an unchanged FastChat *_pair.jsonl file")
        if missing:
            continue
        if isinstance(rec["judge"], list) and not (rec["judge"] and isinstance(rec["judge"][0], str)):
            out.problem(path, number, "judge", f"{rec['judge']!r} does not start with the judge's name")
            continue
        judge = rec["judge"][0] if isinstance(rec["judge"], list) else str(rec["judge"])
        template = rec["judge"][1] if isinstance(rec["judge"], list) and len(rec["judge"]) > 1 else None
        turn = rec.get("turn", 1)
        if isinstance(turn, bool) or not isinstance(turn, int):
            out.problem(path, number, "turn", f"{turn!r} is not an integer", "FastChat numbers turns 1 and 2")
            continue
        vid = str(rec["question_id"])
        ids = {m: f"{vid}:{rec[m]}:turn{turn}" for m in ("model_1", "model_2")}
        for game, mapping, first, second in (("g1", _G1, "model_1", "model_2"), ("g2", _G2, "model_2", "model_1")):
            verdict = mapping.get(rec[f"{game}_winner"])
            if verdict is None:
                out.problem(
                    path, number, f"{game}_winner", f"{rec[f'{game}_winner']!r} is not model_1, model_2, tie or error"
                )
                continue
            out.judgment(
                {
                    "judge": judge,
                    "vignette_id": vid,
                    "response_first": ids[first],
                    "response_second": ids[second],
                    "verdict": verdict,
                    "raw": rec.get(f"{game}_judgment"),
                    "prompt_sha256": None,
                    "judge_template": template,
                    "turn": turn,
                },
                where,
            )
    if questions is not None:
        for number, rec in _jsonl_records(Path(questions), out):
            if _missing(rec.get("question_id")):
                out.problem(questions, number, "question_id", "missing", "pass FastChat's question.jsonl")
                continue
            turns = rec.get("turns") or []
            text = "\n\n".join(turns) if isinstance(turns, list) else str(turns)
            out.vignette(str(rec["question_id"]), text, rec.get("category"), (Path(questions), number))
    if answers_dir is not None:
        _mtbench_answers(Path(answers_dir), out)
    return out.result("mtbench", "The MT-Bench judgments cannot be imported.", ("judge_template", "turn"))


def _jsonl_records(path: Path, out: _Collector):
    """(line, record) of a JSON Lines file, keeping JSON types (FastChat's "judge" is a list)."""
    if not Path(path).is_file():
        raise InputError(f"{path}: file not found.", fix="check the path")
    out.inputs.append(path)
    with open(path, "rb") as handle:
        for number, chunk in enumerate(handle, start=1):
            try:
                line = chunk.decode("utf-8")
            except UnicodeDecodeError as exc:
                out.problem(
                    path,
                    number,
                    None,
                    f"is not valid UTF-8: byte 0x{chunk[exc.start]:02x} at byte {exc.start + 1} of the line",
                    "re-save the file as UTF-8",
                )
                continue
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                out.problem(path, number, None, f"not valid JSON ({exc.msg})")
                continue
            if not isinstance(record, dict):
                out.problem(
                    path,
                    number,
                    None,
                    f"is a JSON {type(record).__name__}, not an object",
                    "write one JSON object per line",
                )
                continue
            yield number, record


def _mtbench_answers(folder: Path, out: _Collector) -> None:
    files = sorted(folder.glob("*.jsonl")) if folder.is_dir() else []
    if not files:
        raise InputError(f"{folder}: no model answer files (*.jsonl).", fix="pass FastChat's model_answer/ folder")
    for path in files:
        for number, rec in _jsonl_records(path, out):
            try:
                turns = rec["choices"][0]["turns"]
                vid, model = str(rec["question_id"]), rec["model_id"]
            except (KeyError, IndexError, TypeError):
                out.problem(path, number, "choices", "not a FastChat answer record (question_id, model_id, choices)")
                continue
            for turn, text in enumerate(turns, start=1):
                out.response(f"{vid}:{model}:turn{turn}", vid, model, text, (path, number))


# --------------------------------------------------------------------------------------------- generic
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
    out = _Collector()
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
            if _missing(record.get(target)):
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
