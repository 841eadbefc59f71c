"""The immutable report model: one JSON document (versioned) that every renderer reads.

``honestci audit`` builds it from an :class:`honestci.audit.pipeline.AuditResult`; ``honestci report``
reads it back from ``verdict.json``, so Markdown, HTML and JSON always show the same figures.
"""

from __future__ import annotations

import json
import math
import re
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
        return cls(_document_text(data))

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


def gate_row(data: dict[str, Any]) -> dict | None:
    """The interval row of a report's ``data`` that the bar gate read (the policy's method for the
    claim's population), None when the audit computed none: every renderer finds it here."""
    for row in data["intervals"]:
        if row["method"] == data["gate_method"] and row["population"] == data["claim"]["population"]:
            return row
    return None


#: Where orjson spells a float otherwise than Python's ``float.__repr__`` (what ``json.dumps``
#: writes): a one-digit negative exponent (``1e-7``, Python ``1e-07``) and the fixed notation below
#: 1e-4 (``0.00001``, Python ``1e-05``). Each search has a literal prefix, which ``re`` finds fast.
_ORJSON_SPELLINGS = (re.compile(r"e-\d,?$", re.M), re.compile(r"0\.0000"))
#: A line holding one float, as indentation writes every scalar: its key (a JSON string, escapes
#: included) or none, the float (a fraction, an exponent or both), and the comma after it.
_FLOAT_LINE = re.compile(r'( *(?:"(?:[^"\\\n]|\\.)*": )?)(-?\d+(?:\.\d+(?:e[-+]?\d+)?|e[-+]?\d+))(,?)')
#: Characters orjson writes as they are and ``json.dumps`` (``ensure_ascii``) escapes: DEL and non-ASCII.
_UNESCAPED = re.compile("[\x7f-\U0010ffff]")


def _python_floats(text: str) -> str:
    """orjson's ``text`` with every float spelled as ``float.__repr__`` spells it."""
    line_starts = sorted(
        {text.rfind("\n", 0, hit.start()) + 1 for search in _ORJSON_SPELLINGS for hit in search.finditer(text)}
    )
    pieces, done = [], 0
    for start in line_starts:
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        line = _FLOAT_LINE.fullmatch(text, start, end)
        if line is not None:  # not a hit inside a string or a key
            pieces += [text[done:start], line[1], repr(float(line[2])), line[3]]
            done = end
    return "".join(pieces) + text[done:]


def _ascii_escape(match: re.Match) -> str:
    code = ord(match.group())
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # a UTF-16 surrogate pair, as json.dumps writes it
    return f"\\u{0xD800 | (code >> 10):04x}\\u{0xDC00 | (code & 0x3FF):04x}"


def _document_text(data: dict[str, Any]) -> str:
    """``json.dumps(data, indent=2, sort_keys=True, allow_nan=False)``, byte for byte, written by
    orjson (the standard library's indenting encoder is pure Python: 0.25 s for the 6 MB report
    of a million contests, this 0.06 s).

    orjson writes NaN and infinities as null and refuses what it cannot write (non-string keys,
    integers beyond 64 bits, NumPy scalars, lone surrogates): the document is used only when
    reading it back gives ``data`` again, else the standard library writes it (and raises on NaN as
    it always did). Its text then differs from ``json.dumps``'s only in the spelling of some
    floats and in escaping: both are rewritten here (tests/test_report_model.py compares the two).
    """
    import orjson

    try:
        text = orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
        faithful = orjson.loads(text) == data
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        faithful = False
    if not faithful:
        return json.dumps(data, indent=2, sort_keys=True, allow_nan=False)
    return _UNESCAPED.sub(_ascii_escape, _python_floats(text.decode()))


#: The types JSON holds as they are, matched exactly by :func:`json_safe` (subclasses take its checks below).
_JSON_SCALARS = frozenset({str, int, bool, type(None)})


def json_safe(value):
    """JSON-compatible copy: NaN/inf become null (JSON has no NaN), NumPy scalars Python numbers,
    other objects their str."""
    # the plain scalars by exact type first: a report holds about a million of them
    if type(value) is float:
        return value if math.isfinite(value) else None
    if type(value) in _JSON_SCALARS:
        return value
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, float):
        # float(): a NumPy float64 (a float subclass) as a Python float, which orjson writes
        return float(value) if math.isfinite(value) else None
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if hasattr(value, "item"):  # numpy scalars
        return json_safe(value.item())
    return str(value)
