"""Column specs of honestci's six input tables, one declarative :class:`TableSpec` per table.

The specs transcribe ``docs/data-formats.md``; :mod:`honestci.audit.data.io` reads them to validate any file, so a
rule (a type, an allowed value, a uniqueness key) is stated once, here.
"""

from __future__ import annotations

from dataclasses import dataclass

from honestci.audit.errors import InputError

#: Column types and how a message names them.
TYPE_WORDS = {"str": "a string", "int": "an integer", "float": "a number"}


@dataclass(frozen=True)
class Column:
    """One column: its name, type (``str``, ``int`` or ``float``) and the rules on its values."""

    name: str
    type: str
    required: bool
    doc: str
    #: The only values allowed (empty: any value of the type).
    allowed: tuple[str, ...] = ()
    #: Whether an empty or blank string is an error.
    non_empty: bool = False
    #: Regular expression the whole value must match, with a phrase saying what it means.
    pattern: tuple[str, str] | None = None


@dataclass(frozen=True)
class UniqueKey:
    """Columns whose values may occur together on one row only.

    ``unordered`` names two of the columns that form an unordered pair: (a, b) and (b, a) are the
    same key.
    """

    columns: tuple[str, ...]
    unordered: tuple[str, str] | None = None


@dataclass(frozen=True)
class TableSpec:
    """The schema of one table: its columns in order, uniqueness keys, and pairs of columns
    whose values must differ on every row.

    ``categorical``: its string columns are held as pandas categoricals (sorted categories), for
    a table whose values repeat across many rows (a judgments table holds two rows per contest,
    each naming responses, a judge, a verdict and a prompt hash that other rows name too): codes
    take 1-4 bytes a row where a string takes its length plus 8.
    """

    name: str
    columns: tuple[Column, ...]
    unique: tuple[UniqueKey, ...] = ()
    distinct: tuple[tuple[str, str], ...] = ()
    categorical: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(column.name for column in self.columns)


def _str(name: str, doc: str, required: bool = True, non_empty: bool | None = None, **rules) -> Column:
    """A string column; a required one must not be empty unless ``non_empty=False``."""
    return Column(name, "str", required, doc, non_empty=required if non_empty is None else non_empty, **rules)


SHA256_HEX = (r"[0-9a-fA-F]{64}", "64 hexadecimal digits")

TABLES: dict[str, TableSpec] = {
    spec.name: spec
    for spec in (
        TableSpec(
            "vignettes",
            (
                _str("vignette_id", "the vignette's unique id"),
                _str("text", "the scenario shown to the systems"),
                _str("family", "groups vignettes for off-distribution splits", required=False),
            ),
            unique=(UniqueKey(("vignette_id",)),),
        ),
        TableSpec(
            "responses",
            (
                _str("response_id", "the response's unique id"),
                _str("vignette_id", "the vignette it answers"),
                _str("system", "the model or checkpoint that wrote it"),
                _str("text", "the answer (may be empty: an empty answer is a real output)", non_empty=False),
                _str("raw", "full output, e.g. with a reasoning trace", required=False),
                _str("run", "independent eval run", required=False),
                _str("pool", "selection or heldout", required=False, allowed=("selection", "heldout")),
                Column("seed", "int", False, "generation seed"),
                Column("sample_idx", "int", False, "index of the sample within (vignette, system, run)"),
            ),
            unique=(UniqueKey(("response_id",)),),
        ),
        TableSpec(
            "human_ratings",
            (
                _str("response_id", "the rated response"),
                _str("rater_id", "who rated it"),
                Column("score", "float", True, "the rating, a finite number (e.g. 1-7)"),
            ),
            unique=(UniqueKey(("response_id", "rater_id")),),
        ),
        TableSpec(
            "human_pairs",
            (
                _str("vignette_id", "the vignette both responses answer"),
                _str("response_a", "the first response of the pair"),
                _str("response_b", "the second response of the pair"),
                _str("label", "which response the rater preferred", allowed=("a", "b", "tie")),
                _str("rater_id", "who labelled the pair"),
            ),
            unique=(UniqueKey(("response_a", "response_b", "rater_id"), unordered=("response_a", "response_b")),),
            distinct=(("response_a", "response_b"),),
        ),
        TableSpec(
            "judgments",
            (
                _str("judge", "the judge model's name"),
                _str("vignette_id", "the vignette both responses answer"),
                _str("response_first", "the response shown first (position A)"),
                _str("response_second", "the response shown second (position B)"),
                _str("verdict", "the judge's verdict", allowed=("first", "second", "tie", "invalid")),
                _str("raw", "the judge's raw output", required=False),
                _str("prompt_sha256", "hash of the judging prompt template", required=False, pattern=SHA256_HEX),
                Column(
                    "preference_first",
                    "float",
                    False,
                    "the judge's probability in [0, 1] that the response shown first is better (a continuous "
                    "preference, e.g. AlpacaEval 2.0's; the verdict must name the side it favours)",
                ),
            ),
            unique=(UniqueKey(("judge", "response_first", "response_second")),),
            distinct=(("response_first", "response_second"),),
            categorical=True,
        ),
        TableSpec(
            "corpus",
            (
                _str("doc_id", "the document's unique id"),
                _str("text", "training text to check for leakage", non_empty=False),
                _str("source", "where the document came from", required=False),
            ),
            unique=(UniqueKey(("doc_id",)),),
        ),
    )
}


def table_spec(table: str) -> TableSpec:
    """The spec of ``table``; an :class:`InputError` naming the known tables if there is none."""
    try:
        return TABLES[table]
    except KeyError:
        raise InputError(
            f"unknown table '{table}'", fix=f"use one of: {', '.join(TABLES)} (see docs/data-formats.md)"
        ) from None
