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
    judge: llama-3.1-70b              # or a panel: `panel: [a, b, c]` with `panel_rule: mean`
    metric: winrate
    bar: 0.608
    population: new_vignettes        # the policy's populations: these_vignettes, new_seeds (needs seeds)
    family: fresh                    # optional: only the vignettes of this family (or `families: [a, b]`)
    seeds: [policy-seed0, policy-seed1, policy-seed2]   # optional: the recipe's seeds, the policy among them
    data: {vignettes: vignettes.jsonl, responses: responses.jsonl, judgments: judgments.jsonl}
    claimed: {point: 0.806, n: 720, ci_low: 0.776, method: wilson, level: 0.95}
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from honestci.audit.data.yaml_io import Count, Name, Number, problems_from_validation, read_yaml_mapping
from honestci.audit.errors import ClaimError, Problem
from honestci.audit.policy import (
    THRESHOLDS,
    Policy,
    Population,
    Thresholds,
    known_gates,
    known_thresholds,
    loosening,
    threshold_problem,
    with_values,
)

SUPPORTED_VERSIONS = (1,)
DATA_TABLES = ("vignettes", "responses", "judgments", "human_ratings", "human_pairs", "corpus")
REQUIRED_TABLES = ("vignettes", "responses", "judgments")


class ClaimedComparison(BaseModel):
    """A comparison the model card made between the policy and another system."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    against: Name
    kind: Literal["paired_difference", "ci_low_vs_point", "point_vs_point"]
    against_point: Number | None = Field(None, ge=0, le=1)
    statement: str | None = None


class ClaimedRow(BaseModel):
    """Another row of the card's table: a system judged against the same opponent."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    system: Name
    point: Number | None = Field(None, ge=0, le=1)
    n: Count | None = Field(None, ge=1)
    ci_low: Number | None = Field(None, ge=0, le=1)
    ci_high: Number | None = Field(None, ge=0, le=1)
    method: str | None = None

    @model_validator(mode="after")
    def _ordered_interval(self) -> ClaimedRow:
        return ordered_interval(self)


def ordered_interval(figures):
    """``figures`` unchanged when its claimed interval is ordered; else ValueError (bad input, not a
    finding: an interval whose lower end lies above its upper end states nothing to audit)."""
    if figures.ci_low is not None and figures.ci_high is not None and figures.ci_low > figures.ci_high:
        raise ValueError(
            f"ci_low {figures.ci_low} lies above ci_high {figures.ci_high}; copy the interval as the card prints it"
        )
    return figures


