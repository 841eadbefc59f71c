"""An organisation's audit policy file: the rules a claim is judged by.

Example (every key optional; what is left out keeps the built-in default of
:class:`honestci.audit.policy.Policy`)::

    version: 1
    name: acme-release-policy
    thresholds: {confidence_level: 0.975, min_clusters: 8, min_judge_agreement: 0.7}
    gate_methods: {new_vignettes: bayes_logit_normal}
    required_gates: [enough_clusters, ci_low_clears_bar, ..., leakage]
    invalid_verdicts: against_claim      # or tie, exclude
    missing_orders: against_claim        # or exclude: a mixed design's single-order contests
    panel_rules: [mean, majority]        # the panel rules a claim may name
    multiplicity: holm                   # or bh: how a family of claimed comparisons is corrected
    populations: [new_vignettes, new_seeds]   # the populations a claim may assert (these_vignettes: only here)

The policy is the auditor's, so it may set any value a threshold can take; the claim, written by
the people being audited, may then only tighten it (:func:`honestci.audit.data.claims.load_claim`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from honestci.audit.data.yaml_io import Name, problems_from_validation, read_yaml_mapping
from honestci.audit.errors import InputError, Problem
from honestci.audit.policy import (
    CERTIFIED_GATE_METHODS,
    CERTIFIED_MULTIPLICITY,
    PANEL_RULES,
    POPULATIONS,
    THRESHOLDS,
    InvalidScoring,
    MissingOrders,
    Multiplicity,
    Policy,
    known_gates,
    known_thresholds,
    threshold_problem,
    with_values,
)


class PolicyError(InputError):
    """A policy file is malformed or sets a value a gate cannot use."""


def _some_of(key: str, value, known: tuple[str, ...]):
    """``value`` unchanged when None or one or more of ``known``; else ValueError naming the rest."""
    if value is None:
        return value
    unknown = sorted(set(value) - set(known))
    if unknown or not value:
        raise ValueError(f"{key} must name one or more of {list(known)}; unknown: {unknown}")
    return value


class PolicySpec(BaseModel):
    """A validated policy file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1]
    name: Name
    thresholds: dict[str, float | int | str] = Field(default_factory=dict)
    gate_methods: dict[str, str] = Field(default_factory=dict)
    required_gates: tuple[str, ...] | None = None
    invalid_verdicts: InvalidScoring = "against_claim"
    missing_orders: MissingOrders = "against_claim"
    panel_rules: tuple[str, ...] | None = None
    multiplicity: Multiplicity = "holm"
    populations: tuple[str, ...] | None = None

    @field_validator("populations")
    @classmethod
    def _known_populations(cls, value):
        if value is not None and len(set(value)) != len(value):
            raise ValueError(f"populations lists a population twice: {list(value)}")
        return _some_of("populations", value, POPULATIONS)

    @field_validator("multiplicity")
    @classmethod
    def _certified_multiplicity(cls, value: str) -> str:
        if value not in CERTIFIED_MULTIPLICITY:
            raise ValueError(
                f"{value!r} is not certified for a gate: its seeded family-wise error exceeded nominal "
                f"(docs/methods.md); choose one of {list(CERTIFIED_MULTIPLICITY)}"
            )
        return value

    @field_validator("panel_rules")
    @classmethod
    def _known_panel_rules(cls, value):
        return _some_of("panel_rules", value, PANEL_RULES)

    @field_validator("thresholds")
    @classmethod
    def _known_thresholds(cls, value: dict) -> dict:
        return known_thresholds(value)

    @field_validator("gate_methods")
    @classmethod
    def _certified_methods(cls, value: dict) -> dict:
        for population, method in value.items():
            if population not in CERTIFIED_GATE_METHODS:
                raise ValueError(f"unknown population {population!r}; known: {sorted(CERTIFIED_GATE_METHODS)}")
            if method not in CERTIFIED_GATE_METHODS[population]:
                raise ValueError(
                    f"{method!r} is not certified for {population} by the coverage study "
                    f"(docs/coverage.md); a gate may read only {list(CERTIFIED_GATE_METHODS[population])}"
                )
        return value

    @field_validator("required_gates")
    @classmethod
    def _known_gates(cls, value):
        return known_gates(value)


def load_policy(path: str | Path | None) -> Policy:
    """The built-in policy (``path`` None) or the one a policy file sets.

    Raises
    ------
    PolicyError
        When the file is missing, not YAML, has unknown keys, a threshold of the wrong type, or a
        gate method the coverage study does not certify (every problem is listed).
    """
    if path is None:
        return Policy()
    path = Path(path)
    raw = read_yaml_mapping(path, "Policy file", PolicyError)
    try:
        spec = PolicySpec.model_validate(raw)
    except ValidationError as exc:
        raise PolicyError(
            f"Policy file {path} does not match the policy spec.",
            problems_from_validation(path, exc),
            fix="see docs/claims.md (policy files) for every key and its allowed values",
        ) from None
    problems = [
        Problem(str(path), None, f"thresholds.{name}", message)
        for name, value in spec.thresholds.items()
        if (message := threshold_problem(name, value)) is not None
    ]
    populations = Policy().populations if spec.populations is None else tuple(spec.populations)
    default = spec.thresholds.get("default_population", THRESHOLDS.default_population)
    if not problems and default not in populations:
        problems.append(
            Problem(
                str(path),
                None,
                "thresholds.default_population",
                f"{default!r} is not among the populations the policy allows ({', '.join(populations)})",
                "list it under `populations:` or choose a default among them",
            )
        )
    if problems:
        raise PolicyError(f"Policy file {path} sets thresholds that cannot be used.", problems)
    source = f"policy file {path.resolve()}"
    policy = Policy(
        name=spec.name,
        thresholds=with_values(THRESHOLDS, spec.thresholds),
        gate_methods=tuple({**dict(Policy().gate_methods), **spec.gate_methods}.items()),
        required_gates=Policy().required_gates if spec.required_gates is None else tuple(spec.required_gates),
        invalid_verdicts=spec.invalid_verdicts,
        missing_orders=spec.missing_orders,
        panel_rules=PANEL_RULES if spec.panel_rules is None else tuple(spec.panel_rules),
        multiplicity=spec.multiplicity,
        populations=populations,
    )
    return replace(policy, sources=tuple((d["key"], source) for d in policy.deviations()))
