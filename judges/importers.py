"""Importers: judgments made by other tools, into the tables of ``docs/data-formats.md``.

Formats
-------
``alpaca_eval``
    AlpacaEval annotations (``results/<model>/<annotator>/annotations.json``, optionally gzipped):
    ``output_1`` (the baseline) is shown first, ``output_2`` second; ``preference`` 1 → first, 2 →
    second, 0 or 1.5 → tie (AlpacaEval's two draw codes), null → invalid. Vignette id =
    ``sha1(instruction)[:12]``. Writes judgments, vignettes and responses. Several files at once:
    a generator's differing text for one instruction (a regenerated baseline) is a distinct response.
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
``arena``
    FastChat Chatbot Arena battles (``clean_battle_*.json``): one judged order per battle,
    ``model_a`` first. Vignette = ``question_id``.
``lm_eval``, ``inspect``
    Per-item scores of two or more models (lm-evaluation-harness ``--log_samples`` JSONL; inspect_ai
    ``.eval``/``.json`` logs with graded scorers) as metric contests: higher score wins, both orders
    written (a metric has no order). inspect_ai pairwise scorers (the score names ``model_a`` and
    ``model_b``) import as judgments, one per judged order, by the grader role's model.
``generic``
    Any CSV/JSONL/Parquet with a column mapping and an explicit verdict-value mapping (nothing is
    guessed; with no verdict column, a mapped raw-reply column is parsed with
    :func:`honestci.judges.parse.parse_verdict`).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import math
import re
import struct
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from honestci.audit.errors import InputError, Problem, require_extra
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

FORMATS = ("alpaca_eval", "pandalm", "mtbench", "arena", "lm_eval", "inspect", "generic")


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
        pool = ("pool",) if any("pool" in row for row in self.responses) else ()
        for name, rows, columns in (
            ("vignettes", self.vignettes, VIGNETTE_COLUMNS),
            ("responses", self.responses, RESPONSE_COLUMNS + pool),
            ("human_pairs", self.human_pairs, HUMAN_PAIR_COLUMNS),
        ):
            if rows:
                paths[name] = write_table(rows, sibling_path(out, name), columns)
        return paths


def assign_pools(
    tables: ImportedTables, candidates: Sequence[str], heldout_fraction: float = 0.0, seed: int = 0
) -> ImportedTables:
    """Mark the candidates' responses with a ``pool`` (``selection`` or ``heldout``) for the
    winner's-curse analysis, splitting the vignettes at random.

    The vignettes the candidates answered are permuted by ``numpy.random.default_rng(seed)``
    (sorted ids first, so the split depends on the seed and the ids only); the first
    ``round(heldout_fraction · G)`` form the held-out pool, the rest the selection pool. Every
    candidate response takes its vignette's pool, so all candidates share one split (the selection
    covariance needs common vignettes); other systems' responses (the opponent, a baseline) get
    none. ``heldout_fraction = 0`` puts every vignette in the selection pool.

    Raises
    ------
    InputError
        A candidate with no response, or a fraction outside [0, 1).
    """
    import numpy as np

    if not 0.0 <= heldout_fraction < 1.0:
        raise InputError(
            f"held-out fraction {heldout_fraction} is outside [0, 1)",
            fix="pass a fraction of the vignettes to hold out, e.g. 0.5 (0: no held-out pool)",
        )
    systems = {row["system"] for row in tables.responses}
    missing = sorted(set(candidates) - systems)
    if missing:
        raise InputError(
            f"no responses of candidate(s) {missing} among the imported tables",
            fix=f"name systems that were imported: {sorted(systems)}",
        )
    chosen = set(candidates)
    vignettes = sorted({row["vignette_id"] for row in tables.responses if row["system"] in chosen})
    order = np.random.default_rng(seed).permutation(len(vignettes))
    n_heldout = round(heldout_fraction * len(vignettes))
    heldout = {vignettes[i] for i in order[:n_heldout]}
    responses = tuple(
        {**row, "pool": "heldout" if row["vignette_id"] in heldout else "selection"} if row["system"] in chosen else row
        for row in tables.responses
    )
    return replace(tables, responses=responses)


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


def _alpaca_response(out: _Collector, vid: str, system: str, text: str, where: tuple[Path, int]) -> str:
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
            continuous = None
            if _missing(preference):
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


# ------------------------------------------------------------------------------------- Arena battles
_ARENA_WINNER = {"model_a": "first", "model_b": "second", "tie": "tie", "tie (bothbad)": "tie"}


def _records(path: Path, out: _Collector, what: str):
    """A JSON list of objects (``.json``/``.json.gz``) or JSON Lines (``.jsonl``), with positions."""
    if not path.is_file():
        raise InputError(f"{path}: file not found.", fix="check the path")
    if path.name.lower().endswith((".jsonl", ".ndjson")):
        return _jsonl_records(path, out)
    return _json_records(path, out, what)


def _conversation_text(conversation, role: str) -> str | None:
    """The ``role`` turns of a FastChat conversation (list of {role, content}) joined; None if absent."""
    if not isinstance(conversation, list):
        return None
    parts = [m.get("content") for m in conversation if isinstance(m, dict) and m.get("role") == role]
    return "\n\n".join(p for p in parts if isinstance(p, str)) if parts else None


def import_arena(path: str | Path) -> ImportedTables:
    """FastChat Chatbot Arena battles (``clean_battle_*.json``, a JSON list, or JSON Lines) → judgments.

    Each battle is one judged order as shown: ``model_a`` first. ``winner`` ``model_a`` → first,
    ``model_b`` → second, ``tie`` and ``tie (bothbad)`` → tie (the original word is kept in ``raw``).
    Vignette (cluster) = ``question_id``; responses are per (question, model, turn). When a battle
    carries ``conversation_a``/``conversation_b`` (lists of {role, content}), vignettes (the user
    turns) and responses (the assistant turns) are written too.
    """
    path = Path(path)
    out = _Collector()
    for number, rec in _records(path, out, "battles"):
        where = (path, number)
        missing = [k for k in ("question_id", "model_a", "model_b", "winner", "judge") if _missing(rec.get(k))]
        for key in missing:
            out.problem(path, number, key, "missing", "pass an unchanged FastChat battle file")
        if missing:
            continue
        verdict = _ARENA_WINNER.get(rec["winner"])
        if verdict is None:
            out.problem(path, number, "winner", f"{rec['winner']!r} is not model_a, model_b, tie or tie (bothbad)")
            continue
        turn = rec.get("turn", 1)
        if isinstance(turn, bool) or not isinstance(turn, int):
            out.problem(path, number, "turn", f"{turn!r} is not an integer", "FastChat numbers turns with integers")
            continue
        if rec["model_a"] == rec["model_b"]:
            out.problem(path, number, "model_b", f"the same model {rec['model_a']!r} on both sides")
            continue
        vid = str(rec["question_id"])
        ids = {side: f"{vid}:{rec[side]}:turn{turn}" for side in ("model_a", "model_b")}
        question = _conversation_text(rec.get("conversation_a"), "user")
        if question is not None:
            out.vignette(vid, question, rec.get("category") or rec.get("language"), where)
            for side, conversation in (("model_a", "conversation_a"), ("model_b", "conversation_b")):
                answer = _conversation_text(rec.get(conversation), "assistant")
                if answer is None:
                    out.problem(
                        path, number, conversation, "has no assistant turn while conversation_a has a user turn"
                    )
                else:
                    out.response(ids[side], vid, rec[side], answer, where)
        out.judgment(
            {
                "judge": str(rec["judge"]),
                "vignette_id": vid,
                "response_first": ids["model_a"],
                "response_second": ids["model_b"],
                "verdict": verdict,
                "raw": rec["winner"],
                "prompt_sha256": None,
                "turn": turn,
            },
            where,
        )
    return out.result("arena", "The Arena battles cannot be imported.", ("turn",))


# ----------------------------------------------------------------- per-item scores → metric contests
def _metric_verdict(first: float | None, second: float | None) -> str:
    """Higher score wins, equal scores tie; a missing score (the item errored) is an invalid verdict."""
    if first is None or second is None:
        return "invalid"
    return "first" if first > second else "second" if second > first else "tie"


def _metric_contests(out: _Collector, judge: str, scored: dict, extra: tuple[str, ...] = ()) -> None:
    """Every pair of systems on every item they share, compared by score, in both orders.

    ``scored`` maps system → {item key: (vignette_id, response_id, score or None, where, extras)}.
    A metric sees no presentation order, so both orders are the same comparison: both are written
    (position bias is zero by construction, not estimated). An item one system lacks is a problem.
    """
    systems = list(scored)
    if len(systems) < 2:
        raise InputError(
            f"Per-item scores of one system only ({', '.join(systems) or 'none'}): a win rate needs two.",
            fix="pass the files of two or more models run on the same items",
        )
    everything = set().union(*(set(items) for items in scored.values()))
    for system in systems:
        for key in sorted(everything - set(scored[system]), key=str):
            other = next(s for s in systems if key in scored[s])
            file, line = scored[other][key][3]
            out.problem(
                file, line, None, f"item {key!r} has no result for {system!r}", "run every model on the same items"
            )
    for i, a in enumerate(systems):
        for b in systems[i + 1 :]:
            for key in scored[a]:
                if key not in scored[b]:
                    continue
                vid, ra, sa, where, extras = scored[a][key]
                vid_b, rb, sb, where_b, _ = scored[b][key]
                if vid_b != vid:
                    out.problem(
                        where_b[0],
                        where_b[1],
                        None,
                        f"item {key!r} is in cluster {vid_b!r} here but {vid!r} in {where[0]}",
                    )
                    continue
                for (r1, s1), (r2, s2) in (((ra, sa), (rb, sb)), ((rb, sb), (ra, sa))):
                    out.judgment(
                        {
                            "judge": judge,
                            "vignette_id": vid,
                            "response_first": r1,
                            "response_second": r2,
                            "verdict": _metric_verdict(s1, s2),
                            "raw": json.dumps({"score_first": s1, "score_second": s2}),
                            "prompt_sha256": None,
                            **{name: extras.get(name) for name in extra},
                        },
                        where,
                    )


def _named_paths(paths: Sequence[str | Path]) -> list[tuple[str | None, Path]]:
    """``NAME=PATH`` or ``PATH`` (an existing file is never split at '=')."""
    named: list[tuple[str | None, Path]] = []
    for spec in map(str, paths):
        name, sep, rest = spec.partition("=")
        named.append((name, Path(rest)) if sep and name and not Path(spec).exists() else (None, Path(spec)))
    return named


def _number(value) -> float | str:
    """A per-item score as a float; a message (str) when it is not one number."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else "is not finite"
    return f"{value!r} is not a number (a per-item score)"


