"""Load and validate input tables (JSON Lines, CSV, Parquet) and whole studies.

Every loader reads the whole file and reports **every** problem at once, each located by file,
line and field (JSONL: 1-based physical line; CSV: 1-based physical line with the header as line 1,
so a record that spans several lines inside quotes is named by its first line; Parquet: 1-based
row), then raises :class:`~honestci.audit.errors.SchemaError`. Identifiers are read as strings. No row is
dropped silently: blank lines are counted in :attr:`~honestci.audit.data.validation.LoadedTable.dropped`.

A file's bytes are read into records by :mod:`honestci.audit.data.readers` and validated into a
:class:`~honestci.audit.data.validation.LoadedTable` by :mod:`honestci.audit.data.validation`; this module picks
the reader by the file's extension, and loads and cross-checks whole studies.
"""

from __future__ import annotations

import gzip
import hashlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import pandas as pd

from honestci.audit.data.readers import READERS, SEE_DOCS, ParquetColumns, RawRecords, arrow_jsonl, read_parquet
from honestci.audit.data.schema import table_spec
from honestci.audit.data.validation import LoadedTable, validate_arrow, validate_records
from honestci.audit.errors import InputError, Problem, SchemaError

EXTENSIONS = (".jsonl", ".jsonl.gz", ".csv", ".parquet")
REQUIRED_STUDY_TABLES = ("vignettes", "responses", "judgments")


def _extension(path: Path) -> str:
    name = path.name.lower()
    for extension in sorted(EXTENSIONS, key=len, reverse=True):
        if name.endswith(extension):
            return extension
    raise InputError(
        f"{path}: cannot tell the file's format from its name", fix=f"use one of the extensions {', '.join(EXTENSIONS)}"
    )