class ClaimedFigures(BaseModel):
    """The figures exactly as the model card states them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    point: Number | None = Field(None, ge=0, le=1)
    n: Count | None = Field(None, ge=1)
    ci_low: Number | None = Field(None, ge=0, le=1)
    ci_high: Number | None = Field(None, ge=0, le=1)
    method: str | None = None
    level: Number = Field(0.95, gt=0, lt=1)
    comparisons: tuple[ClaimedComparison, ...] = ()
    table: tuple[ClaimedRow, ...] = ()
    #: The card says the policy is the best of the claim's ``systems`` (a family of comparisons).
    best_of_systems: bool = False

    @model_validator(mode="after")
    def _ordered_interval(self) -> ClaimedFigures:
        return ordered_interval(self)


class ClaimSpec(BaseModel):
    """A validated claim. Build it with :func:`load_claim`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Count
    name: Name
    policy: Name
    opponent: Name
    judge: Name | None = None
    #: Several judges on the same contests and the rule that makes one score of their verdicts.
    panel: tuple[Name, ...] | None = None
    panel_rule: Literal["mean", "majority"] | None = None
    metric: Literal["winrate"] = "winrate"
    bar: Number = Field(gt=0, lt=1)
    #: The population the bar is tested on (unset: the policy's ``default_population``); the policy's
    #: ``populations`` must allow it (checked by :func:`load_claim`, which knows the policy).
    population: Population = THRESHOLDS.default_population
    method: str | None = None
    data: dict[str, str]
    claimed: ClaimedFigures | None = None
    #: Not the claim's to set: how a contest judged in one order counts is the policy's
    #: (``missing_orders``); named here only so that a claim that sets it is told so.
    allow_single_order: object = None
    pool: Literal["selection", "heldout"] | None = None
    #: Other systems judged against the same opponent on the same vignettes: the audit ranks the
    #: policy among them (K-system table, rank intervals, length-controlled rates).
    systems: tuple[Name, ...] | None = None
    #: Restrict the claim to the vignettes of one family (``family:``) or of several
    #: (``families:``); its population is then the new vignettes of those families, and only
    #: their contests are evidence.
    family: Name | None = None
    families: tuple[Name, ...] | None = None
    #: Independent training seeds (or eval runs) of the claimed recipe, the policy among them: the
    #: audit reports each seed's rate, the between-seed variance and the win rate of a new seed.
    seeds: tuple[Name, ...] | None = None
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

    @field_validator("allow_single_order")
    @classmethod
    def _policy_decides_single_order(cls, value):
        if value is not None:
            raise ValueError(
                "how a contest judged in one order counts is the auditor's policy, not the claim's: by default "
                "its missing order counts against the claim (`missing_orders:` in a policy file); drop this key"
            )
        return value

    @field_validator("required_gates")
    @classmethod
    def _known_gates(cls, value):
        return known_gates(value)

    @field_validator("panel")
    @classmethod
    def _distinct_judges(cls, value):
        if value is not None and (len(value) < 2 or len(set(value)) != len(value) or not all(value)):
            raise ValueError("a panel names two or more distinct judges")
        return value

    @model_validator(mode="after")
    def _consistent_keys(self) -> ClaimSpec:
        if self.panel is not None and self.judge is not None:
            raise ValueError("name either `judge:` (one judge) or `panel:` (several), not both")
        if (self.panel is None) != (self.panel_rule is None):
            raise ValueError("`panel:` and `panel_rule:` go together: a panel needs its rule (mean or majority)")
        if self.systems is not None:
            named = [s for s in self.systems if s in (self.policy, self.opponent)]
            if not self.systems or len(set(self.systems)) != len(self.systems) or not all(self.systems) or named:
                raise ValueError(
                    "`systems:` lists one or more distinct other systems, neither the policy nor the opponent"
                )
        if self.family is not None and self.families is not None:
            raise ValueError("name either `family:` (one family) or `families:` (several), not both")
        if self.families is not None and (
            not self.families or len(set(self.families)) != len(self.families) or not all(self.families)
        ):
            raise ValueError("`families:` lists one or more distinct vignette families")
        if self.seeds is not None:
            if len(self.seeds) < 2 or len(set(self.seeds)) != len(self.seeds) or not all(self.seeds):
                raise ValueError("`seeds:` lists two or more distinct systems, the recipe's training seeds")
            if self.policy not in self.seeds or self.opponent in self.seeds:
                raise ValueError("`seeds:` must include the policy (the seed the card reports) and not the opponent")
        if self.population == "new_seeds" and not self.seeds:
            raise ValueError(
                "`population: new_seeds` is a claim about the recipe: list its training seeds under `seeds:` "
                "(the policy among them), or claim new_vignettes for this checkpoint"
            )
        if self.claimed is not None and self.claimed.best_of_systems and not self.systems:
            raise ValueError("`claimed.best_of_systems` needs the `systems:` the policy is claimed best of")
        return self

    @field_validator("thresholds")
    @classmethod
    def _known_thresholds(cls, value: dict) -> dict:
        return known_thresholds(value)

    @property
    def vignette_families(self) -> tuple[str, ...] | None:
        """The families the claim is restricted to (``family:`` or ``families:``); None: every vignette."""
        return (self.family,) if self.family is not None else self.families


@dataclass(frozen=True)
class Claim:
    """A claim with its data paths resolved to files on disk."""

    spec: ClaimSpec
    path: Path
    data_paths: dict[str, Path]
    #: The policy the claim is judged by: the auditor's, tightened where the claim asks.
    policy: Policy
    training_log_path: Path | None = None

    @property
    def thresholds(self) -> Thresholds:
        return self.policy.thresholds