def _at_path(record: dict, dotted: str):
    """``record`` followed along ``a.b.c``; KeyError if any step is absent."""
    value = record
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(part)
        value = value[part]
    return value


# ---------------------------------------------------------------------------- lm-evaluation-harness
_LM_EVAL_NON_METRIC = {
    "doc_id",
    "doc",
    "target",
    "arguments",
    "resps",
    "filtered_resps",
    "filter",
    "metrics",
    "doc_hash",
    "prompt_hash",
    "target_hash",
}
_LM_EVAL_NAME = re.compile(r"^samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.jsonl(\.gz)?$")


def import_lm_eval(
    paths: Sequence[str | Path],
    metric: str | None = None,
    cluster_key: str | None = None,
    filter_name: str | None = None,
) -> ImportedTables:
    """lm-evaluation-harness ``--log_samples`` files (``samples_<task>_<date>.jsonl``), one per model,
    → metric contests between the models on each document.

    The model is the file's folder (lm-eval writes ``<output_path>/<model>/samples_...``) unless
    given as ``NAME=PATH``. ``metric`` picks the per-sample key (``acc``, ``exact_match``...; default:
    the only one). Cluster (vignette) = ``doc_id``, or the value at ``cluster_key``, a dotted path
    into ``doc``. Records per filter (``filter``) are told apart by ``filter_name`` when a file has
    several. Verdicts: the higher per-sample score wins, equal scores tie (see
    :func:`_metric_contests`).
    """
    out = _Collector()
    scored: dict[str, dict] = {}
    tasks = set()
    chosen_metric = metric
    for name, path in _named_paths(paths):
        match = _LM_EVAL_NAME.match(path.name)
        task = match["task"] if match else path.name.split(".")[0]
        tasks.add(task)
        system = name or path.resolve().parent.name
        if system in scored:
            raise InputError(f"{path}: model {system!r} given twice.", fix="pass each model's file once, as NAME=PATH")
        items: dict = {}
        scored[system] = items
        for number, rec in _records(path, out, "samples"):
            where = (path, number)
            filt = rec.get("filter")
            if filter_name is not None and filt != filter_name:
                continue
            if _missing(rec.get("doc_id")) or isinstance(rec.get("doc_id"), (dict, list)):
                out.problem(path, number, "doc_id", "missing or not an id", "pass an unchanged --log_samples file")
                continue
            if chosen_metric is None:
                names = [k for k in rec if k not in _LM_EVAL_NON_METRIC]
                if len(names) != 1:
                    raise InputError(
                        f"{path}, line {number}: per-sample metrics {names}; which one is the score?",
                        fix="pass --metric NAME",
                    )
                chosen_metric = names[0]
            if chosen_metric not in rec:
                out.problem(path, number, chosen_metric, "missing", "pick a metric every sample has (--metric)")
                continue
            score = _number(rec[chosen_metric])
            if isinstance(score, str):
                out.problem(
                    path,
                    number,
                    chosen_metric,
                    score,
                    "pick a per-sample metric (acc, exact_match...), not a corpus one",
                )
                continue
            doc = rec.get("doc") if isinstance(rec.get("doc"), dict) else {}
            if cluster_key is None:
                vid, text = str(rec["doc_id"]), json.dumps(doc, ensure_ascii=False, sort_keys=True)
            else:
                try:
                    value = _at_path(doc, cluster_key)
                except KeyError as exc:
                    out.problem(
                        path, number, f"doc.{cluster_key}", f"absent (no {exc.args[0]!r})", "check --cluster-key"
                    )
                    continue
                vid, text = f"{task}:{value}", f"{cluster_key} = {value}"
            key = (task, str(rec["doc_id"]))
            if key in items:
                out.problem(
                    path,
                    number,
                    "doc_id",
                    f"doc {rec['doc_id']!r} appears twice (first at line {items[key][3][1]})",
                    "several filters: choose one with --filter" if filt is not None else "pass an unchanged file",
                )
                continue
            response_id = f"{task}:{rec['doc_id']}:{system}"
            out.vignette(vid, text, task, where)
            resps = rec.get("filtered_resps", rec.get("resps"))
            out.response(
                response_id,
                vid,
                system,
                resps if isinstance(resps, str) else json.dumps(resps, ensure_ascii=False),
                where,
            )
            items[key] = (vid, response_id, score, where, {"doc_id": str(rec["doc_id"])})
    if out.problems:
        raise InputError("The lm-evaluation-harness samples cannot be imported.", out.problems)
    _metric_contests(out, f"lm_eval:{chosen_metric}", scored, ("doc_id",))
    return out.result("lm_eval", "The lm-evaluation-harness samples cannot be imported.", ("doc_id",))


