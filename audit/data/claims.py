"""The claim spec: what a model card asserts, and where the evidence lies.

A claim file is YAML, loaded with a ``yaml.SafeLoader`` only (no Python tags; a key given twice is
an error). Data paths are resolved relative to the claim file's folder, symbolic links included,
and may not escape it unless the caller allows it (a link whose target lies outside the folder is
refused like ``../x``).

Example::

    version: 1
    name: "reappraisal-4b-grpo beats gpt-4-0314"
    policy: reappraisal-4b-grpo
    opponent: gpt-4-0314
    judge: llama-3.1-70b
    metric: winrate
    bar: 0.608
    population: new_vignettes        # or these_vignettes
    data: {vignettes: vignettes.jsonl, responses: responses.jsonl, judgments: judgments.jsonl}
    claimed: {point: 0.806, n: 720, ci_low: 0.776, method: wilson, level: 0.95}
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from honestci.audit.errors import ClaimError, Problem
from honestci.audit.policy import GATE_ORDER, THRESHOLDS, Population, Thresholds

SUPPORTED_VERSIONS = (1,)
DATA_TABLES = ("vignettes", "responses", "judgments", "human_ratings", "human_pairs", "corpus")
REQUIRED_TABLES = ("vignettes", "responses", "judgments")
POPULATIONS = ("new_vignettes", "these_vignettes")


class ClaimedComparison(BaseModel):
    """A comparison the model card made between the policy and another system."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    against: str = Field(min_length=1)
    kind: Literal["paired_difference", "ci_low_vs_point", "point_vs_point"]
    against_point: float | None = Field(None, ge=0, le=1)
    statement: str | None = None


class ClaimedRow(BaseModel):
    """Another row of the card's table: a system judged against the same opponent."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    system: str = Field(min_length=1)
    point: float | None = Field(None, ge=0, le=1)
    n: int | None = Field(None, ge=1)
    ci_low: float | None = Field(None, ge=0, le=1)
    ci_high: float | None = Field(None, ge=0, le=1)
    method: str | None = None


class ClaimedFigures(BaseModel):
    """The figures exactly as the model card states them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    point: float | None = Field(None, ge=0, le=1)
    n: int | None = Field(None, ge=1)
    ci_low: float | None = Field(None, ge=0, le=1)
    ci_high: float | None = Field(None, ge=0, le=1)
    method: str | None = None
    level: float = Field(0.95, gt=0, lt=1)
    comparisons: tuple[ClaimedComparison, ...] = ()
    table: tuple[ClaimedRow, ...] = ()


class ClaimSpec(BaseModel):
    """A validated claim. Build it with :func:`load_claim`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int
    name: str = Field(min_length=1)
    policy: str = Field(min_length=1)
    opponent: str = Field(min_length=1)
    judge: str | None = None
    metric: Literal["winrate"] = "winrate"
    bar: float = Field(gt=0, lt=1)
    population: Population = THRESHOLDS.default_population
    method: str | None = None
    data: dict[str, str]
    claimed: ClaimedFigures | None = None
    allow_single_order: bool = False
    pool: Literal["selection", "heldout"] | None = None
    required_gates: tuple[str, ...] | None = None
    training_log: str | None = None
    thresholds: dict[str, float | int | str] = Field(default_factory=dict)

    @field_validator("version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        if value not in SUPPORTED_VERSIONS:
            raise ValueError(f"version {value} is not supported; this honestci reads version(s) {SUPPORTED_VERSIONS}")
        return value

    @field_validator("data")
    @classmethod
    def _known_tables(cls, value: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(value) - set(DATA_TABLES))
        if unknown:
            raise ValueError(f"unknown table(s) {unknown}; known tables are {list(DATA_TABLES)}")
        missing = [t for t in REQUIRED_TABLES if t not in value]
        if missing:
            raise ValueError(f"missing required table(s) {missing}")
        return value

    @field_validator("required_gates")
    @classmethod
    def _known_gates(cls, value):
        if value is not None:
            unknown = sorted(set(value) - set(GATE_ORDER))
            if unknown:
                raise ValueError(f"unknown gate(s) {unknown}; known gates: {list(GATE_ORDER)}")
        return value

    @field_validator("thresholds")
    @classmethod
    def _known_thresholds(cls, value: dict) -> dict:
        known = set(Thresholds.__dataclass_fields__)
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"unknown threshold(s) {unknown}; known: {sorted(known)}")
        return value


@dataclass(frozen=True)
class Claim:
    """A claim with its data paths resolved to files on disk."""

    spec: ClaimSpec
    path: Path
    data_paths: dict[str, Path]
    thresholds: Thresholds
    training_log_path: Path | None = None


class _StrictSafeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` (no Python tags) that refuses a key given twice in one mapping: plain
    YAML keeps the last value silently, so ``bar: 0.9`` followed by ``bar: 0.01`` would audit
    against 0.01."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *anchor` merges; explicit keys may override merged ones
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark, f"found duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _threshold_problem(name: str, value) -> str | None:
    """Why ``value`` cannot override the threshold ``name`` (None if it can): it must have the
    default's type (an integer where the default is one), and a level must lie in (0, 1)."""
    default = getattr(THRESHOLDS, name)
    if isinstance(default, bool):
        return None if isinstance(value, bool) else f"{value!r} is not true or false"
    if isinstance(default, str):
        return None if isinstance(value, str) else f"{value!r} is not a string"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{value!r} is not {'an integer' if isinstance(default, int) else 'a number'}"
    if isinstance(default, int) and not isinstance(value, int):
        return f"{value!r} is not an integer"
    if value != value or value in (float("inf"), float("-inf")):
        return f"{value!r} is not a finite number"
    if name.endswith("_level") and not 0 < value < 1:
        return f"{value!r} is not between 0 and 1"
    if name == "min_clusters" and value < 2:
        return f"{value!r} is below 2: no variance between vignettes can be estimated from fewer"
    return None


