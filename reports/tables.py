"""Figures of the report model as small tables of text: what Markdown and HTML print (each escapes
the text its own way). Numbers are rounded to 3 significant digits, or to the decimals their SE
supports; the full-precision figures stay in ``verdict.json``."""

from __future__ import annotations

import math

from honestci.reports.summary import sig

#: Column headings of figures that recur across sections; other keys have "_" read as a space.
HEADINGS = {
    "n_clusters": "G",
    "ci": "CI",
    "boot_ci": "bootstrap CI",
    "n_effective": "n_eff",
    "df": "df",
    "strength_ci": "strength CI",
    "lc_win_rate": "LC win rate",
    "lc_ci": "LC CI",
    "vs_policy": "policy − system",
    "vs_policy_ci": "simultaneous CI",
}
#: (low, high, merged key): an interval's two ends print as one "[low, high]" cell.
PAIRS = (
    ("ci_low", "ci_high", "ci"),
    ("boot_low", "boot_high", "boot_ci"),
    ("lower", "upper", "ci"),
    ("strength_low", "strength_high", "strength_ci"),
    ("lc_low", "lc_high", "lc_ci"),
    ("vs_policy_low", "vs_policy_high", "vs_policy_ci"),
)


def se_decimals(se: float | None) -> int | None:
    """Decimals an estimate with standard error ``se`` supports: two significant digits of the SE,
    at least 2 and at most 6 (None without a usable SE)."""
    if se is None or not math.isfinite(se) or se <= 0:
        return None
    return max(2, min(6, 1 - math.floor(math.log10(se))))


def number(value, decimals: int | None = None) -> str:
    """A figure: fixed ``decimals`` when given (an SE says how many), else 3 significant digits."""
    if isinstance(value, float) and decimals is not None and math.isfinite(value):
        return f"{value:.{decimals}f}"
    if isinstance(value, (int, float)) or value is None:
        return sig(value)
    return str(value)


def interval(low, high, decimals: int | None = None) -> str:
    """``[low, high]`` with the same decimals at both ends: ``decimals``, else 3 significant
    digits of the larger end (so [0.001, 0.870], not [6.79e-04, 0.870])."""
    if low is None or high is None:
        return "–"
    if decimals is None:
        largest = max(abs(low), abs(high))
        decimals = 3 if largest == 0 else max(0, min(6, 2 - math.floor(math.log10(largest))))
    return f"[{number(float(low), decimals)}, {number(float(high), decimals)}]"


def interval_row(row: dict) -> list[str]:
    """One row of the "every interval side by side" table, in the order of :data:`INTERVAL_COLUMNS`."""
    d = se_decimals(row.get("se"))
    if d is None and row.get("ci_low") is not None:
        d = 3  # no SE (posterior quantiles, bootstrap): a rate's usual 3 decimals
    inconclusive = row.get("ci_low") is None or row.get("verdict") == "INCONCLUSIVE"
    return [
        str(row["label"]),
        str(row["population"]).replace("_", " "),
        number(row.get("estimate"), d),
        "INCONCLUSIVE" if inconclusive else interval(row["ci_low"], row["ci_high"], d),
        sig(row.get("se"), 2),
        number(row.get("df"), 1),
        sig(row.get("n")),
        sig(row.get("n_clusters")),
        sig(row.get("icc"), 2),
        number(row.get("design_effect"), 1),
        number(row.get("n_effective"), 0 if (row.get("n_effective") or 0) >= 100 else 1),
        str(row.get("note") or ""),
    ]


INTERVAL_COLUMNS = ("method", "population", "estimate", "CI", "SE", "df", "n", "G", "ICC", "DEFF", "n_eff", "note")


def _value(value) -> str | None:
    """A piece of evidence as text, or None when there is nothing to show."""
    if value is None or value == {} or value == []:
        return None
    if isinstance(value, dict):
        if "estimate" in value and "ci_low" in value:
            parts = [f"{sig(value['estimate'])} {interval(value['ci_low'], value.get('ci_high'))}"]
            extra = [
                f"{k if k != 'n_clusters' else 'G'} = {value[k]}"
                for k in ("n", "n_clusters")
                if value.get(k) is not None
            ]
            method = value.get("method")
            return parts[0] + (f" ({', '.join([str(method), *extra] if method else extra)})" if method or extra else "")
        inner = [f"{k.replace('_', ' ')} {text}" for k, v in value.items() if (text := _value(v)) is not None]
        return ", ".join(inner) or None
    if isinstance(value, list):
        if value and all(isinstance(v, dict) for v in value):
            return "; ".join(t for v in value if (t := _value(v)) is not None)
        return ", ".join(t for v in value if (t := _value(v)) is not None)
    return number(value)


#: Evidence keys shown first, in this order (verdict.json sorts keys; the rest follow alphabetically).
EVIDENCE_FIRST = ("method", "population", "estimate", "ci_low", "ci_high", "bar", "judge", "n", "n_clusters")


def evidence_pairs(evidence: dict) -> list[tuple[str, str]]:
    """A gate's evidence as (name, formatted value) pairs, the main figures first, empty values left out."""
    keys = [k for k in EVIDENCE_FIRST if k in evidence] + [k for k in evidence if k not in EVIDENCE_FIRST]
    out = []
    for key in keys:
        pair = next((p for p in PAIRS if key in p[:2] and p[0] in evidence and p[1] in evidence), None)
        if pair:
            if key == pair[0] and evidence[key] is not None:
                out.append((HEADINGS[pair[2]], interval(evidence[pair[0]], evidence[pair[1]])))
            continue
        text = _value(evidence[key])
        if text is not None:
            out.append((HEADINGS.get(key, key.replace("_", " ")), text))
    return out


#: A check's table longer than this shows its first :data:`SECTION_ROWS_SHOWN` rows (the rest,
#: e.g. one row per vignette of 1,000, stay in verdict.json).
MAX_SECTION_ROWS, SECTION_ROWS_SHOWN = 60, 40


def section_table(section: dict) -> tuple[list[str], list[list[str]], str]:
    """A check section's table as (headings, rows of text, note): columns in the check's own order
    (the report model's ``columns``; a report written before it existed falls back to the rows'
    keys), an interval's two ends merged into one cell; a long table cut to its first rows, with
    a note saying how many more verdict.json holds."""
    table = section.get("table") or []
    if not table:
        return [], [], ""
    note = ""
    if len(table) > MAX_SECTION_ROWS:
        note = f"The first {SECTION_ROWS_SHOWN} of {len(table)} rows; every row is in verdict.json."
        table = table[:SECTION_ROWS_SHOWN]
    columns = list(section.get("columns") or dict.fromkeys(k for row in section["table"] for k in row))
    shown: list[tuple[str, tuple[str, ...]]] = []
    for key in columns:
        pair = next((p for p in PAIRS if key in p[:2]), None)
        if pair and pair[0] in columns and pair[1] in columns:
            if key == pair[0]:
                shown.append((HEADINGS[pair[2]], pair[:2]))
            continue
        shown.append((HEADINGS.get(key, key.replace("_", " ")), (key,)))
    rows = []
    for row in table:
        cells = []
        for _, keys in shown:
            if len(keys) == 2:
                cells.append(interval(row.get(keys[0]), row.get(keys[1])))
            else:
                value = row.get(keys[0])
                cells.append("" if value == "" else number(value) if not isinstance(value, str) else value)
        rows.append(cells)
    return [heading for heading, _ in shown], rows, note