# ------------------------------------------------------------------------------------------- inspect_ai
#: inspect_ai's letter values (inspect_ai.scorer: CORRECT, INCORRECT, PARTIAL, NOANSWER) as numbers.
_INSPECT_LETTERS = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0}
#: A pairwise scorer's value → the verdict: A (shown first) / B (second) / tie, or A's score 1 / 0 / ½.
_PAIRWISE_VALUES = {"a": "first", "b": "second", "tie": "tie", 1.0: "first", 0.0: "second", 0.5: "tie"}
#: ZIP compression method 93: zstd, which inspect_ai (0.3.1xx on) writes into ``.eval`` logs.
_ZIP_ZSTD = 93
#: A ZIP local file header (APPNOTE 4.3.7): 30 bytes, then the name and the extra field.
_ZIP_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")


def _zstd_decompress(data: bytes, where: str) -> bytes:
    """zstd frames (one or several) → bytes: the stdlib's ``compression.zstd`` (Python 3.14+), else
    the ``zstandard`` package of the ``inspect`` extra."""
    try:
        from compression import zstd  # type: ignore[import-not-found,unused-ignore]

        return zstd.decompress(data)
    except ImportError:
        pass
    require_extra(
        "inspect",
        "zstandard",
        needed_by=f"reading {where} (zstd-compressed, as inspect_ai writes .eval logs)",
        instead="convert the log: inspect log convert --to json",
    )
    import zstandard

    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True) as reader:
        return reader.read()