def load_claim(path: str | Path, allow_outside: bool = False, policy: Policy | None = None) -> Claim:
    """Read, validate and resolve a claim file, and the policy it is judged by.

    ``policy`` is the auditor's (the built-in defaults when None). The claim may only tighten it:
    raise a threshold the strict way, require more gates; any key that would loosen it is an
    error naming the key. ``claimed.level`` and ``claimed.method`` describe the card's printed
    figures and ``method`` an interval to show beside the gate's: none of them drives a gate.

    Raises
    ------
    ClaimError
        When the file is missing, is not YAML, does not match the spec, or names data files that
        do not exist (every problem is listed).
    """
    path = Path(path)
    raw = read_yaml_mapping(path, "Claim file", ClaimError)
    try:
        spec = ClaimSpec.model_validate(raw)
    except ValidationError as exc:
        raise ClaimError(
            f"Claim file {path} does not match the claim spec.",
            problems_from_validation(
                path, exc, unknown_key="unknown key (check its spelling against the claim spec in docs/claims.md)"
            ),
            fix="see docs/claims.md for every key and its allowed values",
        ) from None

    base = path.resolve().parent
    problems, data_paths = [], {}
    entries = [(f"data.{table}", table, relative) for table, relative in spec.data.items()]
    if spec.training_log is not None:
        entries.append(("training_log", "training_log", spec.training_log))
    for field_name, table, relative in entries:
        try:
            resolved = (base / relative).resolve(strict=False)
            resolved.is_file()  # a NUL byte, an over-long name or a symlink loop fails here, not later
        except (OSError, ValueError, RuntimeError) as error:
            reason = "it loops through symbolic links" if isinstance(error, RuntimeError) else str(error)
            problems.append(
                Problem(str(path), None, field_name, f"{relative!r} cannot be used as a path: {reason}", "name a file")
            )
            continue
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
        if (message := threshold_problem(name, value)) is not None
    ]
    if problems:
        raise ClaimError(
            f"Claim file {path} overrides thresholds with values that cannot be used.",
            problems,
            fix="give each threshold a value of its default's type (see audit/policy.py)",
        )
    judged_by = tightened(policy or Policy(), spec, path)
    if "population" not in spec.model_fields_set:  # the policy's default, not the built-in one
        spec = spec.model_copy(update={"population": judged_by.thresholds.default_population})
    if spec.population not in judged_by.populations:
        raise ClaimError(
            f"Claim file {path} asserts a population its policy does not allow.",
            [
                Problem(
                    str(path),
                    None,
                    "population",
                    f"{spec.population!r} is not among the populations policy {judged_by.name!r} allows "
                    f"({', '.join(judged_by.populations)}): the population decides which interval the bar gate "
                    "reads, so the policy chooses it, not the claim",
                    f"claim one of: {', '.join(judged_by.populations)}; or an auditor may allow it in a policy "
                    "file (populations, --policy)",
                )
            ],
        )
    if spec.panel_rule is not None and spec.panel_rule not in judged_by.panel_rules:
        raise ClaimError(
            f"Claim file {path} names a panel rule its policy does not allow.",
            [
                Problem(
                    str(path),
                    None,
                    "panel_rule",
                    f"{spec.panel_rule!r} is not among the rules policy {judged_by.name!r} allows "
                    f"({', '.join(judged_by.panel_rules)}): how a panel's verdicts become a score decides the "
                    "verdict, so the policy chooses it, not the claim",
                    f"name one of: {', '.join(judged_by.panel_rules)}; or an auditor may allow it in a policy "
                    "file (panel_rules, --policy)",
                )
            ],
        )
    training_log_path = data_paths.pop("training_log", None)
    return Claim(
        spec=spec,
        path=path.resolve(),
        data_paths=data_paths,
        policy=judged_by,
        training_log_path=training_log_path,
    )


def tightened(policy: Policy, spec: ClaimSpec, path: Path) -> Policy:
    """``policy`` with the claim's stricter thresholds and extra required gates.

    Raises
    ------
    ClaimError
        Naming every key by which the claim would loosen the policy: a threshold moved the lax
        way (or one with no strict direction), or required gates that leave out one the policy
        requires. Such settings belong in the auditor's policy file, not the claim.
    """
    problems = [
        Problem(str(path), None, f"thresholds.{name}", reason, "an auditor may set it in a policy file (--policy)")
        for name, value in spec.thresholds.items()
        if (reason := loosening(policy.thresholds, name, value)) is not None
    ]
    dropped = [
        gate for gate in policy.required_gates if spec.required_gates is not None and gate not in spec.required_gates
    ]
    if dropped:
        problems.append(
            Problem(
                str(path),
                None,
                "required_gates",
                f"leaves out {dropped}, which the policy requires",
                "a claim may only add gates; an auditor may drop one in a policy file (--policy)",
            )
        )
    if problems:
        raise ClaimError(f"Claim file {path} would loosen the policy it is judged by.", problems)
    extra_gates = tuple(g for g in (spec.required_gates or ()) if g not in policy.required_gates)
    judged_by = replace(
        policy,
        thresholds=with_values(policy.thresholds, spec.thresholds),
        required_gates=policy.required_gates + extra_gates,
    )
    source = f"claim {path.resolve()}"
    keys = [f"thresholds.{name}" for name in spec.thresholds] + ["required_gates"] * bool(extra_gates)
    return replace(judged_by, sources=judged_by.sources + tuple((key, source) for key in keys))
