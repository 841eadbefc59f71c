"""The immutable report model: one JSON document (versioned) that every renderer reads.

``honestci audit`` builds it from an :class:`honestci.audit.pipeline.AuditResult`; ``honestci report``
reads it back from ``verdict.json``, so Markdown, HTML and JSON always show the same figures.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from honestci.audit.errors import InputError
from honestci.audit.policy import POPULATION_LABELS

__all__ = ["POPULATION_LABELS", "POSTERIOR_FILE", "SCHEMA_VERSION", "Report", "json_safe"]

#: Version 1 has gained optional keys, which readers must treat as absent in older files (so the
#: version stays 1): ``per_vignette[*].pooled``, ``pooled_low``, ``pooled_high`` (the partially
#: pooled rate and interval) and ``sections[*].columns`` (the check's column order; JSON object
#: keys are sorted).
SCHEMA_VERSION = 1
#: The main Bayesian fit's InferenceData, written beside the reports when the sampler converged.
POSTERIOR_FILE = "posterior.nc"
REQUIRED_KEYS = ("schema_version", "claim", "verdict", "gates", "intervals", "contests", "provenance")
#: JSON type of each required part (a hand-edited or foreign file fails here, not inside a renderer).
SHAPES = {"claim": dict, "verdict": str, "gates": list, "intervals": list, "contests": dict, "provenance": dict}
CLAIM_KEYS = ("name", "policy", "opponent", "bar", "population")
JSON_NAMES = {dict: "an object", list: "a list", str: "a string"}


@dataclass(frozen=True)
class Report:
    """A read-only report document. ``data`` returns a fresh copy each time, so no renderer can
    change what another renders."""

    document: str

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "audit result") -> Report:
        missing = [key for key in REQUIRED_KEYS if key not in data]
        if missing:
            raise InputError(
                f"{source} is not an honestci report: missing {missing}.",
                fix="pass the verdict.json written by `honestci audit`",
            )
        if data["schema_version"] != SCHEMA_VERSION:
            raise InputError(
                f"{source} has report schema version {data['schema_version']}; this honestci reads "
                f"version {SCHEMA_VERSION}.",
                fix="re-run `honestci audit` with this version",
            )
        wrong = [
            f"'{key}' must be {JSON_NAMES[kind]}" for key, kind in SHAPES.items() if not isinstance(data[key], kind)
        ]
        wrong += [
            f"every item of '{key}' must be an object"
            for key in ("gates", "intervals")
            if isinstance(data[key], list) and not all(isinstance(item, dict) for item in data[key])
        ]
        if isinstance(data["claim"], dict):
            wrong += [f"'claim' lacks '{key}'" for key in CLAIM_KEYS if key not in data["claim"]]
        if wrong:
            raise InputError(
                f"{source} is not an honestci report: {'; '.join(wrong)}.",
                fix="pass the verdict.json written by `honestci audit`",
            )
        return cls(json.dumps(data, indent=2, sort_keys=True, allow_nan=False))

    @classmethod
    def from_json(cls, path: str | Path) -> Report:
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InputError(
                f"{path} does not exist.", fix="pass the verdict.json written by `honestci audit`"
            ) from None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(
                f"{path} is not valid JSON ({exc}).", fix="pass the verdict.json written by `honestci audit`"
            ) from None
        if not isinstance(data, dict):
            raise InputError(f"{path} holds a JSON {type(data).__name__}, not a report object.")
        return cls.from_dict(data, source=str(path))

    @property
    def data(self) -> dict[str, Any]:
        return json.loads(self.document)


def json_safe(value):
    """JSON-compatible copy: NaN/inf become null (JSON has no NaN), other objects their str."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if hasattr(value, "item"):  # numpy scalars
        return json_safe(value.item())
    return str(value)