def _zip_member(path: Path, archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    """One member's bytes: stored and deflate members through the stdlib, zstd ones from their raw
    bytes (the stdlib reads zstd only from Python 3.14). The CRC-32 is checked either way."""
    if info.compress_type != _ZIP_ZSTD:
        return archive.read(info)
    with open(path, "rb") as handle:
        handle.seek(info.header_offset)
        fields = _ZIP_LOCAL_HEADER.unpack(handle.read(_ZIP_LOCAL_HEADER.size))
        if fields[0] != b"PK\x03\x04":
            raise zipfile.BadZipFile(f"bad local header for {info.filename}")
        handle.seek(info.header_offset + _ZIP_LOCAL_HEADER.size + fields[10] + fields[11])
        data = _zstd_decompress(handle.read(info.compress_size), f"{path}")
    if zlib.crc32(data) != info.CRC:
        raise zipfile.BadZipFile(f"CRC-32 mismatch in {info.filename}")
    return data


def _inspect_log(path: Path, out: _Collector) -> tuple[dict, list[tuple[int, str, object]]]:
    """An inspect_ai log (``.json`` or zipped ``.eval``) → its header and its samples as
    (1-based position, field prefix, sample).

    ``.eval`` (inspect_ai's ``log/_recorders/eval.py``): ``header.json`` (or, in a log still being
    written, ``_journal/start.json``) holds ``eval``, ``plan``, ``results``; each sample is a member
    ``samples/{id}_epoch_{n}.json``; a member written twice (a re-run sample) counts once, the last
    write, as inspect_ai reads it. A sample's position among the members is its line, and its
    member name starts its fields (``samples/fr_epoch_1.json:scores.match.value``).
    """
    if not path.is_file():
        raise InputError(f"{path}: file not found.", fix="check the path")
    out.inputs.append(path)
    if path.suffix != ".eval":
        log = _load_json(path)
        if not isinstance(log, dict) or not isinstance(log.get("eval"), dict):
            raise InputError(f"{path}: not an inspect_ai JSON log (no 'eval' object).", fix="pass a .json eval log")
        records = log.get("samples")
        if not isinstance(records, list):
            raise InputError(
                f"{path}: the log has no samples (status {log.get('status')!r}).",
                fix="pass a log written with samples (not --no-log-samples)",
            )
        return log, [(i + 1, f"samples[{i}].", sample) for i, sample in enumerate(records)]
    try:
        with zipfile.ZipFile(path) as archive:
            members = {info.filename: info for info in archive.infolist()}  # the last write of a name wins
            name = "header.json" if "header.json" in members else "_journal/start.json"
            if name not in members:
                raise InputError(
                    f"{path}: not an inspect_ai .eval log (no header.json or _journal/start.json).",
                    fix="pass an .eval log written by inspect_ai",
                )
            header = json.loads(_zip_member(path, archive, members[name]))
            samples: list[tuple[int, str, object]] = []
            names = [n for n in members if n.startswith("samples/") and n.endswith(".json")]
            for position, member in enumerate(names, start=1):
                try:
                    samples.append((position, f"{member}:", json.loads(_zip_member(path, archive, members[member]))))
                except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                    out.problem(path, position, member, f"not valid JSON ({exc})", "pass the unchanged log")
    except (zipfile.BadZipFile, OSError, EOFError, json.JSONDecodeError, zlib.error) as exc:
        raise InputError(
            f"{path}: not a readable .eval log ({exc}).", fix="pass the unchanged file, or convert it to JSON"
        ) from None
    if not isinstance(header, dict) or not isinstance(header.get("eval"), dict):
        raise InputError(f"{path}: {name} has no 'eval' object.", fix="pass an .eval log written by inspect_ai")
    if not samples and not out.problems:
        raise InputError(
            f"{path}: the log has no samples (status {header.get('status')!r}).",
            fix="pass a log written with samples (not --no-log-samples)",
        )
    return header, samples


def _role_models(eval_spec: dict) -> dict[str, str]:
    """``eval.model_roles`` → role: model name (a role bound to a list of models: names joined by +)."""
    roles = eval_spec.get("model_roles")
    named: dict[str, str] = {}
    for role, config in (roles if isinstance(roles, dict) else {}).items():
        configs = config if isinstance(config, list) else [config]
        models = [str(c["model"]) for c in configs if isinstance(c, dict) and isinstance(c.get("model"), str)]
        if models:
            named[str(role)] = "+".join(models)
    return named


def _scorer_roles(eval_spec: dict) -> dict[str, str]:
    """Scorer name → the ``model_role`` its options name (``model_graded_qa(model_role="grader")``)."""
    named = {}
    for entry in eval_spec.get("scorers") or []:
        options = entry.get("options") if isinstance(entry, dict) else None
        if isinstance(options, dict) and isinstance(options.get("model_role"), str):
            named[str(entry.get("name"))] = options["model_role"]
    return named


def _pairwise_sides(entry: object, sample: dict) -> dict | None:
    """The metadata naming the two systems a pairwise score compared (``model_a`` shown first,
    ``model_b`` second): the score's metadata, else the sample's; None for a graded score."""
    for metadata in (entry.get("metadata") if isinstance(entry, dict) else None, sample.get("metadata")):
        if isinstance(metadata, dict) and all(isinstance(metadata.get(k), str) for k in ("model_a", "model_b")):
            return metadata
    return None


def import_inspect(
    paths: Sequence[str | Path], scorer: str | None = None, cluster_key: str | None = None
) -> ImportedTables:
    """inspect_ai eval logs (``.eval`` or ``.json``) → judgments: pairwise scorers as judgments,
    graded scorers as metric contests between the logs' models.

    **Pairwise scorers** (a score whose metadata, or the sample's, names ``model_a`` and ``model_b``,
    the systems shown first and second): each such score is one judged order. Value ``A``/``B``/
    ``tie`` (any case) or A's score 1/0/0.5; a missing value (the judge's reply did not parse) is an
    invalid verdict, kept. The judge is the metadata's ``judge``, else the model bound to the
    scorer's ``model_role`` (default role ``grader``), else ``eval.model`` when it is neither
    system. Texts: metadata ``response_a``/``response_b``, else the sample's output for the side that
    is ``eval.model``. Without ``scorer``, every pairwise scorer of the log is read (a scorer run
    once per presentation order gives both orders).

    **Graded scorers** (numbers, booleans, ``C``/``I``/``P``/``N`` as 1/0/0.5/0): one log per
    model (``eval.model`` or ``NAME=PATH``), compared per (sample, epoch) as metric contests
    (:func:`_metric_contests`); ``scorer`` picks the score (default: the only one). A scorer whose
    options name a ``model_role`` is judged by that role's model, in the judge's name
    (``inspect:model_graded_qa@mockllm/grader``); every log must have the same one.

    Cluster (vignette) = ``task:id`` (the sample), or ``task:VALUE`` of the dotted ``cluster_key``
    in the sample's metadata; each epoch is its own contest within it. A sample that errored
    (``error`` set, no score) is an invalid verdict, kept. A sample's position in the log (1-based)
    is reported as its line.
    """
    out = _Collector()
    scored: dict[str, dict] = {}
    graders: dict[str, tuple[str | None, Path]] = {}
    chosen = scorer
    for name, path in _named_paths(paths):
        header, samples = _inspect_log(path, out)
        spec = header["eval"]
        system = name or str(spec.get("model") or path.stem)
        task = str(spec.get("task") or "task")
        roles, scorer_roles = _role_models(spec), _scorer_roles(spec)
        pairwise = {
            key
            for _, _, sample in samples
            if isinstance(sample, dict) and isinstance(sample.get("scores"), dict)
            for key, entry in sample["scores"].items()
            if _pairwise_sides(entry, sample) is not None
        }
        if chosen is not None and chosen in pairwise:
            pairwise = {chosen}
        if pairwise and (chosen is None or chosen in pairwise):
            context = {"task": task, "model": str(spec.get("model")), "roles": roles, "scorer_roles": scorer_roles}
            for position, prefix, sample in samples:
                _inspect_pairwise(out, (path, position), prefix, sample, sorted(pairwise), context, cluster_key)
            continue
        if system in scored:
            raise InputError(f"{path}: model {system!r} given twice.", fix="pass each model's log once, as NAME=PATH")
        items: dict = {}
        scored[system] = items
        for position, prefix, sample in samples:
            where = (path, position)
            ids = _inspect_sample_ids(out, where, prefix, sample)
            if ids is None:
                continue
            record, sid, epoch, scores = ids
            if chosen is None and scores:
                if len(scores) != 1:
                    raise InputError(
                        f"{path}: scorers {sorted(scores)}; which one is the score?", fix="pass --metric NAME"
                    )
                chosen = next(iter(scores))
            field_name = f"{prefix}scores.{chosen}.value"
            if chosen in scores:
                entry = scores[chosen]
                value = entry.get("value") if isinstance(entry, dict) else None
                score = _INSPECT_LETTERS.get(value) if isinstance(value, str) else _number(value)
                if score is None or isinstance(score, str):
                    out.problem(path, position, field_name, score or f"{value!r} is not C, I, P, N or a number")
                    continue
            elif record.get("error"):
                score = None  # the sample errored: an invalid verdict, kept and counted
            else:
                out.problem(path, position, field_name, "missing (and the sample has no error)")
                continue
            key = (str(sid), epoch)
            if key in items:
                out.problem(path, position, f"{prefix}id", f"sample {sid!r} epoch {epoch} appears twice")
                continue
            vid = _inspect_vignette(out, where, prefix, record, task, cluster_key)
            if vid is None:
                continue
            response_id = f"{task}:{sid}:{system}:epoch{epoch}"
            output = record.get("output")
            answer = output.get("completion") if isinstance(output, dict) else None
            out.response(response_id, vid, system, answer if isinstance(answer, str) else "", where)
            items[key] = (vid, response_id, score, where, {"epoch": epoch})
        role = scorer_roles.get(str(chosen))
        graders[system] = (roles.get(role) if role else None, path)
    if out.problems:
        raise InputError("The inspect_ai logs cannot be imported.", out.problems)
    if scored:
        judges = {grader for grader, _ in graders.values()}
        if len(judges) > 1:
            raise InputError(
                "The logs were graded by different models: "
                + ", ".join(f"{path} by {grader or 'no model'}" for grader, path in graders.values())
                + "; their scores are not comparable.",
                fix="import logs graded by the same grader model",
            )
        (grader,) = judges
        _metric_contests(out, f"inspect:{chosen}" + (f"@{grader}" if grader else ""), scored, ("epoch",))
    return out.result("inspect", "The inspect_ai logs cannot be imported.", ("epoch",))


def _inspect_sample_ids(
    out: _Collector, where: tuple[Path, int], prefix: str, sample: object
) -> tuple[dict, object, int, dict] | None:
    """(sample, id, epoch, scores) of a sample, or None after reporting what is wrong with it."""
    if not isinstance(sample, dict):
        out.problem(*where, prefix.rstrip(".:") or "samples", "is not an object")
        return None
    sid, epoch = sample.get("id"), sample.get("epoch", 1)
    if _missing(sid) or isinstance(sid, (dict, list, bool)):
        out.problem(*where, f"{prefix}id", "missing or not an id")
        return None
    if isinstance(epoch, bool) or not isinstance(epoch, int):
        out.problem(*where, f"{prefix}epoch", f"{epoch!r} is not an integer")
        return None
    scores = sample.get("scores") or {}
    if not isinstance(scores, dict):
        out.problem(*where, f"{prefix}scores", "is not an object")
        return None
    return sample, sid, epoch, scores


def _inspect_vignette(
    out: _Collector, where: tuple[Path, int], prefix: str, sample: dict, task: str, cluster_key: str | None
) -> str | None:
    """The sample's cluster: ``task:id`` with the input as text, or ``task:VALUE`` of ``cluster_key``."""
    if cluster_key is None:
        vid, text = f"{task}:{sample['id']}", sample.get("input")
        text = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False)
    else:
        try:
            value = _at_path(sample.get("metadata") or {}, cluster_key)
        except KeyError as exc:
            out.problem(
                *where, f"{prefix}metadata.{cluster_key}", f"absent (no {exc.args[0]!r})", "check --cluster-key"
            )
            return None
        vid, text = f"{task}:{value}", f"{cluster_key} = {value}"
    out.vignette(vid, text, task, where)
    return vid