def load_table(path: str | Path, table: str) -> LoadedTable:
    """Load and validate one table from ``path``.

    Parameters
    ----------
    path
        A ``.jsonl``, ``.jsonl.gz``, ``.csv`` or ``.parquet`` file; the extension picks the format.
    table
        The table's kind: ``vignettes``, ``responses``, ``human_ratings``, ``human_pairs``,
        ``judgments`` or ``corpus`` (see :data:`honestci.audit.data.schema.TABLES`).

    Raises
    ------
    SchemaError
        Listing every problem in the file, each with file, line and field.
    InputError
        The file cannot be read, or its extension is not one of the above.
    """
    spec = table_spec(table)
    path = Path(path)
    extension = _extension(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise InputError(f"{path}: cannot read the {table} file ({error.strerror})", fix="check the path") from error
    sha256 = hashlib.sha256(data).hexdigest()
    if extension == ".jsonl.gz":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as error:
            raise InputError(
                f"{path}: not a readable gzip file ({error})", fix="compress it again with gzip"
            ) from error
    if extension == ".parquet":
        fast = validate_arrow(ParquetColumns(data, str(path)), spec, str(path), sha256)
        return fast if fast is not None else validate_records(read_parquet(data, str(path)), spec, str(path), sha256)
    if extension in (".jsonl", ".jsonl.gz"):
        arrow = arrow_jsonl(data, spec)
        fast = None if arrow is None else validate_arrow(arrow, spec, str(path), sha256)
        if fast is not None:
            return fast
    return validate_records(READERS[extension](data, str(path)), spec, str(path), sha256)


def table_from_frame(frame: pd.DataFrame, table: str, name: str | None = None) -> LoadedTable:
    """Validate an in-memory frame as ``table`` (rows are numbered from 1, as for Parquet).

    ``sha256`` is then the hash of the frame's contents (:func:`pandas.util.hash_pandas_object`).
    """
    name = name or f"<{table} frame>"
    records = frame.astype(object).where(frame.notna(), None).to_dict("records")
    raw = RawRecords(records=list(enumerate(records, start=1)), header=[str(c) for c in frame.columns])
    digest = hashlib.sha256(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes()).hexdigest()
    return validate_records(raw, table_spec(table), name, digest)


# ---------------------------------------------------------------------------------------------
# Studies


@dataclass(frozen=True, eq=False)
class Study:
    """The validated, cross-checked tables of one study; :meth:`to_frame` is its provenance."""

    vignettes: LoadedTable
    responses: LoadedTable
    judgments: LoadedTable
    human_ratings: LoadedTable | None = None
    human_pairs: LoadedTable | None = None
    corpus: LoadedTable | None = None

    def tables(self) -> dict[str, LoadedTable]:
        """The tables present, by name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    @property
    def sha256(self) -> dict[str, str]:
        """SHA-256 of every input file, by table."""
        return {name: table.sha256 for name, table in self.tables().items()}

    def to_frame(self) -> pd.DataFrame:
        """One row per table and reason (rows loaded, rows dropped), with path and SHA-256."""
        return pd.concat([table.to_frame() for table in self.tables().values()], ignore_index=True)


def load_study(paths: Mapping[str, str | Path]) -> Study:
    """Load every table in ``paths`` (table name -> file), then check references between them.

    Vignettes, responses and judgments are required. Raises :class:`SchemaError` with every
    problem of every file; references are checked once all files are valid.
    """
    unknown = sorted(set(paths) - {f.name for f in fields(Study)})
    if unknown:
        raise InputError(
            f"unknown table(s): {', '.join(unknown)}",
            fix=f"name tables as one of: {', '.join(f.name for f in fields(Study))}",
        )
    missing = [name for name in REQUIRED_STUDY_TABLES if name not in paths]
    if missing:
        raise InputError(
            f"a study needs the {', '.join(missing)} table(s)",
            fix="give a file for each of: " + ", ".join(REQUIRED_STUDY_TABLES),
        )
    tables: dict[str, LoadedTable] = {}
    problems: list[Problem] = []
    for name, path in paths.items():
        try:
            tables[name] = load_table(path, name)
        except SchemaError as error:
            problems += error.problems
        except InputError as error:  # its message already starts with the file's name
            problems.append(Problem(str(path), None, None, error.message.removeprefix(f"{path}: "), error.fix))
    if problems:
        raise SchemaError(
            f"{len(problems)} problem(s) in the study's files",
            problems,
            fix=f"correct the rows listed above ({SEE_DOCS})",
        )
    problems = check_references(tables)
    if problems:
        raise SchemaError(
            f"{len(problems)} reference(s) between the study's tables do not match",
            problems,
            fix="make every id refer to a row that exists, in the right vignette",
        )
    release_arrow_memory()
    return Study(**tables)


def release_arrow_memory() -> None:
    """Hand back to the system the memory pyarrow's allocator keeps for reuse after its arrays
    are freed. Its pool (mimalloc or jemalloc) keeps what reading and validating the tables freed
    for later pyarrow allocations, which are few once the tables are built, and numpy's allocator
    cannot reuse it: ~55 MB resident for the rest of an audit of a million contests."""
    if "pyarrow" in sys.modules:  # nothing to release where pyarrow never ran
        sys.modules["pyarrow"].default_memory_pool().release_unused()


def _references_resolve(tables: Mapping[str, LoadedTable]) -> bool:
    """Whether every reference :func:`check_references` checks resolves, by whole columns (False
    also when it cannot tell: the row-by-row check then names each problem)."""
    vignettes, responses = tables.get("vignettes"), tables.get("responses")
    known = pd.Index(vignettes.frame["vignette_id"]) if vignettes else None
    response_index = pd.Index(responses.frame["response_id"]) if responses else None
    if (known is not None and not known.is_unique) or (response_index is not None and not response_index.is_unique):
        return False
    # vignettes as codes among the responses' vignettes: a row's vignette matches its response's
    # iff the codes are equal (a vignette no response answers is -1, which no response's code is)
    vignette_codes, answered = pd.factorize(responses.frame["vignette_id"]) if responses else (None, None)
    checks = (
        ("responses", ()),
        ("judgments", ("response_first", "response_second")),
        ("human_pairs", ("response_a", "response_b")),
        ("human_ratings", ("response_id",)),
    )
    for name, columns in checks:
        table = tables.get(name)
        if table is None:
            continue
        if known is not None and name != "human_ratings" and not table.frame["vignette_id"].isin(known).all():
            return False
        if response_index is None or vignette_codes is None:
            continue
        same_vignette = name != "human_ratings"  # ratings name a response, not a vignette
        row_vignette = index_positions(pd.Index(answered), table.frame["vignette_id"]) if same_vignette else None
        for column in columns:
            position = index_positions(response_index, table.frame[column])
            if (position < 0).any():
                return False
            if same_vignette and not bool((vignette_codes[position] == row_vignette).all()):
                return False
    return True


def codes_of(values: pd.Series) -> tuple[np.ndarray, pd.Index]:
    """Each value's integer code (-1 where missing) and the distinct values the codes index: a
    categorical's own codes and categories (no pass over the rows), else :func:`pandas.factorize`'s."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        return values.cat.codes.to_numpy(), values.cat.categories
    codes, distinct = pd.factorize(values)
    return codes, pd.Index(distinct)


def index_positions(index: pd.Index, values: pd.Series) -> np.ndarray:
    """``index.get_indexer(values)``: each value's position in ``index`` (unique), -1 where it is
    not there or missing; each distinct value is looked up once (ids repeat, and a categorical
    column is looked up by its codes)."""
    codes, distinct = codes_of(values)
    # positions in the narrowest integer type that holds them (-1 to len(index) - 1)
    lookup = np.append(index.get_indexer(distinct), -1).astype(np.min_scalar_type(-max(len(index), 1)))
    return lookup[codes]


def check_references(tables: Mapping[str, LoadedTable]) -> list[Problem]:
    """Every reference between the given tables that does not resolve (checks whose tables are
    absent are skipped): unknown vignettes and responses, and responses of another vignette."""
    if _references_resolve(tables):
        return []
    problems: list[Problem] = []
    vignettes = tables.get("vignettes")
    responses = tables.get("responses")
    known_vignettes = set(vignettes.frame["vignette_id"]) if vignettes else None
    vignette_of = dict(zip(responses.frame["response_id"], responses.frame["vignette_id"])) if responses else None

    def refs(table: LoadedTable, column: str, known, what: str, vignette_column: str | None = None) -> None:
        for line, value, vignette in zip(table.lines, table.frame[column], table.frame[vignette_column or column]):
            if value not in known:
                problems.append(
                    Problem(
                        table.path,
                        int(line),
                        column,
                        f"{what} {value!r} is not in the {what}s table",
                        f"add the {what} or correct the id",
                    )
                )
            elif vignette_column and known[value] != vignette:
                problems.append(
                    Problem(
                        table.path,
                        int(line),
                        column,
                        f"response {value!r} belongs to vignette {known[value]!r}, not {vignette!r}",
                        "pair only responses to the row's vignette",
                    )
                )

    for name, columns in (
        ("responses", ()),
        ("judgments", ("response_first", "response_second")),
        ("human_pairs", ("response_a", "response_b")),
    ):
        table = tables.get(name)
        if table is None:
            continue
        if known_vignettes is not None:
            refs(table, "vignette_id", known_vignettes, "vignette")
        if vignette_of is not None:
            for column in columns:
                refs(table, column, vignette_of, "response", vignette_column="vignette_id")
    if vignette_of is not None and "human_ratings" in tables:
        refs(tables["human_ratings"], "response_id", vignette_of, "response")
    return problems