def _problems_from_validation(path: Path, error: ValidationError) -> list[Problem]:
    problems = []
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"]) or None
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = "unknown key (check its spelling against the claim spec in docs/claims.md)"
        problems.append(Problem(str(path), None, field, message))
    return problems


def load_claim(path: str | Path, allow_outside: bool = False) -> Claim:
    """Read, validate and resolve a claim file.

    Raises
    ------
    ClaimError
        When the file is missing, is not YAML, does not match the spec, or names data files that
        do not exist (every problem is listed).
    """
    path = Path(path)
    if path.is_dir():
        raise ClaimError(f"{path} is a directory, not a claim file.", fix="pass the path of a claim YAML file")
    if not path.is_file():
        raise ClaimError(f"Claim file {path} does not exist.", fix="pass the path of a claim YAML file")
    try:
        raw = yaml.load(path.read_text(encoding="utf-8-sig"), Loader=_StrictSafeLoader)
    except UnicodeDecodeError as exc:
        raise ClaimError(
            f"Claim file {path} is not UTF-8 text (byte {exc.start}).", fix="save the claim as UTF-8"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise ClaimError(
            f"Claim file {path} is not valid YAML.",
            [Problem(str(path), line, None, str(getattr(exc, "problem", exc)))],
            fix="fix the YAML syntax at the line shown",
        ) from None
    if raw is None:
        raise ClaimError(f"Claim file {path} is empty.", fix="see docs/claims.md for the claim spec")
    if not isinstance(raw, dict):
        raise ClaimError(
            f"Claim file {path} must hold a YAML mapping (key: value pairs), not {type(raw).__name__}.",
            fix="see docs/claims.md for the claim spec",
        )
    try:
        spec = ClaimSpec.model_validate(raw)
    except ValidationError as exc:
        raise ClaimError(
            f"Claim file {path} does not match the claim spec.",
            _problems_from_validation(path, exc),
            fix="see docs/claims.md for every key and its allowed values",
        ) from None

    base = path.resolve().parent
    problems, data_paths = [], {}
    entries = [(f"data.{table}", table, relative) for table, relative in spec.data.items()]
    if spec.training_log is not None:
        entries.append(("training_log", "training_log", spec.training_log))
    for field_name, table, relative in entries:
        resolved = (base / relative).resolve()
        if not allow_outside and not resolved.is_relative_to(base):
            problems.append(
                Problem(
                    str(path),
                    None,
                    field_name,
                    f"'{relative}' resolves outside the claim's folder",
                    "move the data beside the claim or pass --allow-outside-data",
                )
            )
        elif resolved.is_dir():
            problems.append(
                Problem(
                    str(path), None, field_name, f"'{relative}' is a directory, not a file", "name the data file itself"
                )
            )
        elif not resolved.is_file():
            problems.append(
                Problem(
                    str(path),
                    None,
                    field_name,
                    f"file '{relative}' not found (looked in {base})",
                    "fix the path; data paths are relative to the claim file",
                )
            )
        data_paths[table] = resolved
    if problems:
        raise ClaimError(f"Claim file {path} names data that cannot be used.", problems)

    problems = [
        Problem(str(path), None, f"thresholds.{name}", message)
        for name, value in spec.thresholds.items()
        if (message := _threshold_problem(name, value)) is not None
    ]
    if problems:
        raise ClaimError(
            f"Claim file {path} overrides thresholds with values that cannot be used.",
            problems,
            fix="give each threshold a value of its default's type (see audit/gates.py)",
        )
    thresholds = Thresholds(**{**THRESHOLDS.__dict__, **spec.thresholds})
    training_log_path = data_paths.pop("training_log", None)
    return Claim(
        spec=spec,
        path=path.resolve(),
        data_paths=data_paths,
        thresholds=thresholds,
        training_log_path=training_log_path,
    )