def _inspect_pairwise(
    out: _Collector,
    where: tuple[Path, int],
    prefix: str,
    sample: object,
    scorers: list[str],
    context: dict,
    cluster_key: str | None,
) -> None:
    """The judged orders of one sample of a pairwise log (see :func:`import_inspect`)."""
    ids = _inspect_sample_ids(out, where, prefix, sample)
    if ids is None:
        return
    sample, _sid, epoch, scores = ids
    vid = _inspect_vignette(out, where, prefix, sample, context["task"], cluster_key)
    if vid is None:
        return
    for name in scorers:
        entry = scores.get(name)
        field_name = f"{prefix}scores.{name}"
        sides = _pairwise_sides(entry, sample)
        if sides is None:
            reason = "the sample errored, and" if sample.get("error") else "missing, or its"
            out.problem(*where, field_name, f"{reason} metadata names no model_a and model_b", "record both systems")
            continue
        value = entry.get("value") if isinstance(entry, dict) else None
        if value is None:
            verdict = "invalid"  # no score (an error) or the judge's reply did not parse: kept, counted
        else:
            key = value.strip().lower() if isinstance(value, str) else value
            known = (
                _PAIRWISE_VALUES.get(key) if isinstance(key, (str, int, float)) and not isinstance(key, bool) else None
            )
            if known is None:
                out.problem(*where, f"{field_name}.value", f"{value!r} is not A, B, tie, 1, 0 or 0.5")
                continue
            verdict = known
        judge = sides.get("judge") if isinstance(sides.get("judge"), str) else None
        judge = judge or context["roles"].get(context["scorer_roles"].get(name, "grader"))
        if judge is None and context["model"] not in (sides["model_a"], sides["model_b"]):
            judge = context["model"]  # the eval's own model wrote the verdicts
        if judge is None:
            out.problem(
                *where,
                f"{field_name}.metadata.judge",
                "no judge: the eval has no grader role and its model is one of the two systems",
                "name the judge in the score's metadata, or bind it to a grader role (--model-role grader=...)",
            )
            continue
        response_ids = []
        for side, text_key in (("model_a", "response_a"), ("model_b", "response_b")):
            system, text = sides[side], sides.get(text_key)
            response_id = f"{vid}:{system}"
            if not isinstance(text, str) and system == context["model"]:
                output = sample.get("output")
                text = output.get("completion") if isinstance(output, dict) else None
                response_id += f":epoch{epoch}"  # generated in this epoch
            if not isinstance(text, str):
                out.problem(*where, f"{field_name}.metadata.{text_key}", f"no text for {system!r}", "record it there")
                break
            out.response(response_id, vid, system, text, where)
            response_ids.append(response_id)
        if len(response_ids) != 2:
            continue
        answer = entry.get("answer") if isinstance(entry, dict) else None
        out.judgment(
            {
                "judge": judge,
                "vignette_id": vid,
                "response_first": response_ids[0],
                "response_second": response_ids[1],
                "verdict": verdict,
                "raw": answer if isinstance(answer, str) else json.dumps(value),
                "prompt_sha256": None,
                "epoch": epoch,
            },
            where,
        )
