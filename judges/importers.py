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

Modules
-------
This module holds what every importer shares: the :class:`ImportedTables` an
importer returns and :func:`assign_pools`, the :class:`Collector` of rows and problems, the readers
of JSON and JSON Lines files, and the metric contests of per-item scores. Each format family's
importer lives in its own module: :mod:`honestci.judges.importers_alpaca` (``alpaca_eval``,
``pandalm``), :mod:`honestci.judges.importers_fastchat` (``mtbench``, ``arena``),
:mod:`honestci.judges.importers_lm_eval`, :mod:`honestci.judges.importers_inspect` and
:mod:`honestci.judges.importers_generic`; ``honestci import`` maps each format to its importer
(``IMPORTERS`` in :mod:`honestci.audit.cli.judges`).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from honestci.audit.errors import InputError, Problem
from honestci.judges.tables import (
    HUMAN_PAIR_COLUMNS,
    JUDGMENT_COLUMNS,
    RESPONSE_COLUMNS,
    VIGNETTE_COLUMNS,
    sibling_path,
    write_table,
)


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


class Collector:
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


def load_json(path: Path):
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


def json_records(path: Path, out: Collector, what: str):
    """(1-based position, record) of the JSON list of objects in ``path``; other items are problems."""
    records = load_json(path)
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


def is_missing(value) -> bool:
    """True for a value a source leaves out: None, NaN or the empty string."""
    return value is None or (isinstance(value, float) and math.isnan(value)) or value == ""


def jsonl_records(path: Path, out: Collector):
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


def json_or_jsonl_records(path: Path, out: Collector, what: str):
    """A JSON list of objects (``.json``/``.json.gz``) or JSON Lines (``.jsonl``), with positions."""
    if not path.is_file():
        raise InputError(f"{path}: file not found.", fix="check the path")
    if path.name.lower().endswith((".jsonl", ".ndjson")):
        return jsonl_records(path, out)
    return json_records(path, out, what)


# ----------------------------------------------------------------- per-item scores → metric contests
def _metric_verdict(first: float | None, second: float | None) -> str:
    """Higher score wins, equal scores tie; a missing score (the item errored) is an invalid verdict."""
    if first is None or second is None:
        return "invalid"
    return "first" if first > second else "second" if second > first else "tie"


def metric_contests(out: Collector, judge: str, scored: dict, extra: tuple[str, ...] = ()) -> None:
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


def named_paths(paths: Sequence[str | Path]) -> list[tuple[str | None, Path]]:
    """``NAME=PATH`` or ``PATH`` (an existing file is never split at '=')."""
    named: list[tuple[str | None, Path]] = []
    for spec in map(str, paths):
        name, sep, rest = spec.partition("=")
        named.append((name, Path(rest)) if sep and name and not Path(spec).exists() else (None, Path(spec)))
    return named


def per_item_score(value) -> float | str:
    """A per-item score as a float; a message (str) when it is not one number."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else "is not finite"
    return f"{value!r} is not a number (a per-item score)"


def at_path(record: dict, dotted: str):
    """``record`` followed along ``a.b.c``; KeyError if any step is absent."""
    value = record
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(part)
        value = value[part]
    return value
